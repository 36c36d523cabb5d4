// What a yaliComm_t is: a handle into a process-wide table of live communicators, not a pointer.
//
// A handle is (generation << 32) | (slot + 1). Destroying or aborting a comm retires its handle: the
// slot is freed for a later comm, which gets the next generation, so a stale handle is recognized
// (yaliInvalidUsage, "was destroyed") instead of reaching whatever object now lives at an address,
// and the comm object itself is freed (no tombstones: nothing grows with init/destroy cycles).
// Freed slots are reused oldest first, so a stale handle would alias a new comm only after its slot
// had been reused 2^32 times.
#pragma once

#include <memory>

#include "yali/yali.h"

namespace yali {

enum class HandleState {
  kLive,
  kUnknown,    // never a handle of this process
  kDestroyed,  // retired by yaliCommDestroy
  kAborted,    // retired by yaliCommAbort
};

// Registers `comm` and returns its new handle.
yaliComm_t addCommHandle(std::shared_ptr<yaliComm> comm);

// The comm of a live handle (a reference that keeps it alive during the call), or null with *state
// saying why not.
std::shared_ptr<yaliComm> findComm(yaliComm_t handle, HandleState* state);

// Retires a live handle (`how`: kDestroyed or kAborted); later finds return null with that state.
void retireCommHandle(yaliComm_t handle, HandleState how);

}  // namespace yali
