#include "core/ipc_imports.h"

#include <chrono>

namespace yali {

IpcImports::IpcImports(Ops ops) : ops_(std::move(ops)) {}

std::shared_ptr<void> IpcImports::share(const Key& key, char* blockBase) {
  return std::shared_ptr<void>(blockBase, [this, key](void*) { release(key); });
}

std::shared_ptr<void> IpcImports::import(const Key& key, const cudaIpcMemHandle_t& handle, uint64_t handleOffset,
                                         int64_t timeoutMs, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    auto it = entries_.find(key);
    if (it == entries_.end()) break;
    Entry& e = it->second;
    if (e.state == State::kLive || e.state == State::kIdle) {
      // Idle: its close is posted but has not started; the job will find the entry live and leave it.
      e.state = State::kLive;
      ++e.refs;
      return share(key, e.blockBase);
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      // `e` may be gone: the wait released the lock, and the open or close may have ended (and
      // erased the entry) just as the deadline passed. Look again; only a wait still pending fails.
      it = entries_.find(key);
      if (it == entries_.end() || it->second.state == State::kLive || it->second.state == State::kIdle) continue;
      *error = std::string("an earlier ") + (it->second.state == State::kOpening ? "mapping" : "unmapping") +
               " of the same allocation by this process had not ended after " + std::to_string(timeoutMs) +
               " ms";
      return nullptr;
    }
  }
  entries_[key];  // Opening: other imports of it wait for this one
  lock.unlock();
  void* mapped = nullptr;
  const bool opened = ops_.open(&mapped, handle, key.device, error);
  lock.lock();
  auto it = entries_.find(key);
  if (!opened) {
    entries_.erase(it);
    changed_.notify_all();
    return nullptr;
  }
  it->second.state = State::kLive;
  it->second.mapped = mapped;
  it->second.blockBase = static_cast<char*>(mapped) - handleOffset;
  it->second.refs = 1;
  changed_.notify_all();
  return share(key, it->second.blockBase);
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
  ops_.close(mapped, key.device);
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.erase(key);
  changed_.notify_all();
  return true;
}

size_t IpcImports::entries() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

}  // namespace yali
