// Registered buffers (yaliCommRegister): user memory that every peer has mapped, so that the
// zero-copy AllReduces read peers' inputs or write their outputs without staging.
//
// A registration is collective. Ranks number their registrations in call order (Registration::id),
// so the k-th registration of every rank is the same buffer's counterpart. A call refused for its
// arguments (api.cc, before the ranks take part) takes no number in either launch mode, so a stray
// bad call on one rank does not shift its pairing. One refused after taking part (memory that
// cannot be shared, sizes that differ) fails on every rank across processes, where none counts it;
// in single-process mode it takes its number, since the other comms may hold parts. It is usable
// only once every rank holds it: at once after the exchange with one process (or thread) per GPU,
// and in single-process mode (yaliCommInitAll) when the last comm of the group has registered. A
// call takes a zero-copy path only with its buffers inside usable registrations, and every rank
// checks on the device that the others made the same call (block_ops.cuh: enterWithTag).
//
// Identity. A registration remembers its allocation's CUDA buffer id, which CUDA never gives twice
// in a process: memory freed without yaliCommDeregister and allocated again at the same address is
// recognized as not registered (RegisteredSpan::stale), and peers' allocations are mapped once per
// (peer, buffer id), so a peer's new allocation at an old address is never taken for the old one.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/common/device_state.h"
#include "yali/yali.h"

struct yaliComm;

namespace yali {

// What CUDA knows of an address (cuPointerGetAttributes).
struct AllocationInfo {
  bool device = false;     // device memory (cudaMalloc, pools, cuMem), not host memory
  bool managed = false;    // managed memory (cudaMallocManaged): any device may use it
  int deviceOrdinal = -1;  // where device memory lives
  uint64_t bufferId = 0;   // CUDA's id of the allocation, unique over the process's life
  uint64_t start = 0;      // the allocation's first byte and size
  uint64_t size = 0;
  bool legacyIpc = false;  // cudaMalloc memory: CUDA IPC can share it, and [start, start + size)
                           // is exactly the allocation (for pool and cuMem memory it need not be)
};

// False with *error when `p` is not an address CUDA knows (never allocated, or freed).
bool queryAllocation(const void* p, AllocationInfo* out, std::string* error);

struct Registration {
  uint32_t id = 0;           // this comm's registration count when made: the same on every rank
  char* base = nullptr;      // this rank's buffer
  size_t bytes = 0;          // its size, the same on every rank
  uint64_t bufferId = 0;     // its allocation's CUDA buffer id (AllocationInfo::bufferId)
  char* peerBase[kMaxRanks] = {};  // [p]: rank p's buffer as mapped here; [rank] == base
  std::shared_ptr<void> imports[kMaxRanks];  // [p]: rank p's allocation, when mapped by CUDA IPC
                                             // (IpcImports: shared by the process's registrations of it)
  // [p]: offsets from peerBase[p], below `bytes`, where rank p's buffer passes from one mapping to
  // the next (it borrowed several siblings' mappings: ipc_imports.h); the copy engines copy across
  // none of them. Empty for most.
  std::vector<uint64_t> mappingSplits[kMaxRanks];
  std::atomic<bool> usable{false};           // every rank holds it (peerBase complete)
  bool captured = false;     // a CUDA graph captured a call that uses it (LocalState::regEpoch)
  // Calls waiting in an open group (any thread's) that use it, through its peerBase mappings: a
  // QueuedUse each (enqueue.h). yaliCommDeregister refuses while there is one: it would drop the
  // mappings the call launches with at yaliGroupEnd. Shared, so that a use outliving the
  // registration (a destroy from another thread) still has its count to lower.
  std::shared_ptr<std::atomic<int>> queuedUses = std::make_shared<std::atomic<int>>(0);
};

// One comm's registrations.
struct RegistrationTable {
  std::vector<std::unique_ptr<Registration>> live;
  uint32_t nextId = 0;
};

// Single-process mode: the k-th registration of every comm of a yaliCommInitAll group, collected
// until all have registered. Guarded by `mutex` (comms may be driven by different threads).
struct GroupRegistrations {
  std::mutex mutex;
  std::map<uint32_t, std::vector<Registration*>> byId;  // [id][rank], nullptr until registered
};

// A buffer's place in a usable registration, or registration == nullptr. stale: the address lies
// in a registration whose memory was freed (a different allocation lives there now).
struct RegisteredSpan {
  Registration* registration = nullptr;
  size_t offset = 0;
  bool stale = false;
};

// The public calls (checked arguments: comm live, buff/handle non-null, size > 0). The caller holds
// comm->registrationMutex and not comm->mutex: they take comm->mutex only for their short
// updates, so that other threads' calls on the comm go on while they wait for peers (register) or
// for the comm's launches (deregister, bounded by YALI_TIMEOUT_MS; it never waits for peers).
yaliResult_t registerBuffer(yaliComm* comm, void* buff, size_t size, void** handle, const char* call);
yaliResult_t deregisterBuffer(yaliComm* comm, void* handle, const char* call);

// Drops every registration of `comm` (destroy, abort, failed set-up); no peer is told.
void releaseRegistrations(yaliComm* comm);

// Where [p, p + bytes) lies in a usable registration of `comm`, given the buffer id of the
// allocation that holds p now.
RegisteredSpan findRegistered(const yaliComm* comm, const void* p, size_t bytes, uint64_t bufferId);

}  // namespace yali
