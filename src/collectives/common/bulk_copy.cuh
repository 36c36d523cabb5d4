// Bulk copies (Hopper's TMA unit, PTX cp.async.bulk) from shared memory to global memory, local or
// a peer's over NVLink, fed by a ring of shared-memory chunk buffers that the block's threads fill.
//
// Why: an NVLink write issued as 16-byte stores by every thread costs the SM an issue slot and a
// long-latency outstanding store per 16 bytes; measured, 32 blocks of such stores carry about
// 300 GB/s one way while the links carry 390 (docs/PERF.md). A bulk copy moves a whole chunk for
// one instruction of one thread, so the threads are left with the local loads and the reduction.
//
// The ring (kBulkStages buffers of kBulkChunkBytes in dynamic shared memory), chunk c of the
// block's running count using buffer c % kBulkStages:
//   1. every thread writes its part of chunk c into buffer c % S, then fence.proxy.async: its
//      generic writes to shared memory become visible to the bulk copy (the async proxy);
//   2. thread 0 waits until at most S - 2 of its bulk groups are still reading shared memory
//      (cp.async.bulk.wait_group.read): the groups of chunks <= c - S + 1 are done, so buffer
//      (c + 1) % S is free;
//   3. __syncthreads(): buffer c is complete, and every thread may fill buffer (c + 1) % S next;
//   4. thread 0 issues one bulk copy of chunk c per destination and commits them as one group.
// Bulk groups belong to the thread that issued them, so thread 0 issues, waits and drains them
// all. Up to S - 1 chunks are in flight while the threads fill the next one.
//
// Ordering with the flags (device.cuh: publish/observe):
//   * before a flag says "the data is there", thread 0 drains (bulkDrain: wait_group 0, complete
//     and visible to it, then a proxy fence and a system fence); the publishing thread's release
//     follows the block barrier in signalPeers(), so it is ordered after the drain;
//   * before bulk-writing into a buffer a peer may just have finished reading (we observed its
//     flag saying so), thread 0 fences the generic proxy against the async one (bulkStreamBegin).
// Destinations that are not 16-byte aligned, and the last elements of a run whose byte length is
// not a multiple of 16 (bulk copies need both), are written by the threads themselves with plain
// stores; the same flags publish them.
#pragma once

#include "collectives/common/device.cuh"

namespace yali {

constexpr int kBulkStages = 4;
constexpr uint32_t kBulkChunkBytes = 32u << 10;
// Dynamic shared memory of a kernel that uses the ring: 128 KB, one block per SM.
constexpr size_t kBulkSharedBytes = static_cast<size_t>(kBulkStages) * kBulkChunkBytes;

__device__ __forceinline__ void bulkStore(void* globalDst, const void* sharedSrc, uint32_t bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(sharedSrc));
  const size_t g = __cvta_generic_to_global(globalDst);
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g), "r"(s),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulkCommit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most N of this thread's bulk groups are still reading their shared memory.
template <int N>
__device__ __forceinline__ void bulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Thread 0: every bulk copy it issued has completed (its writes are performed), ordered before
// whatever the block publishes next.
__device__ __forceinline__ void bulkDrain() {
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence_system();
  }
}

// Thread 0, before the first bulk write after a wait on a peer's flag: the peer's reads that the
// flag announced finished (observed by the generic proxy) are ordered before our async writes.
__device__ __forceinline__ void bulkStreamBegin() {
  if (threadIdx.x == 0) asm volatile("fence.proxy.async.global;" ::: "memory");
}

// The block's position in the ring (same value in every thread).
struct BulkRing {
  char* buffers;  // kBulkStages x kBulkChunkBytes, dynamic shared memory
  uint32_t next;  // running chunk count
};

// Writes element run [0, n) of f() into every destination dst[0..ndst-1], through the ring.
// f(vectorIndex) returns 16 bytes (elements [i*kE, i*kE+kE)), fElem(elementIndex) one element;
// fElem is used for the tail and when `vectorSources` is false (an unaligned source).
template <typename T, typename VecFn, typename ElemFn>
__device__ __forceinline__ void bulkStream(BulkRing& ring, T* const* dst, int ndst, size_t n,
                                           bool vectorSources, VecFn f, ElemFn fElem) {
  constexpr size_t kE = 16 / sizeof(T);
  constexpr size_t kChunkElems = kBulkChunkBytes / sizeof(T);
  unsigned direct = 0;  // destinations written by plain stores (not 16-byte aligned)
#pragma unroll
  for (int d = 0; d < kMaxRanks; ++d)
    if (d < ndst && (reinterpret_cast<uintptr_t>(dst[d]) & 15) != 0) direct |= 1u << d;
  for (size_t off = 0; off < n; off += kChunkElems) {
    const size_t m = min(kChunkElems, n - off);
    const size_t bulkElems = m / kE * kE;  // a 16-byte multiple, the rest by plain stores
    T* buf = reinterpret_cast<T*>(ring.buffers + (ring.next % kBulkStages) * kBulkChunkBytes);
    size_t firstElem = 0;
    if (vectorSources) {
      for (size_t v = threadIdx.x; v < bulkElems / kE; v += blockDim.x) {
        const uint4 x = f(off / kE + v);
        reinterpret_cast<uint4*>(buf)[v] = x;
        if (direct != 0) {
          const T* xe = reinterpret_cast<const T*>(&x);
#pragma unroll
          for (int d = 0; d < kMaxRanks; ++d)
            if (d < ndst && (direct >> d & 1))
              for (size_t e = 0; e < kE; ++e) dst[d][off + v * kE + e] = xe[e];
        }
      }
      firstElem = bulkElems;
    }
    for (size_t e = firstElem + threadIdx.x; e < m; e += blockDim.x) {
      const T x = fElem(off + e);
      const bool inBulk = e < bulkElems;
      if (inBulk) buf[e] = x;
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d)
        if (d < ndst && (!inBulk || (direct >> d & 1))) dst[d][off + e] = x;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (threadIdx.x == 0) bulkWaitRead<kBulkStages - 2>();
    __syncthreads();
    if (threadIdx.x == 0) {
      if (bulkElems > 0) {
#pragma unroll
        for (int d = 0; d < kMaxRanks; ++d)
          if (d < ndst && !(direct >> d & 1))
            bulkStore(dst[d] + off, buf, static_cast<uint32_t>(bulkElems * sizeof(T)));
      }
      bulkCommit();  // one group per chunk, empty or not: the wait above counts chunks
    }
    ++ring.next;
  }
}

}  // namespace yali
