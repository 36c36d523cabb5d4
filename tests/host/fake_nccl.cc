// A stand-in for libnccl.so.2 in libyali-nccl's host tests (test_nccl_abi.cc and
// test_nccl_abi_errors.cc), which point YALI_NCCL_LIBRARY at it: some of NCCL's functions, each
// noting what it received, so that a test can see what libyali-nccl forwarded. It lacks most of
// NCCL on purpose (ncclSend, for one), to exercise the forward of a function the loaded NCCL does
// not have. Its ncclRecv is noted only, never matched with a peer's call (a test sees where
// libyali-nccl issued it: in which group, before or after which call).
//
// Communicators of one rank (test_nccl_abi.cc's) never start libyali-nccl's YALI set-up, which
// needs libyali. Communicators of several ranks (test_nccl_abi_errors.cc's, with fake_yali.cc
// standing in for libyali) are made by one thread for all their ranks (ncclCommInitAll, or
// ncclCommInitRank inside a group), as one process driving several GPUs does:
//  - collectives and splits issued inside a group are matched across the ranks of each
//    communicator at the outermost ncclGroupEnd and carried out there on host memory (the fake CUDA
//    runtime of fake_yali.cc allocates host memory): AllGather, Broadcast, AllReduce of int32 and
//    float32 (sum, min, max), ncclCommSplit. That is more than libyali-nccl's set-up and the
//    hierarchical path's grouped cross steps use. fakeWaitingCalls counts the calls still waiting. A call whose peers have not made theirs yet waits for them
//    (they come in a later group, one rank at a time, as a test drives the hierarchical path), as
//    NCCL's would on the device; calls that differ fail the group end (ncclInvalidUsage), where
//    NCCL would hang;
//  - outside a group a collective is noted and moves no data (the peers' calls never come);
//  - an AllGather or AllReduce waiting for its peers keeps its stream busy (fakeStreamBusy, which
//    fake_yali.cc's cudaStreamQuery asks), as NCCL's kernel would, so that libyali-nccl's bounded
//    wait for a set-up round (YALI_TIMEOUT_MS) can be seen to end;
//  - fakeRanksPerNode > 0 simulates nodes: the set-up's AllGather of its records (routing.h,
//    RankRecord) reports rank r on node "fake-node-<r / fakeRanksPerNode>", as YALI_NODE_ID does
//    per process on a GPU machine.
// A child communicator (ncclCommSplit, ncclCommShrink) reaches the program's *newcomm as NCCL's
// does (init.cc, ncclCommInitChildComm): NULL at the call, the child when its init job ends. That
// is at the outermost ncclGroupEnd when the call was made inside a group (at once otherwise), and,
// when the parent is non-blocking, later still, from a thread of its own (NCCL runs a non-blocking
// parent's split in the background, whatever the child's config says). Whether a comm is blocking
// follows NCCL: its config, then NCCL_COMM_BLOCKING, which may come from NCCL_CONF_FILE: the
// creating calls and ncclGetUniqueId load that file into the environment first, as NCCL's
// ncclInitEnv does (NCCL once per process; here at each such call: setenv never overwrites).
// Unlike NCCL, which reads NCCL_COMM_BLOCKING once per process (NCCL_PARAM), this fake reads it at
// every creation, so that a test can make its verdict differ from libyali-nccl's (which reads it
// once, as NCCL), as an NCCL environment plugin could.
// A non-blocking comm's init, as NCCL's (init.cc, group.cc): ncclCommInitRankConfig outside a group,
// and the end of a group that made one, return ncclInProgress; ncclCommGetAsyncError says
// ncclInProgress until the init completes (fakeInitDelayMs later, from a thread), and a split of a
// comm still in progress fails with ncclInvalidArgument (ncclCommEnsureReady). A group of a
// non-blocking comm's calls ends with ncclInProgress too; fakeNextBackgroundGroupStays leaves a
// group's comms in ncclInProgress for good, as a group whose end NCCL's background never finishes.
// Communicators are never freed: one that was destroyed or aborted is marked, and any later call
// with it counts in fakeCallsOnEndedComms (NCCL would read freed memory).
//
// Every call, and fake_yali.cc's, is appended to one event log (fakeRecord), so that a test can
// check which library was called, with which communicator, in which order.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>
#ifdef YALI_NCCL_HAS_DEVICE_HEADER
#include <nccl_device.h>
#endif

#include "nccl_abi/routing.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct World;

struct FakeComm {
  uint64_t magic = 0x4d4d4f43454b4146ull;  // not libyali-nccl's, as NCCL's own is not
  int rank = 0;
  int nranks = 1;
  int device = 0;
  World* world = nullptr;
  ncclResult_t asyncError = ncclSuccess;  // fakeSetAsyncError; ncclInProgress while an init runs (atomic)
  bool blocking = true;                   // config.blocking as NCCL takes it (blockingOf)
  bool ended = false;                     // destroyed or aborted
  std::vector<FakeComm*> children;        // made by ncclCommSplit / ncclCommShrink, in order
  int asyncErrorCalls = 0;                // ncclCommGetAsyncError calls under way (atomic)
  bool revoked = false;                   // ncclCommRevoke succeeded: NCCL refuses another (init.cc)
};

// NCCL's abort and revoke join the comm's group job (ncclCommEnsureReady), whose jobs write the
// children of every parent split in that group (one thread driving several ranks): here every
// child still to be written, of any parent (pendingChildren counts them all).
void joinChildren(ncclComm_t comm);
int pendingChildren = 0;  // non-blocking parents' children not yet written (deliver; atomic)

// One communicator: its ranks' FakeComms point at the same World.
struct World {};

std::mutex mutex;  // guards everything below (fake_yali.cc records from several threads)
std::map<uint64_t, World*> worldsById;
struct Event {
  const char* call;  // a string literal
  const void* handle;
  // A collective's arguments (fakeEventArgs, fakeEventBuffers; a copy's source, destination and
  // bytes, fake_yali.cc); zero for every other event.
  const void* send;
  const void* recv;
  size_t count;
  int type;
  int op;
  bool nccl;  // an NCCL collective's (fakeEventArgs reports only those)
};
std::vector<Event> events;
std::vector<std::pair<std::string, ncclResult_t>> failures;  // fakeFailNext, in order
std::string lastError = "fake: no error yet";
// This thread's open group's error (fakeFailedGroupEnds): set by a call NCCL would refuse in CommCheck.
thread_local ncclResult_t groupError = ncclSuccess;

FakeComm* makeComm(World* world, int nranks, int rank, int device) {
  FakeComm* c = new FakeComm;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->world = world != nullptr ? world : new World;
  return c;
}

uint64_t idKey(const ncclUniqueId& id) {
  uint64_t key = 0;
  memcpy(&key, id.internal, sizeof(key));
  return key;
}

// NCCL's environment plugin (plugin/env.cc, ncclEnvPluginLoad), loaded at its first call and kept
// open: NCCL_ENV_PLUGIN names it ("none": none; unset: libnccl-env.so, if there is one), and NCCL
// then reads its settings through its getEnv (here NCCL_COMM_BLOCKING only; fake_nccl_env.cc is
// one). Only the name as given is tried (NCCL also tries libnccl-env-<name>.so).
struct EnvPluginV1 {
  const char* name;
  ncclResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*);
  ncclResult_t (*finalize)();
  const char* (*getEnv)(const char*);
};
EnvPluginV1* envPlugin() {
  static EnvPluginV1* const plugin = []() -> EnvPluginV1* {
    const char* name = getenv("NCCL_ENV_PLUGIN");
    if (name != nullptr && strcasecmp(name, "none") == 0) return nullptr;
    void* lib = dlopen(name != nullptr && name[0] != '\0' ? name : "libnccl-env.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    auto* p = static_cast<EnvPluginV1*>(dlsym(lib, "ncclEnvPlugin_v1"));
    if (p == nullptr) dlclose(lib);
    return p;
  }();
  return plugin;
}

// NCCL_COMM_BLOCKING as NCCL reads it: through its environment plugin, if it loaded one.
const char* commBlockingSetting() {
  EnvPluginV1* plugin = envPlugin();
  return plugin != nullptr ? plugin->getEnv("NCCL_COMM_BLOCKING") : getenv("NCCL_COMM_BLOCKING");
}

// NCCL's ncclInitEnv (misc/param.cc): the lines NAME=VALUE of $NCCL_CONF_FILE go into the
// environment, never over a variable already set. (NCCL also reads ~/.nccl.conf and
// /etc/nccl.conf; the tests name their file.)
void loadConfFile() {
  envPlugin();  // NCCL loads it at its first call too (ncclInitEnv)
  const char* path = getenv("NCCL_CONF_FILE");
  FILE* file = path != nullptr && path[0] != '\0' ? fopen(path, "r") : nullptr;
  if (file == nullptr) return;
  char line[1024];
  while (fgets(line, sizeof(line), file) != nullptr) {
    if (line[0] == '#') continue;
    line[strcspn(line, "\n")] = '\0';
    char* eq = strchr(line, '=');
    if (eq == nullptr) continue;
    *eq = '\0';
    setenv(line, eq + 1, 0);
  }
  fclose(file);
}

// Whether a comm made with `config` is blocking, as NCCL decides (init.cc): a NULL config copies
// the parent's (`inherited`; a new comm's is 1), a config's unset blocking means 1, and
// NCCL_COMM_BLOCKING, when 0 or 1, overrides both.
bool blockingOf(const ncclConfig_t* config, bool inherited) {
  bool blocking = inherited;
  if (config != nullptr) blocking = config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  const char* env = commBlockingSetting();
  if (env != nullptr && env[0] != '\0') {
    const long long value = strtoll(env, nullptr, 0);
    if (value == 0 || value == 1) blocking = value == 1;
  }
  return blocking;
}

}  // namespace
// How long a non-blocking comm's init takes (ms), a non-blocking parent's child's too: a test that
// must act while it is under way makes it longer. 100 ms, not less: a test that checks what is
// refused while an init is under way must get there first, and on a loaded 2-core CI machine a
// thread can be held off the CPU for tens of milliseconds (20 ms was too close).
extern "C" {
__attribute__((visibility("default"))) int fakeInitDelayMs = 100;
}
// The next this many non-blocking parents' children fail their init: NCCL still writes each (init.cc,
// the job's exit), and reports the failure on the parent (group.cc), never on the child.
extern "C" {
__attribute__((visibility("default"))) int fakeFailChildInits = 0;
}
// The next this many non-blocking parents' children are never written: their job returns early
// (init.cc, ncclInitKernelsForDevice) or never runs (group.cc), and the parent reports the error.
extern "C" {
__attribute__((visibility("default"))) int fakeUnwrittenChildren = 0;
}
namespace {

// Hands a child comm to the program's *newcomm: now, or for a non-blocking parent's child from a
// thread of its own fakeInitDelayMs later, as NCCL's background init job does (the program sees
// NULL until then, and must poll).
// The parent's ncclCommGetAsyncError says ncclInProgress until then (NCCL sets it to the jobs' result
// once the group's jobs, which write the children, ended).
void deliver(ncclComm_t* newcomm, ncclComm_t child, FakeComm* parent) {
  if (parent->blocking) {
    *newcomm = child;
    return;
  }
  __atomic_store_n(&parent->asyncError, ncclInProgress, __ATOMIC_RELEASE);
  const int delayMs = __atomic_load_n(&fakeInitDelayMs, __ATOMIC_ACQUIRE);
  // Takes one of `*count` (the fake's knobs above), if any is left.
  const auto takeOne = [](int* count) {
    if (__atomic_fetch_sub(count, 1, __ATOMIC_ACQ_REL) > 0) return true;
    __atomic_fetch_add(count, 1, __ATOMIC_ACQ_REL);  // none was asked for
    return false;
  };
  const bool unwritten = takeOne(&fakeUnwrittenChildren);
  const bool fails = unwritten || takeOne(&fakeFailChildInits);
  __atomic_fetch_add(&pendingChildren, 1, __ATOMIC_ACQ_REL);
  std::thread([newcomm, child, parent, delayMs, fails, unwritten] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    if (!unwritten) __atomic_store_n(newcomm, child, __ATOMIC_RELEASE);
    ncclResult_t expected = ncclInProgress;
    __atomic_compare_exchange_n(&parent->asyncError, &expected, fails ? ncclSystemError : ncclSuccess, false,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    __atomic_fetch_sub(&pendingChildren, 1, __ATOMIC_ACQ_REL);
  }).detach();
}

}  // namespace
namespace {

// A non-blocking comm's init: in progress now, complete fakeInitDelayMs later.
void initInBackground(FakeComm* c) {
  __atomic_store_n(&c->asyncError, ncclInProgress, __ATOMIC_RELEASE);
  const int delayMs = __atomic_load_n(&fakeInitDelayMs, __ATOMIC_ACQUIRE);
  std::thread([c, delayMs] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    ncclResult_t expected = ncclInProgress;
    __atomic_compare_exchange_n(&c->asyncError, &expected, ncclSuccess, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }).detach();
}

}  // namespace

// What the last call of this thread received: its name, its communicator, the handle it was given
// (for deregistration), and this thread's group depth. Read by the tests through dlsym, which gives
// the calling thread's copy. Per thread, as NCCL's group state is (group.cc: ncclGroupDepth and the
// group's tasks are __thread): the shim's background set-ups run their rounds' groups on threads of
// their own while the test's thread makes calls and groups, and one shared copy let them mix (a
// round's group end taken for an inner one; realOf reading a background poll's comm).
extern "C" {
__attribute__((visibility("default"))) thread_local const char* fakeLastCall = "";
__attribute__((visibility("default"))) thread_local void* fakeLastComm = nullptr;
__attribute__((visibility("default"))) thread_local void* fakeLastHandle = nullptr;
__attribute__((visibility("default"))) thread_local int fakeGroupDepth = 0;
// The newcomm pointer this thread's last ncclCommSplit was given (the program's own, or a field of
// libyali-nccl's Comm).
__attribute__((visibility("default"))) thread_local void* fakeLastSplitNewcomm = nullptr;
// Outermost group ends that failed because a call inside the group had failed as NCCL's CommCheck
// fails one (a NULL comm): NCCL sets the thread's group error (group.h, ncclGroupErrCheck), and its
// outermost end returns it and drops the group's tasks (group.cc). Counted, never reset.
__attribute__((visibility("default"))) int fakeFailedGroupEnds = 0;
__attribute__((visibility("default"))) int fakeVersion = NCCL_VERSION_CODE;
// The handle ncclCommRegister gives out.
__attribute__((visibility("default"))) char fakeRegistrationToken = 0;
// Calls made with a communicator after its ncclCommDestroy or ncclCommAbort.
__attribute__((visibility("default"))) int fakeCallsOnEndedComms = 0;
// > 0: simulated nodes of this many consecutive ranks (see the top).
__attribute__((visibility("default"))) int fakeRanksPerNode = 0;
}

// The event log, shared with fake_yali.cc. `call` is a string literal.
FAKE_EXPORT void fakeRecord(const char* call, const void* handle) {
  std::lock_guard<std::mutex> lock(mutex);
  events.push_back({call, handle, nullptr, nullptr, 0, 0, 0, false});
}
// fake_yali.cc's collectives and copies: noted with their buffers and count (a copy: bytes).
FAKE_EXPORT void fakeRecordBuffers(const char* call, const void* handle, const void* send, const void* recv,
                                   size_t count) {
  std::lock_guard<std::mutex> lock(mutex);
  events.push_back({call, handle, send, recv, count, 0, 0, false});
}
FAKE_EXPORT int fakeEventCount() {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int>(events.size());
}
// The i-th event's call and handle; "" past the end.
FAKE_EXPORT const char* fakeEventCall(int i) {
  std::lock_guard<std::mutex> lock(mutex);
  return i >= 0 && i < static_cast<int>(events.size()) ? events[i].call : "";
}
FAKE_EXPORT const void* fakeEventHandle(int i) {
  std::lock_guard<std::mutex> lock(mutex);
  return i >= 0 && i < static_cast<int>(events.size()) ? events[i].handle : nullptr;
}
// The i-th event's collective arguments (recvbuff, count, datatype, op) when it is one of NCCL's
// collectives (all 0 for other events); false past the end.
FAKE_EXPORT bool fakeEventArgs(int i, const void** recv, size_t* count, int* type, int* op) {
  std::lock_guard<std::mutex> lock(mutex);
  if (i < 0 || i >= static_cast<int>(events.size())) return false;
  const bool nccl = events[i].nccl;
  *recv = nccl ? events[i].recv : nullptr;
  *count = nccl ? events[i].count : 0;
  *type = nccl ? events[i].type : 0;
  *op = nccl ? events[i].op : 0;
  return true;
}
// The i-th event's buffers and count (fakeRecordBuffers, or an NCCL collective's); false past the end.
FAKE_EXPORT bool fakeEventBuffers(int i, const void** send, const void** recv, size_t* count) {
  std::lock_guard<std::mutex> lock(mutex);
  if (i < 0 || i >= static_cast<int>(events.size())) return false;
  *send = events[i].send;
  *recv = events[i].recv;
  *count = events[i].count;
  return true;
}

// The next call of `call` returns `result` (once), with a message for ncclGetLastError.
FAKE_EXPORT void fakeFailNext(const char* call, ncclResult_t result) {
  std::lock_guard<std::mutex> lock(mutex);
  failures.push_back({call, result});
}

// ncclCommGetAsyncError of this (real) communicator returns `result` from now on.
FAKE_EXPORT void fakeSetAsyncError(void* comm, ncclResult_t result) {
  __atomic_store_n(&static_cast<FakeComm*>(comm)->asyncError, result, __ATOMIC_RELEASE);
  if (result == ncclSuccess) return;
  std::lock_guard<std::mutex> lock(mutex);
  lastError = "fake NCCL: communicator " + std::to_string(static_cast<FakeComm*>(comm)->rank) +
              " failed asynchronously (" + std::to_string(result) + ")";
}

// The calls of this communicator's ranks that wait for a peer's call, made in no later group so far
// (on a GPU, each would keep its rank waiting in NCCL).
FAKE_EXPORT int fakeWaitingCalls(const void* comm);

// The i-th communicator made from this one by ncclCommSplit or ncclCommShrink (null if none).
FAKE_EXPORT void* fakeChild(void* comm, int i) {
  const auto& children = static_cast<FakeComm*>(comm)->children;
  return i >= 0 && i < static_cast<int>(children.size()) ? children[i] : nullptr;
}

namespace {

// What fakeFailNext asked `call` to return now (ncclSuccess: nothing), consumed.
ncclResult_t failureOf(const char* call) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = failures.begin(); it != failures.end(); ++it) {
    if (it->first != call) continue;
    const ncclResult_t r = it->second;
    failures.erase(it);
    lastError = std::string("fake NCCL: ") + call + " failed as asked (" + std::to_string(r) + ")";
    return r;
  }
  return ncclSuccess;
}

struct Op;
void recordCollective(const char* call, const void* comm, const Op* args);

// Every call goes through here: notes it (a collective with its arguments), and says what it
// returns before doing anything.
ncclResult_t note(const char* call, const void* comm, const Op* args = nullptr);
ncclResult_t note(const char* call, const void* comm, const Op* args) {
  fakeLastCall = call;
  fakeLastComm = const_cast<void*>(comm);
  recordCollective(call, comm, args);
  const ncclResult_t asked = failureOf(call);
  if (asked != ncclSuccess) return asked;
  std::lock_guard<std::mutex> lock(mutex);
  if (comm == nullptr) {
    lastError = std::string("fake NCCL: ") + call + ": comm is NULL";
    if (fakeGroupDepth > 0) groupError = ncclInvalidArgument;  // enqueue.cc: CommCheck, ncclGroupErrCheck
    return ncclInvalidArgument;
  }
  if (static_cast<const FakeComm*>(comm)->ended) {
    ++fakeCallsOnEndedComms;
    lastError = std::string("fake NCCL: ") + call + ": the comm was destroyed or aborted";
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

const FakeComm* fake(ncclComm_t comm) { return reinterpret_cast<const FakeComm*>(comm); }
FakeComm* fakeMutable(ncclComm_t comm) { return reinterpret_cast<FakeComm*>(comm); }

void joinChildren(ncclComm_t comm) {
  if (comm == nullptr) return;
  while (__atomic_load_n(&pendingChildren, __ATOMIC_ACQUIRE) > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// ---- Groups: what a group carries out at its end ------------------------------------------------------

struct Op {
  const char* call;
  FakeComm* comm;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int color, key;
  ncclComm_t* newcomm;
  bool childBlocking = true;  // a split's child: blockingOf its config
  const void* stream = nullptr;  // AllGather's and AllReduce's: fakeStreamBusy
};
void recordCollective(const char* call, const void* comm, const Op* args) {
  std::lock_guard<std::mutex> lock(mutex);
  if (args == nullptr)
    events.push_back({call, comm, nullptr, nullptr, 0, 0, 0, false});
  else
    events.push_back({call, comm, args->send, args->recv, args->count, args->type, args->op, true});
}

thread_local std::vector<Op> pending;  // issued inside this thread's open group
// Children made inside this thread's open group whose *newcomm waits for its end (this fake's shrink).
struct Delivery {
  ncclComm_t* newcomm;
  FakeComm* child;
  FakeComm* parent;
};
thread_local std::vector<Delivery> deliveries;
// Non-blocking work made inside this thread's open group: its end returns ncclInProgress (group.cc), and the
// inits made in it complete in the background.
thread_local bool groupHasNonBlocking = false;
thread_local std::vector<FakeComm*> initsInGroup;
// Calls of ended groups that wait for their peers' (made in a later group), per communicator and
// rank, in issue order.
std::map<World*, std::vector<std::deque<Op>>> backlog;
std::mutex backlogMutex;  // guards backlog: libyali-nccl's background set-up polls it (fakeStreamBusy)

size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// The set-up's records, with the simulated node of each rank written in.
void simulateNode(char* record, int rank) {
  using yali::nccl_abi::RankRecord;
  RankRecord r;
  memcpy(&r, record, sizeof(r));
  if (r.layout != RankRecord::kLayout) return;
  memset(r.node, 0, sizeof(r.node));
  snprintf(r.node, sizeof(r.node), "fake-node-%d", rank / fakeRanksPerNode);
  memcpy(record, &r, sizeof(r));
}

// AllReduce (sum, min, max) of T, made by every rank (ops[r] is rank r's).
template <typename T>
ncclResult_t allReduce(const std::vector<Op*>& ops) {
  const Op& first = *ops[0];
  std::vector<T> acc(first.count);
  memcpy(acc.data(), first.send, first.count * sizeof(T));
  for (size_t r = 1; r < ops.size(); ++r) {
    const T* in = static_cast<const T*>(ops[r]->send);
    for (size_t i = 0; i < first.count; ++i) {
      if (first.op == ncclSum) acc[i] += in[i];
      else if (first.op == ncclMin) acc[i] = std::min(acc[i], in[i]);
      else acc[i] = std::max(acc[i], in[i]);
    }
  }
  for (const Op* o : ops) memcpy(o->recv, acc.data(), acc.size() * sizeof(T));
  return ncclSuccess;
}

// One collective, made by every rank of one communicator (ops[r] is rank r's).
ncclResult_t carryOut(const std::vector<Op*>& ops) {
  const Op& first = *ops[0];
  const int n = static_cast<int>(ops.size());
  const size_t bytes = first.count * typeSize(first.type);
  const std::string call = first.call;
  if (call == "ncclCommSplit") {
    std::vector<int> order(n);
    for (int r = 0; r < n; ++r) order[r] = r;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ops[a]->key < ops[b]->key; });
    std::map<int, World*> byColor;
    std::map<int, int> sizes;
    for (int r : order)
      if (ops[r]->color != NCCL_SPLIT_NOCOLOR) ++sizes[ops[r]->color];
    std::map<int, int> next;
    for (int r : order) {
      Op& o = *ops[r];
      if (o.color == NCCL_SPLIT_NOCOLOR) {
        // NCCL's job writes NULL at its end (init.cc), for a non-blocking parent in its background.
        deliver(o.newcomm, nullptr, o.comm);
        continue;
      }
      World*& w = byColor[o.color];
      if (w == nullptr) w = new World;
      FakeComm* c = makeComm(w, sizes[o.color], next[o.color]++, o.comm->device);
      c->blocking = o.childBlocking;
      o.comm->children.push_back(c);
      deliver(o.newcomm, reinterpret_cast<ncclComm_t>(c), o.comm);
    }
    return ncclSuccess;
  }
  if (bytes == 0) return ncclSuccess;
  if (call == "ncclReduceScatter") return ncclSuccess;  // matched only: this fake moves no data for it
  for (const Op* o : ops)
    if (o->recv == nullptr || (call != "ncclBroadcast" && o->send == nullptr)) return ncclInvalidArgument;
  if (call == "ncclAllGather") {
    std::vector<char> all(bytes * n);
    for (int r = 0; r < n; ++r) {
      memcpy(all.data() + r * bytes, ops[r]->send, bytes);
      if (fakeRanksPerNode > 0 && bytes == sizeof(yali::nccl_abi::RankRecord)) simulateNode(all.data() + r * bytes, r);
    }
    for (const Op* o : ops) memcpy(o->recv, all.data(), all.size());
    return ncclSuccess;
  }
  if (call == "ncclBroadcast") {
    const std::vector<char> root(static_cast<const char*>(ops[first.root]->send),
                                 static_cast<const char*>(ops[first.root]->send) + bytes);
    for (const Op* o : ops) memcpy(o->recv, root.data(), bytes);
    return ncclSuccess;
  }
  if (call == "ncclAllReduce" && (first.op == ncclSum || first.op == ncclMin || first.op == ncclMax)) {
    if (first.type == ncclInt32) return allReduce<int32_t>(ops);
    if (first.type == ncclFloat32) return allReduce<float>(ops);
  }
  return ncclInvalidArgument;  // this fake moves no other data
}

// The outermost group's end: every communicator's calls, with those of earlier groups that waited
// for them, matched rank by rank in issue order, as far as every rank has made its calls.
ncclResult_t carryOutGroup(std::vector<Op> ops) {
  std::set<World*> touched;
  for (Op& o : ops) {
    auto& perRank = backlog[o.comm->world];
    perRank.resize(o.comm->nranks);
    perRank[o.comm->rank].push_back(o);
    touched.insert(o.comm->world);
  }
  ncclResult_t result = ncclSuccess;
  for (World* world : touched) {
    std::vector<std::deque<Op>>& perRank = backlog[world];
    auto everyRankHasOne = [&] {
      for (auto& mine : perRank)
        if (mine.empty()) return false;
      return true;
    };
    while (everyRankHasOne()) {
      std::vector<Op*> call;
      bool same = true;
      // The same call with the same shape on every rank (as NCCL requires; a mismatch is a bug of
      // the caller, which the tests must see): name, count, type, op and root.
      for (auto& mine : perRank) {
        const Op& a = mine.front();
        const Op& b = perRank[0].front();
        call.push_back(&mine.front());
        same = same && strcmp(a.call, b.call) == 0 && a.count == b.count && a.type == b.type && a.op == b.op &&
               a.root == b.root;
      }
      const ncclResult_t r = same ? carryOut(call) : ncclInvalidUsage;
      if (r != ncclSuccess && result == ncclSuccess) {
        result = r;
        std::lock_guard<std::mutex> lock(mutex);
        lastError = std::string("fake NCCL: the group's ") + perRank[0].front().call +
                    (r == ncclInvalidUsage ? " differs between the ranks" : " cannot be carried out here");
      }
      for (auto& mine : perRank) mine.pop_front();
    }
  }
  return result;
}

}  // namespace

// Whether a call issued on this stream waits for a peer's (fake_yali.cc's cudaStreamQuery then says
// cudaErrorNotReady, as CUDA would while NCCL's kernel waits on the device).
FAKE_EXPORT bool fakeStreamBusy(const void* stream) {
  std::lock_guard<std::mutex> lock(backlogMutex);
  for (const auto& world : backlog)
    for (const std::deque<Op>& mine : world.second)
      for (const Op& o : mine)
        if (o.stream != nullptr && o.stream == stream) return true;
  return false;
}

// Whether a call waiting for its peers' (backlog) holds a stream of `device`: on a GPU its kernel
// keeps running there, and whatever synchronizes that device (cudaFree) waits for it for ever.
FAKE_EXPORT bool fakeDeviceBusy(int device) {
  std::lock_guard<std::mutex> lock(backlogMutex);
  for (const auto& world : backlog)
    for (const std::deque<Op>& mine : world.second)
      for (const Op& o : mine)
        if (o.stream != nullptr && o.comm != nullptr && o.comm->device == device) return true;
  return false;
}

FAKE_EXPORT int fakeWaitingCalls(const void* comm) {
  std::lock_guard<std::mutex> lock(backlogMutex);
  const auto it = backlog.find(static_cast<const FakeComm*>(comm)->world);
  int n = 0;
  if (it != backlog.end())
    for (const std::deque<Op>& mine : it->second) n += static_cast<int>(mine.size());
  return n;
}

namespace {

// A collective: noted (with its arguments), and queued when inside a group. A non-blocking comm's
// makes the group's end return ncclInProgress, as NCCL's group of a non-blocking comm does
// (group.cc: the group takes its comms' blocking, and a non-blocking group ends in the background).
ncclResult_t collective(const Op& o, ncclComm_t comm) {
  const ncclResult_t r = note(o.call, comm, &o);
  if (r != ncclSuccess) return r;
  if (fakeGroupDepth > 0) {
    Op queued = o;
    queued.comm = fakeMutable(comm);
    pending.push_back(queued);
    if (!fake(comm)->blocking) groupHasNonBlocking = true;
  }
  return ncclSuccess;
}

}  // namespace

FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  *version = fakeVersion;
  return ncclSuccess;
}

FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "fake: no error" : "fake: error";
}

FAKE_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  fakeLastCall = "ncclGetLastError";
  fakeLastComm = comm;
  fakeRecord("ncclGetLastError", comm);
  static thread_local std::string returned;
  std::lock_guard<std::mutex> lock(mutex);
  returned = lastError;
  return returned.c_str();
}

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  loadConfFile();  // NCCL's init.cc:159: rank 0's first call, usually
  static uint64_t serial = 0;
  memset(id, 7, sizeof(*id));
  const uint64_t key = ++serial;
  memcpy(id->internal, &key, sizeof(key));
  fakeLastCall = "ncclGetUniqueId";
  return ncclSuccess;
}

namespace {

// ncclCommInitRank(Config): one rank of the communicator the id names.
ncclResult_t initRank(const char* call, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                      const ncclConfig_t* config) {
  loadConfFile();
  World* world = nullptr;
  if (nranks > 1) {
    std::lock_guard<std::mutex> lock(mutex);
    World*& w = worldsById[idKey(id)];
    if (w == nullptr) w = new World;
    world = w;
  }
  FakeComm* c = makeComm(world, nranks, rank, nranks > 1 ? rank : 0);
  c->blocking = blockingOf(config, true);
  *comm = reinterpret_cast<ncclComm_t>(c);
  const ncclResult_t r = note(call, *comm);
  if (r != ncclSuccess || c->blocking) return r;
  if (fakeGroupDepth > 0) {
    __atomic_store_n(&c->asyncError, ncclInProgress, __ATOMIC_RELEASE);
    groupHasNonBlocking = true;
    initsInGroup.push_back(c);
    return ncclSuccess;
  }
  initInBackground(c);
  return ncclInProgress;  // init.cc: ncclCommInitRankConfig returns the comm's async state
}

}  // namespace

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, id, rank, nullptr);
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                                ncclConfig_t* config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, id, rank, config);
}

// NCCL's takes no config: NCCL_COMM_BLOCKING=0 makes its comms non-blocking, and then its group's
// end returns ncclInProgress (outside a group), the inits going on in the background (init.cc).
FAKE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  loadConfFile();  // NCCL's calls ncclGetUniqueId first (init.cc)
  World* world = new World;
  const bool blocking = blockingOf(nullptr, true);
  for (int i = 0; i < ndev; ++i) {
    FakeComm* c = makeComm(world, ndev, i, devlist != nullptr ? devlist[i] : i);
    c->blocking = blocking;
    if (!blocking) initInBackground(c);
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  const ncclResult_t r = note("ncclCommInitAll", ndev > 0 ? comms[0] : nullptr);
  if (!blocking && fakeGroupDepth > 0) groupHasNonBlocking = true;  // the outer group's end says so
  return r == ncclSuccess && !blocking && fakeGroupDepth == 0 ? ncclInProgress : r;
}

// The splitShare of the last ncclCommSplit's config (-1: no config).
__attribute__((visibility("default"))) int fakeLastSplitShare = -2;
FAKE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  fakeLastSplitShare = config != nullptr ? config->splitShare : -1;
  fakeLastSplitNewcomm = newcomm;
  loadConfFile();
  const ncclResult_t r = note("ncclCommSplit", comm);
  if (r != ncclSuccess) return r;
  FakeComm* parent = fakeMutable(comm);
  if (__atomic_load_n(&parent->asyncError, __ATOMIC_ACQUIRE) == ncclInProgress) {
    std::lock_guard<std::mutex> lock(mutex);
    lastError = "fake NCCL: ncclCommSplit: the parent is still in progress (ncclCommEnsureReady)";
    return ncclInvalidArgument;
  }
  *newcomm = nullptr;  // NCCL's: NULL until the child's init job ends
  Op split{"ncclCommSplit", parent, nullptr, nullptr, 0, ncclInt8, ncclSum, 0, color, key, newcomm};
  split.childBlocking = blockingOf(config, parent->blocking);
  if (fakeGroupDepth > 0) {
    pending.push_back(split);
    if (!parent->blocking) groupHasNonBlocking = true;
    return ncclSuccess;
  }
  if (parent->nranks > 1) return ncclInvalidUsage;  // its peers' calls would be needed: make them in a group
  Op* one[] = {&split};
  return carryOut(std::vector<Op*>(one, one + 1));
}

// Tear-down that waits on another comm, as NCCL's does: its abort (and revoke, and shrink with
// NCCL_SHRINK_ABORT) of a comm waits for the work queued on the program's streams before that
// comm's last kernel, which may be a kernel of another comm stuck on a dead peer, ended only by an
// abort of that other comm. fakeAbortWaitsFor(waiter, until, ms): the tear-down of `waiter` waits up
// to ms for a tear-down of `until` to have begun; when none does, it counts a deadlock
// (fakeAbortDeadlocks: a real NCCL would have waited for ever). fakeAbortWaitsFor(null, ...) clears.
namespace {
std::mutex tearDownMutex;
std::condition_variable tearDownBegun;
std::set<const void*> tearingDown;                       // comms whose tear-down has begun
std::map<const void*, std::pair<const void*, int>> waits;  // waiter -> (until, ms)
}  // namespace
__attribute__((visibility("default"))) int fakeAbortDeadlocks = 0;
// Each tear-down takes this long (ms), so that tear-downs run together overlap; the most that ran
// at once (fakeMaxTearDownsAtOnce).
__attribute__((visibility("default"))) int fakeTearDownMs = 0;
__attribute__((visibility("default"))) int fakeMaxTearDownsAtOnce = 0;
FAKE_EXPORT void fakeAbortWaitsFor(void* waiter, void* until, int ms) {
  std::lock_guard<std::mutex> lock(tearDownMutex);
  if (waiter == nullptr) {
    waits.clear();
    tearingDown.clear();
    fakeAbortDeadlocks = 0;
    fakeMaxTearDownsAtOnce = 0;
    return;
  }
  waits[waiter] = {until, ms};
}
namespace {
int tearDownsNow = 0;
// One tear-down, from its start (tearDown) to the end of its scope.
struct TearingDown {
  TearingDown() {
    std::lock_guard<std::mutex> lock(tearDownMutex);
    fakeMaxTearDownsAtOnce = std::max(fakeMaxTearDownsAtOnce, ++tearDownsNow);
  }
  ~TearingDown() {
    if (fakeTearDownMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(fakeTearDownMs));
    std::lock_guard<std::mutex> lock(tearDownMutex);
    --tearDownsNow;
  }
};
void tearDown(const void* comm) {
  std::unique_lock<std::mutex> lock(tearDownMutex);
  tearingDown.insert(comm);
  tearDownBegun.notify_all();
  auto it = waits.find(comm);
  if (it == waits.end()) return;
  const void* until = it->second.first;
  if (!tearDownBegun.wait_for(lock, std::chrono::milliseconds(it->second.second),
                              [&] { return tearingDown.count(until) != 0; }))
    ++fakeAbortDeadlocks;
}
}  // namespace

FAKE_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int excludeCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int flags) {
#ifdef NCCL_SHRINK_ABORT
  const TearingDown during;
  if (flags & NCCL_SHRINK_ABORT) tearDown(comm);
#else
  (void)flags;
#endif
  const ncclResult_t r = note("ncclCommShrink", comm);
  if (r != ncclSuccess) return r;
  // The ranks that stay, made at once (this fake's shrink is not collective).
  FakeComm* parent = fakeMutable(comm);
  const int n = parent->nranks - excludeCount;
  int mine = 0;
  for (int q = 0; q < parent->rank; ++q)
    if (std::find(exclude, exclude + excludeCount, q) == exclude + excludeCount) ++mine;
  FakeComm* c = makeComm(nullptr, n, mine, parent->device);
  c->blocking = blockingOf(config, parent->blocking);
  parent->children.push_back(c);
  // NCCL's *newcomm is NULL until the child's init job ends: at the outermost ncclGroupEnd when the
  // call was made inside a group.
  *newcomm = nullptr;
  if (fakeGroupDepth > 0)
    deliveries.push_back({newcomm, c, parent});
  else
    deliver(newcomm, reinterpret_cast<ncclComm_t>(c), parent);
  if (fakeGroupDepth > 0 && !parent->blocking) groupHasNonBlocking = true;
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return note("ncclCommFinalize", comm); }

FAKE_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  const TearingDown during;
  if (comm != nullptr && fake(comm)->revoked) return ncclInvalidArgument;  // as NCCL: a revoke in progress
  joinChildren(comm);
  tearDown(comm);
  const ncclResult_t r = note("ncclCommRevoke", comm);
  if (comm != nullptr && r == ncclSuccess) fakeMutable(comm)->revoked = true;
  return r;
}

// NCCL returns ncclSuccess for a NULL comm in these two (init.cc).
FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  const ncclResult_t r = note("ncclCommDestroy", comm);
  if (comm == nullptr) return ncclSuccess;
  if (r == ncclSuccess) fakeMutable(comm)->ended = true;  // a destroy that fails leaves the comm
  return r;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  const TearingDown during;
  joinChildren(comm);
  tearDown(comm);
  const ncclResult_t r = note("ncclCommAbort", comm);
  if (comm == nullptr) return ncclSuccess;
  fakeMutable(comm)->ended = true;
  return r;
}

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  const ncclResult_t r = note("ncclCommCount", comm);
  if (r == ncclSuccess) *count = fake(comm)->nranks;
  return r;
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  const ncclResult_t r = note("ncclCommUserRank", comm);
  if (r == ncclSuccess) *rank = fake(comm)->rank;
  return r;
}

FAKE_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  const ncclResult_t r = note("ncclCommCuDevice", comm);
  if (r == ncclSuccess) *device = fake(comm)->device;
  return r;
}

// Each ncclCommGetAsyncError first sleeps this long (ms): a thread that polls it (libyali-nccl's
// background answer) cannot have moved on within that time; 0: no sleep.
__attribute__((visibility("default"))) int fakeAsyncErrorDelayMs = 0;
// Calls of ncclCommGetAsyncError that overlapped another on the same comm. NCCL's is not safe on two
// threads at once: the call that finds the comm's init or group done completes its group job, which
// frees it (init.cc, group.cc), so a second call at the same moment frees it again.
__attribute__((visibility("default"))) int fakeAsyncErrorOverlaps = 0;

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const ncclResult_t r = note("ncclCommGetAsyncError", comm);
  if (r != ncclSuccess) return r;
  if (asyncError == nullptr) return ncclInvalidArgument;
  FakeComm* c = const_cast<FakeComm*>(fake(comm));
  if (__atomic_fetch_add(&c->asyncErrorCalls, 1, __ATOMIC_ACQ_REL) > 0)
    __atomic_fetch_add(&fakeAsyncErrorOverlaps, 1, __ATOMIC_ACQ_REL);
  const int delayMs = __atomic_load_n(&fakeAsyncErrorDelayMs, __ATOMIC_ACQUIRE);
  if (delayMs > 0) usleep(static_cast<useconds_t>(delayMs) * 1000);
  *asyncError = __atomic_load_n(&c->asyncError, __ATOMIC_ACQUIRE);
  __atomic_fetch_sub(&c->asyncErrorCalls, 1, __ATOMIC_ACQ_REL);
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t,
                                                  ncclComm_t comm) {
  const ncclResult_t r = note("ncclRedOpCreatePreMulSum", comm);
  if (r == ncclSuccess) *op = static_cast<ncclRedOp_t>(ncclNumOps + 1);  // NCCL's first custom op
  return r;
}

FAKE_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t comm) { return note("ncclRedOpDestroy", comm); }

#ifdef YALI_NCCL_HAS_DEVICE_HEADER
// Two of the device API's host functions (nccl_device.h), to see the forwards unwrap the program's
// handle; the others are left out, as a function an older NCCL lacks.
FAKE_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  return note("ncclDevCommCreate", comm);
}
FAKE_EXPORT ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  note("ncclTeamWorld", comm);
  return ncclTeam_t{1, 0, 1};
}
#endif

FAKE_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                       ncclComm_t comm, cudaStream_t stream) {
  Op o{"ncclAllReduce", nullptr, send, recv, count, type, op, 0, 0, 0, nullptr};
  o.stream = stream;
  return collective(o, comm);
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                       ncclComm_t comm, cudaStream_t stream) {
  Op o{"ncclAllGather", nullptr, send, recv, count, type, ncclSum, 0, 0, 0, nullptr};
  o.stream = stream;
  return collective(o, comm);
}

FAKE_EXPORT ncclResult_t ncclReduceScatter(const void*, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t) {
  const Op o{"ncclReduceScatter", nullptr, nullptr, recv, count, type, op, 0, 0, 0, nullptr};
  return collective(o, comm);  // matched rank by rank in a group; moves no data
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                       ncclComm_t comm, cudaStream_t) {
  return collective({"ncclBroadcast", nullptr, send, recv, count, type, ncclSum, root, 0, 0, nullptr}, comm);
}

FAKE_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                  cudaStream_t) {
  const Op o{"ncclRecv", nullptr, nullptr, recv, count, type, ncclSum, peer, 0, 0, nullptr};
  return note("ncclRecv", comm, &o);
}

FAKE_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  const ncclResult_t r = note("ncclCommRegister", comm);
  if (r == ncclSuccess) *handle = &fakeRegistrationToken;
  return r;
}

FAKE_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  fakeLastHandle = handle;
  return note("ncclCommDeregister", comm);
}

FAKE_EXPORT ncclResult_t ncclGroupStart() {
  fakeRecord("ncclGroupStart", nullptr);
  fakeLastCall = "ncclGroupStart";
  const ncclResult_t r = failureOf("ncclGroupStart");
  if (r == ncclSuccess) ++fakeGroupDepth;
  return r;
}

// fakeFailNextSplitGroup: the result of the next group end that delivers splits' children.
ncclResult_t splitGroupFailure = ncclSuccess;

// The next outermost ncclGroupEnd whose group made splits or shrinks returns `result`, after it
// delivered their children, as NCCL's does when their init jobs fail (init.cc: each job writes its
// child, a failed one too, and the group's end returns the first error).
FAKE_EXPORT void fakeFailNextSplitGroup(ncclResult_t result) { splitGroupFailure = result; }

// fakeNextBackgroundGroupStays: the next outermost ncclGroupEnd that ends its group in the
// background (returns ncclInProgress: a non-blocking comm's calls in it, or fakeFailNext asked for
// it) never ends it there: the comms of its calls say ncclInProgress from then on
// (ncclCommGetAsyncError), as NCCL's would while its background thread stays stuck on the group (a
// peer that never connects, say). Its calls are matched as any group's.
namespace {
std::atomic<bool> backgroundGroupStays{false};
}  // namespace
FAKE_EXPORT void fakeNextBackgroundGroupStays() { backgroundGroupStays.store(true); }

FAKE_EXPORT ncclResult_t ncclGroupEnd() {
  fakeRecord("ncclGroupEnd", nullptr);
  fakeLastCall = "ncclGroupEnd";
  --fakeGroupDepth;
  ncclResult_t r = ncclSuccess;
  std::set<FakeComm*> inGroup;  // the comms of the group's calls (fakeNextBackgroundGroupStays)
  if (fakeGroupDepth == 0 && groupError != ncclSuccess) {
    // group.cc: the group's error ends it, its tasks dropped, nothing carried out.
    r = groupError;
    groupError = ncclSuccess;
    pending.clear();
    ++fakeFailedGroupEnds;
  } else if (fakeGroupDepth == 0) {
    std::vector<Op> ops;
    std::swap(ops, pending);
    for (const Op& op : ops) inGroup.insert(op.comm);
    bool splits = !deliveries.empty();
    for (const Op& op : ops) splits = splits || strcmp(op.call, "ncclCommSplit") == 0;
    {
      std::lock_guard<std::mutex> lock(backlogMutex);
      r = carryOutGroup(std::move(ops));
    }
    if (splits && splitGroupFailure != ncclSuccess) {
      if (r == ncclSuccess) r = splitGroupFailure;
      splitGroupFailure = ncclSuccess;
    }
    for (const Delivery& d : deliveries) deliver(d.newcomm, reinterpret_cast<ncclComm_t>(d.child), d.parent);
    deliveries.clear();
    for (FakeComm* c : initsInGroup) initInBackground(c);
    initsInGroup.clear();
    if (groupHasNonBlocking && r == ncclSuccess) r = ncclInProgress;  // group.cc: a non-blocking group
    groupHasNonBlocking = false;
  }
  const ncclResult_t asked = failureOf("ncclGroupEnd");  // after the group ended, as NCCL's does
  if (asked != ncclSuccess) r = asked;
  if (fakeGroupDepth == 0 && r == ncclInProgress && backgroundGroupStays.exchange(false))
    for (FakeComm* c : inGroup) __atomic_store_n(&c->asyncError, ncclInProgress, __ATOMIC_RELEASE);
  return r;
}

// The group ends as ncclGroupEnd's does, but the outermost end carries out nothing: its calls are
// dropped (NCCL estimates their time; this fake reports none).
FAKE_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  fakeRecord("ncclGroupSimulateEnd", nullptr);
  fakeLastCall = "ncclGroupSimulateEnd";
  ncclResult_t failed = ncclSuccess;
  if (--fakeGroupDepth == 0) {
    pending.clear();
    if (simInfo != nullptr) simInfo->estimatedTime = 0;
    failed = groupError;  // as ncclGroupEnd's
    groupError = ncclSuccess;
    if (failed != ncclSuccess) ++fakeFailedGroupEnds;
  }
  const ncclResult_t asked = failureOf("ncclGroupSimulateEnd");
  return failed != ncclSuccess ? failed : asked;
}
