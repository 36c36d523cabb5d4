#include "core/comm.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "collectives/copy_engine/copy_engine.h"
#include "collectives/p2p/p2p.h"
#include "collectives/registry.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/ipc_imports.h"
#include "core/reaper.h"

yaliComm::~yaliComm() {
  yali::releaseRegistrations(this);
  if (control != nullptr) cudaStreamDestroy(control);  // returns at once, even with work queued
  for (cudaEvent_t e : {eagerOrder.event, captureOrder.event})
    if (e != nullptr) cudaEventDestroy(e);  // likewise, even if still pending
  cudaGetLastError();
}

namespace yali {
namespace {

// What each rank tells the others at set-up. Process ids come from the bootstrap, which verified
// them (Bootstrap::pids), not from here.
struct PeerInfo {
  int32_t device;
  char gpuBusId[32];        // cudaDeviceGetPCIBusId: the same GPU has the same id in every process
  int32_t multiprocessors;  // of that GPU
  uint64_t windowAddress;   // valid in the sender's process only
  uint64_t windowBytes;
  uint64_t settingsDigest;  // ranks must agree on everything that steers algorithm choice
};

// cudaDeviceEnablePeerAccess from the current device to `peer`, once per process: every later comm
// on the same pair would get cudaErrorPeerAccessAlreadyEnabled, harmless but reported by tools
// (compute-sanitizer lists each as an API error).
cudaError_t enablePeerAccessOnce(int device, int peer) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard<std::mutex> lock(mutex);
  if (enabled.count({device, peer})) return cudaSuccess;
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {  // enabled by someone else in this process
    cudaGetLastError();
    e = cudaSuccess;
  }
  if (e == cudaSuccess) enabled.insert({device, peer});
  return e;
}

// The windows of this process's comms, by address: a peer in the same process (one thread per GPU,
// yaliCommInitRank) uses our window at its address, and holds it so that it outlives every kernel
// of the peer's.
std::mutex windowsMutex;
std::map<uint64_t, std::weak_ptr<SharedMemory>>& localWindows() {
  static auto* m = new std::map<uint64_t, std::weak_ptr<SharedMemory>>();  // never destroyed
  return *m;
}

void publishLocalWindow(const std::shared_ptr<SharedMemory>& window) {
  std::lock_guard<std::mutex> lock(windowsMutex);
  auto& m = localWindows();
  for (auto it = m.begin(); it != m.end();) it = it->second.expired() ? m.erase(it) : std::next(it);
  m[reinterpret_cast<uint64_t>(window->data())] = window;
}

std::shared_ptr<SharedMemory> findLocalWindow(uint64_t address) {
  std::lock_guard<std::mutex> lock(windowsMutex);
  auto it = localWindows().find(address);
  return it == localWindows().end() ? nullptr : it->second.lock();
}

// HostStatus blocks come from pinned pages that are never freed (cudaFreeHost waits for every
// kernel on the device, like cudaFree), and are reused once a comm's resources are released. The
// pool holds as many as comms lived at once.
struct HostStatusPool {
  std::mutex mutex;
  std::vector<HostStatus*> free;
};
HostStatusPool& hostStatusPool() {
  static auto* pool = new HostStatusPool();  // never destroyed
  return *pool;
}

std::shared_ptr<HostStatus> newHostStatus(std::string* error) {
  HostStatusPool& pool = hostStatusPool();
  HostStatus* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (pool.free.empty()) {
      constexpr size_t kBlocks = 64;
      void* pages = nullptr;
      cudaError_t e = cudaHostAlloc(&pages, kBlocks * sizeof(HostStatus), cudaHostAllocMapped | cudaHostAllocPortable);
      if (e != cudaSuccess) {
        cudaGetLastError();
        *error = std::string("cudaHostAlloc: ") + cudaGetErrorString(e);
        return nullptr;
      }
      for (size_t i = 0; i < kBlocks; ++i) pool.free.push_back(static_cast<HostStatus*>(pages) + i);
    }
    block = pool.free.back();
    pool.free.pop_back();
  }
  memset(block, 0, sizeof(HostStatus));
  return std::shared_ptr<HostStatus>(block, [](HostStatus* h) {
    std::lock_guard<std::mutex> lock(hostStatusPool().mutex);
    hostStatusPool().free.push_back(h);
  });
}

// Ranks that share a GPU (YALI_ALLOW_SHARED_GPU). gpuOf[r] names rank r's GPU, the same name in
// every process; multiprocessors is the smallest count among the ranks' GPUs. Every rank sees the
// same gpuOf, so all of them fail together or cap their blocks alike (the algorithms need the same
// block count on every rank).
yaliResult_t applyGpuSharing(const std::vector<std::string>& gpuOf, int multiprocessors,
                             bool allowed, const std::vector<yaliComm*>& comms, const char* call) {
  std::map<std::string, std::vector<int>> ranksOn;
  for (int r = 0; r < static_cast<int>(gpuOf.size()); ++r) ranksOn[gpuOf[r]].push_back(r);
  const std::vector<int>* crowded = nullptr;
  for (const auto& entry : ranksOn)
    if (entry.second.size() > 1 && (crowded == nullptr || entry.second.size() > crowded->size()))
      crowded = &entry.second;
  if (crowded == nullptr) return yaliSuccess;
  const int sharing = static_cast<int>(crowded->size());
  if (!allowed)
    return fail(yaliInvalidUsage, nullptr,
                "%s: ranks %d and %d are on the same GPU (%s); YALI needs one GPU per rank "
                "(YALI_ALLOW_SHARED_GPU=1 lets ranks share one, for testing)",
                call, (*crowded)[0], (*crowded)[1], gpuOf[(*crowded)[0]].c_str());
  // The kernels of all ranks on a GPU must be resident together, or a rank waits for a peer whose
  // blocks never start. Assume one block per multiprocessor (a two-shot block, 512 threads of 128
  // registers, fills one) and give the ranks half of them: the other half is for the next
  // kernels, which programmatic launch may start while these still wait.
  const int cap = std::max(1, multiprocessors / (2 * sharing));
  for (yaliComm* comm : comms) comm->selector.limitBlocks(cap);
  logInfo("%s: up to %d ranks share a GPU: at most %d blocks per kernel", call, sharing, cap);
  // Point-to-point: a launch runs up to 2 x (nranks - 1) x channels lanes, all of which must be
  // resident at once (p2p.h), kP2PBlocksPerSM per multiprocessor, half of them left as above.
  for (yaliComm* comm : comms) {
    if (comm->p2pChannels == 0 || comm->nranks < 2) continue;
    const int lanes = std::max(1, multiprocessors * kP2PBlocksPerSM / (2 * sharing));
    comm->p2pChannels = std::clamp(lanes / (2 * (comm->nranks - 1)), 1, comm->p2pChannels);
    logInfo("%s: point-to-point over %d ring(s) per pair", call, comm->p2pChannels);
  }
  return yaliSuccess;
}

// Waits for everything queued on the comm's control stream, polling until deadlineMs: a copy or
// memset there may not run for as long as another kernel keeps every SM (another library's
// collective waiting for a peer, say), and cudaStreamSynchronize would then wait that long.
bool waitForControl(yaliComm* comm, int64_t deadlineMs, std::string* error) {
  for (int64_t sleepUs = 10;; sleepUs = std::min<int64_t>(sleepUs * 2, 2000)) {
    const cudaError_t e = cudaStreamQuery(comm->control);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      cudaGetLastError();
      *error = std::string("the comm's control stream: ") + cudaGetErrorString(e);
      return false;
    }
    if (nowMs() > deadlineMs) {  // not comm->cancel: abort itself writes through this stream
      *error = "work on the comm's control stream did not finish in time (the GPU did not run it)";
      return false;
    }
    usleep(static_cast<useconds_t>(sleepUs));
  }
}

// Allocates the window (zeroed: flags 0 and LL packets with flag 0 never match an epoch >= 1, and
// LocalState at its end), the host-mapped status and the control stream on the current device, and
// sets up the selector. Waits only for its own stream: never for other work on the device.
yaliResult_t allocateRankResources(yaliComm* comm, const char* call) {
  // The layout before the selector (whose limits come from it), from the settings alone: the
  // same on every rank (core/window_layout.h: computeLayout), which the settings digest below enforces.
  comm->windowRegions = laidOutRegions(windowRegionsFor(comm->settings, comm->nranks));
  comm->layout = computeLayout(comm->nranks, comm->settings, comm->windowRegions);
  comm->p2pChannels = static_cast<int>(comm->layout.p2pChannels);
  std::shared_ptr<DeviceResources> res = makeDeviceResources();
  res->device = comm->device;
  YALI_CUDA_CHECK(cudaStreamCreateWithFlags(&comm->control, cudaStreamNonBlocking));
  YALI_CUDA_CHECK(cudaEventCreateWithFlags(&comm->eagerOrder.event, cudaEventDisableTiming));
  YALI_CUDA_CHECK(cudaEventCreateWithFlags(&comm->captureOrder.event, cudaEventDisableTiming));
  YALI_CUDA_CHECK(cudaEventCreateWithFlags(&res->controlDone, cudaEventDisableTiming));
  YALI_CUDA_CHECK(cudaEventCreateWithFlags(&res->serial, cudaEventDisableTiming));
  YALI_CUDA_CHECK(cudaStreamCreateWithFlags(&res->probe, cudaStreamNonBlocking));
  std::string err;
  res->window = SharedMemory::allocate(comm->device, comm->layout.total, &err);
  if (!res->window) return fail(yaliUnhandledCudaError, comm, "%s: allocating the window: %s", call, err.c_str());
  res->hostStatus = newHostStatus(&err);
  if (!res->hostStatus) return fail(yaliUnhandledCudaError, comm, "%s: %s", call, err.c_str());
  HostStatus* status = res->hostStatus.get();
  status->closedWords[0] = status->closedWords[1] = 1;
  YALI_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&res->hostStatusDev), status, 0));
  char* window = res->window->data();
  res->local = reinterpret_cast<LocalState*>(window + comm->layout.local);
  YALI_CUDA_CHECK(cudaMemsetAsync(window, 0, comm->layout.total, comm->control));
  // LocalState's first value. From pageable memory the copy is staged before cudaMemcpyAsync
  // returns, so `init` may go out of scope; the stream is waited for below anyway.
  LocalState init{};
  init.epoch = comm->settings.testEpochStart;
  YALI_CUDA_CHECK(cudaMemcpyAsync(res->local, &init, sizeof(init), cudaMemcpyHostToDevice, comm->control));
  // The zeroes land before any peer learns the address. Bounded by YALI_TIMEOUT_MS (waitForControl).
  if (!waitForControl(comm, nowMs() + comm->settings.timeoutMs, &err)) {
    // The memset and the copy may still run: the window's release (the reaper, when `res` goes)
    // must wait for them, as it does for a retired comm's control stream (retire).
    cudaEventRecord(res->controlDone, comm->control);
    cudaGetLastError();
    return fail(yaliTimeout, comm, "%s: clearing the window: %s (YALI_TIMEOUT_MS=%lld)", call, err.c_str(),
                static_cast<long long>(comm->settings.timeoutMs));
  }
  res->peerWindows[comm->rank] = window;
  comm->res = res;
  comm->status = res->hostStatus;
  publishLocalWindow(res->window);

  int major = 0;
  YALI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, comm->device));
  comm->smMajor = major;
  comm->copyEngineOk = copyEngineAvailable();
  // Querying every algorithm's kernels also loads them all now (registry.h: maxLaunchableThreads).
  SelectorLimits limits{};
  limits.smMajor = major;
  limits.nranks = comm->nranks;
  limits.llPayloadBytes = static_cast<int64_t>(comm->layout.llSlotBytes / 2);
  limits.stagingBytes = static_cast<int64_t>(comm->layout.stagingBytes);
  limits.pullBufferBytes = static_cast<int64_t>(comm->layout.copyInBytes);
  for (int a = 0; a < kNumAlgos; ++a) limits.maxThreads[a] = maxLaunchableThreads(static_cast<Algo>(a));
  // The point-to-point kernels too (no registry row: collectives/p2p/p2p.h).
  if (const cudaError_t e = loadP2PKernels(); e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: loading the point-to-point kernels: %s", call, cudaGetErrorString(e));
  }
  if (!comm->selector.init(comm->settings, limits, &err))
    return fail(yaliInvalidArgument, comm, "%s: %s", call, err.c_str());
  return yaliSuccess;
}

// Marks the comm closed on the device (LocalState: failed and closed both set): its launches still
// queued, and replays of graphs that captured its calls, then touch nothing but its state words.
bool closeOnDevice(yaliComm* comm, int64_t deadlineMs, std::string* error) {
  if (!comm->res) return true;
  return writeDeviceWords(comm, &comm->res->local->failed, comm->res->hostStatus->closedWords,
                          sizeof(comm->res->hostStatus->closedWords), deadlineMs, error);
}

// The comm's end, after closeOnDevice: its handle stops resolving, and its resources go to the
// reaper once no graph holds them any more (the comm object itself is freed when the last API call
// holding it returns).
void retire(yaliComm* comm, yaliComm_t handle, HandleState how) {
  releaseRegistrations(comm);
  if (comm->res) {
    comm->res->eagerIssued = comm->eagerIssued;
    // Never waits. Not recorded (an error): the event reads as complete, as before it was waited for.
    if (comm->res->controlDone != nullptr && comm->control != nullptr)
      cudaEventRecord(comm->res->controlDone, comm->control);
    cudaGetLastError();
  }
  // The copy engines' state holds a reference to res too: dropped first, so that the last one
  // (when no graph and no copy-engine call in flight holds it) goes with comm->res, here. Its
  // release is then posted on this thread, and commDestroy waits for it as yali.h says. Kept
  // until the comm object goes, it was released after yaliCommDestroy had returned, on the
  // reaper, possibly while the process was exiting (CUDA calls racing the runtime's teardown).
  comm->copyEngine.reset();
  comm->res.reset();
  comm->bootstrap.reset();  // closes its sockets: peers' later exchanges fail instead of waiting
  retireCommHandle(handle, how);
}

}  // namespace

ScopedDevice::ScopedDevice(int device) {
  status_ = cudaGetDevice(&previous_);
  if (status_ == cudaSuccess && previous_ != device) status_ = cudaSetDevice(device);
  else previous_ = -1;  // nothing to restore
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

DeviceArgs baseDeviceArgs(const yaliComm* comm) {
  DeviceArgs a{};
  a.rank = comm->rank;
  a.nranks = comm->nranks;
  a.window = comm->res->window->data();
  for (int p = 0; p < comm->nranks; ++p) a.peerWindows[p] = comm->res->peerWindows[p];
  a.layout = comm->layout;
  a.local = comm->res->local;
  a.host = comm->res->hostStatusDev;
  a.timeoutNs = static_cast<uint64_t>(comm->settings.timeoutMs) * 1000000ull;
  a.teamsPerBlock = 1;
  a.regEpoch = comm->regEpoch;
  a.failureWatch = comm->failureWatch;
  return a;
}

std::shared_ptr<DeviceResources> makeDeviceResources() {
  // The last holder may be a CUDA callback thread (a graph's user object), where CUDA must not be
  // called: the release always happens on the reaper, once the comm's eager launches have ended
  // (eagerLaunchesEnded), and kReleaseGraceMs after that. The grace: each block of a launch
  // counts itself into eagerBlocksEnded without a fence (device.cuh: exitLaunch; a block barrier
  // and a fence before the count lengthened every eager launch by about 0.5 us), so stores of the
  // launch's warps may still be on their way then (waitForEagerLaunches says which); they drain
  // within microseconds (memory queues and NVLink, no host round trip), and unmapping the window
  // never waits for the device. 2 ms is a margin of over a hundred times that; yaliCommDestroy
  // waits for this release, so the grace is paid by every destroy (it was 50 ms until session 18:
  // 1000 init/destroy cycles of two comms took 106 s on an H200, against 0.7 s with the fence).
  constexpr int64_t kReleaseGraceMs = 2;
  return std::shared_ptr<DeviceResources>(new DeviceResources(), [](DeviceResources* r) {
    auto drainedAt = std::make_shared<int64_t>(-1);
    Reaper::post([r, drainedAt] {
      if (r->hostStatus != nullptr && r->local != nullptr) {
        if (r->device >= 0) cudaSetDevice(r->device);
        if (!eagerLaunchesEnded(r, r->eagerIssued)) return false;
        // The copy engines' count may have answered while a read was still in flight: its copy
        // lands in pinned memory that goes with the pool, so let it land first (never blocking
        // the reaper, which serves every comm).
        std::lock_guard<std::mutex> lock(r->probeMutex);
        if (r->probeInFlight && cudaStreamQuery(r->probe) == cudaErrorNotReady) return false;
        cudaGetLastError();
        r->probeInFlight = false;
      }
      if (r->controlDone != nullptr && cudaEventQuery(r->controlDone) == cudaErrorNotReady) return false;
      cudaGetLastError();
      if (*drainedAt < 0) *drainedAt = nowMs();
      // Whole milliseconds: more than kReleaseGraceMs of them have passed, so at least that long.
      if (nowMs() - *drainedAt <= kReleaseGraceMs) return false;
      if (r->device >= 0) cudaSetDevice(r->device);
      if (r->controlDone != nullptr) cudaEventDestroy(r->controlDone);
      if (r->serial != nullptr) cudaEventDestroy(r->serial);
      {
        std::lock_guard<std::mutex> lock(r->probeMutex);
        if (r->probe != nullptr) cudaStreamDestroy(r->probe);
      }
      delete r;
      cudaGetLastError();
      return true;
    });
  });
}

namespace {

const volatile HostStatus* statusOf(const yaliComm* comm) { return comm->status.get(); }

}  // namespace

yaliResult_t commAsyncError(const yaliComm* comm) {
  const volatile HostStatus* s = statusOf(comm);
  if (s == nullptr) return yaliSuccess;
  const int failure = s->failure;
  std::atomic_thread_fence(std::memory_order_acquire);  // the details were written before it
  switch (failure) {
    case kFailNone: return yaliSuccess;
    case kFailTimeout: return yaliTimeout;
    case kFailAborted: return yaliInvalidUsage;
    case kFailMismatch: return yaliInvalidUsage;
    case kFailCounts: return yaliInvalidUsage;
    case kFailHost: return yaliUnhandledCudaError;
    case kFailWatched: return yaliRemoteError;
    case kFailP2PBytes: return yaliInvalidUsage;
    case kFailRemote:
      // A peer's failure reaches every rank as the same code: a peer that timed out (it waited for
      // a rank that died or hung) is a timeout here too, so every survivor reports yaliTimeout; a
      // peer's yaliCommAbort is yaliRemoteError; differing registered calls are invalid usage.
      switch (failureCode(s->failureRemoteCode)) {
        case kFailTimeout: return yaliTimeout;
        case kFailMismatch:
        case kFailCounts:
        case kFailP2PBytes: return yaliInvalidUsage;
        default: return yaliRemoteError;
      }
    default: return yaliInternalError;
  }
}

std::string commAsyncErrorText(yaliComm* comm) {
  const volatile HostStatus* s = statusOf(comm);
  if (s == nullptr || s->failure == kFailNone) return "";
  std::atomic_thread_fence(std::memory_order_acquire);  // the details were written before failure
  auto what = [&](int code) -> std::string {
    switch (code) {
      case kFailTimeout:
        return "a device-side wait for a peer timed out (YALI_TIMEOUT_MS; did every rank make the "
               "same call, with registered buffers on all ranks or on none?)";
      case kFailMismatch:
        return "the ranks made different calls on registered buffers (count, datatype, op, the "
               "buffers' offsets within their registrations, or a registration gone); nothing was "
               "written into a peer's buffer";
      case kFailAborted: return "the communicator was aborted (yaliCommAbort)";
      case kFailCounts:
        return "an alltoallv's counts failed a check on the device; nothing was written into that rank's "
               "recvbuff and its count outputs hold -1";
      case kFailHost:
        return "a CUDA call failed half-way through queuing a copy-engine call (the call returned the "
               "error); the comm refuses every later call";
      case kFailWatched:
        return "the comm's watched failure word (yaliCommWatchFailureWord) was set when a launch "
               "started: another library's step before it failed (libyali-nccl: a node of the "
               "hierarchical communicator failed); that launch wrote all-ones into its output";
      case kFailP2PBytes:
        return "a yaliSend and the yaliRecv it is matched with (the k-th of each between the two ranks) move "
               "different bytes (count x the type's size); nothing of that send was written into the "
               "receive's buffer";
      default: return "unknown failure " + std::to_string(code);
    }
  };
  char where[256];
  if (s->failure == kFailHost)  // no wait failed: the step being queued
    snprintf(where, sizeof where, " (queuing the step before the wait for %s, launch %llu)",
             waitPhaseName(s->failurePhase), static_cast<unsigned long long>(s->failureEpoch));
  else if (s->failure == kFailWatched)  // no wait: the launch's start
    snprintf(where, sizeof where, " (at the start of launch %llu)", static_cast<unsigned long long>(s->failureEpoch));
  else
    snprintf(where, sizeof where, " (timeout %lld ms, wait phase %d: %s, block %d, launch %llu)",
             static_cast<long long>(comm->settings.timeoutMs), s->failurePhase, waitPhaseName(s->failurePhase),
             s->failureBlock, static_cast<unsigned long long>(s->failureEpoch));
  const std::string hostNote = comm->getHostNote();
  const std::string note = hostNote.empty() ? "" : "; " + hostNote;
  const int failure = s->failure;
  if (failure == kFailP2PBytes)  // a receiver's check: the sender is its origin (p2p.cu)
    return what(failure) + " (the sender: rank " + std::to_string(s->failureOrigin) + ")" + where + note;
  if (failure != kFailRemote) return what(failure) + where + note;
  const int code = failureCode(s->failureRemoteCode);
  std::string text = "rank " + std::to_string(s->failureOrigin) + " failed and told this rank: ";
  text += code == kFailAborted ? std::string("it called yaliCommAbort") : what(code);
  if (code == kFailCounts) text += std::string(" (") + waitPhaseName(failureCheck(s->failureRemoteCode)) + ")";
  return text + where;
}

bool writeDeviceWords(yaliComm* comm, void* dst, const void* src, size_t bytes, int64_t deadlineMs,
                      std::string* error) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, comm->control);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *error = std::string("cudaMemcpyAsync on the comm's control stream: ") + cudaGetErrorString(e);
    return false;
  }
  return waitForControl(comm, deadlineMs, error);
}

namespace {

// Errors after which the context runs no kernel again (CUDA's sticky errors): every launch of it
// has ended, one way or the other. Asked of calls made with the comm's device current
// (eagerLaunchesEnded sets it), so that they describe the context the kernels run in.
bool contextIsDead(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

// The read of LocalState::eagerBlocksEnded (eagerLaunchesEnded), under r->probeMutex, on the
// comm's device: 1 the kernels' blocks up to `blocks` have ended, 0 not yet (or no read has landed
// yet), -1 the context is dead. The probe stream carries nothing but these copies, so its being
// idle is the read having landed; the value is used only then.
int probeEagerBlocks(DeviceResources* r, uint64_t blocks) {
  HostStatus* s = r->hostStatus.get();
  if (r->probeInFlight) {
    const cudaError_t q = cudaStreamQuery(r->probe);
    if (q == cudaErrorNotReady) return 0;
    cudaGetLastError();
    r->probeInFlight = false;
    if (q != cudaSuccess) return contextIsDead(q) ? -1 : 0;
    if (*reinterpret_cast<volatile uint64_t*>(&s->eagerBlocksEndedRead) >= blocks) return 1;
  }
  // A new read. The driver holds a copy's issue up while an IPC close waits for the device
  // (CloseGate), which may be for as long as another library's kernel runs: none is issued then.
  if (!CloseGate::tryEnterCall()) return 0;
  const cudaError_t e = cudaMemcpyAsync(&s->eagerBlocksEndedRead, &r->local->eagerBlocksEnded, sizeof(uint64_t),
                                        cudaMemcpyDeviceToHost, r->probe);
  CloseGate::leaveCall();
  if (e != cudaSuccess) {
    cudaGetLastError();
    return contextIsDead(e) ? -1 : 0;
  }
  r->probeInFlight = true;
  return 0;
}

}  // namespace

bool eagerLaunchesEnded(DeviceResources* r, const EagerMark& mark) {
  HostStatus* s = r->hostStatus.get();
  if (s == nullptr || mark.lastSeq == 0) return true;
  // The copy engines' watch (advanceEagerDone: acquire-release on the host). Their last call ended
  // is the last launch: every launch before it has ended too (the comm's launches run in order).
  const uint64_t copyEngineEnded = __atomic_load_n(&s->eagerDone, __ATOMIC_ACQUIRE);
  if (copyEngineEnded >= mark.lastSeq) return true;
  // Else both counts: the kernels' blocks (the probe) and the copy engines' calls. A kernel launch
  // that ended after a copy-engine call shows that call ended too, but the watch catches up anyway;
  // while it has not, the probe still runs, to see a dead context (as before, when the last launch
  // was a copy-engine call).
  const bool copyEnginesEnded = copyEngineEnded >= mark.copyEngineSeq;
  if (copyEnginesEnded && mark.kernelBlocks == 0) return true;  // no kernel was launched eagerly
  std::lock_guard<std::mutex> lock(r->probeMutex);
  if (r->probe == nullptr || r->local == nullptr) return false;
  ScopedDevice onDevice(r->device);
  if (onDevice.status() != cudaSuccess) return false;
  // Relaxed for these calls: the thread may be a user's (deregister, destroy), and another thread may
  // be capturing in the global mode, where a query counts as unsafe and would invalidate its capture.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  cudaGetLastError();
  const int ended = probeEagerBlocks(r, mark.kernelBlocks);
  if (exchanged) cudaThreadExchangeStreamCaptureMode(&mode);
  cudaGetLastError();
  if (ended < 0) return true;  // a dead context: every launch has ended
  return ended > 0 && copyEnginesEnded;
}

bool waitForEagerLaunches(yaliComm* comm, const EagerMark& mark, int64_t deadlineMs) {
  if (!comm->res) return true;
  for (int64_t sleepUs = 5; !eagerLaunchesEnded(comm->res.get(), mark);
       sleepUs = std::min<int64_t>(sleepUs * 2, 1000)) {
    if (nowMs() > deadlineMs || comm->cancel.load()) return false;
    usleep(static_cast<useconds_t>(sleepUs));
  }
  // The count says that no warp of the launches still runs, not that their last stores have
  // landed (device.cuh: countEagerBlockEnded, without a fence). What may still be on its way then:
  // stores into this GPU's memory (the output, the window), which land within nanoseconds, and
  // the last flags published into peers' windows, which stay mapped until the release (after its
  // own longer grace; the LL protocols' unfenced packets go only there). Data a launch writes into
  // a peer's registered buffer is not among them: every block (two-shot: every team) that writes
  // it then passes a barrier and a system-scope release, the flag that tells the peer
  // (block_ops.cuh: signalPeers; device.cuh: publish, st.release.sys): PTX promises that a peer
  // that sees the flag sees the data, and the peer's own launch waits for the flag; a release
  // store waits for the earlier stores to be performed before it goes out, and it went out before
  // this launch ended. The caller may free its buffers (yaliCommDeregister) once this returns.
  // Not covered: a failed call whose wait for a peer's flag timed out while that peer, slow but
  // alive, still writes into this rank's registered output (twoshot_direct) — the timeout made
  // the call fail, and the peer's late writes rest on the IPC mapping's lifetime
  // (registration.cc). Slept once per wait that covers a launch no earlier wait covered: a second
  // wait for the same launches (deregistering many buffers) does not sleep.
  constexpr useconds_t kStoreDrainUs = 100;
  std::atomic<uint64_t>& drained = comm->res->eagerDrained;
  if (mark.lastSeq > drained.load()) {
    usleep(kStoreDrainUs);
    uint64_t seen = drained.load();
    while (seen < mark.lastSeq && !drained.compare_exchange_weak(seen, mark.lastSeq)) {
    }
  }
  return true;
}

yaliResult_t commInitRank(yaliComm_t* out, int nranks, const UniqueIdFields& id, int rank,
                          const Settings& settings) {
  const char* call = "yaliCommInitRank";
  auto owner = std::make_shared<yaliComm>();
  yaliComm* comm = owner.get();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->groupKey = id.token[0] ^ (id.token[1] * UINT64_C(0x9e3779b97f4a7c15));
  comm->settings = settings;
  if (cudaGetDevice(&comm->device) != cudaSuccess)
    return fail(yaliUnhandledCudaError, nullptr, "%s: no usable CUDA device (cudaGetDevice failed)", call);
  yaliResult_t r = allocateRankResources(comm, call);
  if (r != yaliSuccess) return r;

  std::string err;
  Bootstrap* boot = nullptr;
  r = Bootstrap::connect(id, rank, nranks, settings.timeoutMs, &comm->cancel, &boot, &err);
  if (r != yaliSuccess) return fail(r, nullptr, "%s: rank %d of %d: %s", call, rank, nranks, err.c_str());
  comm->bootstrap.reset(boot);
  comm->pids = boot->pids();

  std::vector<PeerInfo> info(nranks);
  PeerInfo& mine = info[rank];
  memset(&mine, 0, sizeof(mine));
  mine.device = comm->device;
  if (cudaDeviceGetPCIBusId(mine.gpuBusId, sizeof(mine.gpuBusId), comm->device) != cudaSuccess ||
      cudaDeviceGetAttribute(&mine.multiprocessors, cudaDevAttrMultiProcessorCount, comm->device) !=
          cudaSuccess)
    return fail(yaliUnhandledCudaError, nullptr,
                "%s: reading device %d's PCI bus id and multiprocessor count: %s", call, comm->device,
                cudaGetErrorString(cudaGetLastError()));
  DeviceResources& res = *comm->res;
  mine.windowAddress = reinterpret_cast<uint64_t>(res.window->data());
  mine.windowBytes = comm->layout.total;
  mine.settingsDigest = settingsDigest(settings);
  r = comm->bootstrap->allGather(info.data(), sizeof(PeerInfo), &err);
  if (r != yaliSuccess) return fail(r, nullptr, "%s: exchanging buffers: %s", call, err.c_str());
  // The windows' handles, as file descriptors over the bootstrap's socket (shared_memory.h).
  const int myFd = res.window->exportFd(&err);
  if (myFd < 0) return fail(yaliUnhandledCudaError, nullptr, "%s: exporting the window: %s", call, err.c_str());
  std::vector<int> fds;
  r = comm->bootstrap->allGatherFds(myFd, &fds, &err);
  close(myFd);
  if (r != yaliSuccess) return fail(r, nullptr, "%s: exchanging the windows' handles: %s", call, err.c_str());
  struct CloseAll {
    std::vector<int>& fds;
    ~CloseAll() {
      for (int fd : fds)
        if (fd >= 0) close(fd);
    }
  } closeFds{fds};

  const int32_t myPid = comm->pids[rank];
  for (int p = 0; p < nranks; ++p) {
    if (info[p].settingsDigest != mine.settingsDigest || info[p].windowBytes != mine.windowBytes)
      return fail(yaliInvalidUsage, nullptr,
                  "%s: rank %d and rank %d have different YALI_* settings (algorithm, thresholds, "
                  "buffer sizes, or the tuning file's content must match on every rank)",
                  call, rank, p);
    if (p == rank) continue;
    if (comm->pids[p] == myPid) {
      // Same process (one thread per GPU): we use the peer's window at its address, and hold it so
      // that it outlives our kernels; the peer lets our device access it, as we let its device
      // access ours.
      std::shared_ptr<SharedMemory> peer = findLocalWindow(info[p].windowAddress);
      if (!peer)
        return fail(yaliInternalError, nullptr, "%s: rank %d's window is not a window of this process",
                    call, p);
      res.peerWindows[p] = peer->data();
      res.peerWindowRefs.push_back(std::move(peer));
      if (info[p].device != comm->device) {
        // For registered user buffers, which a same-process peer also uses at their address.
        cudaError_t e = enablePeerAccessOnce(comm->device, info[p].device);
        if (e != cudaSuccess)
          return fail(yaliUnhandledCudaError, nullptr,
                      "%s: cudaDeviceEnablePeerAccess(%d) from device %d failed: %s", call,
                      info[p].device, comm->device, cudaGetErrorString(e));
        if (!res.window->grantAccess(info[p].device, &err))
          return fail(yaliUnhandledCudaError, nullptr, "%s: letting device %d access the window: %s",
                      call, info[p].device, err.c_str());
      }
    } else {
      std::unique_ptr<SharedMemory> mapped = SharedMemory::import(fds[p], info[p].windowBytes, comm->device, &err);
      if (!mapped)
        return fail(yaliUnhandledCudaError, nullptr,
                    "%s: mapping rank %d's window failed: %s; the GPUs need peer-to-peer access (NVLink)",
                    call, p, err.c_str());
      res.peerWindows[p] = mapped->data();
      res.peerImports.push_back(std::move(mapped));
    }
  }
  std::vector<std::string> gpuOf;
  int multiprocessors = mine.multiprocessors;
  for (const PeerInfo& p : info) {
    gpuOf.emplace_back(p.gpuBusId, strnlen(p.gpuBusId, sizeof(p.gpuBusId)));
    multiprocessors = std::min(multiprocessors, static_cast<int>(p.multiprocessors));
  }
  r = applyGpuSharing(gpuOf, multiprocessors, settings.allowSharedGpu, {comm}, call);
  if (r != yaliSuccess) return r;
  // Nobody launches before every rank has mapped every window.
  r = comm->bootstrap->barrier(&err);
  if (r != yaliSuccess) return fail(r, nullptr, "%s: final barrier: %s", call, err.c_str());
  logInfo("rank %d/%d on device %d: window %zu bytes", rank, nranks, comm->device, comm->layout.total);
  *out = addCommHandle(std::move(owner));
  return yaliSuccess;
}

yaliResult_t commInitAll(yaliComm_t* comms, int ndev, const int* devlist, const Settings& settings) {
  const char* call = "yaliCommInitAll";
  auto group = std::make_shared<ProcessGroup>();
  std::random_device entropy;
  const uint64_t groupKey = static_cast<uint64_t>(entropy()) << 32 | entropy();
  std::vector<std::shared_ptr<yaliComm>> made;
  int previous = 0;
  cudaGetDevice(&previous);
  struct RestoreDevice {
    int device;
    ~RestoreDevice() { cudaSetDevice(device); }
  } restore{previous};
  for (int i = 0; i < ndev; ++i) {
    auto comm = std::make_shared<yaliComm>();
    comm->rank = i;
    comm->nranks = ndev;
    comm->groupKey = groupKey;
    comm->device = devlist ? devlist[i] : i;
    comm->settings = settings;
    comm->group = group;
    made.push_back(comm);
    if (cudaSetDevice(comm->device) != cudaSuccess)
      return fail(yaliInvalidArgument, nullptr, "%s: devlist[%d]=%d is not a usable CUDA device",
                  call, i, comm->device);
    yaliResult_t r = allocateRankResources(comm.get(), call);
    if (r != yaliSuccess) return r;
    comm->pids.assign(ndev, static_cast<int32_t>(getpid()));
  }
  // Two ranks of one process on one GPU share its hardware queues: a stream memory wait at the head
  // of a queue can hold up every stream behind it, the peer's write it waits for included (probably
  // why gather_ce timed out this way on an H100, 2026-11-25; the same calls passed one process per
  // rank). The copy-engine algorithms are off for such comms, on every rank: the choice must be the
  // same on all of them (with 3 ranks on 2 GPUs, the rank alone on its GPU would otherwise take
  // *_ce while the others do not, and the call would time out). One process per rank (separate
  // contexts) keeps them.
  bool ranksShareAGpu = false;
  for (int i = 0; i < ndev; ++i)
    for (int j = i + 1; j < ndev; ++j) ranksShareAGpu |= made[i]->device == made[j]->device;
  if (ranksShareAGpu)
    for (int i = 0; i < ndev; ++i) made[i]->copyEngineOk = false;
  for (int i = 0; i < ndev; ++i) {
    DeviceResources& res = *made[i]->res;
    cudaSetDevice(made[i]->device);
    for (int j = 0; j < ndev; ++j) {
      if (i == j) continue;
      res.peerWindows[j] = made[j]->res->window->data();
      res.peerWindowRefs.push_back(made[j]->res->window);
      if (made[i]->device == made[j]->device) continue;  // one GPU: nothing to grant
      std::string err;
      if (!res.window->grantAccess(made[j]->device, &err))
        return fail(yaliUnhandledCudaError, nullptr, "%s: letting device %d access device %d's window: %s",
                    call, made[j]->device, made[i]->device, err.c_str());
      int can = 0;
      cudaDeviceCanAccessPeer(&can, made[i]->device, made[j]->device);
      if (!can)
        return fail(yaliInvalidUsage, nullptr,
                    "%s: device %d cannot access device %d peer-to-peer (NVLink needed)", call,
                    made[i]->device, made[j]->device);
      cudaError_t e = enablePeerAccessOnce(made[i]->device, made[j]->device);
      if (e != cudaSuccess)
        return fail(yaliUnhandledCudaError, nullptr, "%s: cudaDeviceEnablePeerAccess(%d) on device %d: %s",
                    call, made[j]->device, made[i]->device, cudaGetErrorString(e));
    }
  }
  std::vector<std::string> gpuOf;
  std::vector<yaliComm*> raw;
  int multiprocessors = INT32_MAX;
  for (const auto& comm : made) {
    int count = 0;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, comm->device);
    multiprocessors = std::min(multiprocessors, count);
    gpuOf.push_back(std::to_string(comm->device));
    raw.push_back(comm.get());
  }
  yaliResult_t r = applyGpuSharing(gpuOf, multiprocessors, settings.allowSharedGpu, raw, call);
  if (r != yaliSuccess) return r;
  for (int i = 0; i < ndev; ++i) comms[i] = addCommHandle(made[i]);
  return yaliSuccess;
}

namespace {

// Writes `code` from this rank into every peer's WindowHeader::remoteFailure (the peers' waits end,
// their later launches refuse to run, and their copy-engine calls stop at their gate), through the
// comm's control stream, waiting at most until `deadlineMs`.
void tellPeersWeFailed(yaliComm* comm, int code, int64_t deadlineMs, std::string* err) {
  HostStatus* status = comm->res->hostStatus.get();
  status->remoteWord = encodeRemoteFailure(code, comm->rank);
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank || comm->res->peerWindows[p] == nullptr) continue;
    writeDeviceWords(comm, comm->res->peerWindows[p] + offsetof(WindowHeader, remoteFailure), &status->remoteWord,
                     sizeof(status->remoteWord), deadlineMs, err);
  }
}

}  // namespace

yaliResult_t commDestroy(yaliComm* comm, yaliComm_t handle) {
  const char* call = "yaliCommDestroy";
  const int64_t deadline = nowMs() + comm->settings.timeoutMs;
  yaliResult_t result = yaliSuccess;
  ScopedDevice onDevice(comm->device);
  // The calls made before destroy run to their end; only then is the comm closed.
  if (!waitForEagerLaunches(comm, comm->eagerIssued, deadline))
    result = fail(comm->cancel ? yaliRemoteError : yaliTimeout, comm,
                  "%s: rank %d: the comm's calls had not finished after YALI_TIMEOUT_MS=%lld ms (they "
                  "may wait behind other work on their streams); they will do nothing when they run "
                  "(copy-engine calls: copy into their own output only), and the comm's memory is freed "
                  "after them",
                  call, comm->rank, static_cast<long long>(comm->settings.timeoutMs));
  std::string err;
  // Calls left unfinished: the peers learn it now, before this returns and the program reuses its
  // buffers (a peer's copy-engine call still reading our input then ends with this failure; its
  // kernels stop waiting for ours). As a timeout (the destroy gave up waiting for them), or an
  // abort that cut the wait short. Not when the comm had already failed: whoever failed first told
  // the peers, and the survivors' messages name that rank.
  const int gaveUp = comm->cancel ? kFailAborted : kFailTimeout;
  if (result != yaliSuccess && comm->res && statusOf(comm)->failure == kFailNone)
    tellPeersWeFailed(comm, gaveUp, deadline + 1000, &err);
  closeCopyEngine(comm, gaveUp);  // a copy-engine call still waiting is released (copy_engine.h)
  if (!closeOnDevice(comm, deadline + 1000, &err) && result == yaliSuccess)
    result = fail(yaliUnhandledCudaError, comm, "%s: closing the comm on the device: %s", call, err.c_str());
  constexpr Reaper::Lane kLanes[] = {Reaper::Lane::kReleases, Reaper::Lane::kIpcClose};
  uint64_t before[2];
  for (int l = 0; l < 2; ++l) before[l] = Reaper::lastPostedHere(kLanes[l]);
  retire(comm, handle, HandleState::kDestroyed);
  // Wait for the memory to come back (at once, unless a graph still holds it, or closing a peer's
  // mapping of a registered buffer waits for the device), at most until the deadline. Not for the
  // closes while copy-engine calls of the process are in flight: those wait for a moment without
  // any (CloseGate), which steady copy-engine traffic may not leave for long; they run later.
  for (int l = 0; l < 2; ++l) {
    if (kLanes[l] == Reaper::Lane::kIpcClose && CloseGate::callsInFlight() > 0) continue;
    if (Reaper::lastPostedHere(kLanes[l]) != before[l]) Reaper::waitFor(Reaper::lastPostedHere(kLanes[l]), deadline);
  }
  return result;
}

yaliResult_t commAbort(yaliComm* comm, yaliComm_t handle) {
  const int64_t deadline = nowMs() + 1000;  // for our own copies only: abort waits for no kernel
  ScopedDevice onDevice(comm->device);
  std::string err;
  if (comm->res) {
    HostStatus* status = comm->res->hostStatus.get();
    // Our waits in flight give up (they poll the host-mapped word), and so do the peers': each
    // peer's window learns that we aborted. Then nothing of ours runs any more.
    reinterpret_cast<volatile HostStatus*>(status)->abortRequested = 1;
    closeCopyEngine(comm, kFailAborted);  // and so do copy-engine calls in flight, at the watch's next poll
    tellPeersWeFailed(comm, kFailAborted, deadline, &err);
    closeOnDevice(comm, deadline, &err);
  }
  retire(comm, handle, HandleState::kAborted);
  return yaliSuccess;
}

}  // namespace yali
