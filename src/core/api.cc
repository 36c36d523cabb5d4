// The public C API: argument checks (before any CUDA call where possible, so that they work and say
// something useful even without a GPU), then the communicator layer; every collective is a few
// lines that describe the call for the one call path (call.h).
#include <string.h>

#include <set>

#include "collectives/common/device_state.h"
#include "core/bootstrap.h"
#include "core/call.h"
#include "core/comm.h"
#include "core/comm_access.h"
#include "core/enqueue.h"
#include "core/env.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/registration.h"
#include "yali/yali.h"

using namespace yali;

namespace {

yaliResult_t loadSettingsFor(const char* call, Settings* s) {
  std::string err;
  if (!loadSettings(s, &err)) return fail(yaliInvalidArgument, nullptr, "%s: %s", call, err.c_str());
  return yaliSuccess;
}

}  // namespace

extern "C" {

YALI_API const char* yaliGetErrorString(yaliResult_t result) { return resultString(result); }

YALI_API const char* yaliGetLastError(yaliComm_t handle) {
  if (handle != nullptr) {
    HandleState state;
    if (std::shared_ptr<yaliComm> comm = findComm(handle, &state)) {
      // The string lives in the calling thread until its next call, whatever other threads do.
      thread_local std::string returned;
      returned = comm->getLastError();
      return returned.c_str();
    }
  }
  return threadLastError();
}

YALI_API yaliResult_t yaliGetVersion(int* version) {
  if (version == nullptr) return fail(yaliInvalidArgument, nullptr, "yaliGetVersion: version is NULL");
  *version = YALI_VERSION_CODE;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliGetUniqueId(yaliUniqueId* uniqueId) {
  if (uniqueId == nullptr)
    return fail(yaliInvalidArgument, nullptr, "yaliGetUniqueId: uniqueId is NULL");
  std::string err;
  if (!makeUniqueId(uniqueId, &err))
    return fail(yaliSystemError, nullptr, "yaliGetUniqueId: %s", err.c_str());
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommInitRank(yaliComm_t* comm, int nranks, yaliUniqueId uniqueId,
                                       int rank) {
  const char* call = "yaliCommInitRank";
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "%s: comm is NULL", call);
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks)
    return fail(yaliInvalidArgument, nullptr, "%s: nranks=%d is out of range [1, %d]", call, nranks,
                kMaxRanks);
  if (rank < 0 || rank >= nranks)
    return fail(yaliInvalidArgument, nullptr, "%s: rank=%d is out of range [0, nranks-1=%d]", call,
                rank, nranks - 1);
  UniqueIdFields id;
  if (!decodeUniqueId(uniqueId, &id))
    return fail(yaliInvalidArgument, nullptr,
                "%s: uniqueId was not produced by yaliGetUniqueId (bad magic, version or checksum)", call);
  Settings settings;
  yaliResult_t r = loadSettingsFor(call, &settings);
  if (r != yaliSuccess) return r;
  return commInitRank(comm, nranks, id, rank, settings);
}

YALI_API yaliResult_t yaliCommInitAll(yaliComm_t* comms, int ndev, const int* devlist) {
  const char* call = "yaliCommInitAll";
  if (comms == nullptr) return fail(yaliInvalidArgument, nullptr, "%s: comms is NULL", call);
  if (ndev < 1 || ndev > kMaxRanks)
    return fail(yaliInvalidArgument, nullptr, "%s: ndev=%d is out of range [1, %d]", call, ndev,
                kMaxRanks);
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  Settings settings;
  yaliResult_t r = loadSettingsFor(call, &settings);
  if (r != yaliSuccess) return r;
  if (devlist != nullptr) {
    std::set<int> seen;
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0)
        return fail(yaliInvalidArgument, nullptr, "%s: devlist[%d]=%d is negative", call, i, devlist[i]);
      if (!seen.insert(devlist[i]).second && !settings.allowSharedGpu)
        return fail(yaliInvalidArgument, nullptr,
                    "%s: devlist[%d]=%d appears twice in devlist (one GPU per rank; "
                    "YALI_ALLOW_SHARED_GPU=1 lets ranks share a GPU, for testing)",
                    call, i, devlist[i]);
    }
  }
  return commInitAll(comms, ndev, devlist, settings);
}

YALI_API yaliResult_t yaliCommDestroy(yaliComm_t handle) {
  const char* call = "yaliCommDestroy";
  UnlockedComm unlocked(handle, call);
  if (!unlocked) return unlocked.error();
  std::lock_guard<std::mutex> registering(unlocked->registrationMutex);
  LockedComm comm(handle, call);
  if (!comm) return comm.error();
  if (hasPendingLaunches(comm.get()))
    return fail(yaliInvalidUsage, comm.get(),
                "%s: comm has calls waiting in this thread's open group; end it with yaliGroupEnd first",
                call);
  return commDestroy(comm.get(), handle);
}

YALI_API yaliResult_t yaliCommAbort(yaliComm_t handle) {
  const char* call = "yaliCommAbort";
  yaliResult_t r = yaliSuccess;
  std::shared_ptr<yaliComm> owner = resolveComm(handle, call, &r);
  if (!owner) return r;
  // Before taking the lock: a call blocked in another thread (a bootstrap exchange, a wait for the
  // comm's launches) gives up within about 100 ms and releases it.
  owner->cancel = true;
  std::lock_guard<std::mutex> registering(owner->registrationMutex);
  std::lock_guard<std::mutex> lock(owner->mutex);
  dropPendingLaunches(owner.get());
  return commAbort(owner.get(), handle);
}

YALI_API yaliResult_t yaliCommGetAsyncError(yaliComm_t handle, yaliResult_t* asyncError) {
  const char* call = "yaliCommGetAsyncError";
  UnlockedComm comm(handle, call);
  if (!comm) return comm.error();
  if (asyncError == nullptr) return fail(yaliInvalidArgument, comm.get(), "%s: asyncError is NULL", call);
  *asyncError = commAsyncError(comm.get());
  if (*asyncError != yaliSuccess) checkAsync(comm.get(), call);  // records the detail for yaliGetLastError
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommGetFailureFlag(yaliComm_t handle, const int** deviceFlag) {
  const char* call = "yaliCommGetFailureFlag";
  // Locked: destroy and abort drop comm->res under the comm's lock (a set-up call, never in a hot path).
  LockedComm comm(handle, call);
  if (!comm) return comm.error();
  if (deviceFlag == nullptr) return fail(yaliInvalidArgument, comm.get(), "%s: deviceFlag is NULL", call);
  if (!comm->res) return fail(yaliInvalidUsage, comm.get(), "%s: comm was destroyed or aborted", call);
  *deviceFlag = &comm->res->hostStatusDev->failure;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommWatchFailureWord(yaliComm_t handle, const uint64_t* deviceWord) {
  const char* call = "yaliCommWatchFailureWord";
  // Locked: every call's plan copies the word into its launch's arguments under the same lock.
  LockedComm comm(handle, call);
  if (!comm) return comm.error();
  if (!comm->res) return fail(yaliInvalidUsage, comm.get(), "%s: comm was destroyed or aborted", call);
  if (deviceWord != nullptr) {
    AllocationInfo info;
    const yaliResult_t r = checkBuffer(comm.get(), deviceWord, "deviceWord", sizeof(uint64_t), sizeof(uint64_t), call, &info);
    if (r != yaliSuccess) return r;
  }
  comm->failureWatch = deviceWord;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommCount(const yaliComm_t handle, int* count) {
  UnlockedComm comm(handle, "yaliCommCount");
  if (!comm) return comm.error();
  if (count == nullptr) return fail(yaliInvalidArgument, comm.get(), "yaliCommCount: count is NULL");
  *count = comm->nranks;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommCuDevice(const yaliComm_t handle, int* device) {
  UnlockedComm comm(handle, "yaliCommCuDevice");
  if (!comm) return comm.error();
  if (device == nullptr) return fail(yaliInvalidArgument, comm.get(), "yaliCommCuDevice: device is NULL");
  *device = comm->device;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommUserRank(const yaliComm_t handle, int* rank) {
  UnlockedComm comm(handle, "yaliCommUserRank");
  if (!comm) return comm.error();
  if (rank == nullptr) return fail(yaliInvalidArgument, comm.get(), "yaliCommUserRank: rank is NULL");
  *rank = comm->rank;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommRegister(const yaliComm_t handle, void* buff, size_t size, void** phandle) {
  const char* call = "yaliCommRegister";
  UnlockedComm comm(handle, call);
  if (!comm) return comm.error();
  std::lock_guard<std::mutex> registering(comm->registrationMutex);
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (!comm->res) return fail(yaliInvalidUsage, comm.get(), "%s: comm was aborted meanwhile", call);
    // A call refused here is no registration on this comm, in either launch mode: its next call
    // pairs with the peers' next (registration.h).
    if (phandle == nullptr) return fail(yaliInvalidArgument, comm.get(), "%s: handle is NULL", call);
    *phandle = nullptr;
    if (size == 0) return fail(yaliInvalidArgument, comm.get(), "%s: size is 0", call);
    yaliResult_t r = checkAsync(comm.get(), call);
    if (r != yaliSuccess) return r;
    ScopedDevice onDevice(comm->device);
    if (onDevice.status() != cudaSuccess)
      return fail(yaliUnhandledCudaError, comm.get(), "%s: cudaSetDevice(%d) failed", call, comm->device);
    AllocationInfo info;
    r = checkBuffer(comm.get(), buff, "buff", 1, size, call, &info);
    if (r != yaliSuccess) return r;
  }
  return registerBuffer(comm.get(), buff, size, phandle, call);
}

YALI_API yaliResult_t yaliCommDeregister(const yaliComm_t handle, void* registration) {
  const char* call = "yaliCommDeregister";
  UnlockedComm comm(handle, call);
  if (!comm) return comm.error();
  if (registration == nullptr) return fail(yaliInvalidArgument, comm.get(), "%s: handle is NULL", call);
  std::lock_guard<std::mutex> registering(comm->registrationMutex);
  return deregisterBuffer(comm.get(), registration, call);
}

YALI_API yaliResult_t yaliGroupStart(void) { return groupStart(); }

YALI_API yaliResult_t yaliGroupEnd(void) { return groupEnd(); }

YALI_API yaliResult_t yaliGroupSimulateEnd(void) { return groupSimulateEnd(); }

// ---- Collectives: each describes its call; call.cc checks, plans and launches it -----------------

YALI_API yaliResult_t yaliAllReduce(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                    yaliRedOp_t op, yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kAllReduce, "yaliAllReduce", sendbuff, recvbuff, count, datatype, op, 0, stream});
}

YALI_API yaliResult_t yaliReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t comm,
                                        cudaStream_t stream) {
  return submitCall(comm, {Collective::kReduceScatter, "yaliReduceScatter", sendbuff, recvbuff, recvcount, datatype,
                           op, 0, stream});
}

YALI_API yaliResult_t yaliAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, yaliDataType_t datatype,
                                    yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kAllGather, "yaliAllGather", sendbuff, recvbuff, sendcount, datatype, 0, 0,
                           stream});
}

YALI_API yaliResult_t yaliBroadcast(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                    int root, yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kBroadcast, "yaliBroadcast", sendbuff, recvbuff, count, datatype, 0, root,
                           stream});
}

YALI_API yaliResult_t yaliBcast(void* buff, size_t count, yaliDataType_t datatype, int root, yaliComm_t comm,
                                cudaStream_t stream) {
  return submitCall(comm, {Collective::kBroadcast, "yaliBcast", buff, buff, count, datatype, 0, root, stream});
}

YALI_API yaliResult_t yaliReduce(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                 yaliRedOp_t op, int root, yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kReduce, "yaliReduce", sendbuff, recvbuff, count, datatype, op, root, stream});
}

YALI_API yaliResult_t yaliGather(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                 int root, yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kGather, "yaliGather", sendbuff, recvbuff, count, datatype, 0, root, stream});
}

YALI_API yaliResult_t yaliScatter(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                  int root, yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kScatter, "yaliScatter", sendbuff, recvbuff, count, datatype, 0, root, stream});
}

YALI_API yaliResult_t yaliSend(const void* sendbuff, size_t count, yaliDataType_t datatype, int peer,
                               yaliComm_t comm, cudaStream_t stream) {
  return submitP2P(comm, {kP2PSend, sendbuff, count, datatype, peer, stream});
}

YALI_API yaliResult_t yaliRecv(void* recvbuff, size_t count, yaliDataType_t datatype, int peer, yaliComm_t comm,
                               cudaStream_t stream) {
  return submitP2P(comm, {kP2PRecv, recvbuff, count, datatype, peer, stream});
}

YALI_API yaliResult_t yaliAlltoAll(const void* sendbuff, void* recvbuff, size_t count, yaliDataType_t datatype,
                                   yaliComm_t comm, cudaStream_t stream) {
  return submitCall(comm, {Collective::kAlltoAll, "yaliAlltoAll", sendbuff, recvbuff, count, datatype, 0, 0, stream});
}

YALI_API yaliResult_t yaliAlltoAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                    void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                    yaliDataType_t datatype, yaliComm_t comm, cudaStream_t stream) {
  VarCall c{};
  c.mode = kVarHostCounts;
  c.name = "yaliAlltoAllv";
  c.send = sendbuff;
  c.recv = recvbuff;
  c.datatype = datatype;
  c.sendcounts = sendcounts;
  c.sdispls = sdispls;
  c.recvcounts = recvcounts;
  c.rdispls = rdispls;
  c.stream = stream;
  return submitAlltoAllv(comm, c);
}

YALI_API yaliResult_t yaliAlltoAllvDeviceCounts(const void* sendbuff, const int64_t* sendcounts, const int64_t* sdispls,
                                                void* recvbuff, size_t recvCapacity, int64_t* recvcounts,
                                                int64_t* rdispls, yaliDataType_t datatype, yaliComm_t comm,
                                                cudaStream_t stream) {
  VarCall c{};
  c.mode = kVarDeviceCounts;
  c.name = "yaliAlltoAllvDeviceCounts";
  c.send = sendbuff;
  c.recv = recvbuff;
  c.datatype = datatype;
  c.sendCounts = sendcounts;
  c.sendDispls = sdispls;
  c.recvCounts = recvcounts;
  c.recvOffsets = rdispls;
  c.recvCapacity = recvCapacity;
  c.stream = stream;
  return submitAlltoAllv(comm, c);
}

YALI_API yaliResult_t yaliExpertDispatch(const void* sendbuff, const int64_t* sendCounts, void* recvbuff,
                                         int64_t* recvCounts, int64_t* expertOffsets,
                                         const yaliExpertLayout_t* layout, yaliComm_t comm, cudaStream_t stream) {
  VarCall c{};
  c.mode = kVarDispatch;
  c.name = "yaliExpertDispatch";
  c.send = sendbuff;
  c.recv = recvbuff;
  c.sendCounts = sendCounts;
  c.recvCounts = recvCounts;
  c.recvOffsets = expertOffsets;
  c.layout = layout;
  c.stream = stream;
  return submitAlltoAllv(comm, c);
}

YALI_API yaliResult_t yaliExpertCombine(const void* sendbuff, const int64_t* sendCounts, void* recvbuff,
                                        const yaliExpertLayout_t* layout, yaliComm_t comm, cudaStream_t stream) {
  VarCall c{};
  c.mode = kVarCombine;
  c.name = "yaliExpertCombine";
  c.send = sendbuff;
  c.recv = recvbuff;
  c.sendCounts = sendCounts;
  c.layout = layout;
  c.stream = stream;
  return submitAlltoAllv(comm, c);
}

YALI_API yaliResult_t yaliAlgoInfo(yaliComm_t comm, yaliCollective_t collective, const void* sendbuff,
                                   const void* recvbuff, size_t count, yaliDataType_t datatype, yaliRedOp_t op,
                                   int root, yaliAlgoInfo_t* info) {
  return describeCall(comm, {static_cast<Collective>(collective), "yaliAlgoInfo", sendbuff,
                             const_cast<void*>(recvbuff), count, datatype, op, root, nullptr}, info);
}

YALI_API yaliResult_t yaliAllReduceAlgoInfo(yaliComm_t comm, const void* sendbuff, const void* recvbuff,
                                            size_t count, yaliDataType_t datatype, yaliRedOp_t op,
                                            yaliAlgoInfo_t* info) {
  return describeCall(comm, {Collective::kAllReduce, "yaliAllReduceAlgoInfo", sendbuff, const_cast<void*>(recvbuff),
                             count, datatype, op, 0, nullptr}, info);
}

YALI_API const char* yaliCollectiveName(yaliCollective_t collective) {
  return collectiveName(static_cast<Collective>(collective));
}

}  // extern "C"
