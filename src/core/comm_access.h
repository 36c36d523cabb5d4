// What every API call does first: resolve its comm handle (locked for the call, or not), and the
// checks shared by every call (the comm's asynchronous error, a buffer argument).
#pragma once

#include <memory>
#include <mutex>

#include "core/comm.h"
#include "core/registration.h"
#include "yali/yali.h"

namespace yali {

// The live comm of `handle` (a reference for the call's duration), or null after recording why.
std::shared_ptr<yaliComm> resolveComm(yaliComm_t handle, const char* call, yaliResult_t* result);

// A comm resolved from its handle and locked for the scope of an API call (yaliComm::mutex): calls
// from several threads on one comm take turns. Holds a reference, so a comm destroyed meanwhile by
// another thread is freed only after this call; a comm destroyed or aborted while the call waited
// for the lock is refused as one destroyed before it (yaliInvalidUsage), never used.
class LockedComm {
 public:
  LockedComm(yaliComm_t handle, const char* call);
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
yaliResult_t checkAsync(yaliComm* comm, const char* call);

// A buffer argument must be device (or managed) memory of the comm's GPU, aligned to its element,
// allocated now (never freed), and hold `bytes` from `p` on (exactly checkable for cudaMalloc
// memory; pool and cuMem allocations report ranges that need not be theirs). Every call asks CUDA
// afresh (about 0.1 us): a pointer that was valid once may have been freed since.
// A datatype argument must be a yaliDataType_t; the error names the call.
yaliResult_t checkDataType(yaliComm* comm, int datatype, const char* call);

yaliResult_t checkBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize, size_t bytes,
                         const char* call, AllocationInfo* info);
// The same checks on `info`, what CUDA answered for `p` earlier in this call (an in-place call's
// output at its input's address: one question per call and address, not two).
yaliResult_t checkQueriedBuffer(yaliComm* comm, const void* p, const char* name, size_t elemSize, size_t bytes,
                                const char* call, const AllocationInfo& info);

}  // namespace yali
