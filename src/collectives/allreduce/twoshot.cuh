// Two-shot AllReduce (reduce-scatter, then all-gather) for medium and large messages.
//
// The message is cut into tiles of nranks * slotElems elements. Within a tile, rank d owns shard d
// (a 16-byte-aligned run of q elements). Block b handles tiles b, b + gridDim.x, ...; its k-th
// tile is its step k. Per step, with parity = step & 1:
//   1. push    - for every other rank d, copy our part of shard d into d's
//                staging[parity][our rank][slot b] (NVLink writes).
//   2. signal  - publish pushFlags[b][our rank] = flagValue(epoch, step) on every other rank.
//   3. wait    - until every other rank's pushFlags[b][s] on our window reaches that value.
//   4. reduce  - our shard: our own input and the n-1 staged pieces, in rank order 0..n-1, into
//                our output and into result[parity][slot b] (local).
//   5. signal  - publish resultFlags[b][our rank] on every other rank.
//   6. wait    - for every other rank's resultFlags[b][s].
//   7. pull    - copy every other rank's result[parity][slot b] into our output (NVLink reads).
// Each rank reduces only its own shard, so all ranks hold the same bits.
//
// Reuse (why two parities suffice): a sender writes staging[parity] of step k + 2 only after its
// step-6 wait of step k + 1, i.e. after the owner reduced step k + 1 and so finished reading step
// k. An owner overwrites result[parity] at step k + 2 only after its step-3 wait of step k + 2,
// i.e. after every peer pushed step k + 2, which each did after pulling step k + 1 and so after
// pulling step k. Across launches: any wait of a new launch is satisfied only by a peer's flag
// from that launch, which the peer published after its previous launch ended; and a launch ends
// only once it has seen every peer's last result flag, published after that peer's last read of
// its staging. So regions may be laid out differently from launch to launch (other slot sizes,
// another algorithm) without a hazard.
#pragma once

#include "collectives/common/device.cuh"

namespace yali {

constexpr int kPhasePushWait = 2;
constexpr int kPhaseResultWait = 3;

// Copies `n` elements; 16-byte vectors when both ends allow it, element by element otherwise.
// Loads use ld.cg: the source may be a peer's buffer or one a peer wrote.
template <typename T>
__device__ __forceinline__ void copyElems(T* dst, const T* src, size_t n) {
  constexpr size_t kE = 16 / sizeof(T);
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vecs = n / kE;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    constexpr int kUnroll = 4;  // four 16-byte loads in flight per thread before the stores
    size_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * blockDim.x < vecs; i += kUnroll * blockDim.x) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(s + i + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) d[i + u * blockDim.x] = v[u];
    }
    for (; i < vecs; i += blockDim.x) d[i] = __ldcg(s + i);
    done = vecs * kE;
  }
  for (size_t i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = __ldcg(src + i);
}

// out = reduce(src[0..n-1]) in rank order, written to both dst0 and dst1.
template <typename T, Op kOp>
__device__ __forceinline__ void reduceElems(T* dst0, T* dst1, const T* const* src, int nsrc,
                                            size_t n) {
  constexpr size_t kE = 16 / sizeof(T);
  uintptr_t align = reinterpret_cast<uintptr_t>(dst0) | reinterpret_cast<uintptr_t>(dst1);
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < nsrc) align |= reinterpret_cast<uintptr_t>(src[r]);
  }
  size_t done = 0;
  if ((align & 15) == 0) {
    const size_t vecs = n / kE;
    const uint4* const* s = reinterpret_cast<const uint4* const*>(src);
    for (size_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const uint4 v = reduceSources<T, kOp, uint4>(s, i, nsrc);
      reinterpret_cast<uint4*>(dst0)[i] = v;
      reinterpret_cast<uint4*>(dst1)[i] = v;
    }
    done = vecs * kE;
  }
  for (size_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    const T v = reduceSources<T, kOp, T>(src, i, nsrc);
    dst0[i] = v;
    dst1[i] = v;
  }
}

// Publishes `value` into flag array `flagsOffset`[b][rank] of every other rank (one thread each),
// after the whole block's preceding writes: __syncthreads() orders them before the publishing
// thread, whose st.release.sys is cumulative over what it has observed (device.cuh: publish()).
__device__ __forceinline__ void signalPeers(const DeviceArgs& args, size_t flagsOffset,
                                            uint64_t value) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < args.nranks && peer != args.rank) {
    uint64_t* flag = reinterpret_cast<uint64_t*>(args.peerWindows[peer] + flagsOffset) +
                     blockIdx.x * kMaxRanks + args.rank;
    publish(flag, value);
  }
}

// Waits until every other rank's flag [b][s] in our window reaches `value` (one thread each).
// Returns false (for the whole block) when the wait failed.
__device__ __forceinline__ bool waitPeers(const DeviceArgs& args, size_t flagsOffset,
                                          uint64_t value, int phase) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < args.nranks && peer != args.rank) {
    const uint64_t* flag = reinterpret_cast<const uint64_t*>(args.window + flagsOffset) +
                           blockIdx.x * kMaxRanks + peer;
    WaitGuard guard(args);
    while (observe(flag) < value) {
      if (!guard.keepWaiting(phase)) {
        failed = 1;
        break;
      }
    }
  }
  __syncthreads();
  return failed == 0;
}

template <typename T, Op kOp>
__global__ void twoshotKernel(DeviceArgs args) {
  __shared__ uint64_t epochSlot;
  if (commFailed(args)) return;
  const uint64_t epoch = readEpoch(args.local, &epochSlot);
  constexpr size_t kE = 16 / sizeof(T);
  const int n = args.nranks;
  const int me = args.rank;
  const WindowLayout& L = args.layout;
  const size_t slotElems = args.slotBytes / sizeof(T);
  const size_t tileElems = slotElems * n;
  const size_t tiles = (args.count + tileElems - 1) / tileElems;
  const T* send = static_cast<const T*>(args.send);
  T* recv = static_cast<T*>(args.recv);
  const size_t slotOffset = static_cast<size_t>(blockIdx.x) * args.slotBytes;

  uint32_t step = 0;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++step) {
    const int parity = step & 1;
    const size_t tileStart = tile * tileElems;
    const size_t tileLen = min(tileElems, args.count - tileStart);
    // Shard length: 16-byte multiple so every shard of every rank starts aligned in staging.
    const size_t q = ((tileLen + n - 1) / n + kE - 1) / kE * kE;
    auto shardBegin = [&](int d) { return min(static_cast<size_t>(d) * q, tileLen); };
    auto shardLen = [&](int d) { return min(static_cast<size_t>(d + 1) * q, tileLen) - shardBegin(d); };
    const uint64_t value = flagValue(epoch, step);

    // 1. push our part of every other rank's shard into its staging slot.
    for (int k = 1; k < n; ++k) {
      const int d = (me + k) % n;  // start with the next rank: spreads the load over peers
      T* dst = reinterpret_cast<T*>(args.peerWindows[d] + L.staging +
                                    (static_cast<size_t>(parity) * n + me) * L.stagingBytes +
                                    slotOffset);
      copyElems(dst, send + tileStart + shardBegin(d), shardLen(d));
    }
    // 2-3.
    signalPeers(args, L.pushFlags, value);
    if (!waitPeers(args, L.pushFlags, value, kPhasePushWait)) return;

    // 4. reduce our shard in rank order; our own piece comes straight from the input.
    const T* src[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {  // unrolled: src stays in registers
      src[s] = (s == me) ? send + tileStart + shardBegin(me)
                         : reinterpret_cast<const T*>(
                               args.window + L.staging +
                               (static_cast<size_t>(parity) * n + s) * L.stagingBytes + slotOffset);
    }
    T* result = reinterpret_cast<T*>(args.window + L.result + parity * L.stagingBytes + slotOffset);
    reduceElems<T, kOp>(recv + tileStart + shardBegin(me), result, src, n, shardLen(me));

    // 5-6.
    signalPeers(args, L.resultFlags, value);
    if (!waitPeers(args, L.resultFlags, value, kPhaseResultWait)) return;

    // 7. pull every other rank's reduced shard.
    for (int k = 1; k < n; ++k) {
      const int s = (me + k) % n;
      const T* peerResult = reinterpret_cast<const T*>(args.peerWindows[s] + L.result +
                                                       parity * L.stagingBytes + slotOffset);
      copyElems(recv + tileStart + shardBegin(s), peerResult, shardLen(s));
    }
    __syncthreads();
  }
  retireEpoch(args.local, epoch);
}

}  // namespace yali
