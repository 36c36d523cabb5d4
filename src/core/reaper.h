// The reaper: releases a comm's CUDA resources on a thread of its own, once nothing of the comm can
// run any more, so that no API call waits for that.
//
// A release may have to wait: for the comm's launches still queued on streams (they read the
// comm's state words even when they do nothing else), which may sit behind another library's
// kernel for a long time. A job says whether it is done; one that is not is tried again later,
// without holding up the others. Jobs must not block: the comm's own memory is released with
// calls that never wait for the device (shared_memory.h). The one exception, closing a peer's
// mapping of a registered user buffer (cudaIpcCloseMemHandle, which CUDA makes wait for every
// kernel on the device, behind another library's kernel possibly forever), goes to a lane of its
// own (Lane::kIpcClose), so that it never holds up the other lane's jobs (the releases and the
// copy-engine watches, whose waits must stay bounded) by running there. While it waits the driver
// still holds up every CUDA call of the process, the watches' too, so it never starts while a
// copy-engine call is in flight (ipc_imports.h: CloseGate).
//
// Each lane's thread is started by its first post and lives as long as the process (one thread
// per lane, whatever the number of comms); it runs in relaxed stream-capture mode, so that a
// release never invalidates a CUDA graph another thread is capturing. It posts from CUDA's own
// callback threads too (a graph's user object), which must not call CUDA themselves.
#pragma once

#include <stdint.h>

#include <functional>

namespace yali {

class Reaper {
 public:
  enum class Lane : int { kReleases = 0, kIpcClose = 1 };
  // Queues `job` on `lane` and returns its ticket. The job returns true when it has finished, false
  // to be tried again in a few milliseconds.
  static uint64_t post(std::function<bool()> job, Lane lane = Lane::kReleases);
  // Waits until job `ticket` has finished, or until `deadlineMs` (nowMs()) passes. True when it
  // has.
  static bool waitFor(uint64_t ticket, int64_t deadlineMs);
  // The ticket of the last job the calling thread posted on `lane` (0 if none): a caller that
  // drops the last reference to something learns which job releases it.
  static uint64_t lastPostedHere(Lane lane = Lane::kReleases);
};

int64_t nowMs();  // CLOCK_MONOTONIC, milliseconds

}  // namespace yali
