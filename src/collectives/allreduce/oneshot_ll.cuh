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

namespace yali {

constexpr int kPhaseLLRecv = 1;

// Reads the 8 payload bytes of packet `p` (elements [p*k, p*k+k) with k = 8/sizeof(T)) from `src`,
// zero-padding past `count`. Uses one 8-byte load when the packet is whole and aligned.
template <typename T>
__device__ __forceinline__ uint2 loadPayload8(const T* src, size_t p, size_t count) {
  constexpr size_t k = 8 / sizeof(T);
  const size_t first = p * k;
  if (first + k <= count && (reinterpret_cast<uintptr_t>(src + first) & 7) == 0) {
    return *reinterpret_cast<const uint2*>(src + first);
  }
  uint2 v = make_uint2(0, 0);
  T* e = reinterpret_cast<T*>(&v);
  for (size_t i = 0; i < k && first + i < count; ++i) e[i] = src[first + i];
  return v;
}

template <typename T>
__device__ __forceinline__ void storePayload8(T* dst, size_t p, size_t count, uint2 v) {
  constexpr size_t k = 8 / sizeof(T);
  const size_t first = p * k;
  if (first + k <= count && (reinterpret_cast<uintptr_t>(dst + first) & 7) == 0) {
    *reinterpret_cast<uint2*>(dst + first) = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
  for (size_t i = 0; i < k && first + i < count; ++i) dst[first + i] = e[i];
}

// Running fp32 accumulator over the 8-byte payloads of one packet position, fed in rank order.
template <typename T, Op kOp>
struct PayloadAccumulator {
  static constexpr int k = 8 / sizeof(T);
  float acc[k];
  __device__ __forceinline__ void start(uint2 v) {
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < k; ++e) acc[e] = ElemTraits<T>::toFloat(x[e]);
  }
  __device__ __forceinline__ void add(uint2 v) {
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < k; ++e) acc[e] = Reducer<kOp>::combine(acc[e], ElemTraits<T>::toFloat(x[e]));
  }
  __device__ __forceinline__ uint2 result(int nranks) const {
    uint2 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < k; ++e) o[e] = ElemTraits<T>::fromFloat(Reducer<kOp>::finish(acc[e], nranks));
    return out;
  }
};

template <typename T, Op kOp>
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

template <typename T, Op kOp>
__global__ void oneshotLLKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<sizeof(T)>(args, [&](const LaunchInfo& info) { oneshotLL<T, kOp>(args, info.epoch); });
}

}  // namespace yali
