#include "core/ipc_imports.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "core/reaper.h"

namespace yali {

namespace {
// YALI_DEBUG=1: each open, borrow and close on stderr (this table links without libyali's log).
void logInfo(const char* fmt, ...) {
  static const bool on = getenv("YALI_DEBUG") != nullptr && getenv("YALI_DEBUG")[0] == '1';
  if (!on) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "YALI %d: ", static_cast<int>(getpid()));
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
std::atomic<int> gateCalls{0};   // copy-engine calls counted in (CloseGate)
std::atomic<int> gateCloses{0};  // closes counted in
}  // namespace

bool CloseGate::enterCall(int64_t deadlineMs, const std::atomic<bool>& cancel) {
  gateCalls.fetch_add(1);
  while (gateCloses.load() != 0) {
    if (nowMs() > deadlineMs || cancel.load()) {
      gateCalls.fetch_sub(1);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

bool CloseGate::tryEnterCall() {
  gateCalls.fetch_add(1);
  if (gateCloses.load() == 0) return true;
  gateCalls.fetch_sub(1);
  return false;
}

void CloseGate::leaveCall(int calls) { gateCalls.fetch_sub(calls); }

bool CloseGate::enterClose() {
  gateCloses.fetch_add(1);
  if (gateCalls.load() == 0) return true;
  gateCloses.fetch_sub(1);
  return false;
}

void CloseGate::leaveClose() { gateCloses.fetch_sub(1); }

int CloseGate::callsInFlight() { return gateCalls.load(); }

IpcImports::IpcImports(Ops ops) : ops_(std::move(ops)) {}

std::shared_ptr<void> IpcImports::share(std::vector<Key> keys, char* where) {
  return std::shared_ptr<void>(where, [this, keys = std::move(keys)](void*) {
    for (const Key& k : keys) release(k);
  });
}

void IpcImports::take(Entry& e) {
  e.state = State::kLive;
  ++e.refs;
}

std::shared_ptr<void> IpcImports::import(const Key& key, const Block& block, const cudaIpcMemHandle_t& handle,
                                         int64_t timeoutMs, std::string* error, const std::atomic<bool>* cancel,
                                         std::vector<uint64_t>* splits) {
  if (splits != nullptr) splits->clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  std::unique_lock<std::mutex> lock(mutex_);
  // Waits for an entry to leave Opening or Closing; false with *error past the deadline or once
  // `cancel` is set (in slices, so that an abort from another thread ends the wait within about
  // 100 ms). `what` names the entry's kind for the message.
  auto waitForChange = [&](const char* what) {
    const auto slice = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    const bool woken = changed_.wait_until(lock, slice) != std::cv_status::timeout;
    // After every wake-up: notifications for other entries (any comm's) must not keep an abort
    // waiting.
    if (cancel != nullptr && cancel->load()) {
      *error = std::string("yaliCommAbort was called while this call waited for an earlier mapping or "
                           "unmapping of ") + what;
      return false;
    }
    if (woken || std::chrono::steady_clock::now() < deadline) return true;  // look again, wait on
    *error = std::string("an earlier mapping or unmapping of ") + what +
             " by this process had not ended after " + std::to_string(timeoutMs) + " ms";
    return false;
  };
  for (;;) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      Entry& e = it->second;
      if (isOpen(e)) {
        take(e);
        return share({key}, static_cast<char*>(e.mapped));
      }
      // Opening or Closing. The wait released the lock: look again, even past the deadline (the
      // open or close may have ended just then); only a wait still pending fails.
      if (!waitForChange("the same allocation")) {
        it = entries_.find(key);
        if (it == entries_.end() || isOpen(it->second)) {
          error->clear();
          continue;
        }
        return nullptr;
      }
      continue;
    }
    entries_[key].block = block;  // Opening: other imports of it wait for this one
    // A lender's close may end while the open runs, after the driver refused this one because
    // the block was still mapped: then the refusal is stale, and the open is tried again.
    const uint64_t closesBefore = closesDone_;
    lock.unlock();
    void* mapped = nullptr;
    const cudaError_t opened = ops_.open(&mapped, handle, key.device, error);
    uint64_t extentFirst = 0, extentBytes = 0;
    std::string extentError;
    if (opened == cudaSuccess && !ops_.extent(mapped, key.device, block.offset, &extentFirst, &extentBytes, &extentError))
      extentBytes = 0;
    if (extentBytes != 0 && (!(extentFirst <= block.offset && block.offset - extentFirst < extentBytes) ||
                             extentFirst + extentBytes < extentFirst)) {
      extentError = "the driver's range for the mapping does not hold its first byte";
      extentBytes = 0;
    }
    lock.lock();
    it = entries_.find(key);
    logInfo("ipc import: device %d, pid %lld, buffer %llu (block %llu at +%llu, %llu bytes): open %s -> %p, maps "
            "+%llu..+%llu%s%s", key.device, static_cast<long long>(key.peerPid),
            static_cast<unsigned long long>(key.bufferId), static_cast<unsigned long long>(block.id),
            static_cast<unsigned long long>(block.offset), static_cast<unsigned long long>(block.bytes),
            cudaGetErrorString(opened), mapped, static_cast<unsigned long long>(extentFirst),
            static_cast<unsigned long long>(extentFirst + extentBytes), extentError.empty() ? "" : " ",
            extentError.c_str());
    if (opened == cudaSuccess) {
      Entry& e = it->second;
      e.state = State::kLive;
      e.mapped = mapped;
      e.refs = 1;
      e.extentFirst = extentFirst;
      e.extentBytes = extentBytes;
      e.extentError = extentError;
      changed_.notify_all();
      return share({key}, static_cast<char*>(mapped));
    }
    entries_.erase(it);
    changed_.notify_all();
    if (opened != cudaErrorAlreadyMapped || block.id == 0) return nullptr;
    // Its bytes overlap mappings open in its block (ipc_imports.h): borrow them if together they
    // cover the bytes the caller touches, [from, to). Otherwise wait while that can change (a
    // sibling opening or closing, or only Idle ones in the way, whose closes will run), refuse at
    // once while a sibling held by another import is in the way (its mapping stays).
    const uint64_t from = block.offset + block.touchFrom, to = block.offset + block.bytes;
    if (to <= from) {
      *error += "; nothing of it to map";
      return nullptr;
    }
    // In the way: siblings over any byte of the allocation (what the driver's refusal is about:
    // whether to wait); lenders: measured open siblings over the touched bytes.
    const uint64_t allocTo = block.offset + std::max(block.size, block.bytes);
    std::vector<std::map<Key, Entry>::iterator> overlapping;
    bool closingInWay = false, openingInWay = false, openingOverTouched = false;
    bool idleInWay = false, liveInWay = false, liveMeasuredInWay = false;
    std::string unknown;          // why a sibling in the way cannot lend
    std::string unknownAnywhere;  // why one of the block's open siblings cannot (for the message)
    for (auto jt = entries_.begin(); jt != entries_.end(); ++jt) {
      const Key& k = jt->first;
      const Entry& e = jt->second;
      if (k.device != key.device || k.peerPid != key.peerPid || e.block.id != block.id) continue;
      // Its bytes: its mapping's, or until they are known (opening, unmeasured) its whole allocation.
      const uint64_t a = e.extentBytes != 0 ? e.extentFirst : e.block.offset;
      const uint64_t b = e.extentBytes != 0 ? e.extentFirst + e.extentBytes
                                            : e.block.offset + std::max(e.block.size, e.block.bytes);
      if (isOpen(e) && e.extentBytes == 0) unknownAnywhere = e.extentError;
      if (!(a < allocTo && block.offset < b)) continue;
      if (!isOpen(e)) {
        // Closing: gone soon. Opening: may become a lender, if it lies over the touched bytes.
        (e.state == State::kClosing ? closingInWay : openingInWay) = true;
        openingOverTouched |= e.state == State::kOpening && a < to && from < b;
        continue;
      }
      (e.state == State::kIdle ? idleInWay : liveInWay) = true;
      liveMeasuredInWay |= e.state == State::kLive && e.extentBytes != 0;
      if (e.extentBytes == 0) {
        unknown = e.extentError;
        continue;
      }
      // An Idle sibling (its close posted) lends only if its mapping lies within this allocation.
      // One that reaches past it maps memory the peer has freed and may have given to a neighbour
      // since; revived, it would stay open under that neighbour, whose own open the driver then
      // refuses while nothing lends it all of its bytes (2 H200s, 2026-11-29, coll_copy_engine
      // --quick in multi mode: a 512 KB buffer borrowed a freed 524 KB sibling's mapping, and the
      // 76 KB buffer allocated next after it was refused). Such a sibling is waited for instead:
      // its close frees the bytes for an open of our own.
      if (e.state == State::kIdle && !(block.offset <= a && b <= allocTo)) continue;
      if (a < to && from < b) overlapping.push_back(jt);
    }
    // The chain: from `from`, each step the sibling covering the position that reaches furthest.
    std::vector<std::map<Key, Entry>::iterator> chain;
    std::vector<uint64_t> cuts;  // from the allocation's start
    uint64_t at = from;
    while (at < to) {
      auto best = overlapping.end();
      for (auto ot = overlapping.begin(); ot != overlapping.end(); ++ot) {
        const Entry& e = (*ot)->second;
        if (e.extentFirst <= at && at < e.extentFirst + e.extentBytes &&
            (best == overlapping.end() || e.extentFirst + e.extentBytes > (*best)->second.extentFirst + (*best)->second.extentBytes))
          best = ot;
      }
      if (best == overlapping.end()) break;
      if (at != from) cuts.push_back(at - block.offset);
      chain.push_back(*best);
      at = (*best)->second.extentFirst + (*best)->second.extentBytes;
    }
    bool agree = true;
    char* blockBase = nullptr;
    if (at >= to) {
      // Every link's mapping must sit where the peer's offsets put the block (extent checked it
      // against its own offset); where two disagree, lend nothing.
      blockBase = static_cast<char*>(chain[0]->second.mapped) - chain[0]->second.block.offset;
      for (auto& link : chain) agree &= static_cast<char*>(link->second.mapped) - link->second.block.offset == blockBase;
    }
    if (at >= to && agree) {
      std::vector<Key> keys;
      for (auto& link : chain) {
        take(link->second);
        keys.push_back(link->first);
      }
      char* where = blockBase + block.offset;
      error->clear();
      if (splits != nullptr) *splits = cuts;
      logInfo("ipc import: buffer %llu borrows %zu sibling mapping(s) of block %llu, from buffer %llu's (%p): %p",
              static_cast<unsigned long long>(key.bufferId), keys.size(), static_cast<unsigned long long>(block.id),
              static_cast<unsigned long long>(keys[0].bufferId), chain[0]->second.mapped, static_cast<void*>(where));
      return share(std::move(keys), where);
    }
    // Worth a wait: an opening sibling that may lend, or, with nothing held in the way (whose
    // mapping stays), siblings whose closes will free the allocation's bytes.
    const bool mayChange = openingOverTouched || (!liveInWay && (closingInWay || idleInWay));
    const bool staleRefusal = !closingInWay && !openingInWay && !idleInWay && !liveInWay && closesDone_ != closesBefore;
    if (!mayChange && !staleRefusal) {
      if (!agree)
        *error += "; its block's open mappings disagree on where the block starts";
      else if (liveMeasuredInWay || (liveInWay && unknown.empty()))
        *error += "; its block's open mappings do not span it (another registration in this process holds a "
                  "mapping of memory the peer has freed since, over part of its allocation)";
      else if (!unknown.empty())
        *error += "; a mapping of its block in the way could not be measured (" + unknown + ")";
      else if (!unknownAnywhere.empty())
        *error += "; no open mapping of its block covers it, and one could not be measured (" + unknownAnywhere + ")";
      else
        *error += "; no open mapping of its block covers it";
      return nullptr;
    }
    if (staleRefusal) {  // a sibling closed while the open ran: try the open again, within the deadline
      if ((cancel != nullptr && cancel->load()) || std::chrono::steady_clock::now() >= deadline) {
        *error += "; its block's mappings changed until the deadline";
        return nullptr;
      }
      error->clear();
      continue;
    }
    if (!waitForChange("another allocation of its block")) return nullptr;
    error->clear();
  }
}

void IpcImports::release(const Key& key) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_.at(key);
    if (--e.refs > 0) return;
    e.state = State::kIdle;
    ticket = e.closeTicket = ++nextTicket_;
  }
  ops_.post([this, key, ticket] { return closeIfIdle(key, ticket); });
}

bool IpcImports::closeIfIdle(const Key& key, uint64_t ticket) {
  void* mapped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    // Imported again meanwhile (Live), or released again with a later close posted: not ours.
    if (it == entries_.end() || it->second.state != State::kIdle || it->second.closeTicket != ticket) return true;
    it->second.state = State::kClosing;
    mapped = it->second.mapped;
  }
  logInfo("ipc close: device %d, pid %lld, buffer %llu: %p", key.device, static_cast<long long>(key.peerPid),
          static_cast<unsigned long long>(key.bufferId), mapped);
  ops_.close(mapped, key.device);
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.erase(key);
  ++closesDone_;
  changed_.notify_all();
  return true;
}

size_t IpcImports::entries() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace yali
