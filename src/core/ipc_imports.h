// Peer allocations mapped into this process by CUDA IPC, shared by every comm of the process.
//
// CUDA maps an exported allocation at most once per device context: while one mapping is open, a
// second cudaIpcOpenMemHandle of the same allocation fails with cudaErrorAlreadyMapped ("resource
// already mapped"). Registrations of one peer allocation must therefore share one mapping, whether
// they belong to one comm or to several comms of this process, and also when an earlier
// registration's mapping was released but its close, which runs later on the reaper because
// cudaIpcCloseMemHandle waits for the device's kernels, has not happened yet. (Seen 2026-11-28 on
// 2 and 4 H200s, one process per GPU: coll_copy_engine's first registration failed so after the
// suite's earlier cases, when each comm kept mappings of its own.)
//
// The unit CUDA maps is not the allocation but the physical block under it: cudaMalloc may carve
// several small allocations out of one block, and CUDA IPC then shares (and maps) the whole block,
// so a second allocation of a block already mapped fails to open just the same. (Seen 2026-11-29 on
// 2 H200s: coll_copy_engine --quick, two 512 KB slabs of one block.) Entries are therefore keyed by
// the peer's block (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID), and an import returns the block's base
// as mapped here: the allocation that opened the block and any later one of it lie at their offsets
// in the block (CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR on the peer's side), whichever handle opened it.
//
// One entry per (device, peer process, peer block):
//   absent --import--> Opening --opened--> Live (refs > 0) --last release--> Idle (close posted)
//   Idle --import--> Live (the same mapping, no new open)
//   Idle --the close job starts--> Closing --closed--> absent
// An import that finds Opening or Closing waits for it to end, at most `timeoutMs`: a close waits
// for the device's kernels, which end within YALI_TIMEOUT_MS.
//
// Neither the open nor the close runs under the table's mutex: a release may come from a CUDA
// callback thread (a graph's user object dropping a registration), which must never wait for a
// close that itself waits for kernels queued behind that callback.
#pragma once

#include <stdint.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include <cuda_runtime_api.h>

namespace yali {

class IpcImports {
 public:
  struct Key {
    int device;         // the device this process maps it on
    int64_t peerPid;    // the exporting process
    uint64_t blockId;   // its physical block's CUDA id in that process (unique over the process's
                        // life); the allocation's buffer id where the driver names no block (then
                        // every registration of that process is keyed so: one driver, one rule)
    bool operator<(const Key& o) const {
      return std::tie(device, peerPid, blockId) < std::tie(o.device, o.peerPid, o.blockId);
    }
  };
  // How entries are opened, closed and their closes deferred; process() uses CUDA and the reaper,
  // the host tests count calls.
  struct Ops {
    // True with *mapped, or false with *error.
    std::function<bool(void** mapped, const cudaIpcMemHandle_t& handle, int device, std::string* error)> open;
    std::function<void(void* mapped, int device)> close;
    std::function<void(std::function<bool()> job)> post;  // runs the job later (Reaper::post)
  };

  explicit IpcImports(Ops ops);
  // The process's table (never destroyed: releases may come during exit).
  static IpcImports& process();

  // The block `key` mapped here, as its first byte: an open mapping of it, or a new one made from
  // `handle`, an allocation that starts `handleOffset` bytes into the block. nullptr with *error
  // when the open fails, or when an earlier open or close of it did not end within timeoutMs.
  std::shared_ptr<void> import(const Key& key, const cudaIpcMemHandle_t& handle, uint64_t handleOffset,
                               int64_t timeoutMs, std::string* error);

  size_t entries();  // how many allocations are open, opening or closing (tests)

 private:
  enum class State { kOpening, kLive, kIdle, kClosing };
  struct Entry {
    State state = State::kOpening;
    void* mapped = nullptr;      // what the open returned: the opening allocation; closes take it
    char* blockBase = nullptr;   // the block's first byte here (mapped - the opener's offset)
    size_t refs = 0;
    uint64_t closeTicket = 0;  // which posted close may act on an Idle entry (a later release posts anew)
  };
  std::shared_ptr<void> share(const Key& key, char* blockBase);
  void release(const Key& key);
  bool closeIfIdle(const Key& key, uint64_t ticket);

  Ops ops_;
  std::mutex mutex_;
  std::condition_variable changed_;  // an entry left Opening or Closing
  std::map<Key, Entry> entries_;
  uint64_t nextTicket_ = 0;
};

}  // namespace yali
