#include "core/ipc_imports.h"

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

std::shared_ptr<void> IpcImports::share(const Key& key, char* where) {
  return std::shared_ptr<void>(where, [this, key](void*) { release(key); });
}

std::shared_ptr<void> IpcImports::retain(const Key& key, Entry& e, char* where) {
  e.state = State::kLive;
  ++e.refs;
  return share(key, where);
}

std::map<IpcImports::Key, IpcImports::Entry>::iterator IpcImports::findBlock(const Key& key, uint64_t block,
                                                                            bool* busy) {
  *busy = false;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Key& k = it->first;
    if (k.device != key.device || k.peerPid != key.peerPid || it->second.block.id != block) continue;
    if (isOpen(it->second)) return it;
    *busy = true;
  }
  return entries_.end();
}

std::shared_ptr<void> IpcImports::import(const Key& key, const Block& block, const cudaIpcMemHandle_t& handle,
                                         int64_t timeoutMs, std::string* error, const std::atomic<bool>* cancel,
                                         bool* borrowed) {
  if (borrowed != nullptr) *borrowed = false;
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
      if (isOpen(e)) return retain(key, e, static_cast<char*>(e.mapped));
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
    lock.lock();
    it = entries_.find(key);
    logInfo("ipc import: device %d, pid %lld, buffer %llu (block %llu at +%llu, %llu bytes): open %s -> %p", key.device,
            static_cast<long long>(key.peerPid), static_cast<unsigned long long>(key.bufferId),
            static_cast<unsigned long long>(block.id), static_cast<unsigned long long>(block.offset),
            static_cast<unsigned long long>(block.bytes), cudaGetErrorString(opened), mapped);
    if (opened == cudaSuccess) {
      it->second.state = State::kLive;
      it->second.mapped = mapped;
      it->second.refs = 1;
      changed_.notify_all();
      return share(key, static_cast<char*>(mapped));
    }
    entries_.erase(it);
    changed_.notify_all();
    if (opened != cudaErrorAlreadyMapped || block.id == 0) return nullptr;
    // Its block is mapped already: by an allocation of it that this table opened (borrow that
    // mapping), or one still opening or closing (wait, then start over).
    bool busy = false;
    auto lender = findBlock(key, block.id, &busy);
    if (lender != entries_.end()) {
      Entry& e = lender->second;
      char* blockBase = static_cast<char*>(e.mapped) - e.block.offset;
      char* where = blockBase + block.offset;
      std::string why;
      if (!ops_.covers(e.mapped, key.device, blockBase, where, block.bytes, &why)) {
        *error += "; its block's open mapping does not span it (" + why + ")";
        return nullptr;
      }
      error->clear();
      logInfo("ipc import: buffer %llu borrows buffer %llu's mapping %p (block at %p): %p",
              static_cast<unsigned long long>(key.bufferId), static_cast<unsigned long long>(lender->first.bufferId),
              e.mapped, static_cast<void*>(blockBase), static_cast<void*>(where));
      if (borrowed != nullptr) *borrowed = true;
      return retain(lender->first, e, where);
    }
    if (!busy && closesDone_ != closesBefore) {
      error->clear();
      continue;
    }
    if (!busy) {
      *error += "; no mapping of its block is open in this process";
      return nullptr;
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
