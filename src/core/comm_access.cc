#include "core/comm_access.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/handles.h"

namespace yali {

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

LockedComm::LockedComm(yaliComm_t handle, const char* call) : owner_(resolveComm(handle, call, &error_)) {
  if (!owner_) return;
  lock_ = std::unique_lock<std::mutex>(owner_->mutex);
  if (owner_->res) return;
  // Destroyed or aborted by another thread while this call waited for the lock (destroy holds it
  // while it waits for the comm's launches): the handle resolved before, the resources are gone
  // now. Resolving it again names which end it met.
  lock_ = std::unique_lock<std::mutex>();
  owner_.reset();
  if (resolveComm(handle, call, &error_) != nullptr || error_ == yaliSuccess)
    error_ = fail(yaliInvalidUsage, nullptr, "%s: comm was destroyed or aborted meanwhile", call);
}

yaliResult_t checkAsync(yaliComm* comm, const char* call) {
  yaliResult_t r = commAsyncError(comm);
  if (r == yaliSuccess) return r;
  return fail(r, comm, "%s: an earlier operation on this comm failed on the device: %s; the comm must "
              "be aborted with yaliCommAbort",
              call, commAsyncErrorText(comm).c_str());
}

yaliResult_t checkDataType(yaliComm* comm, int datatype, const char* call) {
  if (validDataType(datatype)) return yaliSuccess;
  return fail(yaliInvalidArgument, comm, "%s: datatype=%d is not a yaliDataType_t (0..%d)", call, datatype,
              kNumDataTypes - 1);
}

namespace {

// A buffer argument's checks that need no CUDA: not NULL, aligned to its element.
yaliResult_t checkAddress(yaliComm* comm, const void* p, const char* name, size_t elemSize, const char* call) {
  if (p == nullptr) return fail(yaliInvalidArgument, comm, "%s: %s is NULL", call, name);
  if (reinterpret_cast<uintptr_t>(p) % elemSize != 0)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is not aligned to its element size (%zu bytes)",
                call, name, p, elemSize);
  return yaliSuccess;
}

// Those on what CUDA said of it: device memory of the comm's GPU, holding `bytes` from p on.
yaliResult_t checkAllocation(yaliComm* comm, const void* p, const char* name, size_t bytes, const char* call,
                             const AllocationInfo& info) {
  if (!info.device)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is host memory, not device memory", call, name, p);
  if (!info.managed && info.deviceOrdinal != comm->device)
    return fail(yaliInvalidArgument, comm, "%s: %s=%p is on device %d but comm is on device %d", call,
                name, p, info.deviceOrdinal, comm->device);
  const uint64_t offset = reinterpret_cast<uint64_t>(p) - info.start;
  if (info.legacyIpc && (offset > info.size || bytes > info.size - offset))
    return fail(yaliInvalidArgument, comm,
                "%s: %s=%p holds %llu bytes to the end of its allocation, the call needs %zu (count too "
                "large for the buffer)",
                call, name, p, static_cast<unsigned long long>(info.size - std::min(offset, info.size)),
                bytes);
  return yaliSuccess;
}

}  // namespace

yaliResult_t checkBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize, size_t bytes,
                         const char* call, AllocationInfo* info) {
  yaliResult_t r = checkAddress(comm, p, name, elemSize, call);
  if (r != yaliSuccess) return r;
  std::string why;
  if (!queryAllocation(p, info, &why))
    return fail(yaliInvalidArgument, comm, "%s: %s=%p: %s", call, name, p, why.c_str());
  return checkAllocation(comm, p, name, bytes, call, *info);
}

yaliResult_t checkQueriedBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize, size_t bytes,
                                const char* call, const AllocationInfo& info) {
  yaliResult_t r = checkAddress(comm, p, name, elemSize, call);
  if (r != yaliSuccess) return r;
  return checkAllocation(comm, p, name, bytes, call, info);
}

}  // namespace yali
