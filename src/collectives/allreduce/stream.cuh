// Streaming AllReduce for large messages: each block is split into two warp roles that run a
// kStreamStages-deep pipeline, so NVLink writes stay in flight while the block reduces.
//
//   sender warps   (threads [0, senderThreads)): for step k, copy our input pieces into every
//                  peer's staging stage k % kStreamStages (NVLink writes only), then publish
//                  pushFlags[b][our rank] = flagValue(epoch, k) on each peer.
//   reducer warps  (the rest): for step k, wait for every peer's push of step k, reduce, publish
//                  resultFlags[b][our rank] = flagValue(epoch, k) on each peer.
//
// Two variants, chosen per launch by DeviceArgs::wholeTile:
//   stream_oneshot (wholeTile = 1): a tile is slotBytes of the message. The sender pushes the whole
//     tile to every peer (one load, n-1 stores); every rank reduces the whole tile from its input
//     and the n-1 staged copies. NVLink bytes per rank: (n-1) x message, one flag round trip per
//     step. At n = 2 that equals the two-shot's traffic with half the round trips.
//   stream_twoshot (wholeTile = 0): a tile is n x slotBytes, cut into n shards (as in twoshot.cuh).
//     The sender pushes our part of shard d to rank d; the reducer reduces our shard into our output
//     and into every peer's gather stage (NVLink writes), then, one step later, copies the peers'
//     shards of the previous step out of our gather stage. NVLink bytes: 2(n-1)/n x message.
//
// Reuse of a stage (k and k + kStreamStages share it); every arrow is a release -> acquire pair:
//   * peer staging: our sender writes stage k % S of peer d at step k only after observing d's
//     resultFlags of step k - S: d's reducer published it after reading everything in that stage.
//   * our gather stage (two-shot): owners write it at their reduce(k) after observing our push
//     flag of step k; our sender publishes that flag only after our reducer has copied step k - S
//     out (shared-memory counter `copiedSteps`, handed over with fence.cta on both sides).
//   * in place (send == recv), stream_oneshot: the reducer overwrites tile k of the input, so it
//     starts reduce(k) only after our sender has pushed tile k (shared counter `pushedSteps`).
//     The two-shot variant needs no such wait: its sender never reads our own shard, and it read
//     the other shards before publishing the push flags that the owners' results depend on.
//   * end of launch: the sender waits for every peer's result flag of its last step before the
//     block exits, so when a launch ends no peer still reads what this block wrote into it; the
//     next launch (any algorithm, any block count) starts from free buffers. Owners' writes into
//     our gather stages are covered by our reducer's waits for them.
// Flag values only grow (flagValue(epoch, step)), so nothing is reset between steps or launches.
//
// Failure: a role that abandons a wait records it in shared `roleFailed`; every spin of the other
// role checks that word, and each role decides to stop with a barrier-reduction (bar.red.or), so
// all threads of a role leave together and no barrier is left half-arrived.
#pragma once

#include "collectives/common/copy.cuh"

namespace yali {

constexpr int kPhaseStreamCredit = 4;  // sender: waiting for a peer to free a staging stage
constexpr int kPhaseStreamData = 5;    // reducer: waiting for a peer's push
constexpr int kPhaseStreamResult = 6;  // reducer (two-shot): waiting for an owner's reduced shard
constexpr int kPhaseStreamLocal = 7;   // one role waiting for the other (shared-memory counter)

// Named barriers (id 0 is __syncthreads()).
constexpr int kSenderBarrier = 1;
constexpr int kReducerBarrier = 2;

__device__ __forceinline__ void roleBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Barrier over one role that also returns whether any of its threads passed `pred`.
__device__ __forceinline__ bool roleBarrierAny(int id, int threads, bool pred) {
  int any;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.s32 p, %1, 0;\n\t"
      "bar.red.or.pred q, %2, %3, p;\n\t"
      "selp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(any)
      : "r"(static_cast<int>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// One thread's bounded wait for `*flag >= value`; also gives up when the block's other role failed.
__device__ __forceinline__ bool waitFlag(const DeviceArgs& args, const uint64_t* flag,
                                         uint64_t value, int phase, const volatile int* roleFailed) {
  WaitGuard guard(args);
  while (observe(flag) < value) {
    if (*roleFailed != 0 || !guard.keepWaiting(phase)) return false;
  }
  return true;
}

// One thread's bounded wait for the block's other role to advance a shared counter to `target`;
// the fence.cta after it is the acquire side of the hand-over (the other role fences, then stores).
__device__ __forceinline__ bool waitShared(const DeviceArgs& args, const unsigned* counter,
                                           unsigned target, const volatile int* roleFailed) {
  WaitGuard guard(args);
  while (*reinterpret_cast<const volatile unsigned*>(counter) < target) {
    if (*roleFailed != 0 || !guard.keepWaiting(kPhaseStreamLocal)) return false;
  }
  __threadfence_block();
  return true;
}

// The release side: called by one thread after a role barrier that followed the role's accesses.
__device__ __forceinline__ void advanceShared(unsigned* counter, unsigned value) {
  __threadfence_block();
  *reinterpret_cast<volatile unsigned*>(counter) = value;
}

template <typename T, Op kOp>
__global__ void __launch_bounds__(kBulkMaxThreads) streamKernel(DeviceArgs args) {
  __shared__ uint64_t epochSlot;
  __shared__ int roleFailed;         // 0 -> 1 once, by either role
  __shared__ unsigned copiedSteps;   // two-shot: steps whose gather stage our reducer copied out
  __shared__ unsigned pushedSteps;   // steps our sender has pushed (read in place, one-shot)
  waitForPriorGrids();
  if (commFailed(args)) return;
  if (threadIdx.x == 0) {
    roleFailed = 0;
    copiedSteps = 0;
    pushedSteps = 0;
  }
  const uint64_t epoch = readEpoch(args.local, &epochSlot);  // its __syncthreads() covers the above

  constexpr size_t kE = 16 / sizeof(T);
  constexpr uint32_t S = kStreamStages;
  const int n = args.nranks;
  const int me = args.rank;
  const bool whole = args.wholeTile != 0;
  const bool reducerWaitsForSender = whole && args.send == args.recv;
  const WindowLayout& L = args.layout;
  const size_t slotElems = args.slotBytes / sizeof(T);
  const size_t tileElems = whole ? slotElems : slotElems * n;
  const size_t tiles = (args.count + tileElems - 1) / tileElems;
  const uint32_t steps =
      blockIdx.x < tiles ? static_cast<uint32_t>((tiles - blockIdx.x + gridDim.x - 1) / gridDim.x) : 0;
  const size_t stageBytes = streamStageBytes(L);
  const size_t slotOffset = static_cast<size_t>(blockIdx.x) * args.slotBytes;
  const T* send = static_cast<const T*>(args.send);
  T* recv = static_cast<T*>(args.recv);
  volatile int* failedWord = &roleFailed;

  // Geometry of step k: the tile, and the piece of it that belongs to rank d (the whole tile in
  // the one-shot variant; shard d, a 16-byte multiple long, in the two-shot variant).
  struct Step {
    size_t tileStart, tileLen, q;
    bool whole;
    __device__ size_t begin(int d) const { return whole ? 0 : min(static_cast<size_t>(d) * q, tileLen); }
    __device__ size_t len(int d) const {
      return whole ? tileLen : min(static_cast<size_t>(d + 1) * q, tileLen) - begin(d);
    }
  };
  auto stepAt = [&](uint32_t k) {
    Step st;
    st.tileStart = (blockIdx.x + static_cast<size_t>(k) * gridDim.x) * tileElems;
    st.tileLen = min(tileElems, args.count - st.tileStart);
    st.q = ((st.tileLen + n - 1) / n + kE - 1) / kE * kE;
    st.whole = whole;
    return st;
  };
  // staging / gather stage of step k: [stage][sender or owner][stageBytes], our block's slot in it.
  auto stagingAt = [&](char* window, uint32_t k, int sender) {
    return reinterpret_cast<T*>(window + L.staging + ((k % S) * n + sender) * stageBytes + slotOffset);
  };
  auto gatherAt = [&](char* window, uint32_t k, int owner) {
    return reinterpret_cast<T*>(window + L.gather + ((k % S) * n + owner) * stageBytes + slotOffset);
  };
  auto flagIn = [&](char* window, size_t flagsOffset, int rank) {
    return reinterpret_cast<uint64_t*>(window + flagsOffset) + blockIdx.x * kMaxRanks + rank;
  };

  if (static_cast<int>(threadIdx.x) < args.senderThreads) {
    // ---- sender role ----
    const int tid = threadIdx.x;
    const int nthr = args.senderThreads;
    const bool flagThread = tid < n && tid != me;  // thread p talks to peer p
    bool failed = false;
    for (uint32_t k = 0; k < steps && !failed; ++k) {
      bool bad = false;
      if (k >= S) {
        if (flagThread)
          bad = !waitFlag(args, flagIn(args.window, L.resultFlags, tid), flagValue(epoch, k - S),
                          kPhaseStreamCredit, failedWord);
        if (!whole && tid == 0 && !bad) bad = !waitShared(args, &copiedSteps, k - S + 1, failedWord);
      }
      if (roleBarrierAny(kSenderBarrier, nthr, bad)) {
        failed = true;
        break;
      }
      const Step st = stepAt(k);
      if (whole) {
        T* dst[kMaxRanks];
#pragma unroll
        for (int i = 0; i < kMaxRanks; ++i)
          dst[i] = i < n - 1 ? stagingAt(args.peerWindows[(me + 1 + i) % n], k, me) : nullptr;
        copyElems<T>(dst, n - 1, send + st.tileStart, st.tileLen, tid, nthr);
      } else {
        for (int i = 1; i < n; ++i) {
          const int d = (me + i) % n;  // next rank first: spreads the load over peers
          copyElems<T>(stagingAt(args.peerWindows[d], k, me), send + st.tileStart + st.begin(d),
                       st.len(d), tid, nthr);
        }
      }
      roleBarrier(kSenderBarrier, nthr);  // the role's writes, then the publish (cumulative)
      if (flagThread) publish(flagIn(args.peerWindows[tid], L.pushFlags, me), flagValue(epoch, k));
      if (tid == 0 && reducerWaitsForSender) advanceShared(&pushedSteps, k + 1);
    }
    // Leave only when every peer has consumed all we pushed (see "end of launch" above).
    if (!failed && steps > 0) {
      bool bad = flagThread && !waitFlag(args, flagIn(args.window, L.resultFlags, tid),
                                         flagValue(epoch, steps - 1), kPhaseStreamCredit, failedWord);
      failed = roleBarrierAny(kSenderBarrier, nthr, bad);
    }
    if (failed) roleFailed = 1;
  } else {
    // ---- reducer role ----
    const int tid = threadIdx.x - args.senderThreads;
    const int nthr = blockDim.x - args.senderThreads;
    const bool flagThread = tid < n && tid != me;
    bool failed = false;
    // Two-shot: copy-out of step k - 1 follows reduce(k), so its wait overlaps our reduce.
    const uint32_t last = whole ? steps : steps + 1;
    for (uint32_t k = 0; k < last && !failed; ++k) {
      if (k < steps) {
        const Step st = stepAt(k);
        bool bad = flagThread && !waitFlag(args, flagIn(args.window, L.pushFlags, tid),
                                           flagValue(epoch, k), kPhaseStreamData, failedWord);
        if (reducerWaitsForSender && tid == 0 && !bad)
          bad = !waitShared(args, &pushedSteps, k + 1, failedWord);
        if (roleBarrierAny(kReducerBarrier, nthr, bad)) {
          failed = true;
          break;
        }
        const T* src[kMaxRanks];
#pragma unroll
        for (int s = 0; s < kMaxRanks; ++s)  // unrolled: src stays in registers
          src[s] = s == me ? send + st.tileStart + st.begin(me) : stagingAt(args.window, k, s);
        T* dst[kMaxRanks];
#pragma unroll
        for (int d = 0; d < kMaxRanks; ++d)
          dst[d] = d == 0 ? recv + st.tileStart + st.begin(me)
                          : gatherAt(args.peerWindows[(me + d) % n], k, me);
        reduceElems<T, kOp>(dst, whole ? 1 : n, src, n, st.len(me), tid, nthr);
        roleBarrier(kReducerBarrier, nthr);  // every read of our staging stage, every write, then
        if (flagThread) publish(flagIn(args.peerWindows[tid], L.resultFlags, me), flagValue(epoch, k));
      }
      if (!whole && k >= 1) {
        const uint32_t j = k - 1;
        const Step st = stepAt(j);
        const bool bad = flagThread && !waitFlag(args, flagIn(args.window, L.resultFlags, tid),
                                                 flagValue(epoch, j), kPhaseStreamResult, failedWord);
        if (roleBarrierAny(kReducerBarrier, nthr, bad)) {
          failed = true;
          break;
        }
        for (int i = 1; i < n; ++i) {
          const int s = (me + i) % n;
          copyElems<T>(recv + st.tileStart + st.begin(s), gatherAt(args.window, j, s), st.len(s), tid,
                       nthr);
        }
        roleBarrier(kReducerBarrier, nthr);  // every load from gather stage j is done
        if (tid == 0) advanceShared(&copiedSteps, j + 1);
      }
    }
    if (failed) roleFailed = 1;
  }
  allowNextGrid();
  __syncthreads();
  if (roleFailed != 0) return;  // the epoch stays: the comm is failed for good
  retireEpoch(args.local, epoch);
}

}  // namespace yali
