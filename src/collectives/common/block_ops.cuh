// Block-wide building blocks shared by the multi-step AllReduce kernels (twoshot, oneshot_pull,
// copy_engine): element copies and reductions over a block's threads, and the per-block flag
// exchange with every peer.
#pragma once

#include "collectives/common/device.cuh"

namespace yali {

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
    constexpr int kUnroll = 8;  // eight 16-byte loads in flight per thread before the stores
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

// out = reduce(src[0..nsrc-1]) in rank order, written to dst[0..ndst-1] (local or peer memory).
template <typename T, Op kOp>
__device__ __forceinline__ void reduceElems(T* const* dst, int ndst, const T* const* src, int nsrc,
                                            size_t n) {
  constexpr size_t kE = 16 / sizeof(T);
  uintptr_t align = 0;
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < nsrc) align |= reinterpret_cast<uintptr_t>(src[r]);
    if (r < ndst) align |= reinterpret_cast<uintptr_t>(dst[r]);
  }
  size_t done = 0;
  if ((align & 15) == 0) {
    const size_t vecs = n / kE;
    const uint4* const* s = reinterpret_cast<const uint4* const*>(src);
    for (size_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      const uint4 v = reduceSources<T, kOp, uint4>(s, i, nsrc);
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d)
        if (d < ndst) reinterpret_cast<uint4*>(dst[d])[i] = v;
    }
    done = vecs * kE;
  }
  for (size_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    const T v = reduceSources<T, kOp, T>(src, i, nsrc);
#pragma unroll
    for (int d = 0; d < kMaxRanks; ++d)
      if (d < ndst) dst[d][i] = v;
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

// Waits until `flag` reaches `value` (the calling thread only); false when the wait failed.
__device__ __forceinline__ bool waitAtLeast(const DeviceArgs& args, const uint64_t* flag,
                                            uint64_t value, int phase) {
  WaitGuard guard(args);
  while (observe(flag) < value) {
    if (!guard.keepWaiting(phase)) return false;
  }
  return true;
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
    if (!waitAtLeast(args, flag, value, phase)) failed = 1;
  }
  __syncthreads();
  return failed == 0;
}

}  // namespace yali
