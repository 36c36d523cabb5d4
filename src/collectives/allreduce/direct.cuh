// Direct AllReduce on registered buffers (zero-copy). Every rank's input and output are mapped by
// every peer (yaliCommRegister; DeviceArgs::peerSend/peerRecv), so no byte passes through the
// window: each rank reads its shard of every peer's input and writes the reduced shard into every
// peer's output, over NVLink. Per message byte, a GPU's SMs load 1 and store 1 byte; two-shot
// through staging loads and stores about 2.5 of each at n = 4 (push, reduce, copy-out). Measured at
// 2 GPUs it was never faster than the staged algorithms or twoshot_direct: half of its loads are
// NVLink reads, which each thread waits for before it stores (docs/PERF.md "Registered buffers"),
// so the selector leaves it off by default (YALI_DIRECT_MIN_BYTES turns it on).
//
// Rank d owns shard d of the message (tileSplit of the whole message as one tile); block b of
// every rank takes the b-th of gridDim.x equal runs of its rank's shard. Block b:
//   enter  - enterWithTag (block_ops.cuh) on directFlags[enter]: every peer's block b has started,
//            so its input is final and its earlier work on its output is done, and it made the
//            same call (offsets, count, type, op); otherwise the block returns before touching
//            any buffer.
//   reduce - loads its run of shard `me` from every rank's input (n - 1 NVLink reads), reduces in
//            rank order 0..n-1, and stores the result into every rank's output (n - 1 NVLink
//            writes). Only the owner touches a shard, on any rank, so in-place calls are safe.
//   leave  - publishes directFlags[leave][b][me] = flagValue(epoch, 0) on every peer (after a block
//            barrier: the release covers the block's stores) and waits for every peer's block b.
// Why per-block flags suffice: enter needs only a sign that a peer's kernel has started; for leave,
// our kernel ends once all of its blocks have passed their waits, i.e. once every block of every
// peer has finished reading our input and writing our output, so the caller may reuse both.
// Across launches: the flags only grow (the epoch), and a peer cannot enter launch e + 1 before we
// left launch e.
#pragma once

#include "collectives/common/block_ops.cuh"
#include "collectives/common/device.cuh"
#include "collectives/common/tile_split.h"

namespace yali {

constexpr int kPhaseDirectEnter = 9;
constexpr int kPhaseDirectLeave = 10;
// 512 threads at most, as for two-shot: 128 registers per thread, which the loads in flight need.
constexpr int kDirectMaxThreads = 512;
// Vectors per source in flight per thread (reduceVectorsInFlight): a run's sources are mostly
// peers' memory, so each thread keeps kDirectUnroll x n loads outstanding. 4 (128 registers and a
// few bytes of spills) measured no faster than 2 (docs/PERF.md "Registered buffers").
#ifndef YALI_DIRECT_UNROLL
#define YALI_DIRECT_UNROLL 2
#endif
constexpr int kDirectUnroll = YALI_DIRECT_UNROLL;

template <typename T, Op kOp>
__device__ __forceinline__ void direct(const DeviceArgs& args, const LaunchInfo& info) {
  const uint64_t epoch = info.epoch;
  const int n = args.nranks;
  const int me = args.rank;
  const Team block = wholeBlock();
  const size_t enterFlags = args.layout.directFlags;
  const size_t leaveFlags = enterFlags + sizeof(uint64_t) * kMaxCtas * kMaxRanks;
  if (!enterWithTag(args, enterFlags, info, kPhaseDirectEnter)) return;
  allowNextGrid();

  // This block's run of our shard.
  constexpr size_t kE = 16 / sizeof(T);
  const TileSplit shard = tileSplit(0, args.count, args.count, n, sizeof(T));
  const size_t shardLen = shard.length(me);
  const size_t per = ((shardLen + gridDim.x - 1) / gridDim.x + kE - 1) / kE * kE;
  const size_t runStart = min(static_cast<size_t>(blockIdx.x) * per, shardLen);
  const size_t begin = shard.begin(me) + runStart;
  const size_t len = min(runStart + per, shardLen) - runStart;

  const T* src[kMaxRanks];
  T* dst[kMaxRanks];  // ours first, then the next ranks: the peers' links share the load
  uintptr_t align = 0;
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {  // unrolled: the pointers stay in registers
    src[r] = r < n ? static_cast<const T*>(args.peerSend[r]) + begin : nullptr;
    dst[r] = r < n ? static_cast<T*>(args.peerRecv[(me + r) % n]) + begin : nullptr;
    if (r < n) align |= reinterpret_cast<uintptr_t>(src[r]) | reinterpret_cast<uintptr_t>(dst[r]);
  }
  if ((align & 15) == 0) {
    const size_t vecs = len / kE;
    reduceVectorsInFlight<T, kOp, kDirectUnroll>(block, reinterpret_cast<uint4* const*>(dst), n,
                                                 reinterpret_cast<const uint4* const*>(src), n, vecs);
    // The run's last few elements (a short final shard), one by one.
    const T* tailSrc[kMaxRanks];
    T* tailDst[kMaxRanks];
#pragma unroll
    for (int r = 0; r < kMaxRanks; ++r) {
      tailSrc[r] = r < n ? src[r] + vecs * kE : nullptr;
      tailDst[r] = r < n ? dst[r] + vecs * kE : nullptr;
    }
    reduceElems<T, kOp>(block, tailDst, n, tailSrc, n, len - vecs * kE);
  } else {
    reduceElems<T, kOp>(block, dst, n, src, n, len);
  }

  const uint64_t left = flagValue(epoch, 0);
  signalPeers(block, args, leaveFlags, left);  // block barrier first: every store of the run is issued
  waitPeers(block, args, leaveFlags, left, kPhaseDirectLeave);
}

template <typename T, Op kOp>
__global__ void __launch_bounds__(kDirectMaxThreads) directKernel(const __grid_constant__ DeviceArgs args) {
  runLaunch<sizeof(T)>(args, [&](const LaunchInfo& info) { direct<T, kOp>(args, info); });
}

}  // namespace yali
