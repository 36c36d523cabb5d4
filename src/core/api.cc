// The public C API: argument checks (before any CUDA call, so that they work and say something
// useful even without a GPU), then the communicator and collective layers.
#include <string.h>

#include <set>

#include "collectives/allreduce/launch.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/env.h"
#include "core/error.h"
#include "core/hash.h"
#include "yali/yali.h"

using namespace yali;

namespace {

thread_local int groupDepth = 0;

// Checks that `comm` is a live communicator. `call` names the API function in messages.
yaliResult_t checkComm(const yaliComm* comm, const char* call) {
  if (comm == nullptr) return fail(yaliInvalidArgument, nullptr, "%s: comm is NULL", call);
  if (!isKnownComm(comm))
    return fail(yaliInvalidArgument, nullptr,
                "%s: comm is not a communicator returned by yaliCommInitRank/yaliCommInitAll", call);
  if (comm->state == CommState::kDestroyed)
    return fail(yaliInvalidUsage, nullptr, "%s: comm was destroyed (yaliCommDestroy)", call);
  if (comm->state == CommState::kAborted)
    return fail(yaliInvalidUsage, nullptr, "%s: comm was aborted (yaliCommAbort)", call);
  return yaliSuccess;
}

// Returns the comm's device-side failure, if any, as an error of `call`.
yaliResult_t checkAsync(yaliComm* comm, const char* call) {
  yaliResult_t r = commAsyncError(comm);
  if (r == yaliSuccess) return r;
  const HostStatus* s = comm->hostStatus;
  const char* what =
      s->failure == kFailTimeout
          ? "a device-side wait for a peer timed out (YALI_TIMEOUT_MS; did every rank make the same "
            "call, with registered buffers on all ranks or on none?)"
      : s->failure == kFailMismatch
          ? "the ranks made different calls on registered buffers (count, datatype, op, or the "
            "buffers' offsets within their registrations differ); nothing was written"
      : s->failure == kFailRemoteAbort ? "a peer aborted the communicator"
                                       : "the communicator was aborted";
  return fail(r, comm,
              "%s: an earlier operation on this comm failed on the device: %s (timeout %lld ms, "
              "wait phase %d, block %d, launch %llu); the comm must be aborted with yaliCommAbort",
              call, what, static_cast<long long>(comm->settings.timeoutMs), s->failurePhase,
              s->failureBlock, static_cast<unsigned long long>(s->failureEpoch));
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

// A buffer argument must be device (or managed) memory of the comm's GPU, aligned to its element.
yaliResult_t checkBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize,
                         const char* call) {
  if (p == nullptr) return fail(yaliInvalidArgument, comm, "%s: %s is NULL", call, name);
  if (reinterpret_cast<uintptr_t>(p) % elemSize != 0)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is not aligned to its element size (%zu bytes)",
                call, name, p, elemSize);
  for (const void* known : comm->validatedBuffers)
    if (known == p) return yaliSuccess;
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is not CUDA memory (%s)", call, name, p,
                cudaGetErrorString(e));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is host or unregistered memory, not device memory",
                call, name, p);
  if (attr.type == cudaMemoryTypeDevice && attr.device != comm->device)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is on device %d but comm is on device %d", call,
                name, p, attr.device, comm->device);
  comm->validatedBuffers[comm->nextValidatedSlot] = p;
  comm->nextValidatedSlot = (comm->nextValidatedSlot + 1) % yaliComm::kValidatedBuffers;
  return yaliSuccess;
}

// Where a call's two buffers lie in registered memory (yaliCommRegister).
struct RegisteredCall {
  RegisteredSpan send;
  RegisteredSpan recv;
  // What every rank's kernel compares with its peers' at entry (block_ops.cuh: enterWithTag): the
  // algorithm, the call's count, type and op, and the registrations and offsets of the buffers the
  // algorithm maps (twoshot_direct maps only the output), folded into 32 bits (FNV-1a).
  uint32_t tag(Algo algo, size_t count, yaliDataType_t datatype, yaliRedOp_t op) const {
    const bool mapsSend = algo == Algo::kDirect;
    const uint64_t fields[] = {static_cast<uint64_t>(algo), count, static_cast<uint64_t>(datatype),
                               static_cast<uint64_t>(op), recv.registration->id, recv.offset,
                               mapsSend ? send.registration->id : ~0ull, mapsSend ? send.offset : ~0ull};
    const uint64_t h = fnv1a(fields, sizeof(fields));
    return static_cast<uint32_t>(h ^ (h >> 32));
  }
};

RegisteredCall findRegisteredCall(const yaliComm* comm, const void* send, const void* recv, size_t bytes) {
  RegisteredCall c;
  c.send = findRegistered(comm, send, bytes);
  c.recv = send == recv ? c.send : findRegistered(comm, recv, bytes);
  return c;
}

AlgoChoice chooseFor(const yaliComm* comm, const RegisteredCall& reg, size_t bytes) {
  return comm->selector.choose(bytes, reg.send.registration != nullptr, reg.recv.registration != nullptr);
}

}  // namespace

extern "C" {

YALI_API const char* yaliGetErrorString(yaliResult_t result) { return resultString(result); }

YALI_API const char* yaliGetLastError(yaliComm_t comm) {
  if (comm != nullptr && isKnownComm(comm)) {
    comm->lastErrorReturned = comm->getLastError();
    return comm->lastErrorReturned.c_str();
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
                "%s: uniqueId was not produced by yaliGetUniqueId (bad magic or checksum)", call);
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

YALI_API yaliResult_t yaliCommDestroy(yaliComm_t comm) {
  yaliResult_t r = checkComm(comm, "yaliCommDestroy");
  return r != yaliSuccess ? r : commDestroy(comm);
}

YALI_API yaliResult_t yaliCommAbort(yaliComm_t comm) {
  yaliResult_t r = checkComm(comm, "yaliCommAbort");
  return r != yaliSuccess ? r : commAbort(comm);
}

YALI_API yaliResult_t yaliCommGetAsyncError(yaliComm_t comm, yaliResult_t* asyncError) {
  const char* call = "yaliCommGetAsyncError";
  yaliResult_t r = checkComm(comm, call);
  if (r != yaliSuccess) return r;
  if (asyncError == nullptr) return fail(yaliInvalidArgument, comm, "%s: asyncError is NULL", call);
  *asyncError = commAsyncError(comm);
  if (*asyncError != yaliSuccess) checkAsync(comm, call);  // records the detail for yaliGetLastError
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommCount(const yaliComm_t comm, int* count) {
  yaliResult_t r = checkComm(comm, "yaliCommCount");
  if (r != yaliSuccess) return r;
  if (count == nullptr) return fail(yaliInvalidArgument, comm, "yaliCommCount: count is NULL");
  *count = comm->nranks;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommCuDevice(const yaliComm_t comm, int* device) {
  yaliResult_t r = checkComm(comm, "yaliCommCuDevice");
  if (r != yaliSuccess) return r;
  if (device == nullptr) return fail(yaliInvalidArgument, comm, "yaliCommCuDevice: device is NULL");
  *device = comm->device;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommUserRank(const yaliComm_t comm, int* rank) {
  yaliResult_t r = checkComm(comm, "yaliCommUserRank");
  if (r != yaliSuccess) return r;
  if (rank == nullptr) return fail(yaliInvalidArgument, comm, "yaliCommUserRank: rank is NULL");
  *rank = comm->rank;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliCommRegister(const yaliComm_t comm, void* buff, size_t size, void** handle) {
  const char* call = "yaliCommRegister";
  yaliResult_t r = checkComm(comm, call);
  if (r != yaliSuccess) return r;
  // A call refused here is no registration on this comm, in either launch mode: its next call
  // pairs with the peers' next (registration.h).
  if (handle == nullptr) return fail(yaliInvalidArgument, comm, "%s: handle is NULL", call);
  *handle = nullptr;
  if (size == 0) return fail(yaliInvalidArgument, comm, "%s: size is 0", call);
  r = checkAsync(comm, call);
  if (r != yaliSuccess) return r;
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", call, comm->device);
  r = checkBuffer(comm, buff, "buff", 1, call);
  return r != yaliSuccess ? r : registerBuffer(comm, buff, size, handle, call);
}

YALI_API yaliResult_t yaliCommDeregister(const yaliComm_t comm, void* handle) {
  const char* call = "yaliCommDeregister";
  yaliResult_t r = checkComm(comm, call);
  if (r != yaliSuccess) return r;
  if (handle == nullptr) return fail(yaliInvalidArgument, comm, "%s: handle is NULL", call);
  return deregisterBuffer(comm, handle, call);
}

YALI_API yaliResult_t yaliGroupStart(void) {
  ++groupDepth;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliGroupEnd(void) {
  if (groupDepth == 0)
    return fail(yaliInvalidUsage, nullptr, "yaliGroupEnd: called without a matching yaliGroupStart");
  --groupDepth;
  return yaliSuccess;
}

YALI_API yaliResult_t yaliAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    yaliDataType_t datatype, yaliRedOp_t op, yaliComm_t comm,
                                    cudaStream_t stream) {
  const char* call = "yaliAllReduce";
  yaliResult_t r = checkComm(comm, call);
  if (r != yaliSuccess) return r;
  DataType dtype;
  if (!toDataType(datatype, &dtype))
    return fail(yaliInvalidArgument, comm,
                "%s: datatype=%d is not supported (yaliFloat16=6, yaliFloat32=7, yaliBfloat16=9)", call,
                static_cast<int>(datatype));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= yaliNumOps)
    return fail(yaliInvalidArgument, comm, "%s: op=%d is not a yaliRedOp_t (sum, prod, max, min, avg)",
                call, static_cast<int>(op));
  r = checkAsync(comm, call);
  if (r != yaliSuccess) return r;
  if (count == 0) return yaliSuccess;
  const size_t elemSize = dataTypeSize(dtype);
  if (count > SIZE_MAX / elemSize)
    return fail(yaliInvalidArgument, comm, "%s: count=%zu overflows the byte size", call, count);
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", call, comm->device);
  r = checkBuffer(comm, sendbuff, "sendbuff", elemSize, call);
  if (r != yaliSuccess) return r;
  if (recvbuff != sendbuff) {
    r = checkBuffer(comm, recvbuff, "recvbuff", elemSize, call);
    if (r != yaliSuccess) return r;
  }
  const RegisteredCall reg = findRegisteredCall(comm, sendbuff, recvbuff, count * elemSize);
  const AlgoChoice choice = chooseFor(comm, reg, count * elemSize);
  DeviceArgs args = baseDeviceArgs(comm);
  args.send = sendbuff;
  args.recv = recvbuff;
  args.count = count;
  args.slotBytes = choice.slotBytes;
  args.teamsPerBlock = choice.teams;
  args.epochHint = ++comm->launches;
  if (choice.algo == Algo::kDirect || choice.algo == Algo::kTwoshotDirect) {
    for (int p = 0; p < comm->nranks; ++p) {
      if (choice.algo == Algo::kDirect) args.peerSend[p] = reg.send.registration->peerBase[p] + reg.send.offset;
      args.peerRecv[p] = reg.recv.registration->peerBase[p] + reg.recv.offset;
    }
    args.callTag = reg.tag(choice.algo, count, datatype, op);
  }
  const bool programmatic = comm->settings.programmaticLaunch && comm->smMajor >= 9;
  cudaError_t e = choice.algo == Algo::kCopyEngine
                      ? launchAllReduceCopyEngine(choice, dtype, static_cast<int>(op), args,
                                                  comm->ceStreams, stream)
                      : launchAllReduce(choice, dtype, static_cast<int>(op), args, programmatic, stream);
  if (e != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: kernel launch (%s, %d blocks) failed: %s", call,
                algoName(choice.algo), choice.ctas, cudaGetErrorString(e));
  return yaliSuccess;
}

YALI_API yaliResult_t yaliAllReduceAlgoInfo(yaliComm_t comm, const void* sendbuff,
                                            const void* recvbuff, size_t count,
                                            yaliDataType_t datatype, yaliRedOp_t op,
                                            yaliAlgoInfo_t* info) {
  const char* call = "yaliAllReduceAlgoInfo";
  yaliResult_t r = checkComm(comm, call);
  if (r != yaliSuccess) return r;
  if (info == nullptr) return fail(yaliInvalidArgument, comm, "%s: info is NULL", call);
  DataType dtype;
  if (!toDataType(datatype, &dtype))
    return fail(yaliInvalidArgument, comm, "%s: datatype=%d is not supported", call,
                static_cast<int>(datatype));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= yaliNumOps)
    return fail(yaliInvalidArgument, comm, "%s: op=%d is not a yaliRedOp_t", call, static_cast<int>(op));
  const size_t bytes = count * dataTypeSize(dtype);
  const AlgoChoice c = chooseFor(comm, findRegisteredCall(comm, sendbuff, recvbuff, bytes), bytes);
  memset(info, 0, sizeof(*info));
  strncpy(info->algorithm, count == 0 ? "none" : algoName(c.algo), sizeof(info->algorithm) - 1);
  info->ctas = count == 0 ? 0 : c.ctas;
  info->threads = count == 0 ? 0 : c.threads;
  info->chunkBytes = c.slotBytes;
  return yaliSuccess;
}

}  // extern "C"
