// libyali-nccl's communicators: what the ncclComm_t handed to the program points at, how a YALI
// comm is set up beside the real NCCL one, registrations of buffers with both, and tear-down.
#pragma once

#include <stdint.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl_abi/routing.h"
#include "yali/yali.h"

namespace yali::nccl_abi {

struct Registration;
struct BackgroundSetUp;

// A device buffer of one comm that its calls on every stream share, grown on demand: the
// hierarchical path's (Hierarchy::scratch) and the staging of calls YALI refused for this rank's
// buffers (Comm::staging). Never allocated inside a capture. A buffer that is outgrown is kept
// until the comm is freed: a captured graph or a call in flight on another stream may still use
// it, and keeping it needs no synchronization. Its users are ordered across streams (routing.h,
// StreamOrder): scratchBefore and scratchUsed.
struct Scratch {
  explicit Scratch(const char* what, bool sameOnEveryRank = false) : name(what), agreedSize(sameOnEveryRank) {}
  const char* const name;  // for the log and errors: "hierarchical scratch", ...
  const bool agreedSize;   // its growth follows `agreed` (below): a route is decided on its size
  std::mutex mutex;        // guards everything below
  void* buffer = nullptr;
  size_t bytes = 0;
  std::vector<void*> outgrown;
  // agreedSize: the size the buffer has on every rank whose allocations all succeeded: it grows at
  // the calls that grow the buffer (every rank makes them alike), whether or not this rank's
  // cudaMalloc succeeds, so that a route decided on it (decideHierRoute, in capture) is the same on
  // every rank. bytes < agreed: a growth of this rank's failed (it then got what the call needed,
  // or nothing).
  size_t agreed = 0;
  StreamOrder order;
  cudaEvent_t events[StreamOrder::kSlots] = {};  // one per context slot, made at its first change of stream
  // Across contexts, from the first captured user on (scratchBefore): every user waits for the last
  // user of any context and records `serial` after itself (inside a capture as the graph's own
  // external event nodes), so that a graph's replay and eager calls use the scratch in host issue
  // order, as NCCL orders its calls (its graph mixing support) and libyali its launches.
  cudaEvent_t serial = nullptr;
  bool everCaptured = false;
};

// A communicator whose ranks span several nodes of localSize ranks each (routing.h: decideSetUp):
// YALI among each node's ranks, NCCL across nodes, in three stream-ordered steps per collective
// (intercept.cc). Made at the set-up, ended with the Comm.
struct Hierarchy {
  NodeLayout layout;
  int localRank = 0;
  int node = 0;
  yaliComm_t yali = nullptr;  // among this node's ranks; null once ended (the comm is then flat NCCL)
  ncclComm_t nodeComm = nullptr;   // NCCL split of this node's ranks (carried YALI's id)
  ncclComm_t crossComm = nullptr;  // NCCL split of this local index's ranks, one per node
  // AllGather's and ReduceScatter's scratch. Its order covers every hierarchical call, since the
  // status words below are shared alike. Its size is read by decideHierRoute, so it grows only
  // at calls that every rank makes alike (never for staging, which one rank alone may need).
  Scratch scratch{"hierarchical scratch", true};
  // The cross-node status (intercept.cc, crossStep; ARCHITECTURE.md, "Errors"): AllReduce and
  // ReduceScatter send, beside their NCCL step, whether this node's YALI steps failed, and learn
  // whether any node's did. Made at the set-up (before the agreement, so that every rank has them
  // or no rank has a hierarchy), freed with the scratch by freeComm, never by an abort (comm.cc,
  // releaseMemory, says why).
  const int* yaliFailure = nullptr;  // yaliCommGetFailureFlag(yali): device-readable, sticky nonzero
  // cudaMalloc'd words [kStatusWords]: this rank's two status sources, reduced (max) in place on
  // crossComm ([0] YALI's failure flag, [1] the failed-at-the-call word below); NCCL's buffer, so
  // device memory. Both are copied at every call, from sources that stay nonzero once set: a copy
  // captured in a graph reads them when replayed, so a replay cannot send 0 after a failure (with
  // one word and a source chosen at the call, a graph captured before a failure at the call kept
  // sending YALI's flag, 0, and its replays reset every node's host words).
  int32_t* statusDevice = nullptr;
  // cudaHostAlloc'd (mapped) words: [kCrossStatus, + kStatusWords) the reduced status as the last
  // call's copy left it (each 0, or nonzero for ever), read by ncclCommGetAsyncError; [kAtCall] 0,
  // then 1 for ever once a YALI step of this comm failed at the call (markFailedAtCall), the source
  // of statusDevice[1] (pinned, so the copy is asynchronous and capturable).
  static constexpr int kStatusWords = 2, kCrossStatus = 0, kAtCall = kStatusWords, kHostWords = kStatusWords + 1;
  int32_t* statusHost = nullptr;
  // A YALI step of this comm failed at the call (an error, not a refusal): from then on this rank
  // sends 1 (sticky, as YALI's own flag is).
  void markFailedAtCall() {
    if (statusHost != nullptr) __atomic_store_n(statusHost + kAtCall, 1, __ATOMIC_RELEASE);
  }
};

// The current device, restored at the end of the scope; `device` >= 0 makes it current meanwhile.
// The set-up moves between devices; a call's own copies and events must be issued on the comm's
// device (stream 0 is the current device's legacy stream, and one thread may drive several GPUs).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device = -1);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_ = 0;
  bool ok_ = false;
};

// Whether `stream` is being captured into a CUDA graph. A status that cannot be read (the legacy
// stream while another stream is captured) counts as captured (*unread true), so that nothing is
// allocated, freed or copied on it outside the capture's order; the failed read's CUDA error is
// cleared, not left for the program to find.
bool mayBeCaptured(cudaStream_t stream, bool* unread = nullptr);
// The capture `stream` is in (*id; 0: none). False where its state cannot be read (the legacy
// stream while another stream is captured; the error cleared) or its capture was invalidated.
bool captureIdOf(cudaStream_t stream, unsigned long long* id);

// One rank's communicator as the program holds it. Every ncclComm_t that our ncclCommInit*,
// ncclCommSplit and ncclCommShrink return points at one of these, but the splits and shrinks made
// where NCCL reads its settings through an environment plugin, which are NCCL's own handles
// (intercept.cc, ncclCommSplit, says why). A non-blocking parent's child reaches the program only
// once NCCL wrote it (adoptWhenWritten).
// Made before NCCL's call that creates `real`, which NCCL may fill after that call returned.
struct Comm {
  // "YALICOMM": first, so that ours() can tell our handles from NCCL's own (see there).
  static constexpr uint64_t kMagic = 0x4d4d4f43494c4159ull;
  uint64_t magic = kMagic;
  ncclComm_t real = nullptr;  // NCCL's communicator (NCCL writes it: adopt); null once aborted
  yaliComm_t yali = nullptr;  // null: NCCL only, for the reason in noYali
  int rank = -1;
  int nranks = 0;
  int device = -1;
  bool blocking = true;  // config.blocking as NCCL takes it (isBlocking); non-blocking: set up in the background
  // ncclCommRevoke succeeded, or ncclCommFinalize was called: NCCL refuses a revoke then (init.cc),
  // and so does ncclCommRevoke here, before it stops anything (a child's hand-over among them).
  bool revokedOrFinalized = false;
  // config.splitShare as NCCL takes it (sharesResources): the hierarchy's splits, made with the
  // comm's config, then share its resources and its abort flag (abortTogether).
  bool sharesResources = false;
  bool clique = false;   // made by ncclCommInitAll: every rank in this process (yaliCommInitAll)
  // The order of its deferred calls among a group's comms, the same on every rank of the comm
  // (routing.h, commKeyOfIds, childCommKey), and the splits and shrinks made of it so far, which
  // give each child its own key. Written by its creating call, read by calls on the comm.
  uint64_t groupKey = 0;
  std::atomic<uint64_t> childrenMade{0};
  // The set-up's verdict, the same on every rank (routing.h, decideSetUp):
  CollectiveMask disabled = 0;
  bool registerYali = false;
  std::string noYali;
  Hierarchy* hier = nullptr;  // several nodes: the hierarchical path (yali stays null)
  // A call YALI refused for this rank's buffers runs on copies of them here (intercept.cc, stage).
  // Its own Scratch, not the hierarchy's: one rank alone may grow it, and the hierarchy's size must
  // stay the same on every rank (decideHierRoute reads it).
  Scratch staging{"staging scratch"};

  std::mutex mutex;                           // guards registrations, asyncFailure, keptStaging
  std::vector<Registration*> registrations;  // live ones; freed by ncclCommDestroy
  // A failure of one of this comm's calls at the end of a group that NCCL ended in the background
  // (noteAsyncFailure): ncclSuccess, or the first one, for good, with its message.
  ncclResult_t asyncFailure = ncclSuccess;
  std::string asyncFailureMessage;
  // The memory of calls staged in a group (StagedCall) whose stream was being captured at the
  // group's end, so that it could not be freed there (comm.cc, finishStagedCalls): freed by the
  // destroy (releaseMemory), once the event behind its copy in has completed. Guarded by mutex.
  struct KeptStaging {
    void* memory;
    cudaEvent_t copiedIn;
  };
  std::vector<KeptStaging> keptStaging;

  // Where its real comm may not be ready when its creating call (or group) returns (non-blocking, or
  // its creating group returned ncclInProgress), the comm's set-up runs from a thread of its own once
  // NCCL says it is (comm.cc, setUpYaliWhenReady), and so does the answer ("no") of a rank that will
  // not run YALI on it (answerNoWhenReady; a blocking comm answers in its creating call). While that
  // runs, ncclCommGetAsyncError says ncclInProgress, so that the program, which must wait for
  // ncclSuccess before using a non-blocking comm, issues nothing on it meanwhile; a call that comes
  // sooner is refused as NCCL refuses a call on a comm in progress (refuseWhileSetUp); abort and
  // revoke stop it (cancelSetUp), then join it (waitForSetUp). Written by that thread before it
  // clears the flag (release), read after (acquire): the comm's YALI state (yali, hier, noYali,
  // disabled, registerYali).
  std::atomic<bool> setUpPending{false};
  std::shared_ptr<BackgroundSetUp> background;
  // A set-up round of this rank waited for a peer until YALI_TIMEOUT_MS: the comm is NCCL only, but
  // its real comm has the round's collective queued, unmatched: ncclRemoteError, returned by the
  // creating call (or the group's end) and by ncclCommGetAsyncError from then on (comm.cc, realRound).
  // Also a non-blocking parent's child whose NCCL init failed: its parent's error (comm.cc, handOver),
  // or one whose hand-over an abort or revoke stopped: ncclRemoteError (finishHandOver).
  std::atomic<int> setUpError{ncclSuccess};
  // Whether the YALI comm takes point-to-point calls (intercept.cc, yaliTakesSendRecv): -1 not asked
  // yet, 0 no (its YALI_P2P_CHANNELS=0), 1 yes. A setting every rank shares, so the same verdict on
  // every rank.
  std::atomic<int> sendRecvOnYali{-1};
};

// Waits for c's background set-up, or answer to its peers' set-up (Comm::background), if any.
void waitForSetUp(Comm* c);
// Tells c's background set-up or answer, if any, to stop waiting at once (abort, revoke: cancelSetUp,
// then waitForSetUp returns within a poll, or once a yaliCommInitRank under way has returned).
void cancelSetUp(Comm* c);
// ncclSuccess, or, while c's background set-up still runs (Comm::setUpPending: the program's
// ncclCommGetAsyncError says ncclInProgress), ncclInvalidArgument with a message naming `function`:
// NCCL refuses any call but abort, revoke and ncclCommGetAsyncError on a comm in progress
// (init.cc, ncclCommEnsureReady), and so do we, rather than run NCCL's calls on the real comm beside
// the set-up's rounds, read the comm's YALI state while the set-up writes it, or wait without a
// bound where NCCL would not (review, Session 32). c may be null (not ours: nothing to refuse).
ncclResult_t refuseWhileSetUp(const Comm* c, const char* function);

// What our ncclCommRegister hands out for a comm of ours: both libraries' handles.
struct Registration {
  static constexpr uint64_t kMagic = 0x4745524943434e4cull;  // "LNCCIREG"
  uint64_t magic = kMagic;
  Comm* comm = nullptr;
  void* real = nullptr;  // NCCL's handle
  void* yali = nullptr;  // YALI's, null if none
  void* buff = nullptr;  // for a YALI registration that waits for the group's end
  size_t size = 0;
};

// The Comm behind a handle, or null when it is not ours. NCCL calls parts of its own API through
// the dynamic linker (ncclBcast calls ncclBroadcast, ncclDevCommCreate calls ncclCommRegister), and
// those calls land here, with NCCL's own handles: they must reach NCCL untouched. Both kinds of
// handle point at readable memory that starts with 8 bytes (NCCL's comm starts with its own magic),
// so the first word tells them apart. A null handle is not ours either (NCCL reports it).
Comm* ours(ncclComm_t handle);
inline ncclComm_t handleOf(Comm* c) { return reinterpret_cast<ncclComm_t>(c); }
// The real communicator behind any handle: ours unwrapped, NCCL's as it is.
inline ncclComm_t realComm(ncclComm_t handle) {
  Comm* c = ours(handle);
  return c != nullptr ? c->real : handle;
}
Registration* ourRegistration(void* handle);

// The generic forwards pass every argument through realArg: communicators are unwrapped, anything
// else goes as it is. (A ncclComm_t* is not unwrapped: the functions that fill one are intercepted,
// and one that is not, such as a newer NCCL's ncclCommGrow, hands the program NCCL's own handle,
// which then works everywhere as an NCCL-only communicator.)
template <typename T>
T realArg(T value) {
  return value;
}
inline ncclComm_t realArg(ncclComm_t handle) { return realComm(handle); }
// refuseWhileSetUp for one argument of a generic forward: only an argument that is one of our comms
// can be refused.
template <typename T>
ncclResult_t refuseWhileSetUpArg(T, const char*) {
  return ncclSuccess;
}
inline ncclResult_t refuseWhileSetUpArg(ncclComm_t handle, const char* function) {
  return refuseWhileSetUp(ours(handle), function);
}

// ---- Creation --------------------------------------------------------------------------------------

// Whether a communicator made with this config (NULL: the default, or the parent's for split and
// shrink, `inherited`) is blocking: routing.h, blockingOf, with this process's NCCL_COMM_BLOCKING.
// NCCL_COMM_BLOCKING is read once per process, as NCCL reads it, at the first call.
// Read only once NCCL's creating call returned: NCCL loads its configuration file (NCCL_CONF_FILE,
// ~/.nccl.conf, /etc/nccl.conf) into the environment at its first call on a rank, which for every
// rank but the one that made the unique id is its init, so a read before it could differ between
// ranks (review F4).
bool isBlocking(const ncclConfig_t* config, bool inherited);
// Whether NCCL loaded an environment plugin (NCCL_ENV_PLUGIN not "none" and one of the libraries
// NCCL tries, routing.h envPluginCandidates, loaded and exporting ncclEnvPlugin_v1): NCCL then reads
// its settings through it, which libyali-nccl cannot, so its verdicts (isBlocking) could differ from
// NCCL's. Every communicator is then NCCL only (adopt), and every split and shrink passes the
// program's own pointer to NCCL. Decided once per process, after NCCL's first creating call (as
// isBlocking), and logged then.
bool ncclEnvPluginInUse();
// Whether a communicator made with `config` shares resources with the splits made from it (NCCL's
// config.splitShare, which NCCL_COMM_SPLIT_SHARE_RESOURCES overrides); `inherited` (the parent's)
// for a NULL config. Read once NCCL's creating call returned, as isBlocking; the variable once per
// process, as NCCL reads it.
bool sharesResources(const ncclConfig_t* config, bool inherited);

// A Comm (new, with blocking and sharesResources set) whose `real` NCCL's creating call was given
// to fill (`result`: what that call returned): hands the program its handle in *out and sets YALI up
// beside it now, or at the outermost ncclGroupEnd when made inside a group (the real comm is ready
// only then). NCCL fills a split's or shrink's child only when the child's init job ends, NULL until
// then (init.cc, ncclCommInitChildComm): inside a group that is the outermost ncclGroupEnd, so a
// `real` still null after a call that succeeded in a group waits for it (*out stays NULL until then,
// as NCCL's would: leaveGroup). A `real` null otherwise (NCCL made nothing) frees the Comm and sets
// *out to NULL. Never fails: where YALI cannot be had, the comm is NCCL only. (A split with
// NCCL_SPLIT_NOCOLOR never comes here: NCCL gets the program's pointer, ncclCommSplit.)
// `childExpected` (a split or a shrink): a `real` still
// null then is never freed (a deliberate, logged leak): NCCL could still write it from its background
// where its verdict on the parent (non-blocking) differs from ours (comm.cc, dropChildless).
void adopt(Comm* c, ncclResult_t result, ncclComm_t* out, bool childExpected = false);
// A non-blocking parent's split with a color, or shrink, whose NCCL call (given c->real) did not
// fail: NCCL makes the child in its background whatever the child's config says, writes it into
// c->real at the end of the child's init job, failed or not (init.cc, ncclCommInitRankFunc), and
// only then sets the parent's asynchronous state, ncclInProgress until then, to the job's result
// (group.cc). *out is NULL now, as NCCL leaves the program's. Once the call (outside a group) or the
// outermost group's end (inside one) returns, a thread of ours, held by the parent, waits for the
// parent's state, then reads the child NCCL wrote (NCCL writes it first; one still unwritten then is
// never written: kept, *out NULL), sets the child up (a child whose init failed is NCCL only), and
// then writes our handle into *out; until it did, the parent is in progress to the program (its
// ncclCommGetAsyncError says ncclInProgress, its other calls are refused but abort and revoke), so
// that, as with NCCL alone, a parent that says ncclSuccess has its child written, and the child is
// ready to use when the program sees it. *out must stay valid until then, as it must for NCCL's
// write. An abort or revoke of the parent stops the thread; finishHandOver then hands over what NCCL
// made. A child NCCL never writes (a group whose end failed before its jobs ran) is kept, never freed.
void adoptWhenWritten(Comm* c, ncclComm_t* out, Comm* parent);
// After an abort or revoke of `parent` (NCCL's call returned: its abort joined the children's jobs),
// the children its stopped hand-over had not handed over: written by NCCL, to the program, NCCL only,
// reporting ncclRemoteError; not written, kept, the program's pointer NULL.
void finishHandOver(Comm* parent);
// Whether c is the parent of a child still being handed over (a shrink of it is refused then, even
// with NCCL_SHRINK_ABORT: NCCL refuses one of a comm in progress, and stopping the hand-over for a
// shrink NCCL then refused would leave the child unwritten).
bool handOverPending(const Comm* c);
// ncclCommInitAll's comms (in place in `comms`), YALI's made by yaliCommInitAll. `result` is what
// NCCL's call returned: ncclInProgress for a non-blocking one (NCCL_COMM_BLOCKING=0), whose inits go
// on in NCCL's background: its clique is set up once NCCL made every comm of it (in the background,
// each comm's ncclCommGetAsyncError saying ncclInProgress until then). `blocking`: NCCL's verdict on
// the comms (isBlocking, no config), which `result` does not tell inside a group: there NCCL's call
// returns ncclSuccess for a non-blocking clique too, and only the group's end ncclInProgress.
void adoptClique(ncclComm_t* comms, int n, const int* devlist, ncclResult_t result, bool blocking);

// ---- Groups ----------------------------------------------------------------------------------------

void enterGroup();
// Leaves one group level; at the outermost, does what waited for it: the staged calls' copies back
// (below), the handles of the splits and shrinks made in the group (NCCL has filled their real
// comms by now), the YALI set-up of comms made in the group (when the real ncclGroupEnd succeeded)
// and YALI registrations made in it. `launched`: YALI's part of the group was launched
// (yaliGroupEnd, not yaliGroupSimulateEnd, and neither library's end failed), so the staged calls'
// outputs are there to copy back. Returns ncclSuccess, or the staged calls' failure
// (finishStagedCalls); an inner level always ncclSuccess.
// `inProgress`: NCCL's end returned ncclInProgress (a non-blocking comm in the group): a staged
// call's failure then also goes to its comm (noteAsyncFailure), and the comms made in the group
// answer their peers' set-up with "no" once NCCL has made them (comm.cc, answerNoWhenReady).
// Returns a set-up round's timeout (Comm::setUpError) too.
ncclResult_t leaveGroup(bool realGroupSucceeded, bool launched, bool inProgress);
bool inGroup();
// Whether the group end being made now is the outermost one (this thread's group depth is 1).
bool atOutermostGroupEnd();

// A call of `c` failed at the end of a group whose NCCL part returned ncclInProgress (a
// non-blocking comm in the group). ncclGroupEnd then returns ncclInProgress, as NCCL's did: a
// program polls the group's comms (ncclCommGetAsyncError) until they leave that state, and may stop
// at an error, so the failure goes where that poll finds it: ncclCommGetAsyncError on `c` returns it
// from then on (asyncFailureOf), as NCCL's asynchronous errors stay, and ncclGetLastError says
// `message` (libyali-nccl's, YALI's or NCCL's text of the failure). The first failure is kept.
void noteAsyncFailure(Comm* c, ncclResult_t r, const char* message);
// The failure noteAsyncFailure kept for `c` (ncclSuccess: none), and its message.
ncclResult_t asyncFailureOf(Comm* c, std::string* message);

// A call YALI refused for this rank's buffers, made inside a group and staged there
// (intercept.cc, stageInGroup): YALI's call on its copies launches at the outermost yaliGroupEnd,
// so its output is copied back, and its memory freed, only after that, at the outermost
// ncclGroupEnd (leaveGroup). The memory is the call's own, from cudaMallocAsync on its stream.
// Where it cannot be freed on that stream at the end (a capture begun there since the call), or
// its comm is freed inside the group, it is freed with cudaFree once `copiedIn` has completed:
// cudaFree does not wait for the work on memory from cudaMallocAsync, and the copy in is the last
// use of it that is not a launch of the call.
struct StagedCall {
  Comm* comm;       // null once freed (freeComm): nothing is copied back then
  yaliComm_t yali;  // comm->yali at the call: a comm whose YALI side ended since (an abort inside
                    // the group) launched nothing of it, and gets nothing copied back
  int device;       // the comm's
  cudaStream_t stream;
  void* memory;        // cudaMallocAsync'd on `stream`
  const void* output;  // in memory: what YALI writes on this rank
  void* recv;          // the program's recvbuff
  size_t recvBytes;    // 0: nothing to copy back
  const char* function;
  cudaEvent_t copiedIn;  // recorded on `stream` behind the copy into `memory`
};
// Keeps `s` for the outermost end of this thread's open group.
void stageUntilGroupEnd(const StagedCall& s);
// Forgets the hierarchical calls of `c` deferred to the outermost end of this thread's open group
// (intercept.cc, routeHier): `c` is being freed inside the group. Called by freeComm.
void dropDeferredCalls(Comm* c);

// ---- Registration -----------------------------------------------------------------------------------

// ncclCommRegister on a comm of ours: NCCL's registration, and YALI's when the comm has YALI and
// YALI_NCCL_REGISTER is on everywhere (inside a group: at its end, since YALI's is collective and
// one thread may be registering for several ranks).
ncclResult_t registerBuffer(Comm* c, void* buff, size_t size, void** handle);
// ncclCommDeregister of reg on its own comm c: NCCL's deregistration, then YALI's. reg is freed
// only when NCCL's succeeded; where NCCL refuses, nothing changes (a retry can work).
ncclResult_t deregisterBuffer(Comm* c, Registration* reg);

// ---- Tear-down --------------------------------------------------------------------------------------

// Ends the YALI side: yaliCommAbort (returns at once, from any thread) or yaliCommDestroy (waits
// for this rank's calls, bounded by YALI_TIMEOUT_MS). The comm is NCCL only afterwards; `why` is
// logged ("aborted", "finalized", ...). Returns a failed destroy's result, as NCCL's and noted for
// ncclGetLastError: the comm's calls had not finished, and will do nothing when they run. An abort's
// failure is only logged (ncclSuccess): nothing is left to do about it.
ncclResult_t endYali(Comm* c, bool abort, const char* why);
// Ends the hierarchical side: YALI's node comm (abort or destroy, as endYali), then the cross and
// node NCCL comms (ncclCommDestroy / ncclCommFinalize; for an abort, taken off the comm into
// *toAbort, for abortTogether). The comm is flat NCCL afterwards (hier stays for async errors,
// with its scratch and status words, until freeComm). Returns the first failure of a destroy or
// finalize (as endYali for YALI's; NCCL's for a split's, which is kept, to be aborted with the
// comm); ncclSuccess for an abort.
ncclResult_t endHierarchy(Comm* c, bool abort, bool finalizeOnly, const char* why,
                          std::vector<ncclComm_t>* toAbort = nullptr);

// Aborts the NCCL comms `splits` (ncclCommAbort) each on a thread of its own while `last` (the
// real comm's abort, revoke or shrink) runs on this thread; returns last's result once all have
// ended. Together, not one after the other: NCCL's tear-down of a comm waits for the work queued
// on the program's streams before that comm's last kernel, and that may be a kernel of another of
// the comm's NCCL comms stuck on a dead peer (a hierarchical call's cross step on the split queued
// behind the previous call's flat tail on the real comm), which only that comm's abort ends.
// Where the splits share the comm's resources (Comm::sharesResources) they share its abort flag too:
// an abort of a split then ends the comm's kernels as well, and running it beside a revoke or a
// shrink, which set and reset that flag, could leave it set after their reset: `together` false
// aborts the splits first, one after the other, then runs `last`.
ncclResult_t abortTogether(const std::vector<ncclComm_t>& splits, const std::function<ncclResult_t()>& last,
                           bool together);

// ---- Scratch -----------------------------------------------------------------------------------------

// s's buffer of at least `bytes` on c's device (grown here, at least doubled, or to Scratch::agreed;
// where that cannot be had, to `bytes`), or null with *err set: cudaMalloc's error, or
// cudaErrorStreamCaptureUnsupported when it must grow and `mayGrow` is false (the call's stream is
// being captured).
void* scratchOf(Comm* c, Scratch* s, size_t bytes, bool mayGrow, cudaError_t* err);
size_t scratchBytes(Scratch* s);  // the size a route is decided on: Scratch::agreed where agreedSize
// The order of s's users across streams (Scratch::order), for a call on `stream` in `context`
// (scratchContext: its capture's id, or 0 for eager work; read once per call): scratchBefore
// before the call's first step that touches the scratch (an error: nothing of the call enqueued),
// scratchUsed after its last (whatever the steps returned: what they enqueued stays).
ncclResult_t scratchContext(const char* function, cudaStream_t stream, unsigned long long* context);
ncclResult_t scratchBefore(Comm* c, Scratch* s, const char* function, cudaStream_t stream,
                           unsigned long long context);
ncclResult_t scratchUsed(Scratch* s, const char* function, cudaStream_t stream, unsigned long long context);

// ncclCommDestroy's last step, once NCCL's comm and YALI's are gone: frees the Comm, its
// registrations and its device memory (both scratches, the status words; never an abort's to free:
// comm.cc, releaseMemory).
void freeComm(Comm* c);

// ---- Logging ----------------------------------------------------------------------------------------

// With YALI_NCCL_DEBUG=1, once per (function, power-of-2 size class, library): which library ran
// it and why (for YALI: why, when not empty; a staged call says why it was staged).
void logRoute(const Comm* c, const char* function, size_t bytes, bool yali, const char* why);

}  // namespace yali::nccl_abi
