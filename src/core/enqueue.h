// From a checked call to a kernel on the caller's stream: the one path every collective takes after
// its arguments are checked (call.cc), and yaliGroupStart/yaliGroupEnd/yaliGroupSimulateEnd.
//
// Groups, with NCCL's meaning: inside yaliGroupStart/yaliGroupEnd (nesting counts), collectives are
// checked when called and launched at the outermost yaliGroupEnd, in call order, before it returns.
// An outermost yaliGroupSimulateEnd drops them instead: nothing of a call is committed before its
// launch (launchNow takes the comm's epoch and sequence numbers, a graph's hold, the order of its
// launches across streams, the copy engines' state, and notes what the host knows of a stale
// registration), so a dropped call leaves the comm as if it had never been made.
// One thread driving several GPUs must group the per-GPU calls of one collective: otherwise a
// kernel of its own that it launches between them may, on its first launch under lazy module
// loading, wait for the device to drain, while our kernel on that device waits for a peer whose
// kernel this thread has not launched yet (it would end at YALI_TIMEOUT_MS, as yaliTimeout).
//
// Graphs: a launch into a capturing stream gives the graph a reference to the comm's
// DeviceResources (a CUDA user object), so that its replays never touch freed memory; it gets no
// eager sequence number (DeviceArgs::eagerSeq 0).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <vector>

#include "collectives/common/device_state.h"
#include "core/registration.h"
#include "tuning/selector.h"
#include "yali/yali.h"

namespace yali {

// One use of a registration by a call waiting in a group (Registration::queuedUses): counted while
// the call waits, from enqueue until the plan is launched or dropped (its destruction).
class QueuedUse {
 public:
  QueuedUse() = default;
  explicit QueuedUse(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) {
    if (count_) ++*count_;
  }
  QueuedUse(QueuedUse&&) noexcept = default;
  QueuedUse& operator=(QueuedUse&& other) noexcept {
    if (this != &other) {
      release();
      count_ = std::move(other.count_);
    }
    return *this;
  }
  QueuedUse(const QueuedUse&) = delete;
  QueuedUse& operator=(const QueuedUse&) = delete;
  ~QueuedUse() { release(); }

 private:
  void release() {
    if (count_) --*count_;
    count_.reset();
  }
  std::shared_ptr<std::atomic<int>> count_;
};

// A collective call, checked and planned, ready to launch.
struct PlannedLaunch {
  std::shared_ptr<yaliComm> comm;
  const char* call = "";
  AlgoChoice choice{};
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  size_t bytes = 0;  // what the selector chose for (choiceFits checks it again at launch)
  DeviceArgs args{};  // all but epochHint, eagerSeq and regEpoch, filled at launch
  cudaStream_t stream = nullptr;
  Registration* registrations[1] = {};  // the registration the call's output lies in, if it uses it
  QueuedUse queuedUses[1];  // [i]: registrations[i]'s, while the call waits in a group
  // What the host knows of a device failure the launch will provoke (yaliComm::setHostNote), noted
  // at the launch (a call a simulated group drops provokes none); null when none.
  const char* hostNote = nullptr;
  // Point-to-point (yaliSend, yaliRecv; collectives/p2p/p2p.h): the calls this launch runs, in call
  // order (one outside a group; every one of the comm's in a group, fused at its end), instead of
  // `choice`'s algorithm. A send to self and its receive become one copy at the group's end.
  bool p2p = false;
  std::vector<P2POp> p2pOps;
};

// Launches now, or at the outermost yaliGroupEnd when a group is open on this thread. The caller
// holds plan.comm->mutex.
yaliResult_t enqueue(PlannedLaunch plan);

yaliResult_t groupStart();
yaliResult_t groupEnd();
// Ends the group as groupEnd does; the outermost end drops the group's calls instead of launching
// them.
yaliResult_t groupSimulateEnd();
// Launches of `comm` waiting in this thread's open group.
bool hasPendingLaunches(const yaliComm* comm);
// Whether a group is open on this thread, and the point-to-point calls of `comm` waiting in it.
bool inGroup();
size_t pendingP2POps(const yaliComm* comm);
// Forgets them (yaliCommAbort).
void dropPendingLaunches(const yaliComm* comm);

}  // namespace yali
