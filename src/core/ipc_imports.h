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
// Where CUDA IPC maps is the physical block that cudaMalloc carves into small allocations: every
// allocation of one block opens at the same place in the block's one address range (its offset from
// the block's base), and an open whose bytes overlap a mapping still open there fails with "already
// mapped" too. That happens when a peer frees memory this process still maps (our closes run later,
// on the reaper) and allocates again over it: on 2 H200s (2026-11-29, YALI_DEBUG logs of the quick
// suite in multi mode) a 76 KB allocation overlapped four 20 KB siblings' open mappings. The bytes
// are mapped all the same, by those siblings: such an allocation borrows them. It holds every
// sibling whose mapping covers part of the bytes its caller touches (so none closes under it), only
// when together they cover all of those (the allocation's other bytes may stay unmapped here: the
// result, its first byte, is an address to offset from, not to read), and learns where one
// mapping gives way to the next (`splits`): a
// cudaMemcpyAsync whose source spans two mappings fails as an invalid argument (seen the same day),
// so the copy engines copy such a buffer piece by piece; kernels read across them. What a mapping
// spans is the driver's (Ops::extent: RANGE_START_ADDR and RANGE_SIZE of what the open returned),
// checked against the peer's offsets (the mapping's base must be where they put the block).
//
// One entry per (device, peer process, peer allocation) opened:
//   absent --import--> Opening --opened--> Live (refs > 0) --last release--> Idle (close posted)
//   Idle --import--> Live (the same mapping, no new open)
//   Idle --the close job starts--> Closing --closed--> absent
// A borrow takes its lenders as an import takes its own entry (Live, refs + 1) and lets them go
// together. An Idle sibling lends only if its mapping lies within the borrowing allocation; one
// that reaches past it is waited for (its close), never revived under the allocation's neighbour.
// An import that finds Opening or Closing waits for it to end, at most `timeoutMs`: a close waits
// for the device's kernels, which end within YALI_TIMEOUT_MS.
//
// Neither the open nor the close runs under the table's mutex: a release may come from a CUDA
// callback thread (a graph's user object dropping a registration), which must never wait for a
// close that itself waits for kernels queued behind that callback.
#pragma once

#include <stdint.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

namespace yali {

// Copy-engine calls and IPC closes of this process never overlap. While cudaIpcCloseMemHandle waits
// for the device, the driver holds up the process's other CUDA calls (PERF.md, "Releasing memory
// while another stream's kernel runs"), the copy-engine watch's among them; a copy-engine call whose
// waits are queued ends only when its peers come or that watch releases it. A close started while
// such a call waited therefore waited for it forever (coll_copy_engine part 5, yaliCommAbort of a
// comm whose call waited for a peer: two processes on one H200, 2026-11-29).
//
// The handshake, each side announcing itself before looking at the other (sequentially consistent):
// a call counts itself in before it queues anything and out when its watch has seen it end; a close
// counts itself in, and backs off (its job is tried again later) if a call is counted; a call that
// finds a close counted waits for it before queuing its handshake (a close runs until the device has
// drained; the driver holds the call's CUDA calls up meanwhile anyway), but only until a deadline or
// its comm's abort. So either the close sees the call, or the call sees the close.
class CloseGate {
 public:
  // A copy-engine call, before its first queued operation: false if a close was still running at
  // `deadlineMs` (nowMs()) or `cancel` was set meanwhile; the call is then not counted.
  static bool enterCall(int64_t deadlineMs, const std::atomic<bool>& cancel);
  static void leaveCall(int calls = 1);  // the watch saw it (or them) end
  // A short CUDA call that the driver would hold up while a close waits for the device (a copy
  // queued on a stream: comm.cc's read of the kernels' eager count): counted in like a call, or
  // false, counting nothing, while a close is running. leaveCall() after it.
  static bool tryEnterCall();
  // A close: false, counting nothing, while a copy-engine call is counted.
  static bool enterClose();
  static void leaveClose();
  static int callsInFlight();
};

class IpcImports {
 public:
  struct Key {
    int device;         // the device this process maps it on
    int64_t peerPid;    // the exporting process
    uint64_t bufferId;  // its CUDA buffer id in that process (unique over the process's life)
    bool operator<(const Key& o) const {
      return std::tie(device, peerPid, bufferId) < std::tie(o.device, o.peerPid, o.bufferId);
    }
  };
  // The block holding an allocation: its CUDA id in the peer (0: unknown, never shared), where the
  // allocation starts in it, and how many bytes from that start the caller will touch (up to).
  struct Block {
    uint64_t id = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    uint64_t touchFrom = 0;  // the first of those bytes the caller touches (a borrow need cover only
                             // [touchFrom, bytes) from the allocation's start)
    uint64_t size = 0;       // the allocation's own size (0: unknown, taken as `bytes`): the driver
                             // refuses its open while any of it is mapped
  };
  // How entries are opened, closed and their closes deferred; process() uses CUDA and the reaper,
  // the host tests count calls.
  struct Ops {
    // cudaSuccess with *mapped, or the error with *error (cudaErrorAlreadyMapped: the allocation's
    // block is mapped on this device already).
    std::function<cudaError_t(void** mapped, const cudaIpcMemHandle_t& handle, int device, std::string* error)> open;
    std::function<void(void* mapped, int device)> close;
    // The bytes that the mapping an open on `device` returned as `mapped` makes readable, as
    // offsets in its block: [*first, *first + *bytes). The allocation lies `offset` bytes into its
    // block by the peer's account; false with *error where the driver cannot tell, or where its
    // mapping does not start at `mapped - offset` (then the entry lends to none).
    std::function<bool(const void* mapped, int device, uint64_t offset, uint64_t* first, uint64_t* bytes,
                       std::string* error)>
        extent;
    std::function<void(std::function<bool()> job)> post;  // runs the job later (Reaper::post)
  };

  explicit IpcImports(Ops ops);
  // The process's table (never destroyed: releases may come during exit).
  static IpcImports& process();

  // The allocation `key` (in `block`, shared by `handle`), mapped, as its first byte: its open
  // mapping, a new one, or its place in an open mapping of its block when the driver refuses to
  // map the block twice. nullptr with *error when the open fails, or when an earlier open or close
  // of it (or of its block, for a borrow) did not end within timeoutMs, or `cancel` (the comm's
  // abort flag) was set while waiting for it (checked every 100 ms). *splits (if given): the
  // offsets from the result, below block.bytes, where the bytes lie in another sibling's mapping
  // than the byte before (a borrow spanning several mappings; empty otherwise).
  std::shared_ptr<void> import(const Key& key, const Block& block, const cudaIpcMemHandle_t& handle,
                               int64_t timeoutMs, std::string* error,
                               const std::atomic<bool>* cancel = nullptr, std::vector<uint64_t>* splits = nullptr);

  size_t entries();  // how many allocations are open, opening or closing (tests)

 private:
  enum class State { kOpening, kLive, kIdle, kClosing };
  struct Entry {
    State state = State::kOpening;
    void* mapped = nullptr;     // what the open returned: the allocation's first byte
    Block block;                // the allocation's block (id 0: lent to no other allocation)
    size_t refs = 0;            // its own imports and the borrowers'
    uint64_t extentFirst = 0;   // the bytes its mapping makes readable, as offsets in its block
    uint64_t extentBytes = 0;   // (Ops::extent; 0: unknown, lent to none)
    std::string extentError;    // why unknown
    uint64_t closeTicket = 0;  // which posted close may act on an Idle entry (a later release posts anew)
  };
  // `where`, holding `keys` (each taken once: take()) until the last copy of it goes.
  std::shared_ptr<void> share(std::vector<Key> keys, char* where);
  // An open entry (Live, or Idle with its close posted but not started) is taken once more: it
  // becomes Live, and the job of an Idle one's close then leaves it.
  static bool isOpen(const Entry& e) { return e.state == State::kLive || e.state == State::kIdle; }
  static void take(Entry& e);
  void release(const Key& key);
  bool closeIfIdle(const Key& key, uint64_t ticket);

  Ops ops_;
  std::mutex mutex_;
  std::condition_variable changed_;  // an entry left Opening or Closing
  std::map<Key, Entry> entries_;
  uint64_t nextTicket_ = 0;
  uint64_t closesDone_ = 0;  // closes ended so far: a refused open retries if one ended meanwhile
};

}  // namespace yali
