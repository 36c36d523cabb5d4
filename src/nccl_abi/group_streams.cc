// A group's streams, joined per communicator.
//
// NCCL lets the calls of one group use several streams, and then treats the group as if it had
// been posted on every one of them: the group's kernel waits for what each stream held, and each
// stream waits for the kernel (NCCL's guide, "Mixing multiple streams within the same
// ncclGroupStart/End() group"; enqueue.cc, ncclLaunchPrepare and ncclLaunchFinish, per comm). A
// program may rely on it: it fills an input on one stream and gives a call of the group another.
// On a comm of ours the group's calls go to two libraries, YALI's part and NCCL's part (and calls
// staged or deferred to the group's end, which run outside both), and each library joins only the
// streams of its own part (NCCL's launch; libyali's yaliGroupEnd since Session 36, yali.h). So the
// shim joins them itself, at the outermost end, for each comm whose calls in the group used two
// streams or more:
//   1. before both libraries' ends: every stream of the comm waits for what every other one held;
//   2. once everything of the group was issued: the same again, which now covers the group's work.
// Each join is a star on the comm's device: the first stream waits for an event recorded on each of
// the others, then each of the others waits for one recorded on the first; 2(k-1) records and as
// many waits for k streams, none for one stream (the common case: torch's coalesced calls). One
// event per device and thread serves every join: a wait takes the event's state when it is issued,
// so the event can be recorded again at once.
// Not joined (NCCL_ABI.md, "Streams"): comms NCCL alone runs (it joins its own); a comm whose
// streams are not all in the same capture, or all outside one (NCCL refuses such a group for its own
// part), or whose capture state cannot be read; NCCL's part of a group NCCL ends in the background
// (ncclInProgress), which launches after the second join (NCCL's own join orders its streams); a
// staged call's copy in, made at the call, on its own stream.
#include "nccl_abi/group_streams.h"

#include <algorithm>
#include <map>

#include "nccl_abi/diag.h"
#include "nccl_abi/env.h"
#include "nccl_abi/yali_lib.h"

namespace yali::nccl_abi {

namespace {

thread_local std::vector<GroupStream> tlsGroupStreams;

const YaliLib& rt() { return *cudaRuntime(); }

// The legacy default stream has two names.
cudaStream_t canonical(cudaStream_t s) { return s == cudaStreamLegacy ? nullptr : s; }

// This thread's event on `device` (the current one), made at its first join there.
cudaEvent_t joinEvent(int device) {
  thread_local std::map<int, cudaEvent_t> events;
  cudaEvent_t& e = events[device];
  if (e == nullptr && rt().cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    rt().cudaGetLastError();
    e = nullptr;
  }
  return e;
}

// One comm's streams (two or more, distinct), joined as a star (above). Returns the CUDA error that
// stopped it, cudaSuccess else.
cudaError_t joinOne(int device, const std::vector<cudaStream_t>& streams) {
  DeviceGuard guard(device);  // stream 0 is the current device's; the event must be the streams'
  const cudaEvent_t e = joinEvent(device);
  if (e == nullptr) return cudaErrorMemoryAllocation;
  cudaError_t err = cudaSuccess;
  for (size_t i = 1; i < streams.size() && err == cudaSuccess; ++i) {
    err = rt().cudaEventRecord(e, streams[i]);
    if (err == cudaSuccess) err = rt().cudaStreamWaitEvent(streams[0], e, 0);
  }
  if (err == cudaSuccess) err = rt().cudaEventRecord(e, streams[0]);
  for (size_t i = 1; i < streams.size() && err == cudaSuccess; ++i)
    err = rt().cudaStreamWaitEvent(streams[i], e, 0);
  return err;
}

}  // namespace

void noteGroupStream(Comm* c, cudaStream_t stream) {
  if (c == nullptr || !inGroup() || (c->yali == nullptr && c->hier == nullptr)) return;
  stream = canonical(stream);
  for (const GroupStream& g : tlsGroupStreams)
    if (g.comm == c && g.stream == stream) return;
  tlsGroupStreams.push_back(GroupStream{c, c->device, stream});
}

std::vector<GroupStream> takeGroupStreams() {
  std::vector<GroupStream> taken;
  taken.swap(tlsGroupStreams);
  return taken;
}

void joinGroupStreams(const std::vector<GroupStream>& used) {
  if (settings().testNoStreamJoin) {
    static const bool warned = (warn(-1, "testing: a group's streams are not joined (YALI_NCCL_TEST_NO_STREAM_JOIN)"), true);
    (void)warned;
    return;
  }
  std::vector<const Comm*> done;
  for (const GroupStream& first : used) {
    if (std::find(done.begin(), done.end(), first.comm) != done.end()) continue;
    done.push_back(first.comm);
    std::vector<cudaStream_t> streams;
    for (const GroupStream& g : used)
      if (g.comm == first.comm) streams.push_back(g.stream);
    if (streams.size() < 2) continue;
    // The same capture for all, or none for all; else no join (NCCL refuses such a group).
    unsigned long long capture = 0;
    bool alike = true;
    for (size_t i = 0; i < streams.size() && alike; ++i) {
      unsigned long long id = 0;
      alike = captureIdOf(streams[i], &id) && (i == 0 || id == capture);
      capture = id;
    }
    if (!alike) {
      info(-1, "communicator %p: the group's calls on %zu streams are not all in one capture, or all outside "
               "one: their streams are not joined",
           static_cast<const void*>(first.comm), streams.size());
      continue;
    }
    const cudaError_t err = joinOne(first.device, streams);
    if (err != cudaSuccess) {
      rt().cudaGetLastError();
      warn(-1, "communicator %p: joining the group's %zu streams failed: %s", static_cast<const void*>(first.comm),
           streams.size(), rt().cudaGetErrorString(err));
    }
  }
}

void forgetGroupStreams(const Comm* c) {
  auto& used = tlsGroupStreams;
  used.erase(std::remove_if(used.begin(), used.end(), [c](const GroupStream& g) { return g.comm == c; }), used.end());
}

}  // namespace yali::nccl_abi
