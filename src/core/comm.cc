#include "core/comm.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "collectives/allreduce/launch.h"
#include "core/error.h"
#include "core/hash.h"

namespace yali {

ProcessGroup::~ProcessGroup() {
  for (size_t i = 0; i < windows.size(); ++i) {
    if (windows[i] == nullptr) continue;
    int prev;
    cudaGetDevice(&prev);
    cudaSetDevice(devices[i]);
    cudaFree(windows[i]);
    cudaSetDevice(prev);
  }
}

namespace {

std::mutex registryMutex;
std::unordered_set<const yaliComm*>& registry() {
  static auto* set = new std::unordered_set<const yaliComm*>();  // never destroyed: see yaliComm
  return *set;
}

size_t alignUp(size_t v) { return (v + 255) / 256 * 256; }

// What each rank tells the others at set-up.
struct PeerInfo {
  int32_t pid;
  int32_t device;
  char gpuBusId[32];        // cudaDeviceGetPCIBusId: the same GPU has the same id in every process
  int32_t multiprocessors;  // of that GPU
  uint64_t windowAddress;  // valid in the sender's process only
  uint64_t windowBytes;
  uint64_t settingsDigest;  // ranks must agree on everything that steers algorithm choice
  cudaIpcMemHandle_t handle;
};

uint64_t settingsDigest(const Settings& s) {
  std::string key = s.algo + "|" + std::to_string(s.oneshotLLMaxBytes) + "|" +
                    std::to_string(s.oneshotPullMaxBytes) + "|" +
                    std::to_string(s.twoshotPushMinBytes) + "|" + std::to_string(s.ceMinBytes) + "|" +
                    std::to_string(s.directMinBytes) + "|" + std::to_string(s.twoshotDirectMinBytes) + "|" +
                    std::to_string(s.ceChunkBytes) + "|" +
                    std::to_string(s.maxCtas) + "|" + std::to_string(s.llBufferBytes) + "|" +
                    std::to_string(s.stagingBytes) + "|" + std::to_string(s.pullBufferBytes) + "|" + s.tuningFile +
                    "|" + std::to_string(s.allowSharedGpu);
  return fnv1a(key.data(), key.size());
}

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
  return yaliSuccess;
}

// Allocates the window (zeroed: flags 0 and LL packets with flag 0 never match an epoch >= 1),
// the local state and the host-mapped status on the current device.
yaliResult_t allocateRankResources(yaliComm* comm, const char* call) {
  comm->layout = computeLayout(comm->nranks, comm->settings);
  YALI_CUDA_CHECK(cudaMalloc(&comm->window, comm->layout.total));
  YALI_CUDA_CHECK(cudaMemset(comm->window, 0, comm->layout.total));
  YALI_CUDA_CHECK(cudaMalloc(&comm->local, sizeof(LocalState)));
  LocalState init{};
  init.epoch = 1;
  YALI_CUDA_CHECK(cudaMemcpy(comm->local, &init, sizeof(init), cudaMemcpyHostToDevice));
  YALI_CUDA_CHECK(cudaHostAlloc(&comm->hostStatus, sizeof(HostStatus),
                                cudaHostAllocMapped | cudaHostAllocPortable));
  memset(comm->hostStatus, 0, sizeof(HostStatus));
  YALI_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&comm->hostStatusDev),
                                           comm->hostStatus, 0));
  if (comm->layout.ceChunkBytes > 0) YALI_CUDA_CHECK(createCopyEngineStreams(&comm->ceStreams));
  YALI_CUDA_CHECK(cudaDeviceSynchronize());  // zeroes land before any peer learns the address
  int major = 0;
  YALI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, comm->device));
  comm->smMajor = major;
  SelectorLimits limits{major, comm->nranks, static_cast<int64_t>(comm->layout.llSlotBytes / 2),
                        static_cast<int64_t>(comm->layout.stagingBytes),
                        static_cast<int64_t>(comm->layout.copyInBytes),
                        static_cast<int64_t>(comm->layout.ceChunkBytes),
                        maxLaunchableThreads(Algo::kOneshotLL),
                        std::min({maxLaunchableThreads(Algo::kTwoshot), maxLaunchableThreads(Algo::kTwoshotPush),
                                  maxLaunchableThreads(Algo::kTwoshotDirect), maxLaunchableThreads(Algo::kOneshotPull),
                                  maxLaunchableThreads(Algo::kDirect)}),
                        // Only with staging: the query loads the 15 reduce kernels.
                        comm->layout.ceChunkBytes > 0 ? maxLaunchableThreads(Algo::kCopyEngine) : 0};
  std::string err;
  if (!comm->selector.init(comm->settings, limits, &err))
    return fail(yaliInvalidArgument, comm, "%s: %s", call, err.c_str());
  return yaliSuccess;
}

// Frees what allocateRankResources made and unmaps peers; the window only when this comm owns it.
void releaseRankResources(yaliComm* comm) {
  ScopedDevice onDevice(comm->device);
  releaseRegistrations(comm);
  for (int p = 0; p < comm->nranks; ++p) {
    if (comm->peerMappedByIpc[p]) cudaIpcCloseMemHandle(comm->peerWindows[p]);
    comm->peerMappedByIpc[p] = false;
    comm->peerWindows[p] = nullptr;
  }
  destroyCopyEngineStreams(&comm->ceStreams);
  if (comm->local) cudaFree(comm->local);
  if (comm->hostStatus) cudaFreeHost(comm->hostStatus);
  if (comm->window && !comm->group) cudaFree(comm->window);
  comm->local = nullptr;
  comm->hostStatus = nullptr;
  comm->hostStatusDev = nullptr;
  comm->window = nullptr;
  comm->group.reset();
  comm->bootstrap.reset();
  cudaGetLastError();  // tear-down errors are not the caller's next error
}

}  // namespace

WindowLayout computeLayout(int nranks, const Settings& s) {
  WindowLayout L{};
  size_t off = alignUp(sizeof(WindowHeader));
  L.pushFlags = off;
  off += alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks);
  L.resultFlags = off;
  off += alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks);
  L.directFlags = off;
  off += alignUp(sizeof(uint64_t) * 2 * kMaxCtas * kMaxRanks);
  L.ll = off;
  L.llSlotBytes = 2 * static_cast<size_t>(s.llBufferBytes);  // 8 payload bytes per 16-byte packet
  off += 2 * static_cast<size_t>(nranks) * L.llSlotBytes;
  L.staging = off;
  L.stagingBytes = static_cast<size_t>(s.stagingBytes);
  off += 2 * static_cast<size_t>(nranks) * L.stagingBytes;
  L.result = off;
  off += 2 * L.stagingBytes;
  L.gather = off;
  off += 2 * static_cast<size_t>(nranks) * L.stagingBytes;
  L.copyIn = off;
  L.copyInBytes = static_cast<size_t>(s.pullBufferBytes);
  off += 2 * L.copyInBytes;
  L.ceFlags = off;
  off += alignUp(sizeof(CeFlags));
  L.ceChunkBytes = static_cast<size_t>(s.ceChunkBytes);
  L.ceRs = off;
  off += static_cast<size_t>(kCeSlots) * nranks * L.ceChunkBytes;
  L.ceAg = off;
  off += static_cast<size_t>(kCeSlots) * L.ceChunkBytes;
  L.total = off;
  return L;
}

void registerComm(yaliComm* comm) {
  std::lock_guard<std::mutex> lock(registryMutex);
  registry().insert(comm);
}

bool isKnownComm(const yaliComm* comm) {
  std::lock_guard<std::mutex> lock(registryMutex);
  return registry().count(comm) != 0;
}

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
  a.window = comm->window;
  for (int p = 0; p < comm->nranks; ++p) a.peerWindows[p] = comm->peerWindows[p];
  a.layout = comm->layout;
  a.local = comm->local;
  a.host = comm->hostStatusDev;
  a.timeoutNs = static_cast<uint64_t>(comm->settings.timeoutMs) * 1000000ull;
  a.teamsPerBlock = 1;
  return a;
}

yaliResult_t commAsyncError(yaliComm* comm) {
  if (comm->hostStatus == nullptr) return yaliSuccess;
  switch (reinterpret_cast<volatile HostStatus*>(comm->hostStatus)->failure) {
    case kFailNone: return yaliSuccess;
    case kFailTimeout: return yaliTimeout;
    case kFailAborted: return yaliInvalidUsage;
    case kFailRemoteAbort: return yaliRemoteError;
    case kFailMismatch: return yaliInvalidUsage;
    default: return yaliInternalError;
  }
}

yaliResult_t commInitRank(yaliComm_t* out, int nranks, const UniqueIdFields& id, int rank,
                          const Settings& settings) {
  const char* call = "yaliCommInitRank";
  yaliComm* comm = new yaliComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->settings = settings;
  registerComm(comm);
  auto cleanup = [&](yaliResult_t code) {
    releaseRankResources(comm);
    comm->state = CommState::kDestroyed;
    return code;
  };
  if (cudaGetDevice(&comm->device) != cudaSuccess)
    return cleanup(fail(yaliUnhandledCudaError, nullptr, "%s: no usable CUDA device (cudaGetDevice failed)", call));
  yaliResult_t r = allocateRankResources(comm, call);
  if (r != yaliSuccess) return cleanup(r);

  std::string err;
  Bootstrap* boot = nullptr;
  r = Bootstrap::connect(id, rank, nranks, settings.timeoutMs, &boot, &err);
  if (r != yaliSuccess) return cleanup(fail(r, nullptr, "%s: rank %d of %d: %s", call, rank, nranks, err.c_str()));
  comm->bootstrap.reset(boot);

  std::vector<PeerInfo> info(nranks);
  PeerInfo& mine = info[rank];
  memset(&mine, 0, sizeof(mine));
  mine.pid = getpid();
  mine.device = comm->device;
  if (cudaDeviceGetPCIBusId(mine.gpuBusId, sizeof(mine.gpuBusId), comm->device) != cudaSuccess ||
      cudaDeviceGetAttribute(&mine.multiprocessors, cudaDevAttrMultiProcessorCount, comm->device) !=
          cudaSuccess)
    return cleanup(fail(yaliUnhandledCudaError, nullptr,
                        "%s: reading device %d's PCI bus id and multiprocessor count: %s", call,
                        comm->device, cudaGetErrorString(cudaGetLastError())));
  mine.windowAddress = reinterpret_cast<uint64_t>(comm->window);
  mine.windowBytes = comm->layout.total;
  mine.settingsDigest = settingsDigest(settings);
  if (cudaIpcGetMemHandle(&mine.handle, comm->window) != cudaSuccess)
    return cleanup(fail(yaliUnhandledCudaError, nullptr, "%s: cudaIpcGetMemHandle failed: %s", call,
                        cudaGetErrorString(cudaGetLastError())));
  r = comm->bootstrap->allGather(info.data(), sizeof(PeerInfo), &err);
  if (r != yaliSuccess) return cleanup(fail(r, nullptr, "%s: exchanging buffers: %s", call, err.c_str()));

  for (int p = 0; p < nranks; ++p) {
    if (info[p].settingsDigest != mine.settingsDigest || info[p].windowBytes != mine.windowBytes)
      return cleanup(fail(yaliInvalidUsage, nullptr,
                          "%s: rank %d and rank %d have different YALI_* settings (algorithm, "
                          "thresholds, buffer sizes or tuning file must match on every rank)",
                          call, rank, p));
    if (p == rank) {
      comm->peerWindows[p] = comm->window;
    } else if (info[p].pid == mine.pid) {
      // Same process (one thread per GPU): the address is ours too; IPC would refuse it.
      comm->peerWindows[p] = reinterpret_cast<char*>(info[p].windowAddress);
      if (info[p].device != comm->device) {
        cudaError_t e = enablePeerAccessOnce(comm->device, info[p].device);
        if (e != cudaSuccess)
          return cleanup(fail(yaliUnhandledCudaError, nullptr,
                              "%s: cudaDeviceEnablePeerAccess(%d) from device %d failed: %s", call,
                              info[p].device, comm->device, cudaGetErrorString(e)));
      }
    } else {
      void* mapped = nullptr;
      cudaError_t e = cudaIpcOpenMemHandle(&mapped, info[p].handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess)
        return cleanup(fail(yaliUnhandledCudaError, nullptr,
                            "%s: mapping rank %d's buffer (cudaIpcOpenMemHandle) failed: %s; the "
                            "GPUs need peer-to-peer access (NVLink)",
                            call, p, cudaGetErrorString(e)));
      comm->peerWindows[p] = static_cast<char*>(mapped);
      comm->peerMappedByIpc[p] = true;
    }
  }
  std::vector<std::string> gpuOf;
  int multiprocessors = mine.multiprocessors;
  for (const PeerInfo& p : info) {
    gpuOf.emplace_back(p.gpuBusId, strnlen(p.gpuBusId, sizeof(p.gpuBusId)));
    multiprocessors = std::min(multiprocessors, static_cast<int>(p.multiprocessors));
  }
  r = applyGpuSharing(gpuOf, multiprocessors, settings.allowSharedGpu, {comm}, call);
  if (r != yaliSuccess) return cleanup(r);
  // copy_engine needs every peer's window imported into this process by CUDA IPC: a copy into a
  // window of another GPU of the same process (peer access) hung or lost rounds on the x4 machine
  // (2026-11-22, the suite with YALI_ALGO=copy_engine in single-process mode at 4 GPUs, and in CUDA
  // graphs at 2). Every rank sees the same pids, so all make the same choice.
  std::set<int32_t> pids;
  for (const PeerInfo& p : info) pids.insert(p.pid);
  if (static_cast<int>(pids.size()) != nranks) comm->selector.disableCopyEngine();
  // Nobody launches before every rank has mapped every window.
  r = comm->bootstrap->barrier(&err);
  if (r != yaliSuccess) return cleanup(fail(r, nullptr, "%s: final barrier: %s", call, err.c_str()));
  logInfo("rank %d/%d on device %d: window %zu bytes", rank, nranks, comm->device, comm->layout.total);
  *out = comm;
  return yaliSuccess;
}

yaliResult_t commInitAll(yaliComm_t* comms, int ndev, const int* devlist, const Settings& settings) {
  const char* call = "yaliCommInitAll";
  // One process drives every GPU: no copy_engine (see commInitRank), so no memory or streams for it.
  Settings inProcess = settings;
  inProcess.ceChunkBytes = 0;
  auto group = std::make_shared<ProcessGroup>();
  std::vector<yaliComm*> made;
  auto cleanup = [&](yaliResult_t code) {
    for (yaliComm* c : made) {
      releaseRankResources(c);
      c->state = CommState::kDestroyed;
    }
    return code;
  };
  int previous = 0;
  cudaGetDevice(&previous);
  for (int i = 0; i < ndev; ++i) {
    yaliComm* comm = new yaliComm();
    comm->rank = i;
    comm->nranks = ndev;
    comm->device = devlist ? devlist[i] : i;
    comm->settings = inProcess;
    comm->group = group;
    registerComm(comm);
    made.push_back(comm);
    if (cudaSetDevice(comm->device) != cudaSuccess) {
      cudaSetDevice(previous);
      return cleanup(fail(yaliInvalidArgument, nullptr, "%s: devlist[%d]=%d is not a usable CUDA device",
                          call, i, comm->device));
    }
    yaliResult_t r = allocateRankResources(comm, call);
    group->devices.push_back(comm->device);
    group->windows.push_back(comm->window);
    if (r != yaliSuccess) {
      cudaSetDevice(previous);
      return cleanup(r);
    }
  }
  for (int i = 0; i < ndev; ++i) {
    cudaSetDevice(made[i]->device);
    for (int j = 0; j < ndev; ++j) {
      made[i]->peerWindows[j] = made[j]->window;
      if (i == j || made[i]->device == made[j]->device) continue;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, made[i]->device, made[j]->device);
      if (!can) {
        cudaSetDevice(previous);
        return cleanup(fail(yaliInvalidUsage, nullptr,
                            "%s: device %d cannot access device %d peer-to-peer (NVLink needed)", call,
                            made[i]->device, made[j]->device));
      }
      cudaError_t e = enablePeerAccessOnce(made[i]->device, made[j]->device);
      if (e != cudaSuccess) {
        cudaSetDevice(previous);
        return cleanup(fail(yaliUnhandledCudaError, nullptr, "%s: cudaDeviceEnablePeerAccess(%d) on device %d: %s",
                            call, made[j]->device, made[i]->device, cudaGetErrorString(e)));
      }
    }
  }
  cudaSetDevice(previous);
  std::vector<std::string> gpuOf;
  int multiprocessors = INT32_MAX;
  for (yaliComm* comm : made) {
    int count = 0;
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, comm->device);
    multiprocessors = std::min(multiprocessors, count);
    gpuOf.push_back(std::to_string(comm->device));
  }
  yaliResult_t r = applyGpuSharing(gpuOf, multiprocessors, settings.allowSharedGpu, made, call);
  if (r != yaliSuccess) return cleanup(r);
  for (int i = 0; i < ndev; ++i) comms[i] = made[i];
  return yaliSuccess;
}

yaliResult_t commDestroy(yaliComm* comm) {
  const char* call = "yaliCommDestroy";
  yaliResult_t result = yaliSuccess;
  {
    ScopedDevice onDevice(comm->device);
    // Our launches end (a stuck wait ends at YALI_TIMEOUT_MS) before peers may unmap us.
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
      result = fail(yaliUnhandledCudaError, comm, "%s: waiting for the comm's work: %s", call,
                    cudaGetErrorString(e));
  }
  if (comm->bootstrap) {
    // Peers may still read our window until they too have finished: wait for all of them.
    std::string err;
    yaliResult_t r = comm->bootstrap->barrier(&err);
    if (r != yaliSuccess && result == yaliSuccess)
      result = fail(r, comm, "%s: waiting for peers to finish: %s", call, err.c_str());
  }
  releaseRankResources(comm);
  comm->state = CommState::kDestroyed;
  return result;
}

yaliResult_t commAbort(yaliComm* comm) {
  // 1. Our own device waits give up (they poll this host-mapped word).
  if (comm->hostStatus) reinterpret_cast<volatile HostStatus*>(comm->hostStatus)->abortRequested = 1;
  {
    ScopedDevice onDevice(comm->device);
    // 2. Peers' waits give up too: mark their windows. A private non-blocking stream so that a
    //    stuck user stream cannot hold this copy back.
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
      static const int kOne = 1;
      for (int p = 0; p < comm->nranks; ++p) {
        if (p == comm->rank || comm->peerWindows[p] == nullptr) continue;
        cudaMemcpyAsync(comm->peerWindows[p] + offsetof(WindowHeader, abortedByPeer), &kOne,
                        sizeof(kOne), cudaMemcpyHostToDevice, s);
      }
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    // 3. Our kernels have seen the abort word; let them drain before freeing what they use.
    cudaDeviceSynchronize();
  }
  releaseRankResources(comm);
  comm->state = CommState::kAborted;
  return yaliSuccess;
}

}  // namespace yali
