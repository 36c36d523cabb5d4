// Device-side building blocks shared by every collective kernel: memory-ordering primitives,
// bounded waits, 16-byte vectors and the reduction operators.
//
// Memory-ordering vocabulary used throughout (PTX memory model, scope .sys because the peer GPUs
// read and write our memory over NVLink):
//   * publish(flag, v)   - st.release.sys: every write this thread made (and, through the
//                          preceding __syncthreads(), every write its block made) is visible to
//                          any thread that later observes flag >= v with an acquire load.
//   * observe(flag)      - ld.acquire.sys: after it returns v, writes published before v are
//                          visible to this thread and, after a following __syncthreads(), to its
//                          block.
//   * postRelaxed(flag, v) - st.relaxed.sys: a counter that publishes no data, only that the
//                          block's earlier reads are done (p2p.cu: the LL route's credit); no fence,
//                          so no wait for this thread's earlier writes to drain.
//   * Data written by another GPU is read with ld.global.cg (L2 only, never a stale L1 line): an
//     L1 line filled earlier in the same kernel could otherwise hold the previous round's bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "collectives/common/device_state.h"

namespace yali {

// ---- Ordering primitives ------------------------------------------------------------------------

__device__ __forceinline__ void publish(uint64_t* flag, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(value) : "memory");
}

__device__ __forceinline__ void postRelaxed(uint64_t* flag, uint64_t value) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(value) : "memory");
}

__device__ __forceinline__ uint64_t observe(const uint64_t* flag) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(flag) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Relaxed volatile 16-byte access, used for LL packets whose flags make them self-validating.
__device__ __forceinline__ void storeVolatile16(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 loadVolatile16(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// ld.global.cg of any element or vector type (__ldcg itself knows the built-in types only, not fp8
// or int64_t): the load goes through an unsigned type of the same size.
template <typename T>
__device__ __forceinline__ T ldcg(const T* p) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "ldcg: unsupported size");
  T out;
  if constexpr (sizeof(T) == 1) {
    const unsigned char v = __ldcg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&out, &v, 1);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short v = __ldcg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&out, &v, 2);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int v = __ldcg(reinterpret_cast<const unsigned int*>(p));
    memcpy(&out, &v, 4);
  } else if constexpr (sizeof(T) == 8) {
    const unsigned long long v = __ldcg(reinterpret_cast<const unsigned long long*>(p));
    memcpy(&out, &v, 8);
  } else {
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
    memcpy(&out, &v, 16);
  }
  return out;
}

// ---- Bounded waits ------------------------------------------------------------------------------

__device__ __forceinline__ WindowHeader* headerOf(char* window) {
  return reinterpret_cast<WindowHeader*>(window);
}

// Records that this launch failed (DeviceFailure `code`, in wait phase `phase`) where the host reads
// it, marks the comm failed so that every later wait and launch gives up at once, and tells every
// peer (once per comm, unless the failure came from a peer): their waits for us end now rather than
// at their own deadlines, so that a rank that dies or hangs costs every survivor one timeout, not
// one each in turn. The first failure wins; the host reads these words without synchronizing.
// `origin` and `remoteCode`: for kFailRemote, the peer and its own failure code.
// Out of line (here and below, the frame's rare paths; static: one copy per kernel file): inlined
// into every kernel they cost registers on the paths that run (ptxas showed new spills). Kernels take their DeviceArgs as
// __grid_constant__, so a reference to them costs no copy.
static __device__ __noinline__ void recordFailure(const DeviceArgs& args, int code, int phase, int origin = -1,
                                           int remoteCode = kFailNone) {
  if (atomicCAS(&args.host->claim, 0, 1) == 0) {
    volatile HostStatus* h = args.host;
    h->failurePhase = phase;
    h->failureBlock = blockIdx.x;
    h->failureEpoch = args.epochHint;
    h->failureOrigin = origin;
    h->failureRemoteCode = remoteCode;
    __threadfence_system();  // the details before the code that announces them
    h->failure = code;
  }
  atomicExch(&args.local->failed, 1);
  if (code != kFailRemote && atomicExch(&args.local->propagated, 1) == 0) {
    // A failed count check tells its peers which check (remoteFailureCheck), so that every rank's
    // message names it; the other codes need no detail.
    const uint32_t word = encodeRemoteFailure(code == kFailCounts ? withCheck(code, phase) : code, args.rank);
    for (int p = 0; p < args.nranks; ++p) {
      if (p == args.rank) continue;
      *reinterpret_cast<volatile uint32_t*>(&headerOf(args.peerWindows[p])->remoteFailure) = word;
    }
  }
  __threadfence_system();
}

// A peer's failure as our window's header announces it: recorded as ours (kFailRemote). False when
// no peer has failed.
__device__ __forceinline__ bool peerFailed(const DeviceArgs& args, int phase) {
  const uint32_t word = *reinterpret_cast<volatile uint32_t*>(&headerOf(args.window)->remoteFailure);
  if (word == 0) return false;
  recordFailure(args, kFailRemote, phase, remoteFailureRank(word), remoteFailureCode(word));
  return true;
}

// Every spin loop on the device goes through a WaitGuard: it turns "the peer never came" into an
// error the host can read instead of a hang. Every kSpinsPerCheck iterations it calls
// waitMayGoOn, which checks
//   1. the comm's local failed/closed words (another block of ours or an earlier launch already
//      failed, or the host closed the comm),
//   2. our window's remoteFailure word (a peer failed or called yaliCommAbort),
//   3. the deadline (DeviceArgs::timeoutNs from the wait's start),
// and every kChecksPerHostCheck checks also
//   4. the host-mapped abort word (yaliCommAbort on this rank). That read crosses PCIe; with
//      thousands of threads waiting at once it must stay rare (about every 16K spins).
// On failure it records the error (recordFailure) and every later check returns false.
constexpr int kSpinsPerCheck = 256;
constexpr int kChecksPerHostCheck = 64;

static __device__ __noinline__ bool waitMayGoOn(const DeviceArgs& args, uint64_t deadline, int checks, int phase) {
  if (*reinterpret_cast<volatile unsigned long long*>(&args.local->failed) != 0) return false;
  if (peerFailed(args, phase)) return false;
  if (checks % kChecksPerHostCheck == 0 &&
      *reinterpret_cast<volatile int*>(&args.host->abortRequested) != 0) {
    recordFailure(args, kFailAborted, phase);
    return false;
  }
  if (globalTimerNs() > deadline) {
    recordFailure(args, kFailTimeout, phase);
    return false;
  }
  return true;
}

struct WaitGuard {
  const DeviceArgs& args;
  uint64_t deadline;
  int spins = 0;
  int checks = 0;

  __device__ explicit WaitGuard(const DeviceArgs& a) : args(a) {
    deadline = globalTimerNs() + a.timeoutNs;
  }

  // Returns false once the wait must be abandoned.
  __device__ __forceinline__ bool keepWaiting(int phase) {
    if (++spins < kSpinsPerCheck) return true;
    spins = 0;
    return waitMayGoOn(args, deadline, ++checks, phase);
  }
};

// Waits until `flag` reaches `value` (the calling thread only); false when the wait failed.
__device__ __forceinline__ bool waitAtLeast(const DeviceArgs& args, const uint64_t* flag,
                                            uint64_t value, int phase) {
  WaitGuard guard(args);
  while (observe(flag) < value) {
    if (!guard.keepWaiting(phase)) return false;
  }
  return true;
}

// ---- Programmatic dependent launch ---------------------------------------------------------------

// Our kernels are launched with programmatic stream serialization (launch.cu), so the next one on
// the stream can be scheduled while this one is still running; that hides most of the gap between
// back-to-back launches. Correctness stays with stream order: a kernel calls waitForPriorGrids()
// before touching anything, which returns only once every prior grid on the stream has completed
// and its memory is visible. allowNextGrid() lets our successor be scheduled early; it changes
// nothing about what that successor may see.
__device__ __forceinline__ void waitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allowNextGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- The launch frame: admission, epoch, exit ------------------------------------------------------

// What a launch learns when it starts. Every launch on a comm gets the next epoch without the host
// passing it in (a captured graph replays the same arguments each time): thread 0 of each block
// reads LocalState::epoch when the block starts; the last block of the grid to leave advances it
// (leaveLaunch). Each block's read precedes its leaving (the block barrier at the end of
// enterLaunch comes between them, whichever thread counts the block out), and the advance follows
// the last leaving, so no block of this launch can read the advanced value; the next launch on
// the stream starts after this one ends.
struct LaunchInfo {
  uint64_t epoch;
  uint32_t tag;  // registered buffers: DeviceArgs::callTag, or poisonedTag(callTag) when a
                 // registration this call was captured with has gone (LocalState::regEpoch moved
                 // on): the tags then differ and every rank stops before touching a buffer
};

enum Admission : int {
  kAdmitted = 0,
  kRefusedFailed = 1,  // the comm failed earlier (here or on a peer): poison the output
  kRefusedClosed = 2,  // the comm was destroyed or aborted: touch nothing but the exit counts
};

// Fills the output with all-ones bytes (NaN in fp16, bf16 and fp32), grid-wide: what a launch on a
// failed comm leaves behind instead of stale data, for callers that read outputs without checking
// yaliCommGetAsyncError (a graph replay reaches the device without passing through the host API).
// A rank without an output (recv null: reduce_twoshot's non-roots, whose count is the message's)
// fills nothing.
static __device__ __noinline__ void poisonOutput(const DeviceArgs& args, size_t elemSize) {
  unsigned char* out = static_cast<unsigned char*>(args.recv);
  if (out == nullptr) return;
  const size_t bytes = args.count * elemSize;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t head = (16 - (reinterpret_cast<uintptr_t>(out) & 15)) & 15;
  if (head > bytes) head = bytes;
  for (size_t i = first; i < head; i += stride) out[i] = 0xFF;
  const size_t vecs = (bytes - head) / 16;
  uint4* v = reinterpret_cast<uint4*>(out + head);
  for (size_t i = first; i < vecs; i += stride) v[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  for (size_t i = head + vecs * 16 + first; i < bytes; i += stride) out[i] = 0xFF;
}

// The epoch rebase, by thread 0 of the last block of the launch whose epoch is kEpochLimit, on
// every rank: after it, epochs start again at 1 and the window's epoch-stamped areas (flags and LL
// packets) hold zeros, so no value left from the round that ends can satisfy a wait of the next.
//   1. publish rebaseArrived[our rank] = g + 1 on every peer (g: rebases so far, the same on every
//      rank) and wait for every peer's: every rank's launch kEpochLimit has ended (this runs after
//      its last block left), so no peer still writes into our window or reads from it;
//   2. clear our window's stamped areas;
//   3. publish rebaseCleared[our rank] = g + 1 and wait for every peer's: no rank's next launch
//      can write into a peer's window before that peer has cleared it.
// The flags sit in the header, outside the cleared areas; their values grow by one per rebase and
// never wrap. A failed wait leaves the epoch where it is: the comm has failed.
static __device__ __noinline__ void rebaseEpochs(const DeviceArgs& args) {
  const uint64_t round = args.local->rebases + 1;
  auto exchange = [&](size_t flagsOffset, int phase) {
    __threadfence_system();
    for (int p = 0; p < args.nranks; ++p) {
      if (p == args.rank) continue;
      publish(reinterpret_cast<uint64_t*>(args.peerWindows[p] + flagsOffset) + args.rank, round);
    }
    for (int p = 0; p < args.nranks; ++p) {
      if (p == args.rank) continue;
      if (!waitAtLeast(args, reinterpret_cast<const uint64_t*>(args.window + flagsOffset) + p, round, phase))
        return false;
    }
    return true;
  };
  if (!exchange(offsetof(WindowHeader, rebaseArrived), kPhaseRebaseArrive)) return;
  uint4* stamped = reinterpret_cast<uint4*>(args.window + args.layout.pushFlags);
  for (size_t i = 0; i < args.layout.stampedBytes / 16; ++i) stamped[i] = make_uint4(0, 0, 0, 0);
  if (!exchange(offsetof(WindowHeader, rebaseCleared), kPhaseRebaseClear)) return;
  args.local->rebases = round;
  *reinterpret_cast<volatile uint64_t*>(&args.local->epoch) = 1;
}

// The warps of this block that have left an eager launch (exitLaunch), in shared memory: set to 0
// by thread 0 in enterLaunch, before the block barrier there, so before any warp can count.
__device__ __forceinline__ unsigned& warpsLeftOfBlock() {
  __shared__ unsigned warpsLeft;
  return warpsLeft;
}

// Whether a launch may run, from the words its thread 0 loaded at the start (every kernel's
// admission: enterLaunch, and the point-to-point launch, p2p.cu): `gate` LocalState's {failed,
// closed}, `remote` our window's remoteFailure, `watched` the word yaliCommWatchFailureWord names
// (0 without one). A peer's failure and a set watched word are recorded here (and a watched one
// told to the peers, whose waits for us end at once).
__device__ __forceinline__ Admission admissionOf(const DeviceArgs& args, uint64_t gate, uint32_t remote,
                                                uint64_t watched) {
  const bool closed = (gate >> 32) != 0;
  const bool failed = (gate & 0xFFFFFFFFu) != 0;
  if (closed) return kRefusedClosed;
  if (failed) return kRefusedFailed;
  if (remote != 0) {  // a peer failed since our last launch
    recordFailure(args, kFailRemote, kPhaseAdmission, remoteFailureRank(remote), remoteFailureCode(remote));
    return kRefusedFailed;
  }
  if (watched != 0) {  // the other library flagged what this launch would spread: fail, and tell the
                       // peers (recordFailure), whose waits for us end at once
    recordFailure(args, kFailWatched, kPhaseAdmission);
    return kRefusedFailed;
  }
  return kAdmitted;
}

// The start of every collective kernel, by all threads: waits for the previous grid on the stream,
// then decides whether this launch may run (a failed or closed comm, or a peer's failure, refuse
// it) and reads its epoch and tag. The gate and the epoch share a cache line: one round trip.
__device__ __forceinline__ Admission enterLaunch(const DeviceArgs& args, LaunchInfo* info) {
  __shared__ LaunchInfo shared;
  __shared__ int admission;
  waitForPriorGrids();
  if (threadIdx.x == 0) {
    // All five loads are issued before the first result is used.
    const LocalState* local = args.local;
    const uint64_t gate = *reinterpret_cast<const volatile unsigned long long*>(&local->failed);
    const uint64_t epoch = *reinterpret_cast<const volatile uint64_t*>(&local->epoch);
    const uint32_t regEpoch = *reinterpret_cast<const volatile uint32_t*>(&local->regEpoch);
    const uint32_t remote = *reinterpret_cast<volatile uint32_t*>(&headerOf(args.window)->remoteFailure);
    // Another library's word (yaliCommWatchFailureWord), written by its work earlier on this stream:
    // waitForPriorGrids above made that work's stores visible, so this load sees what it left.
    const uint64_t watched =
        args.failureWatch != nullptr ? *reinterpret_cast<const volatile uint64_t*>(args.failureWatch) : 0;
    admission = admissionOf(args, gate, remote, watched);
    warpsLeftOfBlock() = 0;
    shared.epoch = epoch;
    shared.tag = regEpoch == args.regEpoch ? args.callTag : poisonedTag(args.callTag, args.rank);
  }
  __syncthreads();
  *info = shared;
  return static_cast<Admission>(admission);
}

// The end of every collective kernel, by one thread of each block (exitLaunch says which), on every
// path (also after a failed wait or a refused admission): counts the block out of the launch (a
// one-block launch is its own last block and counts nothing); the last block advances the epoch (a
// failed comm admits no launch again, so its epoch no longer matters and is not read here: that
// load would lengthen every kernel) and rebases at the limit; the same for eager and graph
// launches (the host's watch of eager launches is exitLaunch's: countEagerBlockEnded). Fences
// order the blocks' work before the count only where something reads across them (below): not in
// a plain exit, where they cost 0.4-0.5 us per call at 16 KB-4 MB on 2 H200s (PERF.md Sessions
// 28-29).
// `onFailure`: what the last block runs (thread 0 alone) when an admitted launch failed, after every
// block has left, so nothing of the launch can overwrite it (AlltoAllv: -1 into the count outputs).
struct NoEpilogue {
  __device__ void operator()() const {}
};

template <typename OnFailure = NoEpilogue>
__device__ __forceinline__ void leaveLaunch(const DeviceArgs& args, const LaunchInfo& info, Admission admission,
                                            OnFailure&& onFailure = OnFailure()) {
  LocalState* local = args.local;
  const bool rebase = admission == kAdmitted && info.epoch >= kEpochLimit;
  // A launch of one block is its own last block: no count (an atomic's round trip on the launch's
  // critical path where the block barrier comes first), and no fence where nothing outside the
  // launch's stream order reads what follows: the epoch is read by the comm's next launch only, in
  // enterLaunch after waitForPriorGrids (griddepcontrol.wait: this grid has completed and its
  // memory is visible; keep that load after the wait, also under programmatic launch, where the
  // next grid may be scheduled before this one ends).
  // The fences order the blocks' work before what the last block does after the count, where
  // anything reads it as data outside the grid's completion: an epilogue (its stores must land
  // after every block's), the rebase (it clears the flags; system scope: the peers read them).
  // Elsewhere the count orders nothing: only the comm's next launch reads the epoch and `exits`,
  // after griddepcontrol.wait (or plain stream order), when this grid has completed and all its
  // memory operations are visible. The fences would only hold every block until its stores are
  // performed (a round trip over NVLink), at the end of the launch. A one-block launch's epilogue
  // needs none either: the block barrier before it (exitLaunch) orders the block's stores first.
  constexpr bool kEpilogue = !std::is_same<std::decay_t<OnFailure>, NoEpilogue>::value;
  const bool ordered = rebase || kEpilogue;
  const bool alone = gridDim.x == 1;
  if (rebase) __threadfence_system();  // the rebase's peers must see our stores
  else if (ordered && !alone) __threadfence();
  if (!alone) {
    const unsigned left = atomicAdd(&local->exits, 1u);
    if (left != gridDim.x - 1) return;
    if (ordered) __threadfence();  // acquire: the other blocks' work (their fences) before ours
    local->exits = 0;
  }
  // The failed word is read only where there is an epilogue to run: that load lengthens the exit
  // of every kernel (about 0.35 us at 4 ranks sharing an H100, session 9), and a volatile load is
  // made even when its result goes unused.
  if constexpr (!std::is_same<std::decay_t<OnFailure>, NoEpilogue>::value) {
    if (admission == kAdmitted && *reinterpret_cast<volatile int*>(&local->failed) != 0) onFailure();
  }
  if (rebase) {
    if (*reinterpret_cast<volatile int*>(&local->failed) == 0) rebaseEpochs(args);
  } else if (admission == kAdmitted) {
    *reinterpret_cast<volatile uint64_t*>(&local->epoch) = info.epoch + 1;
  }
}

// An eager launch's block tells the host that every warp of it has ended
// (LocalState::eagerBlocksEnded): a relaxed red.add, fire and forget (no round trip; nothing on
// the device reads the word), by the block's last warp to end (exitLaunch). The host reads the
// word with a copy on a stream of its own and compares it with the blocks it launched eagerly
// (comm.cc: eagerLaunchesEnded). No fence: the count is a statement about time, not data (no warp
// of the block still runs; its stores may still drain, locally or over NVLink), and the host waits
// for those by time before it frees or unmaps anything (comm.cc: kStoreDrainUs, kReleaseGraceMs).
__device__ __forceinline__ void countEagerBlockEnded(LocalState* local) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(__cvta_generic_to_global(&local->eagerBlocksEnded))
               : "memory");
}

// An eager launch's warp has ended (every thread of the block calls it, once, last): each warp,
// once all its lanes are here (__syncwarp), counts itself in shared memory (warpsLeftOfBlock, zeroed
// at the admission); the block's last warp counts the block out (countEagerBlockEnded). No warp
// waits for another. Nothing in a graph launch.
__device__ __forceinline__ void countEagerWarpEnded(const DeviceArgs& args) {
  if (args.eagerSeq == 0) return;
  // This warp's lanes (the block's last warp may be partial).
  const unsigned first = threadIdx.x & ~31u;
  const unsigned lanes = blockDim.x - first < 32 ? blockDim.x - first : 32;
  __syncwarp(lanes == 32 ? ~0u : (1u << lanes) - 1);
  if (threadIdx.x == first && atomicAdd_block(&warpsLeftOfBlock(), 1u) == (blockDim.x + 31) / 32 - 1)
    countEagerBlockEnded(args.local);
}

// The frame's exit, by every thread of the block. Two counts, each made where what follows it
// needs it:
//   - the epoch's (leaveLaunch), by thread 0 when its own part of the body ended, while other warps
//     may still run theirs (a two-shot block's second team runs a pipeline of its own; the LL and
//     pull bodies end without a barrier): what follows the last count is the epoch advance, read
//     only by the comm's next launch in enterLaunch after griddepcontrol.wait, i.e. after every
//     thread of this grid has ended and its memory is visible. Off the critical path: a block
//     barrier there cost 0.13-0.37 us per call from 16 KB to 256 KB on 2 H200s (PERF.md
//     Session 27). Except before a rebase at kEpochLimit (it clears the flags) and an epilogue
//     (it must come after every block's stores): a block barrier first, so that thread 0's fence
//     and count follow the whole block's loads and stores.
//   - an eager launch's count into the host's watch (countEagerBlockEnded), by the block's last
//     warp to end: it must mean that no warp of the block still runs (after it yaliCommDestroy
//     frees the window and yaliCommDeregister lets the caller free its buffer). Each warp, once all
//     its lanes are here (__syncwarp), counts itself in shared memory; no warp waits for another.
//     After a barrier (rebase, epilogue), thread 0 counts, after its leaveLaunch. Against a block
//     barrier and a fence before one count of both this saved 0.5 us per call at 256 KB-4 MB on 2
//     H200s (PERF.md Session 29).
// Every block of every launch reaches this, whatever its admission (the body returns here after a
// failed wait; a refused launch runs no body), so an eager launch always counts gridDim.x blocks,
// which the host adds up (enqueue.cc: launchNow). The case is the same for every thread of the
// block (kernel arguments and the launch's shared LaunchInfo), so the barrier is never reached by
// part of a block.
template <typename OnFailure = NoEpilogue>
__device__ __forceinline__ void exitLaunch(const DeviceArgs& args, const LaunchInfo& info, Admission admission,
                                           OnFailure&& onFailure = OnFailure()) {
  constexpr bool kEpilogue = !std::is_same<std::decay_t<OnFailure>, NoEpilogue>::value;
  const bool rebase = admission == kAdmitted && info.epoch >= kEpochLimit;
  if (kEpilogue || rebase) {
    __syncthreads();
    if (threadIdx.x == 0) {
      leaveLaunch(args, info, admission, onFailure);
      if (args.eagerSeq != 0) countEagerBlockEnded(args.local);
    }
    return;
  }
  if (threadIdx.x == 0) leaveLaunch(args, info, admission, onFailure);
  countEagerWarpEnded(args);
}

// Runs one collective kernel's body inside the launch frame. `body(info)` may return early on a
// failed wait; every thread then still reaches the frame's exit. kElemSize: the output's element
// size (for the poison fill).
template <size_t kElemSize, typename Body>
__device__ __forceinline__ void runLaunch(const DeviceArgs& args, Body&& body) {
  LaunchInfo info;
  const Admission admission = enterLaunch(args, &info);
  if (admission == kAdmitted) body(info);
  else if (admission == kRefusedFailed) poisonOutput(args, kElemSize);
  exitLaunch(args, info, admission);
}

// ---- Element types and reduction ------------------------------------------------------------------
//
// Every element type reduces through an accumulator type (ElemTraits<T>::Acc): fp16, bf16 and fp8
// widen to fp32, fp32 and fp64 stay, 8- and 32-bit integers widen to 32 bits and 64-bit ones stay.
// Integer sums and products wrap around (two's complement, computed on the unsigned type so that no
// signed overflow occurs): truncating a 32-bit wrapped sum to 8 bits gives the 8-bit wrapped sum,
// so the widening changes no result. Max and min compare the widened values (sign-extended for the
// signed types). Results convert back once, at the end (fp8 with rounding to nearest and
// saturation to the largest finite value: the __nv_fp8 constructors' __NV_SATFINITE).

template <typename T>
struct ElemTraits;
template <>
struct ElemTraits<float> {
  using Acc = float;
  __device__ static float toAcc(float v) { return v; }
  __device__ static float fromAcc(float v) { return v; }
};
template <>
struct ElemTraits<double> {
  using Acc = double;
  __device__ static double toAcc(double v) { return v; }
  __device__ static double fromAcc(double v) { return v; }
};
template <>
struct ElemTraits<__half> {
  using Acc = float;
  __device__ static float toAcc(__half v) { return __half2float(v); }
  __device__ static __half fromAcc(float v) { return __float2half_rn(v); }
};
template <>
struct ElemTraits<__nv_bfloat16> {
  using Acc = float;
  __device__ static float toAcc(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 fromAcc(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct ElemTraits<__nv_fp8_e4m3> {
  using Acc = float;
  __device__ static float toAcc(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  __device__ static __nv_fp8_e4m3 fromAcc(float v) { return __nv_fp8_e4m3(v); }
};
template <>
struct ElemTraits<__nv_fp8_e5m2> {
  using Acc = float;
  __device__ static float toAcc(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  __device__ static __nv_fp8_e5m2 fromAcc(float v) { return __nv_fp8_e5m2(v); }
};
// Integers: T widened to Acc.
template <typename T, typename AccT>
struct IntTraits {
  using Acc = AccT;
  __device__ static Acc toAcc(T v) { return static_cast<Acc>(v); }
  __device__ static T fromAcc(Acc v) { return static_cast<T>(v); }
};
template <> struct ElemTraits<int8_t> : IntTraits<int8_t, int32_t> {};
template <> struct ElemTraits<uint8_t> : IntTraits<uint8_t, uint32_t> {};
template <> struct ElemTraits<int32_t> : IntTraits<int32_t, int32_t> {};
template <> struct ElemTraits<uint32_t> : IntTraits<uint32_t, uint32_t> {};
template <> struct ElemTraits<int64_t> : IntTraits<int64_t, int64_t> {};
template <> struct ElemTraits<uint64_t> : IntTraits<uint64_t, uint64_t> {};

// The C++ type of each DataType (DataType order), for the kernel tables.
template <DataType kType> struct TypeOf;
template <> struct TypeOf<DataType::kInt8> { using T = int8_t; };
template <> struct TypeOf<DataType::kUint8> { using T = uint8_t; };
template <> struct TypeOf<DataType::kInt32> { using T = int32_t; };
template <> struct TypeOf<DataType::kUint32> { using T = uint32_t; };
template <> struct TypeOf<DataType::kInt64> { using T = int64_t; };
template <> struct TypeOf<DataType::kUint64> { using T = uint64_t; };
template <> struct TypeOf<DataType::kFloat16> { using T = __half; };
template <> struct TypeOf<DataType::kFloat32> { using T = float; };
template <> struct TypeOf<DataType::kFloat64> { using T = double; };
template <> struct TypeOf<DataType::kBfloat16> { using T = __nv_bfloat16; };
template <> struct TypeOf<DataType::kFp8E4M3> { using T = __nv_fp8_e4m3; };
template <> struct TypeOf<DataType::kFp8E5M2> { using T = __nv_fp8_e5m2; };

// Reduction operators on accumulators. Avg sums, and the division by nranks happens once in
// finish() (floating types only: vocabulary.h opSupports).
template <RedOp kOp>
struct Reducer {
  template <typename A>
  __device__ static A combine(A a, A b) {
    if constexpr (kOp == RedOp::kSum || kOp == RedOp::kAvg || kOp == RedOp::kProd) {
      if constexpr (std::is_integral<A>::value) {
        using U = typename std::make_unsigned<A>::type;  // wraps without undefined behaviour
        return static_cast<A>(kOp == RedOp::kProd ? static_cast<U>(a) * static_cast<U>(b)
                                                  : static_cast<U>(a) + static_cast<U>(b));
      } else {
        return kOp == RedOp::kProd ? a * b : a + b;
      }
    }
    if constexpr (kOp == RedOp::kMax) {
      if constexpr (std::is_same<A, float>::value) return fmaxf(a, b);
      else if constexpr (std::is_same<A, double>::value) return fmax(a, b);
      else return a > b ? a : b;
    }
    if constexpr (kOp == RedOp::kMin) {
      if constexpr (std::is_same<A, float>::value) return fminf(a, b);
      else if constexpr (std::is_same<A, double>::value) return fmin(a, b);
      else return a < b ? a : b;
    }
  }
  template <typename A>
  __device__ static A finish(A a, int nranks) {
    if constexpr (kOp == RedOp::kAvg && !std::is_integral<A>::value) return a / static_cast<A>(nranks);
    return a;
  }
};

// Loads element i of up to kMaxRanks sources (only the first n are read) and reduces them in
// rank order 0..n-1 in the accumulator type. Fully unrolled over kMaxRanks so that the n loads are
// all in flight before the first combine, and the per-source arrays stay in registers.
template <typename T, RedOp kOp, typename Vec>
__device__ __forceinline__ Vec reduceSources(const Vec* const* src, size_t i, int n) {
  using Traits = ElemTraits<T>;
  using Acc = typename Traits::Acc;
  constexpr int kE = sizeof(Vec) / sizeof(T);
  Vec v[kMaxRanks];
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    if (r < n) v[r] = ldcg(src[r] + i);  // L2 only: peers wrote some of these
  }
  Acc acc[kE];
  const T* x0 = reinterpret_cast<const T*>(&v[0]);
#pragma unroll
  for (int e = 0; e < kE; ++e) acc[e] = Traits::toAcc(x0[e]);
#pragma unroll
  for (int r = 1; r < kMaxRanks; ++r) {
    if (r < n) {
      const T* x = reinterpret_cast<const T*>(&v[r]);
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[e] = Reducer<kOp>::combine(acc[e], Traits::toAcc(x[e]));
    }
  }
  Vec out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int e = 0; e < kE; ++e) o[e] = Traits::fromAcc(Reducer<kOp>::finish(acc[e], n));
  return out;
}

}  // namespace yali
