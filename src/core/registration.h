// Registered buffers (yaliCommRegister): user memory that every peer has mapped, so that the
// direct AllReduce reads peers' inputs and writes their outputs without staging.
//
// A registration is collective. Ranks number their registrations in call order (Registration::id),
// so the k-th registration of every rank is the same buffer's counterpart. A call refused for its
// arguments (api.cc, before the ranks take part) takes no number in either launch mode, so a
// stray bad call on one rank does not shift its pairing. One refused after taking part (memory
// that cannot be shared, sizes that differ) fails on every rank across processes, where none
// counts it; in single-process mode it takes its number, since the other comms may hold parts. It is usable only once
// every rank holds it: at once after the exchange with one process (or thread) per GPU, and in
// single-process mode (yaliCommInitAll) when the last comm of the group has registered. A call
// takes the direct path only with both buffers inside usable registrations, and every rank checks
// on the device that the others made the same call (direct.cuh: callTag).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "collectives/common/device_state.h"
#include "yali/yali.h"

struct yaliComm;

namespace yali {

struct Registration {
  uint32_t id = 0;           // this comm's registration count when made: the same on every rank
  char* base = nullptr;      // this rank's buffer
  size_t bytes = 0;          // its size, the same on every rank
  char* peerBase[kMaxRanks] = {};  // [p]: rank p's buffer as mapped here; [rank] == base
  uint64_t importKey[kMaxRanks] = {};  // [p]: rank p's allocation (its address there) when mapped
                                       // by CUDA IPC here (RegistrationTable::imports), else 0
  std::atomic<bool> usable{false};     // every rank holds it (peerBase complete)
};

// A peer allocation mapped into this process by cudaIpcOpenMemHandle. Several registrations may
// lie in one allocation, and CUDA maps an allocation once per process, so mappings are shared and
// counted.
struct PeerImport {
  char* mapped = nullptr;
  int users = 0;
};

// One comm's registrations.
struct RegistrationTable {
  std::vector<std::unique_ptr<Registration>> live;
  uint32_t nextId = 0;
  std::map<std::pair<int, uint64_t>, PeerImport> imports;  // (peer rank, its allocation address)
};

// Single-process mode: the k-th registration of every comm of a yaliCommInitAll group, collected
// until all have registered. Guarded by `mutex` (comms may be driven by different threads).
struct GroupRegistrations {
  std::mutex mutex;
  std::map<uint32_t, std::vector<Registration*>> byId;  // [id][rank], nullptr until registered
};

// A buffer's place in a usable registration, or registration == nullptr.
struct RegisteredSpan {
  const Registration* registration = nullptr;
  size_t offset = 0;
};

// The public calls (checked arguments: comm live, buff/handle non-null, size > 0).
yaliResult_t registerBuffer(yaliComm* comm, void* buff, size_t size, void** handle, const char* call);
yaliResult_t deregisterBuffer(yaliComm* comm, void* handle, const char* call);

// Drops every registration of `comm` (destroy, abort, failed set-up); no peer is told.
void releaseRegistrations(yaliComm* comm);

// Where [p, p + bytes) lies in a usable registration of `comm`; registration == nullptr if nowhere.
RegisteredSpan findRegistered(const yaliComm* comm, const void* p, size_t bytes);

}  // namespace yali
