#include "core/handles.h"

#include <stdint.h>

#include <deque>
#include <mutex>
#include <vector>

namespace yali {
namespace {

struct Slot {
  uint32_t generation = 0;  // of the current (or last) occupant
  std::shared_ptr<yaliComm> comm;  // null when free
  HandleState retiredAs = HandleState::kUnknown;  // how the last occupant left
};

struct HandleTable {
  std::mutex mutex;
  std::vector<Slot> slots;
  std::deque<uint32_t> freeSlots;  // oldest first
};

// Never destroyed: handles may be used from static destructors of the application.
HandleTable& table() {
  static HandleTable* t = new HandleTable();
  return *t;
}

yaliComm_t encode(uint32_t slot, uint32_t generation) {
  return reinterpret_cast<yaliComm_t>((static_cast<uintptr_t>(generation) << 32) | (slot + 1u));
}

bool decode(yaliComm_t handle, uint32_t* slot, uint32_t* generation) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(handle);
  const uint32_t low = static_cast<uint32_t>(v & 0xFFFFFFFFu);
  if (low == 0) return false;
  *slot = low - 1;
  *generation = static_cast<uint32_t>(v >> 32);
  return true;
}

}  // namespace

yaliComm_t addCommHandle(std::shared_ptr<yaliComm> comm) {
  HandleTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  uint32_t index;
  if (!t.freeSlots.empty()) {
    index = t.freeSlots.front();
    t.freeSlots.pop_front();
  } else {
    index = static_cast<uint32_t>(t.slots.size());
    t.slots.emplace_back();
  }
  Slot& s = t.slots[index];
  s.generation = s.generation + 1 == 0 ? 1 : s.generation + 1;  // never 0: handles are non-null
  s.comm = std::move(comm);
  return encode(index, s.generation);
}

std::shared_ptr<yaliComm> findComm(yaliComm_t handle, HandleState* state) {
  uint32_t index, generation;
  HandleTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (!decode(handle, &index, &generation) || index >= t.slots.size() || generation == 0 ||
      generation > t.slots[index].generation) {
    *state = HandleState::kUnknown;
    return nullptr;
  }
  const Slot& s = t.slots[index];
  if (generation == s.generation && s.comm) {
    *state = HandleState::kLive;
    return s.comm;
  }
  // An older occupant of the slot: how the last one left is known; earlier ones were retired too.
  *state = generation == s.generation || generation + 1 == s.generation ? s.retiredAs : HandleState::kDestroyed;
  if (*state == HandleState::kUnknown || *state == HandleState::kLive) *state = HandleState::kDestroyed;
  return nullptr;
}

void retireCommHandle(yaliComm_t handle, HandleState how) {
  uint32_t index, generation;
  HandleTable& t = table();
  std::shared_ptr<yaliComm> dropped;  // released outside the lock
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    if (!decode(handle, &index, &generation) || index >= t.slots.size()) return;
    Slot& s = t.slots[index];
    if (s.generation != generation || !s.comm) return;
    dropped = std::move(s.comm);
    s.retiredAs = how;
    t.freeSlots.push_back(index);
  }
}

}  // namespace yali
