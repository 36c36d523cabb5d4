// One-shot AllReduce with LL packets, for small messages: one kernel, no barrier.
//
// Every rank pushes its whole input to every rank (itself included) as LL packets, then each rank
// reduces the n copies it received, in rank order 0..n-1, so all ranks produce the same bits.
//
// LL packet (16 bytes, written with one st.volatile.v4): { data0, flag, data1, flag }, 8 bytes of
// payload. The flag is the launch epoch (at most kEpochLimit, so it fits 32 bits and no two
// launches of a round share it; the rebase clears the packets between rounds). A reader polls a packet until both
// flags equal the current epoch: each 8-byte half {data, flag} is written by one 8-byte-atomic
// piece of the 16-byte store, so a half whose flag matches carries this epoch's data. No separate
// "data ready" flag is needed.
//
// Reuse of the packet buffers: packets for epoch e go to parity e & 1. A rank writes parity p again
// at epoch e + 2 only after it has finished launch e + 1, which needed data every peer sent during
// its own launch e + 1, which began after that peer's launch e (the last reader of parity p) ended.
// Any launch in between (of any algorithm) waits on every peer the same way, so the argument holds
// across algorithms. Stale packets carry an older epoch of the round, or zero, and never match.
#pragma once

#include "collectives/common/device.cuh"
#include "collectives/common/ll_packets.cuh"

namespace yali {

template <typename T, RedOp kOp>
__device__ __forceinline__ void oneshotLL(const DeviceArgs& args, uint64_t epoch) {
  const uint32_t flag = static_cast<uint32_t>(epoch);  // epoch <= kEpochLimit: unique in a round
  const int parity = static_cast<int>(epoch & 1);
  const int n = args.nranks;
  const size_t packets = (args.count * sizeof(T) + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const WindowLayout& L = args.layout;
  const T* send = static_cast<const T*>(args.send);
  T* recv = static_cast<T*>(args.recv);

  // Phase 1: push. Our packets go to slot [parity][rank] of every rank's LL area. The same thread
  // handles packet p in both phases, so in-place calls read input p before writing output p.
  const size_t mySlot = L.ll + (static_cast<size_t>(parity) * n + args.rank) * L.llSlotBytes;
  for (size_t p = first; p < packets; p += stride) {
    const uint2 d = loadPayload8(send, p, args.count);
    const uint4 packet = make_uint4(d.x, flag, d.y, flag);
    for (int r = 0; r < n; ++r) {
      uint4* dst = reinterpret_cast<uint4*>(args.peerWindows[r] + mySlot) + p;
      storeVolatile16(dst, packet);
    }
  }

  allowNextGrid();

  // Phase 2: receive from every sender in rank order, reduce, store.
  const uint4* recvArea = reinterpret_cast<const uint4*>(
      args.window + L.ll + static_cast<size_t>(parity) * n * L.llSlotBytes);
  const size_t slotPackets = L.llSlotBytes / sizeof(uint4);
  WaitGuard guard(args);
  for (size_t p = first; p < packets; p += stride) {
    PayloadAccumulator<T, kOp> acc;
    for (int r = 0; r < n; ++r) {  // rank order: the same bits on every rank
      const uint4* src = recvArea + r * slotPackets + p;
      uint4 v = loadVolatile16(src);
      while (v.y != flag || v.w != flag) {
        if (!guard.keepWaiting(kPhaseLLRecv)) return;
        v = loadVolatile16(src);
      }
      if (r == 0) acc.start(make_uint2(v.x, v.z));
      else acc.add(make_uint2(v.x, v.z));
    }
    storePayload8(recv, p, args.count, acc.result(n));
  }
}

template <typename T, RedOp kOp>
__global__ void oneshotLLKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<sizeof(T)>(args, [&](const LaunchInfo& info) { oneshotLL<T, kOp>(args, info.epoch); });
}

}  // namespace yali
