// Cooperative copy and reduce loops of the multi-block kernels. Every loop is written for a group
// of threads (`tid` in [0, nthreads)), today always the whole block. Loads use ld.global.cg (L2 only): sources may be a peer's memory or a
// buffer a peer wrote during this kernel (device.cuh explains why L1 must not serve them).
#pragma once

#include "collectives/common/device.cuh"

namespace yali {

// Block size bound for the kernels built on these loops (two-shot): it caps registers
// at 128 per thread so that 512-thread blocks, the tuned size, can always launch.
constexpr int kBulkMaxThreads = 512;

// Copies `n` elements; 16-byte vectors when both ends allow it, element by element otherwise.
template <typename T>
__device__ __forceinline__ void copyElems(T* dst, const T* src, size_t n, unsigned tid,
                                          unsigned nthreads) {
  constexpr size_t kE = 16 / sizeof(T);
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vecs = n / kE;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    constexpr int kUnroll = 8;
    size_t i = tid;
    for (; i + (kUnroll - 1) * nthreads < vecs; i += kUnroll * nthreads) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(s + i + u * nthreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) d[i + u * nthreads] = v[u];
    }
    for (; i < vecs; i += nthreads) d[i] = __ldcg(s + i);
    done = vecs * kE;
  }
  for (size_t i = done + tid; i < n; i += nthreads) dst[i] = __ldcg(src + i);
}

// dst[0..ndst-1] = reduce(src[0..nsrc-1]) over `n` elements, sources in rank order (every rank
// that reduces the same sources gets the same bits).
template <typename T, Op kOp>
__device__ __forceinline__ void reduceElems(T* const* dst, int ndst, const T* const* src, int nsrc,
                                            size_t n, unsigned tid, unsigned nthreads) {
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
    for (size_t i = tid; i < vecs; i += nthreads) {
      const uint4 v = reduceSources<T, kOp, uint4>(s, i, nsrc);
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d)
        if (d < ndst) reinterpret_cast<uint4*>(dst[d])[i] = v;
    }
    done = vecs * kE;
  }
  for (size_t i = done + tid; i < n; i += nthreads) {
    const T v = reduceSources<T, kOp, T>(src, i, nsrc);
#pragma unroll
    for (int d = 0; d < kMaxRanks; ++d)
      if (d < ndst) dst[d][i] = v;
  }
}

}  // namespace yali
