// A stand-in for libyali in libyali-nccl's host tests (test_nccl_abi_errors.cc points YALI_LIBRARY
// at it), with the CUDA runtime functions libyali-nccl takes through libyali's handle
// (yali_lib.h): YALI communicators without a GPU, so that the tests can drive libyali-nccl's YALI
// side, and make it fail, where libyali itself would need one.
//
// Its behaviour follows yali.h where libyali-nccl depends on it:
//  - yaliGetLastError(comm) is the comm's last failure while the comm lives, else the calling
//    thread's; a failure records both (core/error.cc: fail), and so does a yaliCommGetAsyncError
//    that finds an error (core/api.cc);
//  - a comm that failed stays failed: every later call returns its error; a destroyed or aborted
//    comm's calls return yaliInvalidUsage;
//  - collectives do nothing but note themselves, with their buffers and count; a test makes one
//    fail (fakeYaliFailNext) or the comm fail asynchronously (fakeYaliSetAsyncError, which also
//    sets the word that yaliCommGetFailureFlag points at, as a failing kernel does);
//  - a collective accepted is launched (noted again, as "yaliLaunch" with its comm, buffers and
//    count) at once, or inside a group at the outermost yaliGroupEnd, in call order; the outermost
//    yaliGroupSimulateEnd drops the group's instead (yali.h, "Groups");
//  - a collective given fakeYaliRefusedBuffer as its sendbuff or recvbuff refuses it
//    (yaliInvalidArgument), as libyali's buffer checks refuse a buffer of one rank (host memory,
//    say); yaliAlgoInfo checks no buffer, as libyali's does not (its scalar checks are what a test
//    fails with fakeYaliFailNext("yaliAlgoInfo", ...)).
// The CUDA functions work on host memory: "device" and pinned memory are malloc'd, copies are
// memcpy at once (noted, with their source, destination and size), streams are tokens, and no
// stream is captured but fakeCudaCapturedStream. Stream-ordered memory (cudaMallocAsync) comes from
// a pool, as CUDA's does: a block freed with cudaFreeAsync is handed out again, unzeroed, to the
// next cudaMallocAsync of its size, so a scratch holds what its last user left there, as on a GPU;
// both are noted in the log. The device has memory pools unless fakeCudaMemoryPoolsSupported is 0.
// fakeCudaFailNth makes one later call of a CUDA function fail. fakeCudaCallsBehindWaitingNccl
// counts the synchronizations and copies that, on a GPU, would wait behind an NCCL call left waiting
// for a peer.
//
// Every call is appended to fake_nccl.cc's event log (fakeRecord), which this library links, so
// that a test sees both libraries' calls in one order.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <chrono>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "yali/yali.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" void fakeRecord(const char* call, const void* handle);  // fake_nccl.cc
extern "C" void fakeRecordBuffers(const char* call, const void* handle, const void* send, const void* recv,
                                  size_t count);
extern "C" void* fakeYaliRefusedBuffer;  // below
extern "C" int fakeYaliP2POff;           // below
extern "C" thread_local int fakeYaliGroupDepth;  // below

struct yaliComm {
  int rank = 0;
  int nranks = 0;
  bool ended = false;
  yaliResult_t asyncError = yaliSuccess;
  int failureFlag = 0;  // yaliCommGetFailureFlag's word ("device" memory is host memory here)
  const uint64_t* watch = nullptr;  // yaliCommWatchFailureWord's word, read at every launch
  std::string asyncText;
  std::string lastError;
};

namespace {

std::mutex mutex;  // guards the lists below (yaliCommInitRank runs in a thread per rank)
std::vector<yaliComm*> comms;  // every comm made, in order; never freed
struct Failure {
  std::string call;
  yaliResult_t result;
  std::string message;
};
std::vector<Failure> failures;  // fakeYaliFailNext
std::vector<std::string> failuresAfterLaunch;  // fakeYaliFailAfterLaunch
thread_local std::string tlsLastError;
// Collectives accepted inside the open group, launched at its outermost end.
struct Queued {
  yaliComm* comm;
  const void* send;
  const void* recv;
  size_t count;
};
thread_local std::vector<Queued> queued;  // this thread's open group (libyali's group state is per thread)
thread_local int tlsDevice = 0;

yaliResult_t fail(yaliResult_t code, yaliComm* comm, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
yaliResult_t fail(yaliResult_t code, yaliComm* comm, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tlsLastError = buf;
  if (comm != nullptr) comm->lastError = buf;
  return code;
}

// What the call on `comm` returns before it does anything (the call is noted already).
yaliResult_t checkNoted(const char* call, yaliComm* comm) {
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "%s: comm is NULL", call);
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "%s: comm was destroyed or aborted", call);
  if (comm->asyncError != yaliSuccess)
    return fail(comm->asyncError, comm, "%s: an earlier operation on this comm failed: %s", call,
                comm->asyncText.c_str());
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = failuresAfterLaunch.begin(); it != failuresAfterLaunch.end(); ++it) {
    if (*it != call) continue;
    failuresAfterLaunch.erase(it);
    comm->failureFlag = 1;
    comm->asyncError = yaliTimeout;
    comm->asyncText = std::string(call) + "'s kernel failed on the device, as the test asked";
    return yaliSuccess;
  }
  for (auto it = failures.begin(); it != failures.end(); ++it) {
    if (it->call != call) continue;
    const Failure f = *it;
    failures.erase(it);
    return fail(f.result, comm, "%s", f.message.c_str());
  }
  return yaliSuccess;
}

yaliResult_t check(const char* call, yaliComm* comm) {
  fakeRecord(call, comm);
  return checkNoted(call, comm);
}

// A launch reads the comm's watched word when it starts, as libyali's kernels do (the fake's copies
// happen at the call, so the word holds what the stream would have left there): nonzero fails the
// comm asynchronously (yaliRemoteError, its failure flag set). Peers are not modelled: on a GPU they
// learn it from this rank's kernel.
void launch(const Queued& q) {
  fakeRecordBuffers("yaliLaunch", q.comm, q.send, q.recv, q.count);
  if (q.comm->watch != nullptr && *q.comm->watch != 0 && q.comm->asyncError == yaliSuccess) {
    q.comm->asyncError = yaliRemoteError;
    q.comm->asyncText =
        "the comm's watched failure word (yaliCommWatchFailureWord) was set when a launch started: another "
        "library's step before it failed (libyali-nccl: a node of the hierarchical communicator failed)";
    q.comm->failureFlag = 1;
  }
}

// A collective: noted with its buffers; a refused buffer (fakeYaliRefusedBuffer) is refused after
// the comm's own checks, as libyali checks its buffers after the scalars. Accepted, it is launched,
// or queued in the open group.
yaliResult_t collective(const char* call, yaliComm* comm, const void* send, const void* recv, size_t count) {
  fakeRecordBuffers(call, comm, send, recv, count);
  const yaliResult_t r = checkNoted(call, comm);
  if (r != yaliSuccess) return r;
  if (fakeYaliRefusedBuffer != nullptr && (send == fakeYaliRefusedBuffer || recv == fakeYaliRefusedBuffer))
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is host memory, not device memory", call,
                send == fakeYaliRefusedBuffer ? "sendbuff" : "recvbuff", fakeYaliRefusedBuffer);
  const Queued q{comm, send, recv, count};
  if (fakeYaliGroupDepth > 0) {
    std::lock_guard<std::mutex> lock(mutex);
    queued.push_back(q);
  } else {
    launch(q);
  }
  return yaliSuccess;
}

// The outermost end of a group: its collectives launched, or dropped.
void endGroupQueue(bool launchThem) {
  std::vector<Queued> q;
  {
    std::lock_guard<std::mutex> lock(mutex);
    q.swap(queued);
  }
  if (launchThem)
    for (const Queued& each : q) launch(each);
}

yaliComm* makeComm(int nranks, int rank) {
  yaliComm* c = new yaliComm;
  c->rank = rank;
  c->nranks = nranks;
  std::lock_guard<std::mutex> lock(mutex);
  comms.push_back(c);
  return c;
}

}  // namespace

// ---- What the tests set and read (through dlsym) ---------------------------------------------------

extern "C" {
// yaliCommInitRank fails (yaliSystemError) on this rank; -1: on none.
__attribute__((visibility("default"))) int fakeYaliInitFailRank = -1;
// What yaliCommDestroy returns (after ending the comm, as libyali does on a timeout).
__attribute__((visibility("default"))) yaliResult_t fakeYaliDestroyResult = yaliSuccess;
// What yaliGroupStart and yaliGroupEnd return (yaliGroupEnd ends the group first).
__attribute__((visibility("default"))) yaliResult_t fakeYaliGroupStartResult = yaliSuccess;
__attribute__((visibility("default"))) yaliResult_t fakeYaliGroupEndResult = yaliSuccess;
__attribute__((visibility("default"))) thread_local int fakeYaliGroupDepth = 0;  // this thread's, as libyali's
// What cudaMalloc returns (cudaSuccess: it allocates).
__attribute__((visibility("default"))) cudaError_t fakeCudaMallocResult = cudaSuccess;
// A cudaMalloc of more bytes than this fails (cudaErrorMemoryAllocation); 0: no limit.
__attribute__((visibility("default"))) size_t fakeCudaMallocLimit = 0;
// A cudaMemcpyAsync into this destination is noted and fails (cudaErrorInvalidValue), copying
// nothing; null: none fails.
__attribute__((visibility("default"))) void* fakeCudaMemcpyFailDst = nullptr;
// A collective given this buffer (send or recv) refuses it, as libyali refuses host memory; null:
// none.
__attribute__((visibility("default"))) void* fakeYaliRefusedBuffer = nullptr;
// 1: point-to-point is off, as libyali's comms with YALI_P2P_CHANNELS=0 (every yaliSend and yaliRecv
// refused with yaliInvalidUsage, count 0 included); 0: on.
__attribute__((visibility("default"))) int fakeYaliP2POff = 0;
// This stream is being captured (capture id 1); null: none is.
__attribute__((visibility("default"))) void* fakeCudaCapturedStream = nullptr;
// The legacy default stream (0, cudaStreamLegacy) of this device is being captured: asked about
// stream 0 while this device is current, the capture queries say so; -1: none is.
__attribute__((visibility("default"))) int fakeCudaCapturedLegacyDevice = -1;
// What cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported) says (1: the device has memory pools).
__attribute__((visibility("default"))) int fakeCudaMemoryPoolsSupported = 1;
}

namespace {
std::map<std::string, int> cudaFailuresIn;  // fakeCudaFailNth: call -> how many calls until it fails
}  // namespace

// The n-th call from now (1: the next) of `call` fails: cudaMemcpyAsync (cudaErrorInvalidValue,
// copying nothing), cudaMallocAsync or cudaMalloc (cudaErrorMemoryAllocation).
FAKE_EXPORT void fakeCudaFailNth(const char* call, int n) {
  std::lock_guard<std::mutex> lock(mutex);
  cudaFailuresIn[call] = n;
}

namespace {
// Whether this call of `call` is the one fakeCudaFailNth asked to fail (counts it).
bool cudaFailsNow(const char* call) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cudaFailuresIn.find(call);
  if (it == cudaFailuresIn.end() || --it->second > 0) return false;
  cudaFailuresIn.erase(it);
  return true;
}
}  // namespace

// The next call of `call` on a live comm fails with `result` and `message`.
FAKE_EXPORT void fakeYaliFailNext(const char* call, yaliResult_t result, const char* message) {
  std::lock_guard<std::mutex> lock(mutex);
  failures.push_back({call, result, message});
}

// The next call of `call` on a live comm is accepted, and its kernel fails on the device: the comm
// then fails as fakeYaliSetAsyncError makes it (yaliTimeout), its failure flag set.
FAKE_EXPORT void fakeYaliFailAfterLaunch(const char* call) {
  std::lock_guard<std::mutex> lock(mutex);
  failuresAfterLaunch.push_back(call);
}

// The comm fails asynchronously, as when a device-side wait runs out.
FAKE_EXPORT void fakeYaliSetAsyncError(yaliComm_t comm, yaliResult_t result, const char* text) {
  comm->asyncError = result;
  comm->asyncText = text;
  comm->failureFlag = result != yaliSuccess ? 1 : 0;
}

// ---- yali.h -------------------------------------------------------------------------------------------

FAKE_EXPORT const char* yaliGetLastError(yaliComm_t comm) {
  if (comm != nullptr && !comm->ended) return comm->lastError.c_str();
  return tlsLastError.c_str();
}

FAKE_EXPORT yaliResult_t yaliGetUniqueId(yaliUniqueId* id) {
  fakeRecord("yaliGetUniqueId", nullptr);
  memset(id, 0, sizeof(*id));
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommInitRank(yaliComm_t* comm, int nranks, yaliUniqueId, int rank) {
  fakeRecord("yaliCommInitRank", nullptr);
  *comm = nullptr;
  if (rank == fakeYaliInitFailRank)
    return fail(yaliSystemError, nullptr, "yaliCommInitRank: rank %d fails as the test asked", rank);
  *comm = makeComm(nranks, rank);
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommInitAll(yaliComm_t* out, int ndev, const int*) {
  fakeRecord("yaliCommInitAll", nullptr);
  for (int i = 0; i < ndev; ++i) out[i] = makeComm(ndev, i);
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommDestroy(yaliComm_t comm) {
  fakeRecord("yaliCommDestroy", comm);
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliCommDestroy: comm is NULL");
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "yaliCommDestroy: comm was destroyed or aborted");
  comm->ended = true;
  if (fakeYaliDestroyResult != yaliSuccess)
    return fail(fakeYaliDestroyResult, nullptr, "yaliCommDestroy: rank %d: the comm's calls had not finished",
                comm->rank);
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommAbort(yaliComm_t comm) {
  fakeRecord("yaliCommAbort", comm);
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliCommAbort: comm is NULL");
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "yaliCommAbort: comm was destroyed or aborted");
  comm->ended = true;
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommGetAsyncError(yaliComm_t comm, yaliResult_t* asyncError) {
  fakeRecord("yaliCommGetAsyncError", comm);
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliCommGetAsyncError: comm is NULL");
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "yaliCommGetAsyncError: comm was destroyed or aborted");
  *asyncError = comm->asyncError;
  if (comm->asyncError != yaliSuccess)
    fail(comm->asyncError, comm, "yaliCommGetAsyncError: an earlier operation failed: %s", comm->asyncText.c_str());
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommGetFailureFlag(yaliComm_t comm, const int** deviceFlag) {
  fakeRecord("yaliCommGetFailureFlag", comm);
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliCommGetFailureFlag: comm is NULL");
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "yaliCommGetFailureFlag: comm was destroyed or aborted");
  if (deviceFlag == nullptr) return fail(yaliInvalidArgument, comm, "yaliCommGetFailureFlag: deviceFlag is NULL");
  *deviceFlag = &comm->failureFlag;
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommWatchFailureWord(yaliComm_t comm, const uint64_t* deviceWord) {
  fakeRecordBuffers("yaliCommWatchFailureWord", comm, deviceWord, nullptr, 0);
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliCommWatchFailureWord: comm is NULL");
  if (comm->ended) return fail(yaliInvalidUsage, nullptr, "yaliCommWatchFailureWord: comm was destroyed or aborted");
  comm->watch = deviceWord;
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliCommRegister(yaliComm_t comm, void*, size_t, void** handle) {
  const yaliResult_t r = check("yaliCommRegister", comm);
  if (r == yaliSuccess) *handle = comm;  // any non-null token
  return r;
}

FAKE_EXPORT yaliResult_t yaliCommDeregister(yaliComm_t comm, void*) { return check("yaliCommDeregister", comm); }

FAKE_EXPORT yaliResult_t yaliGroupStart() {
  fakeRecord("yaliGroupStart", nullptr);
  if (fakeYaliGroupStartResult != yaliSuccess)
    return fail(fakeYaliGroupStartResult, nullptr, "yaliGroupStart fails as the test asked");
  ++fakeYaliGroupDepth;
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliGroupEnd() {
  fakeRecord("yaliGroupEnd", nullptr);
  if (--fakeYaliGroupDepth == 0) endGroupQueue(true);
  if (fakeYaliGroupEndResult != yaliSuccess)
    return fail(fakeYaliGroupEndResult, nullptr, "yaliGroupEnd fails as the test asked");
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliGroupSimulateEnd() {
  fakeRecord("yaliGroupSimulateEnd", nullptr);
  if (--fakeYaliGroupDepth == 0) endGroupQueue(false);
  if (fakeYaliGroupEndResult != yaliSuccess)
    return fail(fakeYaliGroupEndResult, nullptr, "yaliGroupSimulateEnd fails as the test asked");
  return yaliSuccess;
}

FAKE_EXPORT yaliResult_t yaliAllReduce(const void* send, void* recv, size_t count, yaliDataType_t, yaliRedOp_t,
                                       yaliComm_t comm, cudaStream_t) {
  return collective("yaliAllReduce", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliReduceScatter(const void* send, void* recv, size_t count, yaliDataType_t, yaliRedOp_t,
                                           yaliComm_t comm, cudaStream_t) {
  return collective("yaliReduceScatter", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliAllGather(const void* send, void* recv, size_t count, yaliDataType_t, yaliComm_t comm,
                                       cudaStream_t) {
  return collective("yaliAllGather", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliBroadcast(const void* send, void* recv, size_t count, yaliDataType_t, int,
                                       yaliComm_t comm, cudaStream_t) {
  return collective("yaliBroadcast", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliBcast(void* buff, size_t count, yaliDataType_t, int, yaliComm_t comm, cudaStream_t) {
  return collective("yaliBcast", comm, buff, buff, count);
}

FAKE_EXPORT yaliResult_t yaliReduce(const void* send, void* recv, size_t count, yaliDataType_t, yaliRedOp_t, int,
                                    yaliComm_t comm, cudaStream_t) {
  return collective("yaliReduce", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliGather(const void* send, void* recv, size_t count, yaliDataType_t, int, yaliComm_t comm,
                                    cudaStream_t) {
  return collective("yaliGather", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliScatter(const void* send, void* recv, size_t count, yaliDataType_t, int, yaliComm_t comm,
                                     cudaStream_t) {
  return collective("yaliScatter", comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliAlltoAll(const void* send, void* recv, size_t count, yaliDataType_t, yaliComm_t comm,
                                      cudaStream_t) {
  return collective("yaliAlltoAll", comm, send, recv, count);
}

// Point-to-point: as a collective (the comm and the buffer noted, a refused buffer refused, queued
// in an open group); the peer is not noted.
// As libyali's: point-to-point off refuses every call; count 0 on a live comm moves and queues
// nothing, unnoted (libyali-nccl asks a comm so whether it takes point-to-point).
yaliResult_t pointToPoint(const char* call, yaliComm* comm, const void* send, const void* recv, size_t count) {
  const bool live = comm != nullptr && !comm->ended && comm->asyncError == yaliSuccess;
  if (live && fakeYaliP2POff != 0)
    return fail(yaliInvalidUsage, comm, "%s: point-to-point is off on this comm (YALI_P2P_CHANNELS=0)", call);
  if (live && count == 0) return yaliSuccess;
  return collective(call, comm, send, recv, count);
}

FAKE_EXPORT yaliResult_t yaliSend(const void* send, size_t count, yaliDataType_t, int, yaliComm_t comm, cudaStream_t) {
  return pointToPoint("yaliSend", comm, send, nullptr, count);
}

FAKE_EXPORT yaliResult_t yaliRecv(void* recv, size_t count, yaliDataType_t, int, yaliComm_t comm, cudaStream_t) {
  return pointToPoint("yaliRecv", comm, nullptr, recv, count);
}

// Checks the comm and, through fakeYaliFailNext, the scalars; never the buffers (libyali's does not).
FAKE_EXPORT yaliResult_t yaliAlgoInfo(yaliComm_t comm, yaliCollective_t, const void*, const void*, size_t,
                                      yaliDataType_t, yaliRedOp_t, int, yaliAlgoInfo_t* info) {
  const yaliResult_t r = check("yaliAlgoInfo", comm);
  if (r == yaliSuccess) {
    memset(info, 0, sizeof(*info));
    strcpy(info->algorithm, "fake");
  }
  return r;
}

// ---- The CUDA runtime, on host memory -------------------------------------------------------------------

FAKE_EXPORT cudaError_t cudaGetDevice(int* device) {
  *device = tlsDevice;
  return cudaSuccess;
}

// The devices that a thread other than the one that called fakeWatchOtherThreadsDevices set current
// since (a bit per device below 32): on a real GPU, setting a device makes a CUDA context there
// (hundreds of MB), so a thread of libyali-nccl's that sets a device its comms are not on costs
// every process that much.
__attribute__((visibility("default"))) unsigned fakeDevicesSetByOtherThreads = 0;
std::mutex watchMutex;  // guards the two below
std::thread::id watchingThread;
bool watching = false;

extern "C" __attribute__((visibility("default"))) void fakeWatchOtherThreadsDevices() {
  std::lock_guard<std::mutex> lock(watchMutex);
  watchingThread = std::this_thread::get_id();
  watching = true;
  __atomic_store_n(&fakeDevicesSetByOtherThreads, 0u, __ATOMIC_RELEASE);
}

FAKE_EXPORT cudaError_t cudaSetDevice(int device) {
  tlsDevice = device;
  bool other = false;
  {
    std::lock_guard<std::mutex> lock(watchMutex);
    other = watching && std::this_thread::get_id() != watchingThread;
  }
  if (other && device >= 0 && device < 32)
    __atomic_fetch_or(&fakeDevicesSetByOtherThreads, 1u << device, __ATOMIC_ACQ_REL);
  return cudaSuccess;
}

FAKE_EXPORT const char* cudaGetErrorString(cudaError_t err) {
  return err == cudaSuccess ? "fake CUDA: no error" : "fake CUDA: error";
}

// Noted with the stream made (the event's handle), as cudaStreamDestroy with the stream it ends, so
// that a test can tell whether a stream was destroyed.
// A late peer's collective, as a rank whose stream waits for it sees it (fakeStreamLate): the stream
// made by the `ordinal`-th cudaStreamCreateWithFlags from the call on (1: the next) answers its first
// `answered` queries as usual, then cudaErrorNotReady for `ms` from the next one on, and then as
// usual again: a round on it that completes `ms` late (its peer issues the collective then). On a
// GPU, NCCL's kernel waits on the stream for the late peer; here the set-up's collectives are
// carried out at their group's end, and only the wait for them is late.
namespace {
struct LateStream {
  int ordinal = 0;  // streams still to be made before the late one; 0: none armed
  const void* stream = nullptr;
  int answered = 0;
  long long ms = 0;
  bool started = false;
  std::chrono::steady_clock::time_point from;
};
std::mutex lateMutex;
LateStream late;
}  // namespace

extern "C" __attribute__((visibility("default"))) void fakeStreamLate(int ordinal, int answered, long long ms) {
  std::lock_guard<std::mutex> lock(lateMutex);
  late = LateStream();
  late.ordinal = ordinal;
  late.answered = answered;
  late.ms = ms;
}

FAKE_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  fakeRecord("cudaStreamCreateWithFlags", *stream);
  std::lock_guard<std::mutex> lock(lateMutex);
  if (late.ordinal > 0 && --late.ordinal == 0) late.stream = *stream;
  return cudaSuccess;
}

namespace {
// Whether the late stream's query is to say not ready (fakeStreamLate).
bool lateNow(const void* stream) {
  std::lock_guard<std::mutex> lock(lateMutex);
  if (stream == nullptr || stream != late.stream) return false;
  if (late.answered > 0) {
    --late.answered;
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!late.started) {
    late.started = true;
    late.from = now;
  }
  return now < late.from + std::chrono::milliseconds(late.ms);
}
}  // namespace

extern "C" bool fakeStreamBusy(const void* stream);  // fake_nccl.cc

// Calls that on a GPU would never return, or queue work that never runs: a cudaStreamSynchronize or
// a cudaMemcpyAsync on a stream where an NCCL call waits for a peer's that never came
// (fakeStreamBusy: say a set-up round that timed out, whose collective stays queued until the comm
// is aborted). This fake's synchronization returns at once and its copies are made at once, so a
// test reads this count instead (what libyali-nccl must never do after a timed-out round).
extern "C" {
__attribute__((visibility("default"))) int fakeCudaCallsBehindWaitingNccl = 0;
}
namespace {
void countIfBehindWaitingNccl(cudaStream_t stream) {
  if (stream != nullptr && fakeStreamBusy(stream))
    __atomic_add_fetch(&fakeCudaCallsBehindWaitingNccl, 1, __ATOMIC_RELAXED);
}
}  // namespace

FAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  countIfBehindWaitingNccl(stream);
  return cudaSuccess;
}
// Not ready while an NCCL call issued on the stream waits for a peer's (fake_nccl.cc).
FAKE_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (cudaFailsNow("cudaStreamQuery")) return cudaErrorLaunchFailure;
  if (stream != nullptr && fakeStreamBusy(stream)) return cudaErrorNotReady;
  return lateNow(stream) ? cudaErrorNotReady : cudaSuccess;
}

// Never freed (its address never names another stream): an NCCL call left waiting on it for a peer
// that never came (a set-up round that timed out) keeps it busy (fakeStreamBusy).
FAKE_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  fakeRecord("cudaStreamDestroy", stream);
  return cudaSuccess;
}

namespace {
std::map<size_t, std::vector<void*>> asyncPool;  // freed blocks by size, the last freed last
std::map<void*, size_t> asyncBytes;              // every block's size
}  // namespace

// Both noted with their stream (the event's handle) and memory (fakeEventBuffers: an allocation's
// as recv, with its bytes; a free's as send), so that a test sees on which stream, and when, a
// staged call's own memory comes and goes.
FAKE_EXPORT cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  *p = nullptr;
  if (cudaFailsNow("cudaMallocAsync")) {
    fakeRecordBuffers("cudaMallocAsync", stream, nullptr, nullptr, bytes);
    return cudaErrorMemoryAllocation;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<void*>& freed = asyncPool[bytes];
    if (!freed.empty()) {
      *p = freed.back();
      freed.pop_back();
    } else {
      *p = calloc(1, bytes);
      if (*p != nullptr) asyncBytes[*p] = bytes;
    }
  }
  fakeRecordBuffers("cudaMallocAsync", stream, nullptr, *p, bytes);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

FAKE_EXPORT cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  fakeRecordBuffers("cudaFreeAsync", stream, p, nullptr, 0);
  std::lock_guard<std::mutex> lock(mutex);
  asyncPool[asyncBytes.at(p)].push_back(p);
  return cudaSuccess;
}

// cudaDevAttrMemoryPoolsSupported is fakeCudaMemoryPoolsSupported (1 unless a test says not);
// every other attribute 0.
FAKE_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value = attr == cudaDevAttrMemoryPoolsSupported ? fakeCudaMemoryPoolsSupported : 0;
  return cudaSuccess;
}

// Allocations and frees are noted with their memory (fakeEventBuffers: an allocation's as recv,
// with its bytes; a free's as send), so that a test can match each free with its allocation.
// The runtime's last error, as cudaGetLastError and cudaPeekAtLastError report it: set by a
// cudaMalloc that fails (only there, in this fake).
namespace {
cudaError_t fakeLastCudaError = cudaSuccess;
}  // namespace
FAKE_EXPORT cudaError_t cudaGetLastError() {
  const cudaError_t e = fakeLastCudaError;
  fakeLastCudaError = cudaSuccess;
  return e;
}
FAKE_EXPORT cudaError_t cudaPeekAtLastError() { return fakeLastCudaError; }

FAKE_EXPORT cudaError_t cudaMalloc(void** p, size_t bytes) {
  const bool tooBig = (fakeCudaMallocLimit != 0 && bytes > fakeCudaMallocLimit) || cudaFailsNow("cudaMalloc");
  *p = fakeCudaMallocResult == cudaSuccess && !tooBig ? malloc(bytes) : nullptr;
  // What cudaMalloc promises of the contents: nothing. A pattern that no flag or count takes for 0
  // catches a caller that reads memory it never wrote.
  if (*p != nullptr) memset(*p, 0xA5, bytes);
  fakeRecordBuffers("cudaMalloc", nullptr, nullptr, *p, bytes);
  if (fakeCudaMallocResult != cudaSuccess) return fakeLastCudaError = fakeCudaMallocResult;
  if (tooBig) return fakeLastCudaError = cudaErrorMemoryAllocation;
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

extern "C" bool fakeDeviceBusy(int device);  // fake_nccl.cc

// cudaFree synchronizes the device: behind an NCCL call waiting for a peer's that never came, on a GPU
// it never returns (counted in fakeCudaCallsBehindWaitingNccl).
FAKE_EXPORT cudaError_t cudaFree(void* p) {
  fakeRecordBuffers("cudaFree", nullptr, p, nullptr, 0);
  if (p != nullptr && fakeDeviceBusy(tlsDevice)) __atomic_add_fetch(&fakeCudaCallsBehindWaitingNccl, 1, __ATOMIC_RELAXED);
  free(p);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = calloc(1, bytes);
  fakeRecordBuffers("cudaHostAlloc", nullptr, nullptr, *p, bytes);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

FAKE_EXPORT cudaError_t cudaFreeHost(void* p) {
  fakeRecordBuffers("cudaFreeHost", nullptr, p, nullptr, 0);
  free(p);
  return cudaSuccess;
}

// Noted with its destination (the event's handle), so that a test can tell which word a copy
// wrote, and its source and size (fakeEventBuffers: send, recv, count).
FAKE_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                         cudaStream_t stream) {
  fakeRecordBuffers("cudaMemcpyAsync", dst, src, dst, bytes);
  countIfBehindWaitingNccl(stream);
  if (dst == nullptr || src == nullptr || dst == fakeCudaMemcpyFailDst || cudaFailsNow("cudaMemcpyAsync"))
    return cudaErrorInvalidValue;  // as CUDA
  memmove(dst, src, bytes);
  return cudaSuccess;
}

// Whether the capture queries report `stream` as captured now (fakeCudaCapturedStream,
// fakeCudaCapturedLegacyDevice with the current device).
static bool capturedNow(cudaStream_t stream) {
  if (stream != nullptr && stream == fakeCudaCapturedStream) return true;
  return (stream == nullptr || stream == cudaStreamLegacy) && tlsDevice == fakeCudaCapturedLegacyDevice;
}

FAKE_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const bool captured = capturedNow(stream);
  *status = captured ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

// As cudaStreamIsCapturing (capture id 1); the parameters are this CUDA release's.
FAKE_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                                 unsigned long long* id, cudaGraph_t* graph,
                                                 const cudaGraphNode_t** dependencies,
                                                 const cudaGraphEdgeData** edges, size_t* count) {
  const bool captured = capturedNow(stream);
  *status = captured ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id != nullptr) *id = captured ? 1 : 0;
  if (graph != nullptr) *graph = nullptr;
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return cudaSuccess;
}

// Events: recorded in the log with the stream they are recorded on or waited for on (the order of
// the hierarchical scratch's users across streams).
FAKE_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t stream) {
  fakeRecord("cudaEventRecord", stream);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t stream, unsigned int) {
  fakeRecord("cudaEventRecordWithFlags", stream);
  return cudaSuccess;
}

// Noted with the event (nothing to wait for: copies are made at once here).
FAKE_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  fakeRecord("cudaEventSynchronize", event);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t, unsigned int) {
  fakeRecord("cudaStreamWaitEvent", stream);
  return cudaSuccess;
}
