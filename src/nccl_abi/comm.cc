#include "nccl_abi/comm.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <system_error>
#include <thread>
#include <utility>
#include <tuple>

#include <cuda_runtime.h>

#include "nccl_abi/diag.h"
#include "nccl_abi/group_streams.h"
#include "nccl_abi/env.h"
#include "nccl_abi/nccl_api.h"
#include "nccl_abi/node_id.h"
#include "nccl_abi/yali_lib.h"

namespace yali::nccl_abi {

namespace {
// The CUDA runtime's functions (yali_lib.h, cudaRuntime): libyali's wherever it loaded. Set-up code
// that may run without libyali (answerNo) checks cudaRuntime() first; everything else runs only
// where a YALI comm exists, so libyali loaded.
const YaliLib& rt() { return *cudaRuntime(); }
}  // namespace

Comm* ours(ncclComm_t handle) {
  if (handle == nullptr) return nullptr;
  Comm* c = reinterpret_cast<Comm*>(handle);
  return c->magic == Comm::kMagic ? c : nullptr;
}

ncclResult_t refuseWhileSetUp(const Comm* c, const char* function) {
  if (c == nullptr || !c->setUpPending.load(std::memory_order_acquire)) return ncclSuccess;
  return shimFail(ncclInvalidArgument,
                  "%s: comm=%p is still being set up (its ncclCommGetAsyncError says ncclInProgress): poll it "
                  "until ncclSuccess first, as NCCL requires of a non-blocking communicator",
                  function, static_cast<const void*>(c));
}

Registration* ourRegistration(void* handle) {
  if (handle == nullptr) return nullptr;
  auto* r = static_cast<Registration*>(handle);
  return r->magic == Registration::kMagic ? r : nullptr;
}

namespace {

// An NCCL setting's value, kept from the moment it was read (null: unset). NCCL reads its
// parameters once per process (NCCL_PARAM caches each at its first use, include/param.h), so the
// callers below read theirs once too, into a static, at their first call, which follows NCCL's
// first creating call (which loaded its configuration file, NCCL_CONF_FILE, into the environment):
// isBlocking's after any such call, sharesResources's after one that succeeded (NCCL may fail
// before it reads its settings; a program that sets NCCL_COMM_BLOCKING between a failed first
// init and its next is the case where ours could still differ). A program that changes the
// variable later changes neither NCCL's verdict nor ours. (Read with
// getenv: where NCCL reads its settings through an environment plugin, which may answer
// otherwise, no comm gets YALI and splits pass through: ncclEnvPluginInUse.)
struct SettingOnce {
  explicit SettingOnce(const char* name) {
    const char* v = getenv(name);
    set = v != nullptr;
    if (set) value = v;
  }
  const char* get() const { return set ? value.c_str() : nullptr; }
  bool set;
  std::string value;
};

}  // namespace

bool isBlocking(const ncclConfig_t* config, bool inherited) {
  static const SettingOnce env("NCCL_COMM_BLOCKING");
  return blockingOf(config, inherited, env.get());
}

bool ncclEnvPluginInUse() {
  // NCCL 2.28 reads every setting through ncclEnvPluginGetEnv (misc/param.cc): an external plugin
  // when it loaded one at its first call (plugin/env.cc, ncclEnvPluginLoad), kept open until the
  // process exits. Asked after NCCL's first creating call, as isBlocking, and once per process.
  static const bool inUse = [] {
    const std::vector<std::string> names = envPluginCandidates(getenv("NCCL_ENV_PLUGIN"));
    std::string found;
    for (const std::string& name : names) {
      // Only a library already loaded (RTLD_NOLOAD): NCCL's own handle, if NCCL opened it. NCCL
      // takes it only where it exports ncclEnvPlugin_v1 (plugin/env/env_v1.cc).
      void* lib = dlopen(name.empty() ? nullptr : name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
      if (lib == nullptr) continue;
      const bool plugin = dlsym(lib, "ncclEnvPlugin_v1") != nullptr;
      dlclose(lib);
      if (plugin) {
        found = name.empty() ? "the program itself (NCCL_ENV_PLUGIN=STATIC_PLUGIN)" : name;
        break;
      }
    }
    if (found.empty()) return false;
    warn(-1, "NCCL reads its settings through an environment plugin (%s), which libyali-nccl cannot "
         "read: every communicator is NCCL only (no YALI), and splits and shrinks go to NCCL as they "
         "are", found.c_str());
    return true;
  }();
  return inUse;
}

bool sharesResources(const ncclConfig_t* config, bool inherited) {
  // Read once (SettingOnce), at our first call: after NCCL's first creating call that succeeded
  // (create(), ncclCommInitAll). The rules: routing.h, splitShareOf.
  static const SettingOnce env("NCCL_COMM_SPLIT_SHARE_RESOURCES");
  return splitShareOf(config, inherited, env.get());
}

namespace {

// ---- Thread state: groups and what waits for their end ---------------------------------------------

// A split or shrink made in a group: NCCL fills c->real at the group's end, when the program gets
// its handle in *out (adopt).
struct Child {
  Comm* comm;
  ncclComm_t* out;
  bool childExpected;     // a split with a color, or a shrink: dropChildless
  Comm* parent = nullptr;  // a non-blocking parent's child (adoptWhenWritten): its parent
};

// A YALI deregistration a group deferred (deregisterBuffer): the comm's YALI handle, the
// registration's, and the rank for the log. NCCL's part and our handle went at the call.
struct Deregistration {
  yaliComm_t yali;
  void* handle;
  int rank;
};

// What a group's end must do (NCCL's groups are per thread, and so are YALI's).
struct GroupState {
  int depth = 0;
  std::vector<Child> children;              // splits and shrinks whose real comm waits for the end
  std::vector<Comm*> setUps;                // comms made in the group (ncclCommInitRank, split, ...)
  std::vector<std::vector<Comm*>> cliques;  // ncclCommInitAll's, each set up as one
  std::vector<Registration*> registrations;  // YALI registrations made in the group
  std::vector<Deregistration> deregistrations;  // YALI deregistrations made in the group
  std::vector<StagedCall> staged;               // calls staged in the group (stageUntilGroupEnd)
  std::vector<Comm*> answers;  // comms made in the group that answer their peers' set-up with "no"
  std::vector<Child> written;  // non-blocking parents' children, handed over once NCCL wrote them
};
thread_local GroupState tlsGroup;

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  ok_ = rt().cudaGetDevice(&device_) == cudaSuccess;
  if (device >= 0 && (!ok_ || device != device_)) rt().cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (ok_) rt().cudaSetDevice(device_);
}

bool mayBeCaptured(cudaStream_t stream, bool* unread) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool failed = rt().cudaStreamIsCapturing(stream, &capture) != cudaSuccess;
  if (failed) rt().cudaGetLastError();
  if (unread != nullptr) *unread = failed;
  return failed || capture != cudaStreamCaptureStatusNone;
}

namespace {

// fn(i) for every i: in this thread for one, else one thread each. For YALI calls that are
// collective and block until every rank has made them (yaliCommInitRank, yaliCommRegister), when
// this thread stands for several ranks (one thread driving several GPUs, a group's init).
template <typename Fn>
void forEachRank(size_t n, Fn fn) {
  if (n == 1) {
    fn(0);
    return;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&fn, i] { fn(i); });
  for (std::thread& t : threads) t.join();
}

// ---- The set-up --------------------------------------------------------------------------------------

// Where each rank's set-up messages travel: device memory, since they go through the real NCCL.
// The id round is an allreduce (min) of IdMessage's int32 words: every rank sends ok = 1 when its
// set-up has worked so far, and rank 0 (of the node) sends its id while the others send the largest
// int32 in its words, so every rank gets rank 0's id and ok = 1 only if every rank was fine (a
// broadcast would carry rank 0's word alone: a peer that failed could not say so before YALI's
// init, which then waits for it until YALI_TIMEOUT_MS).
struct IdMessage {
  int32_t ok;  // every rank's set-up has worked so far, and rank 0 could make the id
  int32_t pad;
  yaliUniqueId id;
};
static_assert(sizeof(IdMessage) % sizeof(int32_t) == 0, "the id round reduces IdMessage as int32 words");

// What one rank sends in the id round (IdMessage): `id` on rank 0 (null: it has none), else words
// that leave rank 0's in the minimum.
IdMessage idContribution(bool ok, const yaliUniqueId* id) {
  IdMessage m{};
  m.ok = ok ? 1 : 0;
  if (id != nullptr) {
    m.id = *id;
    return m;
  }
  int32_t words[sizeof(IdMessage) / sizeof(int32_t)];
  for (int32_t& w : words) w = INT32_MAX;
  words[0] = m.ok;
  memcpy(&m, words, sizeof(m));
  return m;
}

struct SetUp {
  Comm* comm = nullptr;
  cudaStream_t stream = nullptr;
  char* scratch = nullptr;  // records[nranks] | IdMessage | int32 agreement
  bool pooled = true;       // scratch came from cudaMallocAsync
  // scratch is pinned host memory, zeroed: this rank could not have the device's (allocNotOkScratch)
  bool hostScratch = false;
  size_t idOffset = 0, agreeOffset = 0;
  // What this rank sends in the id round and the agreement: its words in scratch, or, where their
  // copy there failed, "not ok" from notOk (sendFrom). The agreement's is agreeResult, where the
  // rank has it (step 4 of setUpYali: the round runs in place there).
  const char* idSend = nullptr;
  const char* agreeSend = nullptr;
  void* notOk = nullptr;  // pinned host memory, sizeof(IdMessage); null until needed
  // Every step so far worked here. A rank that fails locally still takes part in the real
  // collectives that follow (with "not ok"), so that no peer waits for it: which rounds a comm
  // takes is decided on the records, which every rank reads alike whatever failed before. Only a
  // rank that cannot read the records (the records round failed on it, or the copy back) leaves the
  // later rounds: it cannot know them (see setUpYali).
  bool alive = true;
  bool roundFailed = false;  // the last realRound failed on this rank: its results are not to be read
  // A round's wait for its collective reached YALI_TIMEOUT_MS (realRound): the collective stays
  // queued on `stream`, unmatched, so nothing on that stream is waited for again (the agreement,
  // freeScratch) and the comm reports ncclRemoteError (Comm::setUpError).
  bool timedOut = false;
  // This rank left rounds its peers may take (leaveRounds): its error stands whatever completes later.
  bool leftRounds = false;
  // The timed-out round's group was still in NCCL's background at the deadline
  // (waitWhileInProgress): its collective may yet be put on `stream`, after anything put there now
  // (freeScratch).
  bool leftInBackground = false;
  // A background answer's (answerNoWhenReady) flag, set by the comm's abort or revoke
  // (cancelSetUp): its waits end at once, as at their deadline. Null in the creating call.
  const std::atomic<bool>* cancel = nullptr;
  bool cancelled() const { return cancel != nullptr && cancel->load(std::memory_order_acquire); }
  // The agreement's word and result: pinned host memory NCCL reads and writes through its device
  // address (written with a plain store before the round, which reduces it in place), read with a
  // plain load once the round's collective completed, so that no copy back, which could fail on
  // this rank alone after its peers had read "yes", can split the decision (review: the agreement
  // left a rank NCCL only after a failed copy back while its peers kept YALI).
  int32_t* agreeResult = nullptr;
  std::string why;    // when !alive, or the verdict's reason
  SetUpVerdict verdict;
  IdMessage id{};
  yaliComm_t yali = nullptr;
  int32_t agreed = 0;
  // Several nodes (verdict.hierarchical): the YALI comm is among this node's ranks, its id made by
  // local rank 0 and broadcast over nodeComm.
  ncclComm_t nodeComm = nullptr, crossComm = nullptr;
  // Several nodes: the cross-node status words (comm.h, Hierarchy), handed to it at the end.
  const int* yaliFailure = nullptr;
  int32_t* statusDevice = nullptr;
  int32_t* statusHost = nullptr;

  bool hierarchical() const { return verdict.hierarchical; }
  int yaliRank() const { return hierarchical() ? verdict.layout.localRankOf[comm->rank] : comm->rank; }
  int yaliRanks() const { return hierarchical() ? verdict.layout.localSize : comm->nranks; }
  ncclComm_t idComm() const { return hierarchical() ? nodeComm : comm->real; }

  void fail(const std::string& reason) {
    if (alive) why = reason;
    alive = false;
  }
};

std::string cudaText(const char* what, cudaError_t err) {
  return std::string(what) + " failed: " + rt().cudaGetErrorString(err);
}

// Waits for s's round on s.stream, polling it (cudaStreamQuery) until `deadline`: a peer that does
// not take part in a round (its NCCL call failed, it cannot reach the round at all) ends the wait
// at YALI_TIMEOUT_MS instead of leaving this rank in cudaStreamSynchronize for ever.
// cudaErrorNotReady: the deadline passed.
cudaError_t waitForRound(SetUp& s, std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    const cudaError_t err = rt().cudaStreamQuery(s.stream);
    if (err != cudaErrorNotReady) return err;
    if (std::chrono::steady_clock::now() >= deadline || s.cancelled()) return cudaErrorNotReady;
    if (polls < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Polls the real comm's ncclCommGetAsyncError until NCCL has left ncclInProgress there, `deadline`
// has passed or `cancel` (may be null) is set; returns the comm's state then (ncclInProgress: not
// done in time), or the poll's own failure. NCCL says ncclInProgress while it makes a non-blocking
// comm in its background (answerNoWhenReady waits for that), and while it ends in its background a
// round's group that returned ncclInProgress (group.cc: a group of a non-blocking comm, as a gated
// rank's answer on its non-blocking comm is, answerNo): the round's collective is on its stream
// only once that is done. Before, a wait on the stream would find it empty, and freeing the round's
// memory would free memory NCCL is yet to use.
ncclResult_t waitWhileInProgress(ncclComm_t real, std::chrono::steady_clock::time_point deadline,
                                 const std::atomic<bool>* cancel) {
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = callReal<Api::ncclCommGetAsyncError>(real, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress || std::chrono::steady_clock::now() >= deadline ||
        (cancel != nullptr && cancel->load(std::memory_order_acquire)))
      return state;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Testing only (Settings::testDelayRank, YALI_NCCL_TEST_SETUP_DELAY): the named rank sleeps before
// it issues `round` (records, id, agreement, answer), as a peer late for it would.
void testDelayBefore(const char* round, const std::vector<SetUp*>& setUps) {
  const Settings& t = settings();
  if (t.testDelayRank < 0 || t.testDelayRound != round) return;
  for (const SetUp* s : setUps) {
    if (s->comm->rank != t.testDelayRank) continue;
    warn(s->comm->rank, "testing: %lld ms before the set-up's %s round (YALI_NCCL_TEST_SETUP_DELAY)", t.testDelayMs,
         round);
    std::this_thread::sleep_for(std::chrono::milliseconds(t.testDelayMs));
    return;
  }
}

// One real collective on every comm of the set-up, issued in one real group (this thread may stand
// for several ranks of one communicator), then waited for. `issue` enqueues s's call on s.stream.
// Sets roundFailed where it failed; timedOut where a wait reached `deadline` (YALI_TIMEOUT_MS).
// `round`: the round's name for YALI_NCCL_TEST_SETUP_DELAY (testDelayBefore). `timeouts`: how many
// YALI_TIMEOUT_MS the round waits for its peers (the agreement's peers may come one YALI_TIMEOUT_MS
// late: setUpYali, step 4).
template <typename Issue>
void realRound(const std::vector<SetUp*>& setUps, const char* what, const char* round, Issue issue,
               int timeouts = 1) {
  if (setUps.empty()) return;
  testDelayBefore(round, setUps);
  // One deadline for the round: this thread may stand for several ranks, each waited for in turn.
  const long long waitMs = static_cast<long long>(settings().timeoutMs) * timeouts;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(waitMs);
  for (SetUp* s : setUps) s->roundFailed = false;
  // Stopped (abort, revoke: the cancel flag the set-up's comms share): the round is not issued, and
  // each comm reports ncclRemoteError, as after a round it left (its peers may take it).
  if (std::any_of(setUps.begin(), setUps.end(), [](const SetUp* s) { return s->cancelled(); })) {
    for (SetUp* s : setUps) {
      s->roundFailed = true;
      s->comm->setUpError.store(ncclRemoteError);
      s->fail(std::string(what) + ": not issued, the set-up was stopped (abort or revoke)");
    }
    return;
  }
  ncclResult_t r = callReal<Api::ncclGroupStart>();
  for (SetUp* s : setUps) {
    if (r != ncclSuccess) break;
    rt().cudaSetDevice(s->comm->device);
    r = issue(*s);
  }
  const ncclResult_t end = callReal<Api::ncclGroupEnd>();
  // Every call issued, and the group ends in NCCL's background (waitWhileInProgress).
  const bool inBackground = r == ncclSuccess && end == ncclInProgress;
  if (r == ncclSuccess) r = end;
  // The round's collective may stay queued on the real comm (NCCL's background end of the group, or
  // the stream, did not finish in time): the comm is to be aborted, and its memory kept (freeScratch).
  auto giveUp = [what, waitMs, timeouts](SetUp* s, const char* waitedFor) {
    s->roundFailed = true;
    s->timedOut = true;
    s->comm->setUpError.store(ncclRemoteError);
    s->fail(std::string(what) + " over NCCL waited " + std::to_string(waitMs) + " ms (" +
            (timeouts == 1 ? std::string("YALI_TIMEOUT_MS") : std::to_string(timeouts) + " x YALI_TIMEOUT_MS") +
            ") for " + waitedFor);
    warn(s->comm->rank, "communicator %p: %s; the communicator is NCCL only, but the set-up's collective stays "
         "queued on it, unmatched: its creating call and ncclCommGetAsyncError report ncclRemoteError (abort it)",
         static_cast<void*>(s->comm), s->why.c_str());
  };
  for (SetUp* s : setUps) {
    const ncclResult_t mine = inBackground ? waitWhileInProgress(s->comm->real, deadline, s->cancel) : r;
    if (inBackground && mine == ncclInProgress) {
      s->leftInBackground = true;
      giveUp(s, "NCCL to end the round's group (ncclGroupEnd returned ncclInProgress)");
      continue;
    }
    if (mine != ncclSuccess) {
      s->roundFailed = true;
      s->fail(std::string(what) + " over NCCL failed: " + callReal<Api::ncclGetErrorString>(mine));
      continue;
    }
    rt().cudaSetDevice(s->comm->device);
    const cudaError_t err = waitForRound(*s, deadline);
    if (err == cudaErrorNotReady) {
      giveUp(s, "a peer that did not take part");
    } else if (err != cudaSuccess) {
      s->roundFailed = true;
      s->fail(cudaText(what, err));
    }
  }
}

// A rank out of a set-up round its peers may take, or of the rounds after it (its own call of the
// round failed, it cannot read the records, it has no node comm for its node's id round): their
// collectives may then stay queued on the real comm, unmatched (their wait ends at YALI_TIMEOUT_MS,
// realRound), or behind such a one on their streams, and this rank's first collective on the comm
// would be matched against one of them (garbage, or a hang). As a rank whose round timed out, the
// comm is NCCL only and reports ncclRemoteError (Comm::setUpError): the program is to abort it. A
// rank cannot tell whether its peers took the rounds, so it reports the error even where none did.
// (Review: such a rank was told ncclSuccess.)
void leaveRounds(SetUp& s, const char* rounds) {
  s.leftRounds = true;
  s.comm->setUpError.store(ncclRemoteError);
  if (s.timedOut) return;  // realRound's giveUp said so
  warn(s.comm->rank, "communicator %p: %s; this rank is out of %s, which its peers may take: the communicator is "
       "NCCL only, but a set-up collective of theirs may stay queued on it, unmatched: its creating call and "
       "ncclCommGetAsyncError report ncclRemoteError (abort it)",
       static_cast<void*>(s.comm), s.why.c_str(), rounds);
}

// The set-up's copies go through its own non-blocking stream: a cudaMemcpy would run on the legacy
// default stream, and so wait for whatever the program has queued on its blocking streams.
// Whether the copy worked (else s failed).
bool copyOnStream(SetUp& s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  rt().cudaSetDevice(s.comm->device);
  cudaError_t err = rt().cudaMemcpyAsync(dst, src, bytes, kind, s.stream);
  if (err == cudaSuccess) err = rt().cudaStreamSynchronize(s.stream);
  if (err != cudaSuccess) s.fail(cudaText("cudaMemcpyAsync", err));
  return err == cudaSuccess;
}

bool copyToDevice(SetUp& s, size_t offset, const void* src, size_t bytes) {
  return copyOnStream(s, s.scratch + offset, src, bytes, cudaMemcpyHostToDevice);
}

bool copyFromDevice(SetUp& s, void* dst, size_t offset, size_t bytes) {
  return copyOnStream(s, dst, s.scratch + offset, bytes, cudaMemcpyDeviceToHost);
}

// This rank's words for a round (the id round, the agreement), at `offset` in its scratch: the
// address it sends them from. Where their copy into the scratch failed, the scratch holds what its
// block held before (a pool block: the last set-up's words, ok = 1 among them), so the rank sends
// `notOk` instead, from pinned host memory that NCCL reads through its device address (an
// out-of-place allreduce; the result still lands in the scratch). Where even that memory cannot be
// had, the scratch's (warned: a peer may go on to YALI's init and wait for this rank there until
// YALI_TIMEOUT_MS; the agreement then leaves YALI on no rank). NOT RUN ON A GPU.
const char* sendFrom(SetUp& s, size_t offset, const void* words, const void* notOk, size_t bytes) {
  if (copyToDevice(s, offset, words, bytes)) return s.scratch + offset;
  if (s.notOk == nullptr &&
      rt().cudaHostAlloc(&s.notOk, sizeof(IdMessage), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    s.notOk = nullptr;
    warn(s.comm->rank, "communicator %p: %s, and no pinned host memory to say \"not ok\" from: the set-up sends "
         "what its scratch held", static_cast<void*>(s.comm), s.why.c_str());
    return s.scratch + offset;
  }
  memcpy(s.notOk, notOk, bytes);
  return static_cast<const char*>(s.notOk);
}

// Scratch memory in stream order (cudaMallocAsync): cudaFree would wait for every kernel on the
// device, the program's and other communicators' included. Where the device has no memory pools,
// plain cudaMalloc.
cudaError_t allocScratch(SetUp& s, size_t bytes) {
  void* p = nullptr;
  cudaError_t err = rt().cudaMallocAsync(&p, bytes, s.stream);
  if (err == cudaSuccess) err = rt().cudaStreamSynchronize(s.stream);
  if (err != cudaSuccess) {
    s.pooled = false;
    err = rt().cudaMalloc(&p, bytes);
  }
  s.scratch = err == cudaSuccess ? static_cast<char*>(p) : nullptr;
  return err;
}

// The scratch of a rank that could not have the device's (allocScratch failed, or the stream): pinned
// host memory, zeroed by the host, so that the rank still takes part in the records round, with a
// zeroed record (no copy that could fail). A zeroed record decides "no YALI" on every rank
// (decideSetUp: its layout is 0), so no rank takes a later round, and this one knows it without
// reading the records. NCCL reads and writes the memory through its device address (the same as
// its host address: CUDA's unified addressing). NOT RUN ON A GPU: without it the rank took no part
// and every peer waited for it in the records round. False when even this cannot be had.
bool allocNotOkScratch(SetUp& s, size_t bytes) {
  void* p = nullptr;
  if (rt().cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) return false;
  memset(p, 0, bytes);
  s.scratch = static_cast<char*>(p);
  s.hostScratch = true;
  s.pooled = false;
  return true;
}

// One ncclCommSplit of every hierarchical comm of the set-up, in one real group (this thread may
// stand for several ranks). `keys` picks (color, key) from splitKeys; the new comm goes to `out`.
template <typename Keys>
void splitRound(const std::vector<SetUp*>& setUps, const char* what, Keys keys, ncclComm_t SetUp::*out) {
  if (setUps.empty()) return;
  ncclResult_t r = callReal<Api::ncclGroupStart>();
  for (SetUp* s : setUps) {
    if (r != ncclSuccess) break;
    rt().cudaSetDevice(s->comm->device);
    const std::pair<int, int> ck = keys(splitKeys(s->verdict.layout, s->comm->rank));
    // The comm's config (NULL: NCCL copies the parent's: its network, CTA and traffic settings),
    // which also decides whether the splits share its resources (Comm::sharesResources).
    r = callReal<Api::ncclCommSplit>(s->comm->real, ck.first, ck.second, &(s->*out), nullptr);
  }
  const ncclResult_t end = callReal<Api::ncclGroupEnd>();
  if (r == ncclSuccess) r = end;
  for (SetUp* s : setUps) {
    if (r == ncclSuccess && s->*out != nullptr) continue;
    // NCCL writes a split's child when its init job ends, even one whose init failed (init.cc,
    // ncclCommInitRankFunc's exit): a round that failed may still have left a (failed) child here.
    // It is aborted and forgotten, so that this rank leaves the rounds that need it (the id round).
    if (s->*out != nullptr) {
      callReal<Api::ncclCommAbort>(s->*out);
      s->*out = nullptr;
    }
    s->fail(std::string(what) + " failed: " + callReal<Api::ncclGetErrorString>(r));
  }
}

void freeScratch(SetUp& s) {
  if (s.timedOut) {
    // The stream holds a collective that never completes until the comm is aborted: nothing here
    // may wait for it (cudaStreamSynchronize, cudaFree and cudaFreeHost would), and the memory it
    // reads and writes must outlive it. Device memory from the pool goes in stream order (after
    // the abort ended the collective), but not where the round's group was left in NCCL's
    // background (leftInBackground): NCCL may launch the collective later, behind the free. The
    // rest is kept, never freed (a deliberate, logged leak).
    if (s.scratch != nullptr && !s.hostScratch && s.pooled && !s.leftInBackground)
      rt().cudaFreeAsync(s.scratch, s.stream);
    // The stream is kept too, never destroyed (the callers destroy it only where it is still set):
    // a group left in NCCL's background may yet launch the round's collective onto it, and a
    // destroyed stream's handle may by then name nothing, or another stream.
    warn(s.comm->rank, "communicator %p: the set-up's memory and stream behind its timed-out round are kept, "
         "never freed", static_cast<void*>(s.comm));
    s.scratch = nullptr;
    s.notOk = nullptr;
    s.agreeResult = nullptr;
    s.stream = nullptr;
    return;
  }
  if (s.agreeResult != nullptr) {
    rt().cudaStreamSynchronize(s.stream);
    rt().cudaFreeHost(s.agreeResult);
    s.agreeResult = nullptr;
  }
  // Pinned host memory that NCCL read or wrote on the stream goes once the stream has drained.
  if (s.notOk != nullptr || (s.scratch != nullptr && s.hostScratch)) rt().cudaStreamSynchronize(s.stream);
  if (s.notOk != nullptr) {
    rt().cudaFreeHost(s.notOk);
    s.notOk = nullptr;
  }
  if (s.scratch == nullptr) return;
  if (s.hostScratch) {
    rt().cudaFreeHost(s.scratch);
  } else if (s.pooled) {
    rt().cudaFreeAsync(s.scratch, s.stream);
    rt().cudaStreamSynchronize(s.stream);
  } else {
    rt().cudaFree(s.scratch);
  }
  s.scratch = nullptr;
}

// The set-up's memory and stream at its end, on its comm's device: freed, or kept where a round
// timed out (freeScratch: it then leaves s.stream null).
void releaseSetUp(SetUp& s) {
  rt().cudaSetDevice(s.comm->device);
  freeScratch(s);
  if (s.stream != nullptr) rt().cudaStreamDestroy(s.stream);
  s.stream = nullptr;
}

// The hierarchical path's cross-node status words (comm.h, Hierarchy) for s's YALI comm, on the
// comm's device, zeroed, and watched by the YALI comm (yaliCommWatchFailureWord): a launch of it
// that starts after a cross step brought a nonzero status fails, and tells its node peers, so that
// a shard another node flagged is never spread through this node's AllGather as if valid (without
// the watch, the node peers that share no cross comm with the failed rank learnt of it one call
// late; ARCHITECTURE.md, "Errors"). Made before the agreement: a rank that cannot have them ends its
// YALI comm there and says "not ok", so no rank keeps a hierarchy without them, and every rank
// that keeps one watches its words (libyali requires that of every rank or none).
void makeCrossStatus(SetUp& s) {
  static_assert(Hierarchy::kStatusWords * sizeof(int32_t) == sizeof(uint64_t),
                "the status words are the one 64-bit word the YALI comm watches");
  rt().cudaSetDevice(s.comm->device);
  if (lib().yaliCommGetFailureFlag(s.yali, &s.yaliFailure) != yaliSuccess) {
    s.fail(std::string("yaliCommGetFailureFlag failed: ") + lib().yaliGetLastError(nullptr));
  } else {
    void* device = nullptr;
    void* host = nullptr;
    cudaError_t err = rt().cudaMalloc(&device, Hierarchy::kStatusWords * sizeof(int32_t));
    if (err == cudaSuccess) s.statusDevice = static_cast<int32_t*>(device);
    if (err == cudaSuccess)
      err = rt().cudaHostAlloc(&host, Hierarchy::kHostWords * sizeof(int32_t),
                                cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      s.fail(cudaText("allocating the hierarchical path's status words", err));
    } else {
      s.statusHost = static_cast<int32_t*>(host);
      for (int i = 0; i < Hierarchy::kHostWords; ++i) s.statusHost[i] = 0;
      // The device words start at 0 (cudaMalloc leaves them undefined), before anything watches
      // them: the first YALI launch comes before the first cross step writes them.
      if (copyOnStream(s, s.statusDevice, s.statusHost, Hierarchy::kStatusWords * sizeof(int32_t),
                       cudaMemcpyHostToDevice)) {
        if (lib().yaliCommWatchFailureWord(s.yali, reinterpret_cast<const uint64_t*>(s.statusDevice)) == yaliSuccess)
          return;
        s.fail(std::string("yaliCommWatchFailureWord failed: ") + lib().yaliGetLastError(s.yali));
      }
    }
  }
  lib().yaliCommDestroy(s.yali);
  s.yali = nullptr;
}

// Frees what makeCrossStatus made (a set-up that kept no hierarchy, or a destroyed one: nothing of
// the comm runs any more). cudaFree and cudaFreeHost wait for the device, as the scratch's does.
void freeCrossStatus(int device, int32_t** statusDevice, int32_t** statusHost) {
  if (*statusDevice == nullptr && *statusHost == nullptr) return;
  rt().cudaSetDevice(device);
  if (*statusDevice != nullptr) rt().cudaFree(*statusDevice);
  if (*statusHost != nullptr) rt().cudaFreeHost(*statusHost);
  *statusDevice = nullptr;
  *statusHost = nullptr;
}

// Reads rank, size and device off the real comm.
bool describe(Comm* c) {
  if (callReal<Api::ncclCommUserRank>(c->real, &c->rank) != ncclSuccess ||
      callReal<Api::ncclCommCount>(c->real, &c->nranks) != ncclSuccess ||
      callReal<Api::ncclCommCuDevice>(c->real, &c->device) != ncclSuccess) {
    c->noYali = "could not read the communicator's rank, size or device from NCCL";
    return false;
  }
  return true;
}

void announce(const Comm* c) {
  if (c->hier != nullptr)
    info(c->rank, "communicator of %d ranks on %d nodes of %d (node %d, local rank %d), device %d: hierarchical "
         "(YALI in the node, NCCL across) for AllReduce, AllGather, ReduceScatter; flat NCCL for the rest",
         c->nranks, c->hier->layout.nodes, c->hier->layout.localSize, c->hier->node, c->hier->localRank, c->device);
  else if (c->yali != nullptr)
    info(c->rank, "communicator of %d ranks on device %d: YALI for its collectives%s", c->nranks, c->device,
         c->disabled != 0 ? " (YALI_NCCL_DISABLE keeps some on NCCL)" : "");
  else
    info(c->rank, "communicator of %d rank(s) on device %d: NCCL only (%s)", c->nranks, c->device, c->noYali.c_str());
}

// A rank that will not run YALI on these comms (its config is non-blocking, NCCL reads an
// environment plugin, its creating group returned ncclInProgress, it has no libyali) answers the
// set-up's first round, which its peers enter (setUpYali), with a zeroed record (allocNotOkScratch),
// from pinned host memory: a zeroed record decides "no YALI" on every rank (decideSetUp), so no rank
// takes a later round, and this one needs none. Before, such a rank skipped the round and its peers
// waited for it for ever (review 2026-11-29, "Per-rank conditions in the set-up rounds"). The real
// comms must be ready (a blocking comm once its init returned; else answerNoWhenReady). Where this
// rank cannot take part at all (no CUDA runtime, no pinned memory, NCCL refuses the call), its peers'
// round ends at YALI_TIMEOUT_MS with ncclRemoteError (realRound). The comm's noYali is kept.
void answerNo(const std::vector<Comm*>& comms, const std::atomic<bool>* cancel = nullptr) {
  std::vector<SetUp> setUps;
  for (Comm* c : comms) {
    const std::string why = c->noYali;
    if (!describe(c) || c->nranks < 2) {  // one rank: no peers, no round (the same on every rank)
      announce(c);
      continue;
    }
    c->noYali = why;
    if (cudaRuntime() == nullptr) {
      warn(c->rank, "communicator %p: NCCL only (%s), and no CUDA runtime to answer its peers' set-up with: they "
           "wait for this rank until YALI_TIMEOUT_MS", static_cast<void*>(c), why.c_str());
      continue;
    }
    SetUp s;
    s.comm = c;
    s.cancel = cancel;
    setUps.push_back(s);
  }
  if (setUps.empty()) return;
  DeviceGuard restoreDevice;
  std::vector<SetUp*> all;
  for (SetUp& s : setUps) {
    rt().cudaSetDevice(s.comm->device);
    if (rt().cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) != cudaSuccess) s.stream = nullptr;
    if (!allocNotOkScratch(s, static_cast<size_t>(s.comm->nranks) * sizeof(RankRecord))) {
      warn(s.comm->rank, "communicator %p: NCCL only (%s), and no pinned host memory to answer its peers' set-up "
           "with: they wait for this rank until YALI_TIMEOUT_MS", static_cast<void*>(s.comm), s.comm->noYali.c_str());
      continue;
    }
    all.push_back(&s);
  }
  realRound(all, "the set-up's allgather (this rank's record says no)", "answer", [](SetUp& s) {
    return callReal<Api::ncclAllGather>(s.scratch + s.comm->rank * sizeof(RankRecord), s.scratch,
                                        sizeof(RankRecord), ncclUint8, s.comm->real, s.stream);
  });
  for (SetUp& s : setUps) {
    Comm* c = s.comm;
    // Its record may not have gone out: its peers' records round may wait for it.
    if (s.roundFailed) leaveRounds(s, "the set-up's records round");
    info(c->rank, "communicator %p: answered its peers' set-up with \"no YALI\"", static_cast<void*>(c));
    announce(c);
    releaseSetUp(s);
  }
}

}  // namespace

// The set-up, or the answer to it, of comms whose real comms may not be ready yet (Comm::background).
struct BackgroundSetUp {
  std::thread thread;
  std::once_flag joined;
  // Set by the comm's abort or revoke (cancelSetUp): the set-up stops waiting (for NCCL's init, for
  // its rounds) at once, as at YALI_TIMEOUT_MS, so that an abort is not held up by it (before: up to
  // twice YALI_TIMEOUT_MS; review of 8f3bfe3, Session 30). Its memory is then kept, as after a
  // timeout: the abort of the real comm follows. A yaliCommInitRank under way is not stopped: it
  // ends at its own YALI_TIMEOUT_MS, or when its peers join.
  std::atomic<bool> cancel{false};
  // A hand-over of non-blocking parents' children (handOverWhenWritten), held by those parents: the
  // children, their parents, and whether the thread handed them to the program. Read by others only
  // once the thread was joined, once (finishHandOver: the abort or revoke of any of the parents).
  std::vector<Child> kids;
  std::vector<Comm*> parents;
  bool handedOver = false;
  std::once_flag finished;
};

namespace {

// Comm::background is assigned by the thread that creates a comm or splits a parent while another
// may read it (a watchdog's abort or revoke of that parent): both through std::atomic_load/store.
std::shared_ptr<BackgroundSetUp> backgroundOf(const Comm* c) { return std::atomic_load(&c->background); }
void setBackground(Comm* c, std::shared_ptr<BackgroundSetUp> b) { std::atomic_store(&c->background, std::move(b)); }

// A new thread's device is 0; before anything there restores "the current device" (DeviceGuard),
// it takes its comms' (the first whose device NCCL reports): setting 0 back would make a CUDA context
// on GPU 0 in every process, hundreds of MB of it (review, Session 32).
void useDeviceOf(const std::vector<Comm*>& comms) {
  for (Comm* c : comms) {
    int device = -1;
    if (cudaRuntime() == nullptr || callReal<Api::ncclCommCuDevice>(c->real, &device) != ncclSuccess) continue;
    rt().cudaSetDevice(device);
    return;
  }
}

// `run(ready, cancel)` (answerNo or setUpYali), from a thread of its own, once NCCL says each comm's
// init completed (ncclCommGetAsyncError no longer ncclInProgress): a non-blocking comm's init goes on
// in NCCL's background after its creating call returned, and blocking here could deadlock a program
// that makes several ranks' non-blocking comms one after the other on one thread. That wait is
// NCCL's own (its init completes when every rank has joined, however late: torch makes a comm at its
// first collective on it), so it has no deadline here; abort and revoke end it (cancel), and so do
// a destroy or finalize made before it ended. A deadline would leave a rank whose peer came later
// out of the set-up without an error, while that peer's rounds went on (review, Session 32). A comm
// whose init failed takes no part (its NCCL comm is not there to carry the rounds; NCCL reports its
// error). Until `run` is done the program's ncclCommGetAsyncError says ncclInProgress
// (Comm::setUpPending) without asking NCCL, and a call on the comm is refused (refuseWhileSetUp).
// Stopped (cancel) before `run` began, a comm whose init was under way, or every comm once it was
// over, reports ncclRemoteError: its peers may be in their set-up's rounds, which it will not take.
template <typename Run>
void whenReady(const std::vector<Comm*>& comms, Run run) {
  if (comms.empty()) return;
  auto background = std::make_shared<BackgroundSetUp>();
  for (Comm* c : comms) {
    c->setUpPending.store(true);
    setBackground(c, background);
  }
  // The flag outlives the thread: every comm here holds `background` until its tear-down, which
  // joins the thread first (waitForSetUp).
  const std::atomic<bool>* cancel = &background->cancel;
  background->thread = std::thread([comms, cancel, run] {
    std::vector<Comm*> ready;
    for (Comm* c : comms) {
      const ncclResult_t state = waitWhileInProgress(c->real, std::chrono::steady_clock::time_point::max(), cancel);
      if (state == ncclInProgress) {  // stopped before NCCL's init completed (cancel)
        c->noYali = "stopped (abort or revoke) before NCCL's init completed";
        c->setUpError.store(ncclRemoteError);
      } else if (state == ncclSuccess) {
        ready.push_back(c);
      } else {
        if (c->noYali.empty()) c->noYali = std::string("NCCL's init did not complete (") +
                                           callReal<Api::ncclGetErrorString>(state) + ")";
        info(-1, "communicator %p: NCCL's init did not complete (%s): no part in the set-up",
             static_cast<void*>(c), callReal<Api::ncclGetErrorString>(state));
      }
    }
    if (cancel->load(std::memory_order_acquire)) {  // stopped before the rounds: none is issued
      for (Comm* c : ready) {
        c->noYali = "stopped (abort or revoke) before its set-up";
        c->setUpError.store(ncclRemoteError);
      }
      ready.clear();
    }
    useDeviceOf(ready);
    run(ready, cancel);
    // Release: the program's thread that sees the set-up done (ncclCommGetAsyncError,
    // refuseWhileSetUp) sees everything it wrote into the comms.
    for (Comm* c : comms) c->setUpPending.store(false, std::memory_order_release);
  });
}

// A rank that will not run YALI (a gate of its own) answers its peers' set-up from the background.
void answerNoWhenReady(const std::vector<Comm*>& comms) {
  whenReady(comms, [](const std::vector<Comm*>& ready, const std::atomic<bool>* cancel) { answerNo(ready, cancel); });
}

// The set-up of comms whose real communicators are ready, on every rank of each (collective over
// the real comm, like the init that made it):
//   1. allgather every rank's record (node, settings) and decide from them, the same everywhere;
//   2. the id round (IdMessage): rank 0 makes a YALI id, and an allreduce (min) gives it to every
//      rank with whether every rank is fine so far;
//   3. if so, every rank creates its YALI comm on the comm's device (one thread per rank here);
//   4. an allreduce (min) of "my YALI comm exists": unless every rank has one, nobody keeps it, so
//      that no rank ever routes a call to YALI while a peer routes it to NCCL.
// Which steps a comm takes depends only on what every rank of it knows alike (its size, the
// records), so its ranks issue the same real collectives; a rank whose own part fails (a CUDA call,
// yaliGetUniqueId, yaliCommInitRank, the status words) still takes part in them, saying "not ok" (a
// zeroed record, ok = 0, "no YALI comm"). What no rank can do is take part in a round it cannot
// know or has no comm for: a rank on which the records round failed, or the copy of its result,
// leaves the rounds after it, and one whose node split failed, its node's id round. Each means NCCL
// or CUDA failing on that rank (a copy from its own device memory fails when its CUDA context is
// broken), when its peers would wait for its NCCL calls anyway, as for a rank lost to NCCL. Each
// such wait ends at YALI_TIMEOUT_MS (realRound) with ncclRemoteError on the waiting ranks, and the
// rank that left reports ncclRemoteError too (leaveRounds). A rank that will not run YALI for a
// reason of its own (non-blocking, no libyali, ...) answers step 1 with "no" instead of skipping it
// (answerNo).
void setUpYali(const std::vector<Comm*>& comms, const std::atomic<bool>* cancel = nullptr) {
  std::vector<SetUp> setUps;
  for (Comm* c : comms) {
    // A comm of one rank has nothing to share; any other may be one node of 2 to 8 ranks, or
    // several nodes (the records tell).
    if (!describe(c) || (c->nranks < 2 && !yaliTakes(c->nranks, &c->noYali))) {
      announce(c);  // the same on every rank of it: no exchange at all
      continue;
    }
    SetUp s;
    s.comm = c;
    s.cancel = cancel;
    setUps.push_back(s);
  }
  if (setUps.empty()) return;  // before any CUDA call: a comm of one rank needs none
  if (yaliLib() == nullptr) {
    // Not necessarily the same on every rank (one node's installation, a libyali that fails to load
    // there): the rank still answers its peers' rounds, with a record that says no (answerNo).
    std::vector<Comm*> answering;
    for (SetUp& s : setUps) {
      s.comm->noYali = std::string("no libyali: ") + yaliLibError();
      answering.push_back(s.comm);
    }
    answerNo(answering, cancel);
    return;
  }

  DeviceGuard restoreDevice;
  const Settings& env = settings();
  const RankRecord mine = makeRecord(thisNodeIdentity(), env.disabled, env.registerYali);
  std::vector<SetUp*> all;
  for (SetUp& s : setUps) {
    const size_t n = static_cast<size_t>(s.comm->nranks);
    s.idOffset = n * sizeof(RankRecord);
    s.agreeOffset = s.idOffset + sizeof(IdMessage);
    const size_t bytes = s.agreeOffset + sizeof(int32_t);
    rt().cudaSetDevice(s.comm->device);
    cudaError_t err = rt().cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) s.stream = nullptr;  // the legacy stream, for the records round below
    if (err == cudaSuccess) err = allocScratch(s, bytes);
    if (err == cudaSuccess) {
      // A non-blocking comm, or one set up in the background (setUpYaliWhenReady, the only caller
      // that gives a cancel flag: NCCL made it in its background), says so: the hierarchical path
      // is not made for such comms (routing.h, RankRecord::nonBlocking).
      RankRecord record = mine;
      record.nonBlocking = !s.comm->blocking || cancel != nullptr ? 1 : 0;
      copyToDevice(s, s.comm->rank * sizeof(RankRecord), &record, sizeof(record));
    } else {
      s.scratch = nullptr;
      s.fail(cudaText("allocating the set-up's stream and scratch", err));
      if (!allocNotOkScratch(s, bytes)) {
        // Nothing left to take part with: its peers wait for it in the records round, as NCCL's own
        // calls do for a lost rank.
        warn(s.comm->rank, "communicator %p: %s, and no pinned host memory either: this rank cannot take part "
             "in libyali-nccl's set-up, and its peers wait for it in the set-up's first exchange",
             static_cast<void*>(s.comm), s.why.c_str());
        continue;
      }
    }
    all.push_back(&s);
  }

  // 1. Records. Every rank that can read them decides from them, whatever failed here before: the
  // verdict, and with it the rounds that follow, are then its peers'.
  realRound(all, "the set-up's allgather", "records", [](SetUp& s) {
    return callReal<Api::ncclAllGather>(s.scratch + s.comm->rank * sizeof(RankRecord), s.scratch,
                                        sizeof(RankRecord), ncclUint8, s.comm->real, s.stream);
  });
  std::vector<SetUp*> yes;  // from here on, only the comms whose records said yes
  for (SetUp* s : all) {
    std::vector<RankRecord> records(s->comm->nranks);
    // Cannot read them: leaves the later rounds (setUpYali's comment says why nothing else is left),
    // which its peers may take (leaveRounds). So does a rank whose round failed though its zeroed
    // record said no (hostScratch): that record may not have gone out, and its peers' records round
    // then waits for it.
    if (s->roundFailed ||
        (!s->hostScratch && !copyFromDevice(*s, records.data(), 0, records.size() * sizeof(RankRecord)))) {
      leaveRounds(*s, "the set-up's rounds after its records");
      continue;
    }
    if (s->hostScratch) continue;  // its zeroed record said no on every rank (allocNotOkScratch)
    s->verdict = decideSetUp(records);
    if (s->verdict.yali)
      yes.push_back(s);
    else
      s->fail(s->verdict.why);
  }

  // 1b. Several nodes: the node comm and the cross comm (NCCL splits of the real comm, collective
  // over it: every rank of a hierarchical comm takes part, each in one group per round).
  std::vector<SetUp*> splitting;
  for (SetUp* s : yes)
    if (s->hierarchical()) splitting.push_back(s);
  splitRound(splitting, "the node split", [](SplitKeys k) { return std::make_pair(k.nodeColor, k.nodeKey); },
             &SetUp::nodeComm);
  splitRound(splitting, "the cross split", [](SplitKeys k) { return std::make_pair(k.crossColor, k.crossKey); },
             &SetUp::crossComm);

  // 2. The id round (per node on a hierarchical comm). A rank whose node split failed (splitRound
  // failed it) has no node comm: it leaves its node's round, since an AllReduce on a null comm fails
  // NCCL's whole group (its CommCheck error is the group's), every other comm's round with it.
  // Its node's peers may take their round without it (leaveRounds): their wait ends at
  // YALI_TIMEOUT_MS, and their agreement then comes behind that stuck collective on their streams;
  // it takes no agreement either (step 4).
  std::vector<SetUp*> idRound;
  for (SetUp* s : yes) {
    if (s->idComm() != nullptr)
      idRound.push_back(s);
    else
      leaveRounds(*s, "its node's id round");
  }
  for (SetUp* s : idRound) {
    yaliUniqueId id;
    const bool root = s->yaliRank() == 0;
    bool made = false;
    if (root && s->alive) {
      rt().cudaSetDevice(s->comm->device);
      made = lib().yaliGetUniqueId(&id) == yaliSuccess;
      if (!made) s->fail(std::string("yaliGetUniqueId failed: ") + lib().yaliGetLastError(nullptr));
    }
    const IdMessage sent = idContribution(s->alive, root ? (made ? &id : nullptr) : nullptr);
    const IdMessage notOk = idContribution(false, nullptr);
    s->idSend = sendFrom(*s, s->idOffset, &sent, &notOk, sizeof(sent));
  }
  realRound(idRound, "the set-up's id round", "id", [](SetUp& s) {
    return callReal<Api::ncclAllReduce>(s.idSend, s.scratch + s.idOffset,
                                        sizeof(IdMessage) / sizeof(int32_t), ncclInt32, ncclMin, s.idComm(),
                                        s.stream);
  });
  std::vector<SetUp*> joining;  // every rank of the node was fine, and rank 0 made an id: YALI's init
  for (SetUp* s : idRound) {
    // Its own id round failed (NCCL refused its call or its group, or its stream reported an error):
    // its collective may not be queued while its peers' are, so it leaves the agreement too (on a
    // flat comm that round is the next on the same NCCL comm, where its agreement would meet a
    // peer's id round), and reports ncclRemoteError, as a rank out of any round its peers take.
    // (Review, Session 30: such a rank was told ncclSuccess, NCCL only.)
    if (s->roundFailed && !s->timedOut) leaveRounds(*s, "the set-up's agreement");
  }
  for (SetUp* s : idRound) {
    const bool read = !s->roundFailed && copyFromDevice(*s, &s->id, s->idOffset, sizeof(s->id));
    if (read && s->id.ok != 1)
      s->fail("rank 0 (of the node) could not make a YALI unique id, or the set-up failed on another rank "
              "(its log says why)");
    if (s->alive) joining.push_back(s);
  }

  // 3. The YALI comms, concurrently (each blocks until its peers have joined).
  forEachRank(joining.size(), [&](size_t i) {
    SetUp& s = *joining[i];
    rt().cudaSetDevice(s.comm->device);
    if (lib().yaliCommInitRank(&s.yali, s.yaliRanks(), s.id.id, s.yaliRank()) != yaliSuccess) {
      s.yali = nullptr;
      s.fail(std::string("yaliCommInitRank failed: ") + lib().yaliGetLastError(nullptr));
    }
  });

  // 3b. Several nodes: the cross-node status words.
  for (SetUp* s : joining)
    if (s->hierarchical() && s->yali != nullptr) makeCrossStatus(*s);

  // 4. Agreement: every rank whose records said yes and that left no round (leaveRounds), with or
  // without a YALI comm (the id round does not tell a rank that could not read it whether its peers
  // went on to YALI's init).
  // The result lands in pinned host memory (SetUp::agreeResult): after the round nothing is left
  // that could fail on this rank alone, so every rank reads the same word. A rank that cannot have
  // that memory says "no" here (a local failure before the round, which every rank then sees).
  // The word is also what the rank sends: `have` goes in with a plain store (NCCL reads it through
  // its device address once the collective runs) and the allreduce runs in place, so nothing is put
  // on s.stream before the collective and nothing waits on it: after a round that timed out the
  // stream holds that round's collective, which never completes until the comm is aborted, and a
  // copy into the scratch with its cudaStreamSynchronize (copyOnStream) would wait behind it for
  // ever (review: a rank whose id round timed out would hang here). Nor can a word left in a reused
  // scratch block (a pool block's last set-up: 1) be sent for this rank's.
  std::vector<SetUp*> agreeing;
  for (SetUp* s : yes) {
    // A rank out of an earlier round takes no later one (leaveRounds): its collectives on the comm
    // may be one short of its peers'. Its peers' agreement then ends at its deadline, with the error
    // this rank reports too.
    if (s->leftRounds) continue;
    void* word = nullptr;
    rt().cudaSetDevice(s->comm->device);
    if (rt().cudaHostAlloc(&word, sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
      s->agreeResult = static_cast<int32_t*>(word);
    } else {
      s->fail("no pinned host memory for the set-up's agreement");
    }
    // 0 on a rank whose earlier round timed out (it never reached YALI's init: no YALI comm).
    const int32_t have = s->yali != nullptr && s->agreeResult != nullptr ? 1 : 0;
    if (s->agreeResult != nullptr) {
      __atomic_store_n(s->agreeResult, have, __ATOMIC_RELEASE);
      s->agreeSend = reinterpret_cast<const char*>(s->agreeResult);
    } else if (!s->timedOut) {
      // Without the word: "no" through the scratch (its stream holds no collective left waiting).
      const int32_t none = 0;
      s->agreeSend = sendFrom(*s, s->agreeOffset, &have, &none, sizeof(have));
    } else {
      // Without the word, after a timed-out round: nothing to send "no" from without waiting behind
      // that round's collective. The rank leaves the agreement, whose peers' wait ends at
      // YALI_TIMEOUT_MS (ncclRemoteError); on a GPU they would wait for it anyway, as its agreement
      // could only run after the stuck collective on its stream.
      continue;
    }
    agreeing.push_back(s);
  }
  // The round waits twice YALI_TIMEOUT_MS, three times on a comm spanning several nodes: a peer may
  // come one YALI_TIMEOUT_MS late from a yaliCommInitRank that waited that long for a rank that did
  // not join (this one, if its id round timed out, or a third), after an id round it was itself up
  // to two late for. On a flat comm every rank waited in that id round with it (one round for all);
  // across nodes the id rounds are per node, so the other nodes' ranks reach the agreement at once
  // and wait the whole span. With one timeout, a peer late for the id round, or for the agreement
  // itself, split the ranks (Session 31, tests/gpu/ncclabi_setup_faults.py on an H200: the late rank
  // told ncclSuccess, its peer ncclRemoteError; after a late agreement the late rank kept YALI while
  // its peer had dropped it); with two on a multi-node comm, the other nodes' ranks gave up before a
  // late node peer came (review, Session 31).
  const bool acrossNodes =
      std::any_of(agreeing.begin(), agreeing.end(), [](const SetUp* s) { return s->hierarchical(); });
  realRound(
      agreeing, "the set-up's agreement", "agreement",
      [](SetUp& s) {
        return callReal<Api::ncclAllReduce>(s.agreeSend,
                                            s.agreeResult != nullptr ? static_cast<void*>(s.agreeResult)
                                                                     : static_cast<void*>(s.scratch + s.agreeOffset),
                                            1, ncclInt32, ncclMin, s.comm->real, s.stream);
      },
      acrossNodes ? 3 : 2);
  for (SetUp* s : agreeing) {
    // The agreement completed on a rank whose id round had timed out: its stream has drained
    // (waitForRound: cudaStreamQuery found nothing left on it), so the id round's collective, queued
    // on the same stream before the agreement's, completed too: the late peer made it. Nothing of
    // the set-up is left queued on the comm, and the rank's "no" (it has no YALI comm) decided
    // NCCL only for every rank: the comm is as a failed YALI init leaves it, without an error, as
    // its peers' (the late rank's init timed out waiting for this one, and it is told ncclSuccess).
    // Not where this rank left rounds (leaveRounds: its peers' collectives may still wait on the
    // comm), nor where a round's group was left in NCCL's background (it may still launch).
    if (!s->timedOut || s->roundFailed || s->leftRounds || s->leftInBackground) continue;
    s->timedOut = false;
    s->comm->setUpError.store(ncclSuccess);
    warn(s->comm->rank, "communicator %p: the set-up's agreement completed after its earlier round had timed out "
         "(a late peer): nothing of the set-up is left queued on the communicator, which is NCCL only, without an "
         "error", static_cast<void*>(s->comm));
  }
  for (SetUp* s : agreeing) {
    // Its own agreement failed (as its id round above): its "no" may never reach its peers, whose
    // round then ends at its deadline with ncclRemoteError; so does this rank's creating call.
    if (s->roundFailed && !s->timedOut) leaveRounds(*s, "the set-up's agreement");
  }
  for (SetUp* s : yes) {
    // A plain load: only where the round completed on this rank (its stream drained; realRound).
    if (!s->roundFailed && s->agreeResult != nullptr) s->agreed = __atomic_load_n(s->agreeResult, __ATOMIC_ACQUIRE);
    else s->agreed = 0;
    if (s->alive && s->agreed != 1) s->fail("YALI's set-up failed on another rank (its log says why)");
    if (!s->alive && s->yali != nullptr) {
      lib().yaliCommDestroy(s->yali);
      s->yali = nullptr;
    }
  }

  for (SetUp& s : setUps) {
    Comm* c = s.comm;
    if (s.yali != nullptr && s.hierarchical()) {
      Hierarchy* h = new Hierarchy;
      h->layout = s.verdict.layout;
      h->localRank = s.yaliRank();
      h->node = h->layout.nodeOf[c->rank];
      h->yali = s.yali;
      h->nodeComm = s.nodeComm;
      h->crossComm = s.crossComm;
      h->yaliFailure = s.yaliFailure;
      h->statusDevice = s.statusDevice;
      h->statusHost = s.statusHost;
      s.statusDevice = nullptr;
      s.statusHost = nullptr;
      c->hier = h;
      s.yali = nullptr;  // c->yali stays null: every other collective is flat NCCL
    } else if (s.timedOut) {
      // No hierarchy, after a round that timed out here: the set-up's stream holds that round's
      // collective until the comm is aborted, and NCCL's destroy of a split synchronizes its streams
      // (init.cc, commDestroySync: behind the id round's collective on the node comm, or the
      // parent's where the splits share its resources), as cudaFree and cudaFreeHost synchronize the
      // device: each would wait for ever. The splits are aborted (abort waits for nothing), except
      // where they share the comm's resources (Comm::sharesResources): they then share its abort
      // flag too, and with it that of the comm it was split from, if it shares that one's, so an
      // abort here would end the program's other, healthy comms' kernels (review, Session 31); they
      // are kept, never destroyed, and the program's abort of this comm, which its ncclRemoteError
      // asks for, ends their kernels through that flag. The status words are kept, never freed (two
      // and three words; nothing reads them: no hierarchy).
      if (!c->sharesResources) {
        if (s.crossComm != nullptr) callReal<Api::ncclCommAbort>(s.crossComm);
        if (s.nodeComm != nullptr) callReal<Api::ncclCommAbort>(s.nodeComm);
      }
      warn(c->rank, "communicator %p: the set-up's splits%s and cross-node status words behind its timed-out round "
           "are %s", static_cast<void*>(c), c->sharesResources ? " (sharing its resources)" : "",
           c->sharesResources ? "kept, never destroyed or freed" : "aborted, and the words kept, never freed");
      s.statusDevice = nullptr;
      s.statusHost = nullptr;
    } else {
      // No hierarchy after all (another rank failed): the splits go (made on every rank alike).
      if (s.crossComm != nullptr) callReal<Api::ncclCommDestroy>(s.crossComm);
      if (s.nodeComm != nullptr) callReal<Api::ncclCommDestroy>(s.nodeComm);
      freeCrossStatus(c->device, &s.statusDevice, &s.statusHost);
    }
    c->yali = s.yali;
    c->disabled = s.verdict.disabled;
    c->registerYali = s.yali != nullptr && s.verdict.registerYali;
    c->noYali = s.yali != nullptr || c->hier != nullptr ? "" : s.why;
    announce(c);
    releaseSetUp(s);
  }
}

// The set-up of non-blocking comms (or of comms whose creating group returned ncclInProgress), from a
// thread of its own once NCCL made them (whenReady): NCCL requires the program to wait for
// ncclCommGetAsyncError to leave ncclInProgress before it uses such a comm, and it says so until this
// set-up is done (Comm::setUpPending), so the set-up's rounds meet no call of the program's on the
// comm. The comms made in one creating call or group go together, in one thread: one thread may
// make several ranks' comms (one process driving several GPUs), whose rounds meet each other.
// Peers set up in their creating calls (blocking) meet these rounds as they meet any other. A
// failure is reported through ncclCommGetAsyncError (Comm::setUpError), where NCCL reports an init
// that failed in its background. Before (Session 32), such comms were NCCL only (answerNoWhenReady).
void setUpYaliWhenReady(const std::vector<Comm*>& comms) {
  for (Comm* c : comms)
    info(-1, "communicator %p: non-blocking: set up in the background once NCCL made it (ncclCommGetAsyncError "
         "says ncclInProgress until then)", static_cast<void*>(c));
  whenReady(comms, [](const std::vector<Comm*>& ready, const std::atomic<bool>* cancel) {
    // A comm whose init did not complete leaves its peers waiting in their records round: they end
    // it at YALI_TIMEOUT_MS with ncclRemoteError, as for a rank lost to NCCL.
    setUpYali(ready, cancel);
  });
}

// ncclCommInitAll's ranks all live here: no exchange is needed, and yaliCommInitAll makes all of
// them or none.
void setUpClique(const std::vector<Comm*>& comms) {
  const int n = static_cast<int>(comms.size());
  std::vector<int> devices;
  for (Comm* c : comms) {
    if (!describe(c)) {
      for (Comm* d : comms) d->noYali = c->noYali;
      for (Comm* d : comms) announce(d);
      return;
    }
    devices.push_back(c->device);
  }
  if (yaliLib() == nullptr) {
    for (Comm* c : comms) {
      c->noYali = std::string("no libyali: ") + yaliLibError();
      announce(c);
    }
    return;
  }
  DeviceGuard restoreDevice;
  const Settings& env = settings();
  std::vector<RankRecord> records(n, makeRecord(thisNodeIdentity(), env.disabled, env.registerYali));
  const SetUpVerdict verdict = decideSetUp(records);
  std::vector<yaliComm_t> yali(n, nullptr);
  std::string why = verdict.why;
  if (verdict.yali && lib().yaliCommInitAll(yali.data(), n, devices.data()) != yaliSuccess) {
    why = std::string("yaliCommInitAll failed: ") + lib().yaliGetLastError(nullptr);
    std::fill(yali.begin(), yali.end(), nullptr);
  }
  for (int i = 0; i < n; ++i) {
    comms[i]->yali = yali[i];
    comms[i]->disabled = verdict.disabled;
    comms[i]->registerYali = verdict.registerYali;
    comms[i]->noYali = yali[i] != nullptr ? "" : why;
    announce(comms[i]);
  }
}

// A non-blocking ncclCommInitAll's clique (or one made in a group that NCCL ended in its
// background), from a thread of its own once NCCL made every comm of it (whenReady): yaliCommInitAll
// makes all of them or none, so a clique of which a comm's init failed, or that was stopped by an
// abort or revoke, is NCCL only. Until the set-up is done each comm's ncclCommGetAsyncError says
// ncclInProgress, and calls on them are refused, as for any background set-up. (Before Session 33's
// change, such a clique was NCCL only.)
void setUpCliqueWhenReady(const std::vector<Comm*>& clique) {
  for (Comm* c : clique)
    info(-1, "communicator %p: a non-blocking ncclCommInitAll: set up in the background once NCCL made it "
         "(ncclCommGetAsyncError says ncclInProgress until then)", static_cast<void*>(c));
  const size_t n = clique.size();
  whenReady(clique, [n](const std::vector<Comm*>& ready, const std::atomic<bool>*) {
    if (ready.size() == n) {
      setUpClique(ready);
      return;
    }
    for (Comm* c : ready) {
      if (c->noYali.empty()) c->noYali = "a non-blocking ncclCommInitAll not made on every device";
      announce(c);
    }
  });
}

void registerWithYali(Registration* reg) {
  Comm* c = reg->comm;
  if (c->yali == nullptr) return;
  if (lib().yaliCommRegister(c->yali, reg->buff, reg->size, &reg->yali) != yaliSuccess) {
    // NCCL's registration stands; calls on the buffer take YALI's staged algorithms.
    info(c->rank, "yaliCommRegister(%p, %zu) failed, NCCL's registration only: %s", reg->buff, reg->size,
         lib().yaliGetLastError(c->yali));
    reg->yali = nullptr;
  }
}

// The YALI registrations a group deferred: each comm's in its order; comms of different ranks in
// parallel, since each registration waits for the peers' (ncclCommInitAll's do not wait: in order).
void registerDeferred(std::vector<Registration*> regs) {
  std::vector<Comm*> comms;
  for (Registration* r : regs)
    if (std::find(comms.begin(), comms.end(), r->comm) == comms.end()) comms.push_back(r->comm);
  auto registerAllOf = [&](Comm* c) {
    for (Registration* r : regs)
      if (r->comm == c) registerWithYali(r);
  };
  std::vector<Comm*> parallel;
  for (Comm* c : comms) {
    if (c->clique)
      registerAllOf(c);
    else
      parallel.push_back(c);
  }
  forEachRank(parallel.size(), [&](size_t i) { registerAllOf(parallel[i]); });
}

}  // namespace

// ---- Creation --------------------------------------------------------------------------------------

namespace {

// The backstop where our verdict on a parent (blocking) and NCCL's (non-blocking) could still differ
// (an environment plugin that ncclEnvPluginInUse did not see): a split with a color or a shrink
// whose child is still NULL once NCCL's call (outside a group) or the group's end returned may be
// one that NCCL still makes in its background, writing the child into c->real later. Such a Comm
// is never freed (a deliberate leak, logged), so that write can only land in memory of ours; the
// program keeps the NULL NCCL showed at that moment. Decided on what the calls returned, never on
// timing. Otherwise (no child was to come) the Comm is freed.
void dropChildless(Comm* c, bool childMayStillCome) {
  if (!childMayStillCome) {
    delete c;
    return;
  }
  c->noYali = "NCCL gave no child for a split or shrink that makes one";
  warn(-1, "communicator %p: NCCL returned no child for a split or shrink that makes one; kept "
       "allocated, never freed (NCCL may still write the child into it if it took the parent for "
       "non-blocking); the program's pointer is NULL", static_cast<void*>(c));
}

}  // namespace

void adopt(Comm* c, ncclResult_t result, ncclComm_t* out, bool childExpected) {
  // Read once, atomically: where NCCL runs a split in its background against our verdict on the
  // parent (dropChildless), its thread may write the child into c->real at any moment (a plain read
  // here was a data race: ThreadSanitizer, Session 35). What it sees decides below; a child written
  // after it is the case dropChildless keeps the Comm for.
  const bool made = __atomic_load_n(&c->real, __ATOMIC_ACQUIRE) != nullptr;
  // A split's or shrink's child made inside a group: NCCL writes it at the outermost ncclGroupEnd.
  const bool atGroupEnd = !made && result == ncclSuccess && tlsGroup.depth > 0;
  if (!made && !atGroupEnd) {  // NCCL failed and made nothing, or makes it in its background
    // NCCL can write a child later only after a call that did not fail (ncclSuccess, which a split
    // that NCCL finishes in its background returns, or ncclInProgress): a refused call (the parent
    // in error, a bad argument) made no job, so its Comm is freed, not kept.
    dropChildless(c, childExpected && (result == ncclSuccess || result == ncclInProgress));
    *out = nullptr;
    return;
  }
  // Each gate below is this rank's own (a config, a process's environment): its peers may well
  // run the set-up, whose first round is collective over the real comm. So a gated comm still
  // answers that round, with a record that says no (answerNo; Comm::background): every rank then
  // decides NCCL only for it. Where the real comm may not be ready yet, from a thread of its own
  // once it is (answerNoWhenReady); inside a group, after the group's end.
  bool gated = true;  // a gate of this rank's: it answers with "no"
  bool inBackground = false;  // a non-blocking comm, set up once NCCL made it (setUpYaliWhenReady)
  if (ncclEnvPluginInUse()) {
    c->noYali = "NCCL reads its settings through an environment plugin: NCCL only";
    info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(c), c->noYali.c_str());
  } else if (c->clique) {
    // ncclCommInitAll's comms that are not set up together (adoptClique): since 991b179, those NCCL
    // returned with ncclInProgress where we took them for blocking (intercept.cc, ncclCommInitAll).
    // Every rank is in this process, none answers a set-up (below): NCCL only.
    c->noYali = "NCCL's ncclCommInitAll returned ncclInProgress for communicators taken for blocking: NCCL only";
    info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(c), c->noYali.c_str());
  } else if (c->blocking && result == ncclInProgress) {
    // NCCL took it for non-blocking where we did not (a verdict of ours that differs from NCCL's).
    c->noYali = "NCCL's init returned ncclInProgress for a communicator taken for blocking";
    info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(c), c->noYali.c_str());
  } else if (result != ncclSuccess && result != ncclInProgress) {
    // No NCCL comm to answer on: its peers' rounds, if their inits succeeded, end at YALI_TIMEOUT_MS.
    c->noYali = "NCCL's init failed";
    gated = false;
  } else if (tlsGroup.depth > 0) {
    gated = false;
    tlsGroup.setUps.push_back(c);  // with the group's other comms: one thread may make several ranks
  } else if (!c->blocking && result == ncclInProgress) {
    // Its init goes on in NCCL's background: set up once NCCL is done. (A non-blocking comm that
    // NCCL returned with ncclSuccess is ready, and the program need not poll it, as a blocking
    // parent's split with a non-blocking child's config: set up here, below.)
    gated = false;
    inBackground = true;
  } else {
    gated = false;
    setUpYali({c});
  }
  // ncclCommInitAll's ranks are all in this process, none of them runs a set-up: nobody to answer.
  if (c->clique) gated = false;
  if (gated && tlsGroup.depth > 0) {
    tlsGroup.answers.push_back(c);  // answered once the group's end made its real comm (leaveGroup)
  } else if (gated && c->real != nullptr && result == ncclSuccess) {
    // NCCL's init returned ncclSuccess (a blocking one, or a non-blocking one NCCL finished): its
    // comm is ready, so the answer is made here, before the program gets the handle. From a thread
    // of its own (below) it would run beside the program, which need not poll a blocking comm
    // before its first collective: two threads on one NCCL comm, in an order that can differ
    // between ranks, one rank's collective meeting another's set-up round (review of 8f3bfe3,
    // Session 30: an environment plugin's blocking comms).
    answerNo({c});
  } else if (gated && c->real != nullptr) {
    answerNoWhenReady({c});
  }
  if (inBackground && c->real != nullptr) setUpYaliWhenReady({c});  // never a clique's (above)
  if (atGroupEnd) {
    tlsGroup.children.push_back({c, out, childExpected});
    *out = nullptr;  // as NCCL left it: NULL until the split completes
  } else {
    *out = handleOf(c);
  }
}

namespace {

// The hand-over's thread (handOverWhenWritten): NCCL's verdict on the children, their set-up,
// then the program's pointers. Stopped (cancel: an abort or revoke of a parent) before it wrote
// them, it leaves them to finishHandOver.
void handOver(const std::vector<Child>& kids, const std::vector<Comm*>& parents, const std::atomic<bool>* cancel,
              bool* handedOver) {
  const auto cancelled = [cancel] { return cancel->load(std::memory_order_acquire); };
  // NCCL's verdict on a child is its parent's asynchronous state, which NCCL sets once the child's
  // job ended (group.cc): NCCL never sets a split's child's own (init.cc leaves it ncclSuccess from
  // its allocation, a failure only in its initState). The parents are this thread's alone meanwhile
  // (the program's ncclCommGetAsyncError says ncclInProgress without asking NCCL, its other calls
  // are refused): this is the one thread that asks NCCL, and its call that finds the group done
  // completes NCCL's group job. The parents first, then the children: NCCL writes a child (at its
  // job's end) before it sets the parent's state, so a child still unwritten then is one NCCL will
  // not write (a job that returned early, or never ran: init.cc, ncclInitKernelsForDevice; group.cc,
  // a failed allocation or thread), whose parent reports NCCL's error. (Waiting for the children
  // first, as before, left such a parent in progress for good: a review of a5d1ad9.)
  std::vector<std::pair<Comm*, ncclResult_t>> verdicts;
  for (Comm* p : parents) {
    const ncclResult_t state = waitWhileInProgress(p->real, std::chrono::steady_clock::time_point::max(), cancel);
    if (state == ncclInProgress) return;  // stopped (cancel)
    verdicts.push_back({p, state});
  }
  std::vector<Comm*> ready;
  for (const Child& k : kids) {
    ncclResult_t state = ncclSuccess;
    for (const auto& v : verdicts)
      if (v.first == k.parent) state = v.second;
    // NCCL's store into `real` is atomic (release); so is this load.
    if (__atomic_load_n(&k.comm->real, __ATOMIC_ACQUIRE) == nullptr) {
      dropChildless(k.comm, true);  // kept, never freed; the program keeps NULL, as with NCCL alone
      continue;
    }
    if (state == ncclSuccess) {
      ready.push_back(k.comm);
      continue;
    }
    // No NCCL comm to take part in the rounds: its peers' rounds, if their children were made, end
    // at YALI_TIMEOUT_MS with ncclRemoteError. The program learns of the failure from the parent,
    // and from the child too (setUpError): NCCL never sets a split child's own state, so NCCL alone
    // says ncclSuccess for it while its calls fail (NCCL 2.28.9 on 2 H200s, Session 34: an
    // AllReduce returned ncclInvalidArgument, then NCCL's thread died), and a program that polls the
    // child, not the parent, would use it.
    k.comm->setUpError.store(state);
    k.comm->noYali = std::string("NCCL's init of the child failed (its parent reports ") +
                     callReal<Api::ncclGetErrorString>(state) + ")";
    info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(k.comm), k.comm->noYali.c_str());
  }
  if (cancelled()) return;
  useDeviceOf(ready);
  // Bounded as any set-up's rounds (YALI_TIMEOUT_MS), and stopped at once by a cancel, after which
  // the children are still handed over here: their comms are made. (A child whose config is
  // blocking may wait in NCCL's own calls of the rounds without a bound, as any blocking comm's
  // set-up can: NCCL_ABI.md, "What the bound does not cover".)
  setUpYali(ready, cancel);
  for (const Child& k : kids)
    if (__atomic_load_n(&k.comm->real, __ATOMIC_ACQUIRE) != nullptr)
      __atomic_store_n(k.out, handleOf(k.comm), __ATOMIC_RELEASE);
  *handedOver = true;
}

// The parents of a hand-over are ready again to the program (release: it then sees the children
// written).
void parentsReady(const std::vector<Comm*>& parents) {
  for (Comm* p : parents) p->setUpPending.store(false, std::memory_order_release);
}

// adoptWhenWritten's hand-over of `kids` (made by one call, or in one group: one thread may make
// several ranks' children, whose set-up rounds meet each other, so they are set up together), from
// a thread of its own that their parents hold (Comm::background: their abort or revoke stops it,
// their tear-down joins it), and during which their parents are in progress to the program.
void handOverWhenWritten(const std::vector<Child>& kids) {
  std::vector<Comm*> parents;
  try {  // nothing may leave an NCCL call: std::bad_alloc, std::system_error from the thread
    auto background = std::make_shared<BackgroundSetUp>();
    background->kids = kids;
    for (const Child& k : kids)
      if (std::find(parents.begin(), parents.end(), k.parent) == parents.end()) parents.push_back(k.parent);
    background->parents = parents;
    for (Comm* p : parents) {
      // Its own set-up's thread, or an earlier hand-over's, is over: a split or shrink of a comm in
      // progress is refused (a shrink with NCCL_SHRINK_ABORT too, while a hand-over runs).
      waitForSetUp(p);
      p->setUpPending.store(true);
      setBackground(p, background);
    }
    const std::atomic<bool>* cancel = &background->cancel;
    bool* handedOver = &background->handedOver;
    background->thread = std::thread([kids, parents, cancel, handedOver] {
      handOver(kids, parents, cancel, handedOver);
      // Stopped before it handed them over, the parents stay in progress until the abort or revoke
      // that stopped it hands the children over (finishHandOver): a parent says ncclSuccess only
      // with its child written, as NCCL's does.
      if (*handedOver) parentsReady(parents);
    });
  } catch (...) {
    // No thread: the children stay NCCL's to write into Comms never freed; the program keeps NULL
    // (a program polling the parent to ncclSuccess, then its pointer, sees no child: logged).
    warn(-1, "a non-blocking parent's split or shrink: no thread to hand its child over: the program's "
         "pointer stays NULL");
    for (const Child& k : kids) dropChildless(k.comm, true);
    for (Comm* p : parents) {
      std::shared_ptr<BackgroundSetUp> b = backgroundOf(p);
      if (b != nullptr && !b->thread.joinable()) b->kids.clear();  // the one made here, without a thread
    }
    parentsReady(parents);
  }
}

}  // namespace

void adoptWhenWritten(Comm* c, ncclComm_t* out, Comm* parent) {
  *out = nullptr;
  info(-1, "communicator %p: a non-blocking parent's child: handed over once NCCL wrote it and its set-up "
       "ended (the parent says ncclInProgress until then)", static_cast<void*>(c));
  Child k{c, out, true, parent};
  if (tlsGroup.depth > 0)
    tlsGroup.written.push_back(k);  // its job runs at the outermost ncclGroupEnd
  else
    handOverWhenWritten({k});
}

void finishHandOver(Comm* parent) {
  std::shared_ptr<BackgroundSetUp> b = backgroundOf(parent);
  if (b == nullptr || b->kids.empty()) return;
  // Once, whichever of its parents' aborts or revokes comes first (they may run on several threads).
  std::call_once(b->finished, [&] {
    waitForSetUp(parent);  // joined already by the caller; the fields are read after the join
    if (b->handedOver) return;
    b->handedOver = true;
    for (const Child& k : b->kids) {
      if (__atomic_load_n(&k.comm->real, __ATOMIC_ACQUIRE) == nullptr) {
        // NCCL's abort and revoke join the child's job, so this is a child NCCL never wrote (or a
        // revoke NCCL refused, which joined nothing: refused here first where we know NCCL will):
        // kept, since NCCL may still write it; the program keeps NULL.
        dropChildless(k.comm, true);
        continue;
      }
      // NCCL made the child: the program gets it, NCCL only, with the error a comm whose set-up was
      // stopped reports (its peers may be in their rounds).
      k.comm->setUpError.store(ncclRemoteError);
      try {  // nothing may leave ncclCommAbort or ncclCommRevoke (std::bad_alloc)
        k.comm->noYali = "its parent was aborted or revoked before the child's set-up";
        info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(k.comm), k.comm->noYali.c_str());
      } catch (...) {
      }
      __atomic_store_n(k.out, handleOf(k.comm), __ATOMIC_RELEASE);
    }
    parentsReady(b->parents);
  });
}

bool handOverPending(const Comm* c) {
  std::shared_ptr<BackgroundSetUp> b = backgroundOf(c);
  return b != nullptr && !b->kids.empty() && c->setUpPending.load(std::memory_order_acquire);
}

void adoptClique(ncclComm_t* comms, int n, const int* devlist, ncclResult_t result, bool blocking) {
  (void)devlist;  // the devices are read back from NCCL's comms
  std::vector<Comm*> clique;
  for (int i = 0; i < n; ++i) {
    Comm* c = new Comm;
    c->real = comms[i];
    c->clique = true;
    // Not `result != ncclInProgress`: a non-blocking clique made inside a group was then marked
    // blocking, and its splits (NULL config: non-blocking, as NCCL makes them) lost their children,
    // NCCL writing them after the split returned (a review of 991b179).
    c->blocking = blocking;
    c->sharesResources = sharesResources(nullptr, false);  // no config: NCCL's default, or the variable
    comms[i] = handleOf(c);
    clique.push_back(c);
  }
  if (tlsGroup.depth > 0)
    tlsGroup.cliques.push_back(clique);
  else if (result == ncclInProgress)
    setUpCliqueWhenReady(clique);
  else
    setUpClique(clique);
}

// ---- Groups ----------------------------------------------------------------------------------------

void enterGroup() { ++tlsGroup.depth; }

bool inGroup() { return tlsGroup.depth > 0; }

bool atOutermostGroupEnd() { return tlsGroup.depth == 1; }

void stageUntilGroupEnd(const StagedCall& s) { tlsGroup.staged.push_back(s); }

void noteAsyncFailure(Comm* c, ncclResult_t r, const char* message) {
  const char* const prefix = "libyali-nccl: ";  // shimFail's, which the report adds again
  if (message != nullptr && strncmp(message, prefix, strlen(prefix)) == 0) message += strlen(prefix);
  std::lock_guard<std::mutex> lock(c->mutex);
  if (c->asyncFailure != ncclSuccess) return;
  c->asyncFailure = r;
  c->asyncFailureMessage = message != nullptr ? message : "";
}

ncclResult_t asyncFailureOf(Comm* c, std::string* message) {
  std::lock_guard<std::mutex> lock(c->mutex);
  *message = c->asyncFailureMessage;
  return c->asyncFailure;
}

namespace {

// Frees a staged call's memory now, without a stream: once the event behind its copy in has
// completed (cudaFree does not wait for work on memory from cudaMallocAsync). For memory that no
// launch of the call uses: nothing of it was launched, or the launch's users (a captured graph) are
// gone with the comm.
void freeStagingAfterCopyIn(int device, void* memory, cudaEvent_t copiedIn) {
  DeviceGuard onDevice(device);
  if (copiedIn != nullptr) {
    rt().cudaEventSynchronize(copiedIn);
    rt().cudaEventDestroy(copiedIn);
  }
  if (memory != nullptr) rt().cudaFree(memory);
}

// The staged calls of a group at its outermost end (comm.h, StagedCall; intercept.cc,
// stageInGroup), after yaliGroupEnd (or yaliGroupSimulateEnd) and NCCL's end returned. Each one's
// output is copied back into the program's recvbuff, then its memory freed, both on the call's
// stream: yaliGroupEnd enqueued the group's YALI calls on their streams before it returned, so
// stream order puts the copy back after the staged call's kernel, and the free after the copy back
// (and after whatever of the group's launch used the memory, launched or not). No host wait.
//  - Nothing is copied back where nothing was launched (`launched` false: a simulated end, or
//    yaliGroupEnd failed: the program learns that the group failed), nor for a comm whose YALI side
//    ended inside the group (an abort: libyali dropped or refused its queued call). The memory is
//    freed all the same: in stream order after anything on the stream, that is safe. A comm freed
//    inside the group freed its calls' memory then (freeComm).
//  - A stream that is being captured now began a capture after the call (stageInGroup stages no
//    call made in a capture; one whose capture status cannot be read counts as captured). A free on
//    it would be captured, not run (and CUDA frees only a graph's own allocations in a capture), so
//    the memory is kept with the comm and freed by its destroy (releaseMemory), after the event
//    behind its copy in. Nothing is copied back either (that copy too would be captured). Where
//    yaliGroupEnd launched the call, its kernel went into that capture, whose graph reads the
//    memory at every replay and whose output this rank never gets: ncclInvalidUsage (make the call
//    inside the capture, or end the group before the capture begins). Where nothing of it was
//    launched (a simulated end, say), nothing is wrong: no error. (Before a review's finding C,
//    Session 28, the memory was never freed, and a simulated end returned ncclInvalidUsage too.)
// Where nothing was staged (always, without libyali: no comm has YALI then) no CUDA call is made at
// all: there is no runtime to call (yali_lib.h). Returns the first failure, else ncclSuccess.
ncclResult_t finishStagedCalls(const std::vector<StagedCall>& staged, bool launched, bool inProgress) {
  if (staged.empty()) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  const StagedCall* current = nullptr;
  // A failure of the current call: the group's result, and, where NCCL ended the group in the
  // background, its comm's asynchronous error too (leaveGroup, noteAsyncFailure).
  auto note = [&](ncclResult_t r) {
    if (result == ncclSuccess) result = r;
    if (inProgress && current->comm != nullptr) noteAsyncFailure(current->comm, r, shimLastError());
  };
  for (const StagedCall& s : staged) {
    if (s.memory == nullptr) continue;  // its comm was freed inside the group, and its memory then
    current = &s;
    DeviceGuard onCommDevice(s.device);  // stream 0 is the current device's legacy stream
    const int rank = s.comm != nullptr ? s.comm->rank : -1;
    const bool ran = launched && s.comm != nullptr && s.comm->yali == s.yali && s.yali != nullptr;
    bool unreadable = false;
    if (mayBeCaptured(s.stream, &unreadable)) {
      {
        std::lock_guard<std::mutex> lock(s.comm->mutex);
        s.comm->keptStaging.push_back({s.memory, s.copiedIn});
      }
      const char* unread = unreadable ? " (its capture status could not be read)" : "";
      if (ran) {
        note(shimFail(ncclInvalidUsage,
                      "%s: stream=%p began a CUDA graph capture between this call, staged inside "
                      "ncclGroupStart/End (YALI refused this rank's buffers), and the group's end%s: YALI's launch "
                      "of it went into the capture and its output was not copied back; its staging memory %p is "
                      "kept for the capture until the communicator's destroy. Make the call inside the capture, "
                      "or end the group before the capture begins",
                      s.function, static_cast<void*>(s.stream), unread, s.memory));
        warn(rank, "%s", shimLastError());
      } else {
        info(rank,
             "%s: staged inside ncclGroupStart/End, nothing of it launched (%s); stream=%p began a capture since "
             "the call%s, so its staging memory %p cannot be freed there: freed by the communicator's destroy",
             s.function, !launched ? "the group was simulated or failed" : "the comm's YALI side ended inside the group",
             static_cast<void*>(s.stream), unread, s.memory);
      }
      continue;
    }
    if (ran && s.recvBytes > 0) {
      const cudaError_t err =
          rt().cudaMemcpyAsync(s.recv, s.output, s.recvBytes, cudaMemcpyDefault, s.stream);
      if (err != cudaSuccess)
        note(shimFail(ncclInvalidArgument,
                      "%s: staged inside ncclGroupStart/End, and copying its output from the staging memory into "
                      "recvbuff at the group's end failed (%zu bytes, from %p to %p): %s",
                      s.function, s.recvBytes, s.output, s.recv, rt().cudaGetErrorString(err)));
    } else if (!ran) {
      info(rank, "%s: staged inside ncclGroupStart/End: nothing copied back (%s)", s.function,
           !launched ? "the group was simulated or failed" : "the comm's YALI side ended inside the group");
    }
    const cudaError_t freed = rt().cudaFreeAsync(s.memory, s.stream);
    if (freed != cudaSuccess)
      info(rank, "%s: freeing the staging memory at the group's end failed (%s): %p is leaked", s.function,
           rt().cudaGetErrorString(freed), s.memory);
    if (s.copiedIn != nullptr) rt().cudaEventDestroy(s.copiedIn);
  }
  return result;
}

}  // namespace

void cancelSetUp(Comm* c) {
  std::shared_ptr<BackgroundSetUp> b = backgroundOf(c);
  if (b != nullptr) b->cancel.store(true, std::memory_order_release);
}

void waitForSetUp(Comm* c) {
  std::shared_ptr<BackgroundSetUp> b = backgroundOf(c);
  if (b == nullptr) return;
  std::call_once(b->joined, [&b] {
    if (b->thread.joinable()) b->thread.join();
  });
}

ncclResult_t leaveGroup(bool realGroupSucceeded, bool launched, bool inProgress) {
  if (tlsGroup.depth == 0 || --tlsGroup.depth > 0) return ncclSuccess;
  std::vector<Child> children;
  std::vector<Comm*> setUps;
  std::vector<std::vector<Comm*>> cliques;
  std::vector<Registration*> registrations;
  std::vector<Deregistration> deregistrations;
  std::vector<StagedCall> staged;
  std::vector<Comm*> answers;
  std::vector<Child> written;
  std::swap(answers, tlsGroup.answers);
  std::swap(written, tlsGroup.written);
  std::swap(children, tlsGroup.children);
  std::swap(setUps, tlsGroup.setUps);
  std::swap(cliques, tlsGroup.cliques);
  std::swap(registrations, tlsGroup.registrations);
  std::swap(deregistrations, tlsGroup.deregistrations);
  std::swap(staged, tlsGroup.staged);
  // First, right behind the group's launches on the calls' streams.
  const ncclResult_t result = finishStagedCalls(staged, launched, inProgress);
  // The real group has ended, and with it the init jobs of the splits and shrinks made in it: NCCL
  // wrote each child into its Comm (even one whose init failed), or nothing (a group that failed
  // before their jobs ran). The program gets our handle where NCCL made a comm,
  // and keeps the NULL it was given otherwise, as with NCCL alone. A Comm that expected a child
  // and got none is kept, never freed (dropChildless; adopt says why).
  for (const Child& k : children) {
    if (k.comm->real != nullptr) {
      *k.out = handleOf(k.comm);
      continue;
    }
    setUps.erase(std::remove(setUps.begin(), setUps.end(), k.comm), setUps.end());
    answers.erase(std::remove(answers.begin(), answers.end(), k.comm), answers.end());
    dropChildless(k.comm, k.childExpected);
  }
  ncclResult_t setUpResult = ncclSuccess;
  std::vector<Comm*> inBackground;  // set up once NCCL made them (setUpYaliWhenReady)
  if (!realGroupSucceeded) {
    // The comms made in a failed group may not exist on every rank: none of them gets YALI, nor
    // does a clique whose group returned ncclInProgress.
    std::vector<Comm*> nccl = inProgress ? std::vector<Comm*>() : setUps;
    if (!inProgress)
      for (auto& clique : cliques) nccl.insert(nccl.end(), clique.begin(), clique.end());
    for (Comm* c : nccl) {
      c->noYali = inProgress ? "the group that made it returned ncclInProgress (non-blocking)"
                             : "the group that made it failed";
      info(-1, "communicator %p: NCCL only (%s)", static_cast<void*>(c), c->noYali.c_str());
    }
    // A group that returned ncclInProgress made its comms in NCCL's background: they are set up
    // once NCCL is done, together (one thread may have made several ranks), as their peers, whose
    // groups may have returned ncclSuccess, set up theirs in the group's end. Before (Session 32),
    // each answered the set-up with "no" then.
    if (inProgress) {
      inBackground = setUps;
      for (auto& clique : cliques) setUpCliqueWhenReady(clique);  // (NCCL only before Session 33)
    } else {
      answers.clear();  // a failed group: no NCCL comm to answer on (peers: YALI_TIMEOUT_MS)
    }
  } else {
    // The group's end returned ncclSuccess: NCCL made its comms, non-blocking ones too (NCCL returns
    // ncclInProgress while any is under way), and the program need not poll them: set up here.
    if (!setUps.empty()) setUpYali(setUps);
    for (auto& clique : cliques) setUpClique(clique);
    for (Comm* c : setUps)
      if (setUpResult == ncclSuccess) setUpResult = static_cast<ncclResult_t>(c->setUpError.load());
  }
  inBackground.erase(std::remove_if(inBackground.begin(), inBackground.end(), [](Comm* c) { return c->real == nullptr; }),
                     inBackground.end());
  setUpYaliWhenReady(inBackground);
  // Non-blocking parents' children (adoptWhenWritten): NCCL ends such a group in its background
  // (ncclInProgress) and writes each child at the end of its init job. A group that failed before
  // its jobs ran writes none: those Comms are kept, never freed (dropChildless), and the program
  // keeps its NULL, as with NCCL alone.
  if (!written.empty()) {
    if (realGroupSucceeded || inProgress)
      handOverWhenWritten(written);
    else
      for (const Child& k : written) dropChildless(k.comm, true);
  }
  answers.erase(std::remove_if(answers.begin(), answers.end(), [](Comm* c) { return c->real == nullptr; }),
                answers.end());
  // Where the group's end succeeded (ncclSuccess), NCCL made its comms, non-blocking ones too: they
  // are answered here, before the group's end returns (adopt says why not from a thread); where it
  // returned ncclInProgress, once NCCL says they are made.
  std::vector<Comm*> readyNow, later;
  for (Comm* c : answers) (realGroupSucceeded ? readyNow : later).push_back(c);
  answerNo(readyNow);
  answerNoWhenReady(later);
  if (!registrations.empty()) registerDeferred(registrations);
  // After YALI's group end (endGroup ran it before this): its calls that used the buffers launched.
  for (const Deregistration& d : deregistrations)
    if (lib().yaliCommDeregister(d.yali, d.handle) != yaliSuccess)
      info(d.rank, "yaliCommDeregister at the group's end failed: %s", lib().yaliGetLastError(d.yali));
  return result != ncclSuccess ? result : setUpResult;
}

// ---- Registration -----------------------------------------------------------------------------------

ncclResult_t registerBuffer(Comm* c, void* buff, size_t size, void** handle) {
  if (handle == nullptr) return callReal<Api::ncclCommRegister>(c->real, buff, size, handle);
  void* realHandle = nullptr;
  const ncclResult_t r = callReal<Api::ncclCommRegister>(c->real, buff, size, &realHandle);
  if (r != ncclSuccess) return r;
  auto* reg = new Registration;
  reg->comm = c;
  reg->real = realHandle;
  reg->buff = buff;
  reg->size = size;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    c->registrations.push_back(reg);
  }
  if (c->yali != nullptr && c->registerYali) {
    if (tlsGroup.depth > 0)
      tlsGroup.registrations.push_back(reg);
    else
      registerWithYali(reg);
  }
  *handle = reg;
  return ncclSuccess;
}

ncclResult_t deregisterBuffer(Comm* c, Registration* reg) {
  // NCCL's first: where NCCL refuses, nothing is touched (NCCL frees nothing then), so the handle
  // stays whole, YALI's registration with NCCL's, for a retry or for the comm's destroy. Except
  // where NCCL's comm is gone (ncclCommAbort, or a destroy whose YALI side failed: c->real is NULL,
  // and NCCL refuses every deregistration): its registrations went with it, YALI's comm too
  // (endYali), and the handle is freed here, since a program whose watchdog aborted the comm may
  // never destroy it. The call then succeeds (nothing is left to deregister): an error would invite
  // the program to keep or retry a handle that no longer exists.
  if (c->real != nullptr) {  // (NCCL's CommCheck would refuse a NULL comm, with a warning each time)
    const ncclResult_t r = callReal<Api::ncclCommDeregister>(c->real, reg->real);
    if (r != ncclSuccess) return r;
  }
  auto& deferred = tlsGroup.registrations;
  deferred.erase(std::remove(deferred.begin(), deferred.end(), reg), deferred.end());
  if (reg->yali != nullptr && c->yali != nullptr) {
    if (tlsGroup.depth > 0) {
      // A YALI call of this group may use it: such a call launches at the group's end, through the
      // registration, and yaliCommDeregister refuses it until then. So YALI's part waits for the
      // group's end (leaveGroup).
      tlsGroup.deregistrations.push_back({c->yali, reg->yali, c->rank});
    } else if (lib().yaliCommDeregister(c->yali, reg->yali) != yaliSuccess) {
      info(c->rank, "yaliCommDeregister failed: %s", lib().yaliGetLastError(c->yali));
    }
  }
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    auto& regs = c->registrations;
    regs.erase(std::remove(regs.begin(), regs.end(), reg), regs.end());
  }
  reg->magic = 0;
  delete reg;
  return ncclSuccess;
}

// ---- Tear-down --------------------------------------------------------------------------------------

namespace {

// yaliCommAbort or yaliCommDestroy of y, which endYali and endHierarchy have just taken off the comm.
ncclResult_t endYaliComm(const Comm* c, yaliComm_t y, bool abort) {
  const yaliResult_t r = abort ? lib().yaliCommAbort(y) : lib().yaliCommDestroy(y);
  if (r == yaliSuccess) return ncclSuccess;
  info(c->rank, "%s failed: %s", abort ? "yaliCommAbort" : "yaliCommDestroy", lib().yaliGetLastError(nullptr));
  if (abort) return ncclSuccess;
  noteFailure(Failure::kYali);
  return toNcclResult(r);
}

// Frees s's buffers and its event (nothing of the comm runs any more; cudaFree waits for the
// device).
void releaseScratch(Comm* c, Scratch* s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->buffer != nullptr) s->outgrown.push_back(s->buffer);
  if (!s->outgrown.empty() || s->events[0] != nullptr || s->events[1] != nullptr || s->serial != nullptr) {
    DeviceGuard restore(c->device);
    for (void* p : s->outgrown) rt().cudaFree(p);
    for (cudaEvent_t& e : s->events)
      if (e != nullptr) rt().cudaEventDestroy(e);
    if (s->serial != nullptr) rt().cudaEventDestroy(s->serial);
  }
  s->outgrown.clear();
  s->buffer = nullptr;
  s->bytes = 0;
  for (cudaEvent_t& e : s->events) e = nullptr;
  s->serial = nullptr;
  s->everCaptured = false;
}

// The comm's device memory: the staging scratch, the staging memory of grouped calls kept because
// their stream was captured at the group's end (Comm::keptStaging), and a hierarchy's scratch and
// cross-node status words. Freed by freeComm alone, the last step of ncclCommDestroy: by then NCCL's destroy of
// every comm that touched them has returned (the real comm, whose flat tail of a staged
// hierarchical AllReduce uses the staging scratch, and the splits), YALI's comm is destroyed (its
// calls waited for) or aborted (its launches touch nothing), and what is left, our copies queued
// on the program's streams, cudaFree and cudaFreeHost wait for before they release anything.
//
// Never at an abort (ncclCommAbort, Revoke, Shrink with NCCL_SHRINK_ABORT), although a program that
// aborts a comm (torch's watchdog) usually never destroys it, so that an aborted comm keeps them,
// as it keeps the Comm, until a destroy of its handle (accepted after an abort):
//  - cudaFree and cudaFreeHost wait for the work queued on the device, and an abort must wait for
//    no kernel: a watchdog that aborts its comms one by one would hang on a kernel of a comm it has
//    not aborted yet, stuck on a dead peer;
//  - our copies into the status words and the scratches (cudaMemcpyAsync on the program's streams,
//    also recorded in captured graphs) obey no abort flag: queued behind a stuck kernel, they run
//    after the abort returned, and would write freed memory, perhaps another allocation's by then;
//  - a thread racing with the abort (a call in flight, ncclCommGetAsyncError reading the host
//    word) may still be using them, which is why the Comm is kept too.
void releaseMemory(Comm* c) {
  std::vector<Comm::KeptStaging> kept;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    std::swap(kept, c->keptStaging);
  }
  for (const Comm::KeptStaging& k : kept) freeStagingAfterCopyIn(c->device, k.memory, k.copiedIn);
  releaseScratch(c, &c->staging);
  Hierarchy* h = c->hier;
  if (h == nullptr) return;
  releaseScratch(c, &h->scratch);
  DeviceGuard restore;
  freeCrossStatus(c->device, &h->statusDevice, &h->statusHost);
  h->yaliFailure = nullptr;
}

}  // namespace

ncclResult_t endYali(Comm* c, bool abort, const char* why) {
  yaliComm_t y = c->yali;
  if (y == nullptr) return ncclSuccess;
  // Only the pointer changes: an abort may run while another thread routes a call on the comm (it
  // then calls YALI with a handle that YALI refuses as stale, or NCCL). noYali stays as it was.
  c->yali = nullptr;
  info(c->rank, "YALI communicator %s", why);
  return endYaliComm(c, y, abort);
}

ncclResult_t abortTogether(const std::vector<ncclComm_t>& splits, const std::function<ncclResult_t()>& last,
                           bool together) {
  if (!together) {
    for (ncclComm_t split : splits) callReal<Api::ncclCommAbort>(split);
    return last();
  }
  std::vector<std::thread> threads;
  // Joined whatever happens below (a std::thread destroyed unjoined ends the process).
  struct JoinAll {
    std::vector<std::thread>& threads;
    ~JoinAll() {
      for (std::thread& t : threads)
        if (t.joinable()) t.join();
    }
  } joinAll{threads};
  try {
    threads.reserve(splits.size());
  } catch (...) {
  }
  for (ncclComm_t split : splits) {
    try {
      threads.emplace_back([split] { callReal<Api::ncclCommAbort>(split); });
    } catch (...) {
      callReal<Api::ncclCommAbort>(split);  // no thread to be had: one after the other, as before
    }
  }
  return last();
}

ncclResult_t endHierarchy(Comm* c, bool abort, bool finalizeOnly, const char* why, std::vector<ncclComm_t>* toAbort) {
  Hierarchy* h = c->hier;
  if (h == nullptr) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  Failure failed = Failure::kNone;  // whose failure `result` is, noted again at the end
  // As endYali: only the pointer changes first, so that a call racing with an abort sees null and
  // takes flat NCCL (or calls YALI with a handle it refuses as stale).
  yaliComm_t y = h->yali;
  h->yali = nullptr;
  if (y != nullptr) {
    info(c->rank, "hierarchical path %s (node YALI communicator first)", why);
    result = endYaliComm(c, y, abort);
    if (result != ncclSuccess) failed = Failure::kYali;
  }
  for (ncclComm_t* split : {&h->crossComm, &h->nodeComm}) {
    if (*split == nullptr) continue;
    if (abort) {
      // Off the comm first (a call racing with the abort takes flat NCCL), aborted by the caller
      // together with the real comm (abortTogether).
      const ncclComm_t s = std::exchange(*split, nullptr);
      if (toAbort != nullptr) toAbort->push_back(s);
      else callReal<Api::ncclCommAbort>(s);
      continue;
    }
    // Finalized: destroyed with the comm. A split NCCL did not destroy stays, for the comm's abort.
    const ncclResult_t r =
        finalizeOnly ? callReal<Api::ncclCommFinalize>(*split) : callReal<Api::ncclCommDestroy>(*split);
    if (r == ncclSuccess && !finalizeOnly) *split = nullptr;
    if (r != ncclSuccess && result == ncclSuccess) {
      result = r;
      failed = Failure::kNccl;
    }
  }
  if (result != ncclSuccess) noteFailure(failed);
  return result;  // the scratch and the status words stay until freeComm (releaseMemory)
}

void* scratchOf(Comm* c, Scratch* s, size_t bytes, bool mayGrow, cudaError_t* err) {
  std::lock_guard<std::mutex> lock(s->mutex);
  *err = cudaSuccess;
  if (bytes <= s->bytes) return s->buffer;
  if (!mayGrow) {
    *err = cudaErrorStreamCaptureUnsupported;
    return nullptr;
  }
  // At least double: a program whose sizes grow step by step allocates log(size) times, and the
  // outgrown buffers (kept, comm.h says why) add up to less than the last one. An agreed size grows
  // first, whatever cudaMalloc says (comm.h); a rank whose earlier growth failed tries it again.
  // Where the doubled (or agreed) size cannot be had, the call's own need is tried: one failed
  // growth, of a huge call say, must not fail every later call.
  size_t grown = std::max(bytes, 2 * s->bytes);
  if (s->agreedSize) {
    if (bytes > s->agreed) s->agreed = std::max(bytes, 2 * s->agreed);
    grown = s->agreed;
  }
  void* p = nullptr;
  DeviceGuard restore(c->device);
  const bool clean = rt().cudaPeekAtLastError() == cudaSuccess;  // the program's last error, before ours
  *err = rt().cudaMalloc(&p, grown);
  if (*err != cudaSuccess && grown > bytes) {
    grown = bytes;
    *err = rt().cudaMalloc(&p, grown);
    // The first try's error is ours and came to nothing: the program's next cudaGetLastError must
    // not report it (PyTorch checks it after its kernels).
    if (*err == cudaSuccess && clean) rt().cudaGetLastError();
  }
  if (*err != cudaSuccess) return nullptr;
  info(c->rank, "%s: %zu bytes", s->name, grown);
  if (s->buffer != nullptr) s->outgrown.push_back(s->buffer);
  s->buffer = p;
  s->bytes = grown;
  return p;
}

size_t scratchBytes(Scratch* s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->agreedSize ? s->agreed : s->bytes;
}

namespace {

// cudaStreamGetCaptureInfo through libyali's runtime, with the parameters after the capture id
// (they differ between CUDA releases) left null.
template <typename... Rest>
cudaError_t captureInfo(cudaError_t (*get)(cudaStream_t, cudaStreamCaptureStatus*, unsigned long long*, Rest...),
                        cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id) {
  return get(stream, status, id, Rest{}...);
}

}  // namespace

bool captureIdOf(cudaStream_t stream, unsigned long long* id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  *id = 0;
  if (captureInfo(rt().cudaStreamGetCaptureInfo, stream, &status, id) != cudaSuccess) {
    rt().cudaGetLastError();
    return false;
  }
  if (status == cudaStreamCaptureStatusNone) *id = 0;
  return status != cudaStreamCaptureStatusInvalidated;
}

ncclResult_t scratchContext(const char* function, cudaStream_t stream, unsigned long long* context) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaError_t err = captureInfo(rt().cudaStreamGetCaptureInfo, stream, &status, &id);
  if (err != cudaSuccess)
    return shimFail(ncclInvalidArgument, "%s: stream=%p: cudaStreamGetCaptureInfo failed: %s", function,
                    static_cast<void*>(stream), rt().cudaGetErrorString(err));
  *context = status == cudaStreamCaptureStatusNone ? 0 : id;
  return ncclSuccess;
}

ncclResult_t scratchBefore(Comm* c, Scratch* s, const char* function, cudaStream_t stream,
                           unsigned long long context) {
  std::lock_guard<std::mutex> lock(s->mutex);
  const StreamOrder::Before b = s->order.before(stream, context);
  // b.record, not b.recordOn != nullptr: the last user's stream may be the default stream (0), and
  // skipping its record left the wait below without a recorded event (no order, or a failed wait).
  cudaEvent_t& event = s->events[b.slot];
  // Made at the context's first change of stream, or at its first user on cudaStreamPerThread,
  // which scratchUsed marks at once (StreamOrder::after).
  if ((b.record || StreamOrder::perThread(stream)) && event == nullptr) {
    DeviceGuard restore(c->device);
    const cudaError_t err = rt().cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      event = nullptr;
      return shimFail(ncclUnhandledCudaError, "%s: the %s's event: cudaEventCreateWithFlags: %s", function, s->name,
                      rt().cudaGetErrorString(err));
    }
  }
  if (b.record) {
    const cudaError_t err = rt().cudaEventRecord(event, static_cast<cudaStream_t>(const_cast<void*>(b.recordOn)));
    if (err != cudaSuccess)
      return shimFail(ncclUnhandledCudaError,
                      "%s: ordering after the %s's last user, on stream %p: cudaEventRecord: %s "
                      "(was that stream destroyed?)",
                      function, s->name, b.recordOn, rt().cudaGetErrorString(err));
  }
  if (b.wait) {
    const cudaError_t err = rt().cudaStreamWaitEvent(stream, event, 0);
    if (err != cudaSuccess)
      return shimFail(ncclUnhandledCudaError, "%s: stream=%p: waiting for the %s's last user: %s", function,
                      static_cast<void*>(stream), s->name, rt().cudaGetErrorString(err));
  }
  // Across contexts (Scratch::serial). At the first captured user, the eager users so far are marked
  // on the last one's stream (unless that stream is the one capturing: its work is then before the
  // capture in stream order only). Inside a capture the wait is an external event node: each replay
  // waits for the record current when it was launched.
  if (!settings().graphMixing) return ncclSuccess;
  if (context != 0 && !s->everCaptured) {
    if (s->serial == nullptr) {
      DeviceGuard restore(c->device);
      const cudaError_t err = rt().cudaEventCreateWithFlags(&s->serial, cudaEventDisableTiming);
      if (err != cudaSuccess) {
        s->serial = nullptr;
        return shimFail(ncclUnhandledCudaError, "%s: the %s's order across graphs: cudaEventCreateWithFlags: %s",
                        function, s->name, rt().cudaGetErrorString(err));
      }
    }
    // Not sticky: a mark that cannot be made (the last eager user's stream destroyed, or the legacy
    // stream while another stream captures) is a warning; the first replay is then not ordered
    // after the eager users before it.
    s->everCaptured = true;
    const void* eager = nullptr;
    uint64_t eagerThread = 0;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (s->order.lastEager(&eager, &eagerThread) && StreamOrder::perThread(eager) &&
        eagerThread != threadToken()) {
      // A record here would land on this thread's stream, not on the one they ran on.
      warn(c->rank, "%s: the %s's eager users before its first capture ran on another thread's cudaStreamPerThread "
           "and cannot be marked from this thread: the first replay is not ordered after them", function, s->name);
    } else if (s->order.lastEager(&eager)) {
      cudaStream_t es = static_cast<cudaStream_t>(const_cast<void*>(eager));
      cudaError_t err = rt().cudaStreamIsCapturing(es, &status);
      if (err == cudaSuccess && status == cudaStreamCaptureStatusNone) err = rt().cudaEventRecord(s->serial, es);
      if (err != cudaSuccess)
        warn(c->rank, "%s: marking the %s's eager users before its first capture failed: %s", function, s->name,
             rt().cudaGetErrorString(err));
      rt().cudaGetLastError();
    }
  }
  if (!s->everCaptured) return ncclSuccess;
  const cudaError_t err = rt().cudaStreamWaitEvent(stream, s->serial, context != 0 ? cudaEventWaitExternal : 0);
  if (err != cudaSuccess)
    return shimFail(ncclUnhandledCudaError, "%s: stream=%p: waiting for the %s's last user in another context: %s",
                    function, static_cast<void*>(stream), s->name, rt().cudaGetErrorString(err));
  return ncclSuccess;
}

ncclResult_t scratchUsed(Scratch* s, const char* function, cudaStream_t stream, unsigned long long context) {
  std::lock_guard<std::mutex> lock(s->mutex);
  // The cross-context record first, so that inside a capture the next user on another stream
  // depends on this record node too (a graph's records then form a chain).
  if (s->everCaptured) {
    const cudaError_t err = context != 0 ? rt().cudaEventRecordWithFlags(s->serial, stream, cudaEventRecordExternal)
                                         : rt().cudaEventRecord(s->serial, stream);
    if (err != cudaSuccess)
      return shimFail(ncclUnhandledCudaError, "%s: stream=%p: recording the %s's use for other contexts: %s",
                      function, static_cast<void*>(stream), s->name, rt().cudaGetErrorString(err));
  }
  int slot = 0;
  if (!s->order.after(stream, context, &slot)) return ncclSuccess;
  const cudaError_t err = rt().cudaEventRecord(s->events[slot], stream);  // made by scratchBefore
  if (err != cudaSuccess)
    return shimFail(ncclUnhandledCudaError, "%s: stream=%p: cudaEventRecord after the %s's use: %s", function,
                    static_cast<void*>(stream), s->name, rt().cudaGetErrorString(err));
  return ncclSuccess;
}

void freeComm(Comm* c) {
  // Destroyed inside the group that made it or registered with it: nothing may wait for it there.
  auto drop = [](auto& v, auto pred) { v.erase(std::remove_if(v.begin(), v.end(), pred), v.end()); };
  drop(tlsGroup.setUps, [c](Comm* x) { return x == c; });
  drop(tlsGroup.answers, [c](Comm* x) { return x == c; });
  waitForSetUp(c);
  for (auto& clique : tlsGroup.cliques) drop(clique, [c](Comm* x) { return x == c; });
  drop(tlsGroup.registrations, [c](Registration* r) { return r->comm == c; });
  // A call of it staged in the group: nothing of it launches (its YALI side ended first), so its
  // memory goes now, after its copy in, rather than at the group's end, where its stream may be
  // captured by then and the comm gone to keep it (finishStagedCalls).
  for (StagedCall& s : tlsGroup.staged) {
    if (s.comm != c) continue;
    freeStagingAfterCopyIn(s.device, s.memory, s.copiedIn);
    s.comm = nullptr;
    s.memory = nullptr;
    s.copiedIn = nullptr;
  }
  dropDeferredCalls(c);  // a hierarchical call of it deferred to the group's end: not run
  forgetGroupStreams(c);  // its streams of the group are not joined
  for (Registration* reg : c->registrations) {
    reg->magic = 0;
    delete reg;
  }
  c->registrations.clear();
  releaseMemory(c);
  delete c->hier;  // ended by endHierarchy
  c->hier = nullptr;
  c->magic = 0;
  delete c;
}

// ---- Logging ----------------------------------------------------------------------------------------

void logRoute(const Comm* c, const char* function, size_t bytes, bool yali, const char* why) {
  if (!debugEnabled()) return;
  static std::mutex mutex;
  static std::set<std::tuple<std::string, int, bool>> logged;
  const int cls = sizeClass(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert({function, cls, yali}).second) return;
  }
  if (yali)
    info(c->rank, "%s of %zu bytes (2^%d class): YALI%s%s%s", function, bytes, cls, why[0] != '\0' ? " (" : "", why,
         why[0] != '\0' ? ")" : "");
  else
    info(c->rank, "%s of %zu bytes (2^%d class): NCCL (%s)", function, bytes, cls, why);
}

}  // namespace yali::nccl_abi
