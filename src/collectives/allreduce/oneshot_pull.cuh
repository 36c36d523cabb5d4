// One-shot AllReduce by copy-in and pull, for messages between LL and two-shot (about 256 KB to a
// few MB): one flag exchange per launch, and every byte crosses NVLink once, as a read.
//
// Block b owns the element run [b * per, (b + 1) * per) of the message (per: a 16-byte multiple,
// the same on every rank because every rank makes the same selector choice for the same count):
//   1. copy-in  - our input run -> our window's copyIn[parity][run] (local memory);
//   2. exchange - publish pushFlags[b][our rank] = flagValue(epoch, 0) on every other rank, then
//                 wait until every other rank's pushFlags[b][s] on our window reaches that value;
//   3. pull     - output run = reduce, in rank order 0..n-1, of every rank's copyIn[parity][run]
//                 (ours from local memory, the others' by NVLink reads), so all ranks hold the
//                 same bits.
// Compared with LL, the payload crosses the link once (LL sends a flag with every 8 bytes), at the
// cost of one flag round trip; compared with two-shot, one round trip instead of two, but each
// rank reads n - 1 whole inputs (two-shot moves 2(n-1)/n of one), so it pays off at n = 2 up to a
// few MB and at larger n only for smaller messages (the selector's table).
//
// Flags: pushFlags is shared with two-shot. Values grow with the epoch across every launch of the
// comm, so a flag left by an earlier launch (of any algorithm) never satisfies this launch's wait.
// Reuse of copyIn parity p = epoch & 1: we overwrite it at launch e + 2, which starts after our
// launch e + 1 ended; that launch needed a signal from every peer issued during the peer's own
// launch e + 1, which started after the peer's launch e, the last to read parity p, ended.
#pragma once

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"

namespace yali {

// A block's run is short (1 MB over 64 blocks is 16 KB, two 16-byte vectors per thread), so each
// thread issues all of its vectors' loads before the first store: one memory latency per run
// instead of one per vector. kPullUnroll x n sources x 16 bytes stays within the register budget.
constexpr int kPullUnroll = 4;

// dst[i] = src[i] for vectors [0, vecs).
__device__ __forceinline__ void copyVectorsAllInFlight(uint4* dst, const uint4* src, size_t vecs) {
  constexpr int kU = 4;  // no sources to reduce: twice the vectors in flight
  for (size_t base = threadIdx.x; base < vecs; base += kU * blockDim.x) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (base + u * blockDim.x < vecs) v[u] = __ldcg(src + base + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (base + u * blockDim.x < vecs) dst[base + u * blockDim.x] = v[u];
  }
}

template <typename T, RedOp kOp>
__device__ __forceinline__ void oneshotPull(const DeviceArgs& args, uint64_t epoch) {
  const int n = args.nranks;
  const WindowLayout& L = args.layout;
  const size_t parityOffset = L.copyIn + static_cast<size_t>(epoch & 1) * L.copyInBytes;
  // args.slotBytes: bytes per block (a 16-byte multiple).
  const size_t per = args.slotBytes / sizeof(T);
  const size_t begin = min(static_cast<size_t>(blockIdx.x) * per, args.count);
  const size_t len = min(begin + per, args.count) - begin;

  constexpr size_t kE = 16 / sizeof(T);
  T* mine = reinterpret_cast<T*>(args.window + parityOffset) + begin;  // 16-byte aligned
  const T* in = static_cast<const T*>(args.send) + begin;
  if (aligned16(in) && len % kE == 0) {
    copyVectorsAllInFlight(reinterpret_cast<uint4*>(mine), reinterpret_cast<const uint4*>(in), len / kE);
  } else {
    copyElems(wholeBlock(), mine, in, len);
  }
  const uint64_t value = flagValue(epoch, 0);
  signalPeers(wholeBlock(), args, L.pushFlags, value);  // block barrier first: the whole run is copied in
  if (!waitPeers(wholeBlock(), args, L.pushFlags, value, kPhasePullWait)) return;
  allowNextGrid();

  const T* src[kMaxRanks];
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s)  // unrolled: src stays in registers
    src[s] = s < n ? reinterpret_cast<const T*>(args.peerWindows[s] + parityOffset) + begin : nullptr;
  T* out = static_cast<T*>(args.recv) + begin;
  if (aligned16(out) && len % kE == 0) {
    uint4* dst[1] = {reinterpret_cast<uint4*>(out)};
    reduceVectorsInFlight<T, kOp, kPullUnroll>(wholeBlock(), dst, 1,
                                               reinterpret_cast<const uint4* const*>(src), n, len / kE);
  } else {
    T* dst[1] = {out};
    reduceElems<T, kOp>(wholeBlock(), dst, 1, src, n, len);
  }
}

template <typename T, RedOp kOp>
__global__ void oneshotPullKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<sizeof(T)>(args, [&](const LaunchInfo& info) { oneshotPull<T, kOp>(args, info.epoch); });
}

}  // namespace yali
