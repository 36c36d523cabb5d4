// Building blocks shared by the multi-step kernels (two-shot, oneshot_pull, the exchanges):
// element copies and reductions over a team's threads, and the per-pipeline flag exchange with
// every peer.
#pragma once

#include "collectives/common/device.cuh"

namespace yali {

// The threads that run one pipeline of a multi-step kernel together: the whole block (wholeBlock),
// or, in two-shot, one of `perBlock` teams of whole warps (teamOf). A block's teams share nothing
// but the SM: each has its own flags row, slot and tiles, and synchronizes only its own threads, so
// one team's barrier, release drain and flag wait overlap the other team's NVLink stores.
struct Team {
  int id;       // pipeline index in the grid: flags row [id], slot id of every staging area
  int count;    // pipelines in the grid
  int index;    // team within its block: its hardware barrier is 1 + index (0 is
                // __syncthreads) and its __shared__ words are [index]
  int size;     // threads in the team, a multiple of 32
  int thread;   // this thread's index in the team

  // bar.sync orders memory among the threads that take part, like __syncthreads() does for a block
  // (PTX: barrier.sync), which is what signalPeers' cumulativity argument needs.
  __device__ __forceinline__ void sync() const {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + index), "r"(size) : "memory");
  }
};

__device__ __forceinline__ Team wholeBlock() {
  return {static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), 0,
          static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x)};
}

// Team of this thread when the block is cut into `perBlock` equal teams (blockDim.x / perBlock
// must be a multiple of 32; the selector guarantees it). Pipelines are numbered block-major.
__device__ __forceinline__ Team teamOf(int perBlock) {
  if (perBlock <= 1) return wholeBlock();
  const int size = static_cast<int>(blockDim.x) / perBlock;
  const int index = static_cast<int>(threadIdx.x) / size;
  return {static_cast<int>(blockIdx.x) * perBlock + index, static_cast<int>(gridDim.x) * perBlock,
          index, size, static_cast<int>(threadIdx.x) - index * size};
}

// Copies `n` elements with the team's threads; 16-byte vectors when both ends allow it, element by
// element otherwise. Loads use ld.cg: the source may be a peer's buffer or one a peer wrote.
template <typename T>
__device__ __forceinline__ void copyElems(const Team& team, T* dst, const T* src, size_t n) {
  constexpr size_t kE = 16 / sizeof(T);
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vecs = n / kE;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    constexpr int kUnroll = 8;  // eight 16-byte loads in flight per thread before the stores
    const size_t stride = team.size;
    size_t i = team.thread;
    for (; i + (kUnroll - 1) * stride < vecs; i += kUnroll * stride) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(s + i + u * stride);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) d[i + u * stride] = v[u];
    }
    for (; i < vecs; i += stride) d[i] = __ldcg(s + i);
    done = vecs * kE;
  }
  for (size_t i = done + team.thread; i < n; i += team.size) dst[i] = ldcg(src + i);
}

// Copies `n` bytes with the team's threads at the widest access both ends allow: when dst and src
// are equally misaligned modulo 16 (8, 4, 2), a head of single bytes brings both to that boundary
// and the rest moves in 16-byte (8-, 4-, 2-byte) words; only pieces whose offsets differ by an odd
// number of bytes move byte by byte. The exchanges move every piece with it: a piece of an odd
// element count starts the next rank's piece off the 16-byte grid.
__device__ __forceinline__ void copyBytes(const Team& team, char* dst, const char* src, size_t n) {
  const uintptr_t apart = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  const size_t width = (apart & 15) == 0 ? 16 : (apart & 7) == 0 ? 8 : (apart & 3) == 0 ? 4 : (apart & 1) == 0 ? 2 : 1;
  const size_t head = min(n, (width - (reinterpret_cast<uintptr_t>(dst) & (width - 1))) & (width - 1));
  for (size_t i = team.thread; i < head; i += team.size) dst[i] = ldcg(src + i);
  dst += head;
  src += head;
  n -= head;
  const size_t words = n / width;
  switch (width) {
    case 16: copyElems(team, reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), words); break;
    case 8: copyElems(team, reinterpret_cast<uint2*>(dst), reinterpret_cast<const uint2*>(src), words); break;
    case 4: copyElems(team, reinterpret_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t*>(src), words); break;
    case 2: copyElems(team, reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src), words); break;
    default: copyElems(team, dst, src, words); break;
  }
  for (size_t i = words * width + team.thread; i < n; i += team.size) dst[i] = ldcg(src + i);
}

// One copy among several that a team makes together (copyJobs): `len` bytes from src to dst.
struct CopyJob {
  char* dst;
  const char* src;
  size_t len;
};

// Vectors each thread moves of every job in one pass of copyJobs, as copyElems' eight loads in flight.
constexpr int kCopyJobUnroll = 8;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// One pass of copyJobs over one job: this thread's vectors base, base + stride, ... (kCopyJobUnroll of
// them, those below the job's whole vectors), loaded before any is stored. Both ends 16-byte aligned.
__device__ __forceinline__ void copyJobPass(const CopyJob& job, size_t base, size_t stride) {
  const size_t vecs = job.len / 16;
  if (base >= vecs) return;
  const uint4* s = reinterpret_cast<const uint4*>(job.src);
  uint4* d = reinterpret_cast<uint4*>(job.dst);
  uint4 v[kCopyJobUnroll];
#pragma unroll
  for (int u = 0; u < kCopyJobUnroll; ++u)
    if (base + u * stride < vecs) v[u] = __ldcg(s + base + u * stride);
#pragma unroll
  for (int u = 0; u < kCopyJobUnroll; ++u)
    if (base + u * stride < vecs) d[base + u * stride] = v[u];
}

// Copies every job with the team's threads, the jobs interleaved: pass after pass, each thread
// moves kCopyJobUnroll vectors of every job in turn. Jobs that write into peers' memory then keep
// NVLink stores in flight while the same threads make the local copies: made one after the other,
// the links idle during each local copy (the direct exchange's own piece: out of place, AllGather,
// Broadcast and Scatter ran 20 % slower than in place at 1 GB on 2 H200s, where that copy is
// dropped; docs/PERF.md, Session 37). Every job's ends must be 16-byte aligned (callers check with
// aligned16 and otherwise copy job by job with copyBytes); each job's last len % 16 bytes are copied
// after the passes.
__device__ __forceinline__ void copyJobs(const Team& team, const CopyJob* jobs, int count) {
  size_t vecs = 0;
  for (int p = 0; p < count; ++p) vecs = max(vecs, jobs[p].len / 16);
  const size_t stride = team.size;
  for (size_t base = team.thread; base < vecs; base += kCopyJobUnroll * stride)
    for (int p = 0; p < count; ++p) copyJobPass(jobs[p], base, stride);
  for (int p = 0; p < count; ++p)
    for (size_t i = jobs[p].len / 16 * 16 + team.thread; i < jobs[p].len; i += team.size)
      jobs[p].dst[i] = ldcg(jobs[p].src + i);
}

// out = reduce(src[0..nsrc-1]) in rank order, written to dst[0..ndst-1] (local or peer memory),
// by the team's threads.
template <typename T, RedOp kOp>
__device__ __forceinline__ void reduceElems(const Team& team, T* const* dst, int ndst,
                                            const T* const* src, int nsrc, size_t n) {
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
    for (size_t i = team.thread; i < vecs; i += team.size) {
      const uint4 v = reduceSources<T, kOp, uint4>(s, i, nsrc);
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d)
        if (d < ndst) reinterpret_cast<uint4*>(dst[d])[i] = v;
    }
    done = vecs * kE;
  }
  for (size_t i = done + team.thread; i < n; i += team.size) {
    const T v = reduceSources<T, kOp, T>(src, i, nsrc);
#pragma unroll
    for (int d = 0; d < kMaxRanks; ++d)
      if (d < ndst) dst[d][i] = v;
  }
}

// dst[d][i] = reduce of src[0..nsrc-1][i] in rank order, for vectors [0, vecs) and d < ndst, by the
// team's threads. Each thread issues the loads of kU vectors of every source before its first
// store, so a run whose sources are peers' memory pays one NVLink latency per kU vectors (and the
// stores cannot be mistaken for writes to the sources, which would serialize the loads).
// Registers: kU x nsrc x 16 bytes of loads in flight per thread, for up to kMaxRanks sources.
template <typename T, RedOp kOp, int kU>
__device__ __forceinline__ void reduceVectorsInFlight(const Team& team, uint4* const* dst, int ndst,
                                                      const uint4* const* src, int nsrc, size_t vecs) {
  const size_t stride = team.size;
  for (size_t base = team.thread; base < vecs; base += kU * stride) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (base + u * stride < vecs) v[u] = reduceSources<T, kOp, uint4>(src, base + u * stride, nsrc);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d)
        if (d < ndst && base + u * stride < vecs) dst[d][base + u * stride] = v[u];
    }
  }
}

// Vectors of every source each thread of reduceRun loads before its first store
// (reduceVectorsInFlight): kReduceRunUnroll x nsrc x 16 bytes in flight per thread.
constexpr int kReduceRunUnroll = 4;

// out = reduce(src[0..nsrc-1]) in rank order over `bytes` bytes (whole elements), by the team's
// threads: the exchanges' reductions of a piece's slot or run (the staged exchange's consume, the
// pull), whose sources are peers' memory or staging that peers wrote. When out, every source and
// `bytes` are 16-byte multiples, each thread keeps kReduceRunUnroll vectors of every source in
// flight (one memory latency per kReduceRunUnroll vectors, not one per vector); otherwise the run
// goes element by element (reduceElems). Either way each element is the same reduction in the same
// order, so every rank that reduces the same sources gets the same bits.
template <typename T, RedOp kOp>
__device__ __forceinline__ void reduceRun(const Team& team, T* out, const T* const* src, int nsrc,
                                          size_t bytes) {
  bool vectors = aligned16(out) && bytes % 16 == 0;
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s) vectors = vectors && (s >= nsrc || aligned16(src[s]));
  T* dst[1] = {out};
  if (vectors)
    reduceVectorsInFlight<T, kOp, kReduceRunUnroll>(team, reinterpret_cast<uint4* const*>(dst), 1,
                                                    reinterpret_cast<const uint4* const*>(src), nsrc, bytes / 16);
  else
    reduceElems<T, kOp>(team, dst, 1, src, nsrc, bytes / sizeof(T));
}

// Publishes `value` into flag array `flagsOffset`[team.id][rank] of every other rank (one thread
// each), after the whole team's preceding writes: the team barrier orders them before the
// publishing thread, whose st.release.sys is cumulative over what it has observed (device.cuh:
// publish()).
// `peers`: a bit mask of the ranks to signal (all by default; our own bit is ignored).
__device__ __forceinline__ void signalPeers(const Team& team, const DeviceArgs& args,
                                            size_t flagsOffset, uint64_t value, uint32_t peers = ~0u) {
  team.sync();
  const int peer = team.thread;
  if (peer < args.nranks && peer != args.rank && ((peers >> peer) & 1u)) {
    uint64_t* flag = reinterpret_cast<uint64_t*>(args.peerWindows[peer] + flagsOffset) +
                     team.id * kMaxRanks + args.rank;
    publish(flag, value);
  }
}

// Waits until every other rank's flag [team.id][s] in our window reaches `value` (one thread
// each; `peers`: a bit mask of the ranks to wait for, all by default). Returns false (for the whole
// team) when the wait failed.
__device__ __forceinline__ bool waitPeers(const Team& team, const DeviceArgs& args,
                                          size_t flagsOffset, uint64_t value, int phase,
                                          uint32_t peers = ~0u) {
  __shared__ int failed[kMaxTeamsPerBlock];
  if (team.thread == 0) failed[team.index] = 0;
  team.sync();
  const int peer = team.thread;
  if (peer < args.nranks && peer != args.rank && ((peers >> peer) & 1u)) {
    const uint64_t* flag = reinterpret_cast<const uint64_t*>(args.window + flagsOffset) +
                           team.id * kMaxRanks + peer;
    if (!waitAtLeast(args, flag, value, phase)) failed[team.index] = 1;
  }
  team.sync();
  return failed[team.index] == 0;
}

// The entry handshake of the kernels that touch peers' registered buffers (twoshot_direct, the
// direct exchange),
// by the whole block: publishes flagValue(epoch, tag) into flag array `flagsOffset` [block][our
// rank] of every peer and waits until every peer's block has published its own. A peer publishes
// after its waitForPriorGrids(), so from then on its registered buffers hold its input and nothing
// of its own still reads or writes them (stream order). A peer whose tag is not ours made a
// different call (or runs a different algorithm, or its registration is gone: LaunchInfo::tag):
// the block records kFailMismatch. Every rank sees a differing tag when any does, so all give up
// before touching a peer's buffer. Returns false when the block must stop (mismatch or a failed
// wait).
__device__ __forceinline__ bool enterWithTag(const DeviceArgs& args, size_t flagsOffset,
                                             const LaunchInfo& info, int phase) {
  __shared__ int mismatch;
  const Team block = wholeBlock();
  const uint64_t epoch = info.epoch;
  if (threadIdx.x == 0) mismatch = 0;  // ordered before the checks by signalPeers' barrier
  signalPeers(block, args, flagsOffset, flagValue(epoch, info.tag));
  if (!waitPeers(block, args, flagsOffset, flagValue(epoch, 0), phase)) return false;
  // The flag holds this launch's value, or already a later launch's: a peer need not wait for
  // this block again after the handshake (twoshot_direct's blocks without tiles), so it may finish
  // this launch and enter its next call's while we stall here. A later epoch means the peer
  // compared our tag with its own in this launch and found them equal (a mismatch fails its comm,
  // which then admits no later launch), so only a flag of this epoch is compared.
  const int peer = threadIdx.x;
  if (peer < args.nranks && peer != args.rank) {
    const uint64_t* flag = reinterpret_cast<const uint64_t*>(args.window + flagsOffset) +
                           blockIdx.x * kMaxRanks + peer;
    const uint64_t seen = observe(flag);
    if ((seen >> 32) == epoch && static_cast<uint32_t>(seen) != info.tag) {
      mismatch = 1;
      recordFailure(args, kFailMismatch, phase);
    }
  }
  __syncthreads();
  return mismatch == 0;
}

}  // namespace yali
