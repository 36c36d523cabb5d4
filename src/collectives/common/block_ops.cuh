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

// Threads per block the kernels built on these helpers are compiled for (__launch_bounds__): the
// batched reduce below would otherwise take over 128 registers a thread and cap blocks at 256
// threads. 512 is what the tuning table uses; maxLaunchableThreads() reports this cap.
constexpr int kBlockOpsMaxThreads = 512;

// Vectors per thread per source that reduceElems keeps in flight (1 = one vector of every source
// at a time, the form before this batching). YALI_REDUCE_BATCH exists for A/B builds only.
#ifndef YALI_REDUCE_BATCH
#define YALI_REDUCE_BATCH 4
#endif
constexpr int kReduceBatch = YALI_REDUCE_BATCH;

// Reduces items i + u * stride (u < kBatch) of sources srcAt(0..nsrc-1) in rank order in fp32 and
// stores each result to dstAt(0..ndst-1). An item is a Vec: a 16-byte vector, or one T.
// Why batched: a block reduces a whole shard per step (128 KB in twoshot_push), and with one
// vector of each source per thread every 8 KB of output cost a full memory latency. Here source
// r+1's batch is loaded while source r's is added, so two sources' batches are in flight; the adds
// stay in rank order 0..nsrc-1, so every rank's bits are the same for any kBatch.
// Registers: two batches of raw items plus kBatch x (sizeof(Vec) / sizeof(T)) fp32 accumulators.
// The accessors compute pointers on demand (no arrays of 2 x kMaxRanks pointers held in registers).
template <typename T, Op kOp, typename Vec, int kBatch, typename DstAt, typename SrcAt>
__device__ __forceinline__ void reduceItems(const DstAt& dstAt, int ndst, const SrcAt& srcAt,
                                            int nsrc, size_t i, size_t stride) {
  constexpr int kE = sizeof(Vec) / sizeof(T);
  float acc[kBatch][kE];
  Vec cur[kBatch], next[kBatch];
  const Vec* first = reinterpret_cast<const Vec*>(srcAt(0)) + i;
#pragma unroll
  for (int u = 0; u < kBatch; ++u) cur[u] = __ldcg(first + u * stride);  // L2: peers wrote these
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < nsrc) {
      if (r + 1 < nsrc) {
        const Vec* p = reinterpret_cast<const Vec*>(srcAt(r + 1)) + i;
#pragma unroll
        for (int u = 0; u < kBatch; ++u) next[u] = __ldcg(p + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const T* x = reinterpret_cast<const T*>(&cur[u]);
#pragma unroll
        for (int e = 0; e < kE; ++e) {
          const float f = ElemTraits<T>::toFloat(x[e]);
          acc[u][e] = r == 0 ? f : Reducer<kOp>::combine(acc[u][e], f);
        }
        cur[u] = next[u];
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    Vec out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < kE; ++e) o[e] = ElemTraits<T>::fromFloat(Reducer<kOp>::finish(acc[u][e], nsrc));
#pragma unroll
    for (int d = 0; d < kMaxRanks; ++d)
      if (d < ndst) reinterpret_cast<Vec*>(dstAt(d))[i + u * stride] = out;
  }
}

// out = reduce(srcAt(0..nsrc-1)) in rank order over n elements, written to dstAt(0..ndst-1)
// (local or peer memory). srcAt(r) returns const T*, dstAt(d) returns T*.
template <typename T, Op kOp, typename DstAt, typename SrcAt>
__device__ __forceinline__ void reduceElemsAt(const DstAt& dstAt, int ndst, const SrcAt& srcAt,
                                              int nsrc, size_t n) {
  constexpr size_t kE = 16 / sizeof(T);
  uintptr_t align = 0;
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < nsrc) align |= reinterpret_cast<uintptr_t>(srcAt(r));
    if (r < ndst) align |= reinterpret_cast<uintptr_t>(dstAt(r));
  }
  size_t done = 0;
  if ((align & 15) == 0) {
    const size_t vecs = n / kE;
    // Avg's IEEE division takes enough registers to spill at 512 threads with a batch of 4.
    constexpr int kBatch = kOp == Op::kAvg && kReduceBatch > 2 ? 2 : kReduceBatch;
    size_t i = threadIdx.x;
#pragma unroll 1  // one batch's registers at a time
    for (; i + (kBatch - 1) * blockDim.x < vecs; i += kBatch * blockDim.x)
      reduceItems<T, kOp, uint4, kBatch>(dstAt, ndst, srcAt, nsrc, i, blockDim.x);
    for (; i < vecs; i += blockDim.x) reduceItems<T, kOp, uint4, 1>(dstAt, ndst, srcAt, nsrc, i, 0);
    done = vecs * kE;
  }
  for (size_t i = done + threadIdx.x; i < n; i += blockDim.x)
    reduceItems<T, kOp, T, 1>(dstAt, ndst, srcAt, nsrc, i, 0);
}

// The same over arrays of pointers: dst[0..ndst-1], src[0..nsrc-1].
template <typename T, Op kOp>
__device__ __forceinline__ void reduceElems(T* const* dst, int ndst, const T* const* src, int nsrc,
                                            size_t n) {
  reduceElemsAt<T, kOp>([&](int d) { return dst[d]; }, ndst, [&](int r) { return src[r]; }, nsrc, n);
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

}  // namespace yali
