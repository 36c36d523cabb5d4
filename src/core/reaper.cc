#include "core/reaper.h"

#include <cuda_runtime.h>
#include <time.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

namespace yali {
namespace {

// A job not ready is tried again this much later: about the release grace (comm.cc:
// makeDeviceResources), which every yaliCommDestroy waits out. A pass over a release costs a few
// volatile reads, a stream query or a one-word copy queued (the kernels' eager count: none while an
// IPC close runs, CloseGate) and, from the control stream's end, an event query; over a copy-engine watch, a
// device switch, its mutex, one to three event queries and, for a call of a failed or closed comm,
// one memset queued on the watch's stream every 10 ms (copy_engine.cc: poll).
constexpr int kRetryMs = 2;

struct ReaperState {
  std::mutex mutex;
  std::condition_variable posted;    // a job was queued
  std::condition_variable finished;  // a job has finished
  std::deque<std::pair<uint64_t, std::function<bool()>>> jobs;
  std::set<uint64_t> unfinished;
  uint64_t lastPosted = 0;
  bool started = false;
};

constexpr int kLanes = 2;  // Reaper::Lane

// Never destroyed: the threads may still run while the process exits, and CUDA's callbacks that
// post releases may come after static destructors.
ReaperState& state(int lane) {
  static ReaperState* s = new ReaperState[kLanes];
  return s[lane];
}

// A ticket names its lane in its lowest bit (post, waitFor).
int laneOf(uint64_t ticket) { return static_cast<int>(ticket & 1); }

void reaperLoop(int lane) {
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  ReaperState& s = state(lane);
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.posted.wait(lock, [&] { return !s.jobs.empty(); });
    // One pass over the jobs queued now; those not ready go to the back.
    bool progress = false;
    for (size_t n = s.jobs.size(); n > 0; --n) {
      auto job = std::move(s.jobs.front());
      s.jobs.pop_front();
      lock.unlock();
      const bool done = job.second();
      // A finished job's captures go now, outside the lock: releasing them may post a job (the
      // copy engines' watch holds the last reference to a comm's DeviceResources, whose release
      // is a job), and posting takes the lock. (Seen on an H100, 2026-11-25: the reaper thread
      // deadlocked on itself after a copy-engine call outlived its aborted comm.)
      if (done) job.second = nullptr;
      lock.lock();
      if (done) {
        s.unfinished.erase(job.first);
        progress = true;
      } else {
        s.jobs.push_back(std::move(job));
      }
    }
    if (progress) s.finished.notify_all();
    if (!s.jobs.empty()) s.posted.wait_for(lock, std::chrono::milliseconds(kRetryMs));
  }
}

}  // namespace

int64_t nowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

thread_local uint64_t postedHere[kLanes] = {};

uint64_t Reaper::post(std::function<bool()> job, Lane lane) {
  const int l = static_cast<int>(lane);
  ReaperState& s = state(l);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.started) {
    s.started = true;
    std::thread(reaperLoop, l).detach();
  }
  const uint64_t ticket = (++s.lastPosted << 1) | static_cast<uint64_t>(l);
  s.jobs.emplace_back(ticket, std::move(job));
  s.unfinished.insert(ticket);
  s.posted.notify_one();
  postedHere[l] = ticket;
  return ticket;
}

uint64_t Reaper::lastPostedHere(Lane lane) { return postedHere[static_cast<int>(lane)]; }

bool Reaper::waitFor(uint64_t ticket, int64_t deadlineMs) {
  ReaperState& s = state(laneOf(ticket));
  std::unique_lock<std::mutex> lock(s.mutex);
  while (s.unfinished.count(ticket) != 0) {
    const int64_t left = deadlineMs - nowMs();
    if (left <= 0) return false;
    s.finished.wait_for(lock, std::chrono::milliseconds(left));
  }
  return true;
}

}  // namespace yali
