#include "collectives/copy_engine/copy_engine.h"

#include <cuda.h>  // types and enums only: the driver is reached through the runtime's entry points
#include <cuda_runtime.h>
#include <stddef.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/comm_access.h"
#include "core/driver_entry.h"
#include "core/enqueue.h"
#include "core/error.h"
#include "core/ipc_imports.h"
#include "core/reaper.h"

namespace yali {
namespace {

// The driver's memory operations, looked up once through the runtime (libyali links only it).
struct MemOps {
  CUresult (*batch)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int) = nullptr;
  CUresult (*memsetD32)(CUdeviceptr, unsigned int, size_t, CUstream) = nullptr;
  CUresult (*attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  bool ok = false;
};

const MemOps& memOps() {
  static const MemOps m = [] {
    MemOps x;
    x.ok = lookUpDriver("cuStreamBatchMemOp", &x.batch) && lookUpDriver("cuMemsetD32Async", &x.memsetD32) &&
           lookUpDriver("cuDeviceGetAttribute", &x.attribute);
    return x;
  }();
  return m;
}

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// One call in flight, in issue order (CopyEngineState::inFlight).
struct Watch {
  cudaEvent_t started = nullptr;
  cudaEvent_t readyPassed = nullptr;
  cudaEvent_t ended = nullptr;
  uint32_t tag = 0;
  uint64_t eagerSeq = 0;
  uint64_t launch = 0;         // the host's launch count (error reports)
  int64_t startedSeenMs = -1;  // when the watch first saw `started` complete
  bool told = false;           // the peers were told our failure for this call (CopyEngineState::told)
  int64_t releasedMs = -1;     // when the watch last wrote the call's release (-1: never)
  // `ended` could not be recorded (a failed call): the call has ended once its stream is idle.
  bool endedByStream = false;
  cudaStream_t stream = nullptr;
};

// A released call's words are written again this often until it ends (a peer's late handshake
// write may land over them). Not at every poll: each write queues a memset, and a call stuck behind
// another library's kernel would queue one per poll (every 2 ms) for as long as it stays stuck.
constexpr int64_t kReleaseEveryMs = 10;

void destroyEvents(Watch& w) {
  for (cudaEvent_t e : {w.started, w.readyPassed, w.ended})
    if (e != nullptr) cudaEventDestroy(e);
}

}  // namespace

// Per comm, made at its first *_ce call; held by the comm and by the watch job while calls are in
// flight (so the window, the events and the side streams outlive a destroy that overtakes them).
struct CopyEngineState {
  int device = 0;
  int rank = 0;
  int nranks = 0;
  int64_t timeoutMs = 0;
  int64_t testFailCall = 0;  // YALI_TEST_COPY_ENGINE_FAIL: the call (from 1) that fails half-way
  int64_t calls = 0;         // calls issued so far (issueCopyEngine's thread; enqueue holds the comm)
  bool flush = false;  // CU_STREAM_WAIT_VALUE_FLUSH: remote writes visible after a wait
  std::shared_ptr<DeviceResources> res;
  uint32_t* ready = nullptr;  // our window's words: ready[kMaxRanks], then done[kMaxRanks]
  size_t ceFlagsOffset = 0;
  cudaStream_t side[kMaxRanks] = {};  // one per peer we read from, at most nranks - 1
  cudaEvent_t fork = nullptr;
  cudaEvent_t join[kMaxRanks] = {};
  cudaStream_t watchStream = nullptr;  // the watch's releases (non-blocking: never behind S)
  // The watch's read of our window's remoteFailure word into HostStatus::remoteSeen: recorded
  // after the copy on watchStream; pending until the next poll finds it complete.
  cudaEvent_t remoteRead = nullptr;
  bool remoteReadPending = false;
  std::atomic<int> closedCode{0};  // closeCopyEngine's code: what an unfinished call is recorded as
  // Recorded on watchStream after the peers' failure words (tellPeers): a call is released only once
  // the host has seen it complete (poll).
  cudaEvent_t told = nullptr;
  std::atomic<bool> closed{false};

  std::mutex mutex;  // inFlight, spare, jobPosted
  std::deque<std::unique_ptr<Watch>> inFlight;
  std::vector<std::unique_ptr<Watch>> spare;
  bool jobPosted = false;

  ~CopyEngineState() {
    ScopedDevice onDevice(device);
    for (cudaStream_t& s : side)
      if (s != nullptr) cudaStreamDestroy(s);
    for (cudaEvent_t& e : join)
      if (e != nullptr) cudaEventDestroy(e);
    if (fork != nullptr) cudaEventDestroy(fork);
    if (remoteRead != nullptr) cudaEventDestroy(remoteRead);
    if (told != nullptr) cudaEventDestroy(told);
    if (watchStream != nullptr) cudaStreamDestroy(watchStream);
    for (auto& w : spare) destroyEvents(*w);
    for (auto& w : inFlight) destroyEvents(*w);  // none: the watch job, which holds the state, ends with none left
    CloseGate::leaveCall(static_cast<int>(inFlight.size()));
    cudaGetLastError();
  }
};

namespace {

bool done(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) return false;
  cudaGetLastError();
  return true;  // complete, or an error: nothing more to wait for either way
}

bool tellPeers(CopyEngineState& ce);

// HostStatus as a kernel's recordFailure (device.cuh) writes it: the first failure claims the
// record, fills in the details, then publishes the code. kFailRemote: `origin` and `remoteCode`
// name the peer and its failure. The peers are told at once (tellPeers), whether or not a call of
// ours is ever released (a call that failed half-way may end by itself), and again before each
// release (poll). Not when a kernel of ours claimed the record first and has not published it yet:
// that kernel tells the peers itself (recordFailure), and so does a release of ours.
void recordHostFailure(CopyEngineState& ce, int code, int phase, uint64_t launch, int origin = -1,
                       int remoteCode = kFailNone) {
  HostStatus* s = ce.res->hostStatus.get();
  if (__sync_bool_compare_and_swap(&s->claim, 0, 1)) {
    volatile HostStatus* v = s;
    v->failurePhase = phase;
    v->failureBlock = -1;  // no kernel: no block
    v->failureEpoch = launch;
    v->failureOrigin = origin;
    v->failureRemoteCode = remoteCode;
    __sync_synchronize();
    v->failure = code;
  }
  // Later kernels of ours refuse to run (their admission reads the word).
  memOps().memsetD32(dptr(&ce.res->local->failed), 1, 1, ce.watchStream);
  tellPeers(ce);
}

// Every peer's remoteFailure word gets the comm's recorded failure, on the watch's stream: our own
// code, or for kFailRemote the origin's code and rank (the origin itself is skipped), so that the
// peers' messages name the rank that failed first as we know it (a word from another writer may
// land last). kFailCounts: the check of the failure we recorded (a kernel's blocks may each have
// failed a different one). False, telling nothing, while a failure is claimed but not yet published
// (a kernel filling in its details): the caller tries again at its next poll.
bool tellPeers(CopyEngineState& ce) {
  const volatile HostStatus* s = ce.res->hostStatus.get();
  const int code = s->failure;
  if (code == kFailNone) return false;
  __sync_synchronize();  // the details after the code that announces them (recordFailure's order)
  const int origin = code == kFailRemote ? s->failureOrigin : ce.rank;
  const uint32_t word =
      code == kFailRemote ? encodeRemoteFailure(s->failureRemoteCode, origin)
                          : encodeRemoteFailure(code == kFailCounts ? withCheck(code, s->failurePhase) : code, ce.rank);
  bool queued = true;
  for (int p = 0; p < ce.nranks; ++p) {
    if (p == ce.rank || p == origin || ce.res->peerWindows[p] == nullptr) continue;
    queued &= memOps().memsetD32(dptr(ce.res->peerWindows[p] + offsetof(WindowHeader, remoteFailure)), word, 1,
                                 ce.watchStream) == CUDA_SUCCESS;
  }
  return queued;  // false: the caller's next poll tells them again
}

// A peer's failure, for a call that waits (started, not ended): our window's remoteFailure word,
// which a failing or aborting peer writes (a kernel's recordFailure, recordHostFailure above,
// yaliCommAbort), is device memory, so the watch reads it by a 4-byte copy on its stream into
// HostStatus::remoteSeen, one at a time: queued at one poll, looked at by a later one. Recorded as
// kFailRemote (the peer and its code), the call is then released like a timed-out one; true then.
// A kernel waiting for a failed peer ends at its next check of the same word; without this a
// copy-engine call would wait out YALI_TIMEOUT_MS.
bool peerFailed(CopyEngineState& ce, int phase, uint64_t launch) {
  volatile HostStatus* s = ce.res->hostStatus.get();
  if (ce.remoteReadPending) {
    const cudaError_t r = cudaEventQuery(ce.remoteRead);
    if (r == cudaErrorNotReady) return false;
    cudaGetLastError();
    ce.remoteReadPending = false;
    const uint32_t word = s->remoteSeen;
    if (r == cudaSuccess && word != 0) {
      recordHostFailure(ce, kFailRemote, phase, launch, remoteFailureRank(word), remoteFailureCode(word));
      return true;
    }
  }
  const char* header = ce.res->peerWindows[ce.rank] + offsetof(WindowHeader, remoteFailure);
  if (cudaMemcpyAsync(const_cast<uint32_t*>(&s->remoteSeen), header, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                      ce.watchStream) == cudaSuccess &&
      cudaEventRecord(ce.remoteRead, ce.watchStream) == cudaSuccess)
    ce.remoteReadPending = true;
  cudaGetLastError();
  return false;
}

// Every ready and done word of ours holds `tag`, and our remoteFailure word 0: the call's waits
// pass, its gate included. The failure that caused the release is recorded by now (HostStatus,
// LocalState::failed), so clearing the word loses nothing a later launch of ours would need.
void release(CopyEngineState& ce, const Watch& w) {
  memOps().memsetD32(dptr(ce.ready), w.tag, 2 * kMaxRanks, ce.watchStream);
  memOps().memsetD32(dptr(ce.res->peerWindows[ce.rank] + offsetof(WindowHeader, remoteFailure)), 0, 1,
                     ce.watchStream);
}

// HostStatus::eagerDone = max(eagerDone, seq): the copy engines' count of ended eager launches (the
// kernels count their ended blocks in LocalState::eagerBlocksEnded; eagerLaunchesEnded takes this
// alone when it has reached the comm's last launch, else both); another watch pass may have stored
// a later number.
void advanceEagerDone(CopyEngineState& ce, uint64_t seq) {
  uint64_t* p = &ce.res->hostStatus->eagerDone;
  uint64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  while (seen < seq && !__atomic_compare_exchange_n(p, &seen, seq, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

// A call whose `ended` could not be recorded (Watch::endedByStream) has ended once its stream is
// idle. Not while the program captures on that stream: a query there would invalidate its capture
// (and a capture's work is not this call's). An error from the query (the stream destroyed since,
// say) counts as an end only once the call was released: until then it may be what holds the
// stream.
bool streamEnded(const Watch& w) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(w.stream, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
    return false;
  const cudaError_t e = cudaStreamQuery(w.stream);
  cudaGetLastError();
  if (e == cudaSuccess) return true;
  return e != cudaErrorNotReady && w.releasedMs >= 0;
}

// One poll of the watch (reaper thread). True when nothing is in flight any more (the job ends).
bool poll(const std::shared_ptr<CopyEngineState>& state) {
  CopyEngineState& ce = *state;
  ScopedDevice onDevice(ce.device);
  std::lock_guard<std::mutex> lock(ce.mutex);
  while (!ce.inFlight.empty()) {
    Watch& w = *ce.inFlight.front();
    if (w.endedByStream ? streamEnded(w) : done(w.ended)) {
      CloseGate::leaveCall();  // an IPC close may start now (ipc_imports.h); before a destroy can see it end
      advanceEagerDone(ce, w.eagerSeq);
      ce.spare.push_back(std::move(ce.inFlight.front()));
      ce.inFlight.pop_front();
      continue;
    }
    const volatile HostStatus* s = ce.res->hostStatus.get();
    auto phase = [&] { return done(w.readyPassed) ? kPhaseCopyEngineDone : kPhaseCopyEngineReady; };
    // Aborted, or destroyed with this call unfinished (yaliCommDestroy gave up waiting for it after
    // YALI_TIMEOUT_MS, and told the peers so): recorded, so that the peers are told before the release.
    if (s->failure == kFailNone && s->claim == 0 && (s->abortRequested != 0 || ce.closed.load()))
      recordHostFailure(ce, s->abortRequested != 0 ? kFailAborted : ce.closedCode.load(), phase(), w.launch);
    if (s->failure == kFailNone && s->claim == 0 && done(w.started)) {
      if (w.startedSeenMs < 0) w.startedSeenMs = nowMs();
      if (nowMs() - w.startedSeenMs > ce.timeoutMs) {
        recordHostFailure(ce, kFailTimeout, phase(), w.launch);
        logInfo("copy engines: rank %d: launch %llu timed out waiting for a peer (YALI_TIMEOUT_MS=%lld)", ce.rank,
                static_cast<unsigned long long>(w.launch), static_cast<long long>(ce.timeoutMs));
      } else if (!peerFailed(ce, phase(), w.launch)) {
        break;  // nothing to release
      }
    }
    // A failure claimed but not yet published (a kernel of ours filling in its details) is released
    // at a later poll, once the peers can be told which failure it is.
    if (s->failure == kFailNone) break;
    // The release. First the peers are told (again), and the call is released only after the host
    // has seen those writes complete (the `told` event): a released call's handshake words must not
    // reach a peer ahead of the failure word that stops its gate (handshake: step 4). Then our words,
    // again every kReleaseEveryMs until the call has ended.
    if (!w.told) {
      w.told = tellPeers(ce) && cudaEventRecord(ce.told, ce.watchStream) == cudaSuccess;
      break;  // the release at a later poll (or the tell again, if it could not be queued)
    }
    if (!done(ce.told)) break;
    if (w.releasedMs < 0 || nowMs() - w.releasedMs >= kReleaseEveryMs) {
      release(ce, w);
      w.releasedMs = nowMs();
    }
    break;
  }
  cudaGetLastError();
  if (ce.inFlight.empty()) {
    // The watch's own memsets (releases, failure words: into our window and the peers') run before
    // the job lets the state, and with it the comm's resources, go.
    if (cudaStreamQuery(ce.watchStream) == cudaErrorNotReady) return false;
    cudaGetLastError();
    ce.remoteReadPending = false;  // its copy has landed (the stream is idle); the next call reads anew
    ce.jobPosted = false;
    return true;
  }
  return false;
}

// Starts the watch job if none runs (ce.mutex held): it holds the state, and through it the comm's
// device resources, until nothing is in flight.
void ensureWatch(yaliComm* comm, CopyEngineState& ce) {
  if (ce.jobPosted) return;
  ce.jobPosted = true;
  std::shared_ptr<CopyEngineState> held = comm->copyEngine;
  Reaper::post([held] { return poll(held); });
}

cudaError_t makeState(yaliComm* comm, std::shared_ptr<CopyEngineState>* out) {
  auto ce = std::make_shared<CopyEngineState>();
  ce->device = comm->device;
  ce->rank = comm->rank;
  ce->nranks = comm->nranks;
  ce->timeoutMs = comm->settings.timeoutMs;
  ce->testFailCall = comm->settings.testCopyEngineFail;
  ce->res = comm->res;
  ce->ready = reinterpret_cast<uint32_t*>(comm->res->peerWindows[comm->rank] + comm->layout.ceFlags);
  ce->ceFlagsOffset = comm->layout.ceFlags;
  int flush = 0;
  if (memOps().attribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, comm->device) == CUDA_SUCCESS)
    ce->flush = flush != 0;
  cudaError_t e = cudaStreamCreateWithFlags(&ce->watchStream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->fork, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->remoteRead, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->told, cudaEventDisableTiming);
  for (int i = 0; e == cudaSuccess && i < comm->nranks - 1; ++i) {
    e = cudaStreamCreateWithFlags(&ce->side[i], cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ce->join[i], cudaEventDisableTiming);
  }
  if (e == cudaSuccess) *out = std::move(ce);
  return e;
}

// The handshake steps' memory operations on S (copy_engine.h: steps 1, 3 and 4), on plane 0 (ready)
// or 1 (done) of the ceFlags words: ours at ce.ready + plane * kMaxRanks, and the same in every peer's
// window. The done plane ends with the gate (step 4).
enum Plane : int { kReady = 0, kDone = 1 };
cudaError_t handshake(const CopyEngineState& ce, Plane plane, uint32_t tag, cudaStream_t s) {
  uint32_t* ours = ce.ready + plane * kMaxRanks;
  const size_t planeOffset = ce.ceFlagsOffset + sizeof(uint32_t) * kMaxRanks * plane;
  CUstreamBatchMemOpParams ops[3 * kMaxRanks + 1] = {};
  unsigned n = 0;
  for (int p = 0; p < ce.nranks; ++p) {
    if (p == ce.rank) continue;
    CUstreamBatchMemOpParams& op = ops[n++];
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = dptr(ce.res->peerWindows[p] + planeOffset) + sizeof(uint32_t) * ce.rank;
    op.writeValue.value = tag;
    op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // a memory barrier before the write
  }
  for (int p = 0; p < ce.nranks; ++p) {
    if (p == ce.rank) continue;
    CUstreamBatchMemOpParams& op = ops[n++];
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = dptr(ours + p);
    op.waitValue.value = tag;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ | (ce.flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
  }
  for (int p = 0; p < ce.nranks; ++p) {
    if (p == ce.rank) continue;
    CUstreamBatchMemOpParams& op = ops[n++];
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = dptr(ours + p);
    op.writeValue.value = 0;
    op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
  if (n == 0) return cudaSuccess;  // a comm of one rank: nothing to issue (an empty batch may be refused)
  if (plane == kDone) {
    // The gate: no peer has failed, or our release (which clears the word) let the call go. A peer
    // whose call was released writes our remoteFailure word before its release (tellPeers), so a
    // done word that came from a released peer is followed here by a word that stops us: our watch
    // then records the peer's failure and releases us in turn, instead of ending the call without
    // an error on a peer input its program may have overwritten.
    CUstreamBatchMemOpParams& op = ops[n++];
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = dptr(ce.res->peerWindows[ce.rank] + offsetof(WindowHeader, remoteFailure));
    op.waitValue.value = 0;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ | (ce.flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);
  }
  return memOps().batch(reinterpret_cast<CUstream>(s), n, ops, 0) == CUDA_SUCCESS ? cudaSuccess
                                                                                   : cudaErrorUnknown;
}

bool hasBit(uint32_t mask, int i) { return (mask >> i) & 1u; }

}  // namespace

// 32-bit stream memory operations are part of every CUDA 12 driver; the flush is optional.
bool copyEngineAvailable() { return memOps().ok; }

yaliResult_t issueCopyEngine(yaliComm* comm, PlannedLaunch& plan) {
  const char* call = plan.call;
  // A failed comm's call is refused here too, not only when it is made: a call queued in a group
  // (enqueue.cc: groupEnd) issues after the calls before it, one of which may have failed the comm.
  // Unlike a kernel, which refuses to run on the device, a copy-engine call has no later guard: its
  // handshake could pass on the words a release left holding the same tag.
  if (commAsyncError(comm) != yaliSuccess) return checkAsync(comm, call);
  if (!comm->copyEngine) {
    const cudaError_t e = makeState(comm, &comm->copyEngine);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(yaliUnhandledCudaError, comm, "%s: setting up the copy engines' streams: %s", call,
                  cudaGetErrorString(e));
    }
  }
  CopyEngineState& ce = *comm->copyEngine;
  const DeviceArgs& a = plan.args;
  const Registration* reg = plan.registrations[0];  // every rank's input, as mapped here
  const cudaStream_t s = plan.stream;
  std::unique_ptr<Watch> w;
  {
    std::lock_guard<std::mutex> lock(ce.mutex);
    if (!ce.spare.empty()) {
      w = std::move(ce.spare.back());
      ce.spare.pop_back();
    }
  }
  if (!w) {
    w.reset(new Watch);
    if (cudaEventCreateWithFlags(&w->started, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&w->readyPassed, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&w->ended, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      destroyEvents(*w);
      return fail(yaliUnhandledCudaError, comm, "%s: creating the copy engines' events", call);
    }
  }
  w->tag = a.callTag;
  w->eagerSeq = a.eagerSeq;
  w->launch = a.epochHint;
  w->startedSeenMs = -1;
  w->told = false;
  w->releasedMs = -1;
  w->endedByStream = false;

  // A CUDA call that fails half-way: the comm fails (kFailHost, recorded as a timeout would be: our
  // later calls are refused, the peers' kernels refuse to run, and the peers' handshakes with this
  // call end when their watches read our failure word), and
  // what was queued stays in flight in issue order, `ended` recorded after it: the watch releases
  // it when it is the oldest call (a release never overwrites an older call's tag) and the comm's
  // resources, which the watch holds, outlive it. Not a launch: eagerDone does not move for it (nor
  // yaliComm::eagerIssued: enqueue.cc counts only calls issued whole). When
  // `ended` cannot be recorded either, the call has ended once its stream is idle (Watch::endedByStream):
  // the watch releases it meanwhile, as any failed call.
  int k = 0;                          // side streams with work queued on them
  int phase = kPhaseCopyEngineReady;  // the step being queued (for the failure's record)
  auto failed = [&](const char* what, cudaError_t e, bool recordEnd = true) {
    cudaGetLastError();
    // Best effort: S waits for the side streams' copies (a failure between a copy and its join
    // would leave one outside `ended`, reading a peer's input after the comm's memory went).
    for (int j = 0; j <= k && j < a.nranks - 1; ++j) {
      if (cudaEventRecord(ce.join[j], ce.side[j]) == cudaSuccess) cudaStreamWaitEvent(s, ce.join[j], 0);
    }
    cudaGetLastError();
    // (Not for cudaStreamPerThread: the watch's thread would query its own. Let go then, as before.)
    w->endedByStream = (!recordEnd || cudaEventRecord(w->ended, s) != cudaSuccess) && s != cudaStreamPerThread;
    w->stream = s;
    cudaGetLastError();
    w->eagerSeq = 0;
    std::lock_guard<std::mutex> lock(ce.mutex);
    recordHostFailure(ce, kFailHost, phase, w->launch);
    comm->setHostNote(std::string("the CUDA call that failed: ") + what + ": " + cudaGetErrorString(e));
    ce.inFlight.push_back(std::move(w));
    ensureWatch(comm, ce);
    return fail(yaliUnhandledCudaError, comm, "%s: copy engines: %s: %s", call, what, cudaGetErrorString(e));
  };
  // Counted in before anything is queued (a close that started after would wait for the call while
  // holding up its watch: CloseGate). From here on every path pushes the call to the watch, which
  // counts it out.
  if (!CloseGate::enterCall(nowMs() + comm->settings.timeoutMs, comm->cancel)) {
    const uint64_t launch = w->launch;
    std::lock_guard<std::mutex> lock(ce.mutex);
    ce.spare.push_back(std::move(w));
    if (comm->cancel.load())  // the abort fails the comm and tells the peers
      return fail(yaliInvalidUsage, comm, "%s: yaliCommAbort was called while the call waited to be issued", call);
    // The peers' calls wait for this one: the comm fails as for a CUDA call failing half-way
    // (kFailHost), so that they are told and this rank's later calls are refused (a copy-engine
    // call's tag names the call, not its turn: a later identical call would pair with their
    // waiting ones). The watch holds the state until its memsets have run.
    comm->setHostNote("a CUDA IPC mapping's close (cudaIpcCloseMemHandle, which waits for the device) was still "
                      "running after YALI_TIMEOUT_MS: the copy-engine call was not issued");
    recordHostFailure(ce, kFailHost, kPhaseCopyEngineReady, launch);
    ensureWatch(comm, ce);
    return fail(yaliUnhandledCudaError, comm,
                "%s: copy engines: a CUDA IPC mapping's close was still running after YALI_TIMEOUT_MS=%lld ms; "
                "nothing of the call was queued and the comm failed (its peers are told)",
                call, static_cast<long long>(comm->settings.timeoutMs));
  }
  cudaError_t e = cudaEventRecord(w->started, s);
  if (e != cudaSuccess) return failed("cudaEventRecord", e);
  e = handshake(ce, kReady, a.callTag, s);
  if (e != cudaSuccess) return failed("cuStreamBatchMemOp (ready)", e);
  e = cudaEventRecord(w->readyPassed, s);
  if (e == cudaSuccess) e = cudaEventRecord(ce.fork, s);
  if (e != cudaSuccess) return failed("cudaEventRecord", e);
  // Each peer's piece for us: from its input (peerRecv[p]: its input as mapped here) at our block
  // when its input holds one block per receiver (AlltoAll, Scatter), else at 0.
  phase = kPhaseCopyEngineDone;  // the copies, then the done handshake
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  for (int i = 1; i < a.nranks; ++i) {
    const int p = (a.rank + i) % a.nranks;
    if (!hasBit(a.recvFrom, p)) continue;
    const size_t from = hasBit(a.peerSrcByRank, p) ? static_cast<size_t>(a.rank) * a.pieceBytes : 0;
    const size_t to = hasBit(a.dstByRank, p) ? static_cast<size_t>(p) * a.pieceBytes : 0;
    const char* src = static_cast<const char*>(a.peerRecv[p]) + from;
    e = cudaStreamWaitEvent(ce.side[k], ce.fork, 0);
    // One copy per mapping the piece lies in (a buffer borrowed from several siblings' mappings,
    // ipc_imports.h: a copy whose source spans two is refused).
    size_t done = 0;
    if (e == cudaSuccess && reg != nullptr) {
      const size_t at = static_cast<size_t>(src - reg->peerBase[p]);
      for (uint64_t cut : reg->mappingSplits[p]) {
        if (cut <= at + done) continue;
        if (cut >= at + a.pieceBytes || e != cudaSuccess) break;
        const size_t part = static_cast<size_t>(cut) - (at + done);
        e = cudaMemcpyAsync(recv + to + done, src + done, part, cudaMemcpyDefault, ce.side[k]);
        done += part;
      }
    }
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(recv + to + done, src + done, a.pieceBytes - done, cudaMemcpyDefault, ce.side[k]);
    if (e == cudaSuccess) e = cudaEventRecord(ce.join[k], ce.side[k]);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ce.join[k], 0);
    if (e != cudaSuccess) {
      logInfo("%s: rank %d: rank %d's piece: %zu bytes from %p (its input as mapped here %p + %zu, %zu mapping "
              "splits) to %p: %s", call, a.rank, p, static_cast<size_t>(a.pieceBytes), static_cast<const void*>(src),
              a.peerRecv[p], from, reg != nullptr ? reg->mappingSplits[p].size() : size_t{0},
              static_cast<void*>(recv + to), cudaGetErrorString(e));
      return failed("a peer's piece (cudaMemcpyAsync on a side stream)", e);
    }
    ++k;
  }
  if (hasBit(a.recvFrom, a.rank) && hasBit(a.sendTo, a.rank)) {
    const size_t from = hasBit(a.srcByRank, a.rank) ? static_cast<size_t>(a.rank) * a.pieceBytes : 0;
    const size_t to = hasBit(a.dstByRank, a.rank) ? static_cast<size_t>(a.rank) * a.pieceBytes : 0;
    e = cudaMemcpyAsync(recv + to, send + from, a.pieceBytes, cudaMemcpyDefault, s);
    if (e != cudaSuccess) return failed("our own piece (cudaMemcpyAsync)", e);
  }
  // The test hook: this call fails here, its ready handshake and copies queued, its done handshake
  // not, the worst place (peers pass the ready handshake with us and then wait for our done word),
  // and its end is not recorded either, the worst case (the watch finds the end by the stream).
  if (++ce.calls == ce.testFailCall)  // (on cudaStreamPerThread its end is recorded: see `failed`)
    return failed("YALI_TEST_COPY_ENGINE_FAIL (an injected failure)", cudaErrorUnknown, s == cudaStreamPerThread);
  e = handshake(ce, kDone, a.callTag, s);
  if (e != cudaSuccess) return failed("cuStreamBatchMemOp (done)", e);
  e = cudaEventRecord(w->ended, s);
  if (e != cudaSuccess) return failed("cudaEventRecord", e);

  std::lock_guard<std::mutex> lock(ce.mutex);
  ce.inFlight.push_back(std::move(w));
  ensureWatch(comm, ce);
  return yaliSuccess;
}

void closeCopyEngine(yaliComm* comm, int code) {
  if (!comm->copyEngine) return;
  comm->copyEngine->closedCode = code;
  comm->copyEngine->closed = true;  // after the code: the watch reads closed, then the code
}

}  // namespace yali
