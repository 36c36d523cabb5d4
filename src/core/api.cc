// The public C API: argument checks (before any CUDA call where possible, so that they work and say
// something useful even without a GPU), then the communicator and collective layers.
#include <string.h>

#include <set>

#include "collectives/common/device_state.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/env.h"
#include "core/error.h"
#include "core/handles.h"
#include "core/hash.h"
#include "core/registration.h"
#include "yali/yali.h"

using namespace yali;

namespace {

// The live comm of `handle` (a reference for the call's duration), or null after recording why.
std::shared_ptr<yaliComm> resolveComm(yaliComm_t handle, const char* call, yaliResult_t* result) {
  *result = yaliSuccess;
  if (handle == nullptr) {
    *result = fail(yaliInvalidArgument, nullptr, "%s: comm is NULL", call);
    return nullptr;
  }
  HandleState state;
  std::shared_ptr<yaliComm> comm = findComm(handle, &state);
  if (comm) return comm;
  switch (state) {
    case HandleState::kDestroyed:
      *result = fail(yaliInvalidUsage, nullptr, "%s: comm was destroyed (yaliCommDestroy)", call);
      break;
    case HandleState::kAborted:
      *result = fail(yaliInvalidUsage, nullptr, "%s: comm was aborted (yaliCommAbort)", call);
      break;
    default:
      *result = fail(yaliInvalidArgument, nullptr,
                     "%s: comm is not a communicator returned by yaliCommInitRank/yaliCommInitAll", call);
  }
  return nullptr;
}

// A comm resolved from its handle and locked for the scope of an API call (yaliComm::mutex): calls
// from several threads on one comm take turns. Holds a reference, so a comm destroyed meanwhile by
// another thread is freed only after this call.
class LockedComm {
 public:
  LockedComm(yaliComm_t handle, const char* call) : owner_(resolveComm(handle, call, &error_)) {
    if (owner_) lock_ = std::unique_lock<std::mutex>(owner_->mutex);
  }
  explicit operator bool() const { return owner_ != nullptr; }
  yaliResult_t error() const { return error_; }
  yaliComm* operator->() const { return owner_.get(); }
  yaliComm* get() const { return owner_.get(); }
  const std::shared_ptr<yaliComm>& shared() const { return owner_; }

 private:
  yaliResult_t error_ = yaliSuccess;
  std::shared_ptr<yaliComm> owner_;
  std::unique_lock<std::mutex> lock_;
};

// A comm resolved from its handle, not locked: for calls that only read what never changes after
// set-up (rank, size, device, the host-mapped status), so that they answer even while another
// thread's call on the comm blocks (a watchdog thread polling yaliCommGetAsyncError, say).
class UnlockedComm {
 public:
  UnlockedComm(yaliComm_t handle, const char* call) : owner_(resolveComm(handle, call, &error_)) {}
  explicit operator bool() const { return owner_ != nullptr; }
  yaliResult_t error() const { return error_; }
  yaliComm* operator->() const { return owner_.get(); }
  yaliComm* get() const { return owner_.get(); }

 private:
  yaliResult_t error_ = yaliSuccess;
  std::shared_ptr<yaliComm> owner_;
};

// Returns the comm's device-side failure, if any, as an error of `call`.
yaliResult_t checkAsync(yaliComm* comm, const char* call) {
  yaliResult_t r = commAsyncError(comm);
  if (r == yaliSuccess) return r;
  return fail(r, comm, "%s: an earlier operation on this comm failed on the device: %s; the comm must "
              "be aborted with yaliCommAbort",
              call, commAsyncErrorText(comm).c_str());
}

bool toDataType(yaliDataType_t t, DataType* out) {
  switch (static_cast<int>(t)) {
    case yaliFloat16: *out = DataType::kFloat16; return true;
    case yaliFloat32: *out = DataType::kFloat32; return true;
    case yaliBfloat16: *out = DataType::kBfloat16; return true;
    default: return false;
  }
}

yaliResult_t loadSettingsFor(const char* call, Settings* s) {
  std::string err;
  if (!loadSettings(s, &err)) return fail(yaliInvalidArgument, nullptr, "%s: %s", call, err.c_str());
  return yaliSuccess;
}

// A buffer argument must be device (or managed) memory of the comm's GPU, aligned to its element,
// allocated now (never freed), and hold `bytes` from `p` on (exactly checkable for cudaMalloc
// memory; pool and cuMem allocations report ranges that need not be theirs). Every call asks CUDA
// afresh (about 0.1 us): a pointer that was valid once may have been freed since.
yaliResult_t checkBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize, size_t bytes,
                         const char* call, AllocationInfo* info) {
  if (p == nullptr) return fail(yaliInvalidArgument, comm, "%s: %s is NULL", call, name);
  if (reinterpret_cast<uintptr_t>(p) % elemSize != 0)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is not aligned to its element size (%zu bytes)",
                call, name, p, elemSize);
  std::string why;
  if (!queryAllocation(p, info, &why))
    return fail(yaliInvalidArgument, comm, "%s: %s=%p: %s", call, name, p, why.c_str());
  if (!info->device)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is host memory, not device memory", call, name, p);
  if (!info->managed && info->deviceOrdinal != comm->device)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is on device %d but comm is on device %d", call,
                name, p, info->deviceOrdinal, comm->device);
  const uint64_t offset = reinterpret_cast<uint64_t>(p) - info->start;
  if (info->legacyIpc && (offset > info->size || bytes > info->size - offset))
    return fail(yaliInvalidArgument, comm,
                "%s: %s=%p holds %llu bytes to the end of its allocation, the call needs %zu (count too "
                "large for the buffer)",
                call, name, p, static_cast<unsigned long long>(info->size - std::min(offset, info->size)),
                bytes);
  return yaliSuccess;
}

// The registered-buffer facts of a call: which algorithm the ranks will agree on, and the tag that
// every rank's kernel compares with its peers' at entry (block_ops.cuh: enterWithTag): the
// algorithm, the call's count, type and op, and the registrations and offsets of the buffers the
// algorithm maps (twoshot_direct maps only the output), folded into 32 bits (FNV-1a).
struct RegisteredCall {
  RegisteredSpan send;
  RegisteredSpan recv;
  uint32_t tag(Algo algo, size_t count, yaliDataType_t datatype, yaliRedOp_t op) const {
    const bool mapsSend = algo == Algo::kDirect;
    const uint64_t fields[] = {static_cast<uint64_t>(algo), count, static_cast<uint64_t>(datatype),
                               static_cast<uint64_t>(op), recv.registration->id, recv.offset,
                               mapsSend ? send.registration->id : ~0ull, mapsSend ? send.offset : ~0ull};
    const uint64_t h = fnv1a(fields, sizeof(fields));
    return static_cast<uint32_t>(h ^ (h >> 32));
  }
  // A buffer lies where a registration's memory was freed (a new allocation at its address).
  bool stale(Algo algo) const { return recv.stale || (algo == Algo::kDirect && send.stale); }
};

RegisteredCall findRegisteredCall(const yaliComm* comm, const void* send, uint64_t sendId, const void* recv,
                                  uint64_t recvId, size_t bytes) {
  RegisteredCall c;
  c.send = findRegistered(comm, send, bytes, sendId);
  c.recv = send == recv ? c.send : findRegistered(comm, recv, bytes, recvId);
  return c;
}

// A stale registration still steers the choice as if it were live, so that this rank runs what its
// peers run; its tag then differs from theirs (poisonedTag), and every rank stops.
AlgoChoice chooseFor(const yaliComm* comm, const RegisteredCall& reg, size_t bytes) {
  return comm->selector.choose(bytes, reg.send.registration != nullptr, reg.recv.registration != nullptr);
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

YALI_API yaliResult_t yaliAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t handle,
                                    cudaStream_t stream) {
  const char* call = "yaliAllReduce";
  LockedComm locked(handle, call);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  DataType dtype;
  if (!toDataType(datatype, &dtype))
    return fail(yaliInvalidArgument, comm,
                "%s: datatype=%d is not supported (yaliFloat16=6, yaliFloat32=7, yaliBfloat16=9)", call,
                static_cast<int>(datatype));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= yaliNumOps)
    return fail(yaliInvalidArgument, comm, "%s: op=%d is not a yaliRedOp_t (sum, prod, max, min, avg)",
                call, static_cast<int>(op));
  yaliResult_t r = checkAsync(comm, call);
  if (r != yaliSuccess) return r;
  if (count == 0) return yaliSuccess;
  const size_t elemSize = dataTypeSize(dtype);
  if (count > SIZE_MAX / elemSize)
    return fail(yaliInvalidArgument, comm, "%s: count=%zu overflows the byte size", call, count);
  const size_t bytes = count * elemSize;
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", call, comm->device);
  AllocationInfo sendInfo, recvInfo;
  r = checkBuffer(comm, sendbuff, "sendbuff", elemSize, bytes, call, &sendInfo);
  if (r != yaliSuccess) return r;
  if (recvbuff != sendbuff) {
    r = checkBuffer(comm, recvbuff, "recvbuff", elemSize, bytes, call, &recvInfo);
    if (r != yaliSuccess) return r;
  } else {
    recvInfo = sendInfo;
  }
  const RegisteredCall reg =
      findRegisteredCall(comm, sendbuff, sendInfo.bufferId, recvbuff, recvInfo.bufferId, bytes);
  PlannedLaunch plan;
  plan.comm = locked.shared();
  plan.call = call;
  plan.choice = chooseFor(comm, reg, bytes);
  plan.dtype = dtype;
  plan.op = static_cast<int>(op);
  plan.bytes = bytes;
  plan.stream = stream;
  DeviceArgs& args = plan.args;
  args = baseDeviceArgs(comm);
  args.send = sendbuff;
  args.recv = recvbuff;
  args.count = count;
  args.slotBytes = plan.choice.slotBytes;
  args.teamsPerBlock = plan.choice.teams;
  const Algo algo = plan.choice.algo;
  if (algo == Algo::kDirect || algo == Algo::kTwoshotDirect) {
    for (int p = 0; p < comm->nranks; ++p) {
      if (algo == Algo::kDirect) args.peerSend[p] = reg.send.registration->peerBase[p] + reg.send.offset;
      args.peerRecv[p] = reg.recv.registration->peerBase[p] + reg.recv.offset;
    }
    args.callTag = reg.tag(algo, count, datatype, op);
    plan.registrations[0] = reg.recv.registration;
    if (algo == Algo::kDirect) plan.registrations[1] = reg.send.registration;
    if (reg.stale(algo)) {
      // The memory under a registration was freed and allocated again: take part in the entry
      // handshake with a tag no peer has, so that every rank stops before a peer writes into the
      // new allocation.
      args.callTag = poisonedTag(args.callTag, comm->rank);
      comm->setHostNote("this rank's buffer lies where registered memory was freed without "
                        "yaliCommDeregister (a new allocation at the old address)");
      logInfo("%s: rank %d: a buffer lies in freed registered memory", call, comm->rank);
    }
  }
  return enqueue(std::move(plan));
}

YALI_API yaliResult_t yaliAllReduceAlgoInfo(yaliComm_t handle, const void* sendbuff,
                                            const void* recvbuff, size_t count,
                                            yaliDataType_t datatype, yaliRedOp_t op,
                                            yaliAlgoInfo_t* info) {
  const char* call = "yaliAllReduceAlgoInfo";
  LockedComm locked(handle, call);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  if (info == nullptr) return fail(yaliInvalidArgument, comm, "%s: info is NULL", call);
  DataType dtype;
  if (!toDataType(datatype, &dtype))
    return fail(yaliInvalidArgument, comm, "%s: datatype=%d is not supported", call,
                static_cast<int>(datatype));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= yaliNumOps)
    return fail(yaliInvalidArgument, comm, "%s: op=%d is not a yaliRedOp_t", call, static_cast<int>(op));
  if (count > SIZE_MAX / dataTypeSize(dtype))
    return fail(yaliInvalidArgument, comm, "%s: count=%zu overflows the byte size", call, count);
  const size_t bytes = count * dataTypeSize(dtype);
  // Buffers CUDA does not know (or NULL) lie in no registration.
  AllocationInfo sendInfo, recvInfo;
  std::string ignored;
  if (sendbuff == nullptr || !queryAllocation(sendbuff, &sendInfo, &ignored)) sendInfo = AllocationInfo();
  if (recvbuff == nullptr || !queryAllocation(recvbuff, &recvInfo, &ignored)) recvInfo = AllocationInfo();
  const RegisteredCall reg = findRegisteredCall(comm, sendbuff, sendInfo.bufferId, recvbuff, recvInfo.bufferId, bytes);
  const AlgoChoice c = chooseFor(comm, reg, bytes);
  memset(info, 0, sizeof(*info));
  strncpy(info->algorithm, count == 0 ? "none" : algoName(c.algo), sizeof(info->algorithm) - 1);
  info->ctas = count == 0 ? 0 : c.ctas;
  info->threads = count == 0 ? 0 : c.threads;
  info->chunkBytes = c.slotBytes;
  return yaliSuccess;
}

}  // extern "C"
