#include "core/enqueue.h"

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "core/comm.h"
#include "core/error.h"

namespace yali {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<PlannedLaunch> pending;  // in call order
};
thread_local GroupState group;

// The capturing graph holds the comm's resources until it is destroyed (CUDA runs the user
// object's destructor once the graph and every executable made from it are gone and their
// launches have ended: measured, 2026-11-24). One reference per capture is enough.
yaliResult_t holdForGraph(yaliComm* comm, unsigned long long captureId, cudaGraph_t graph,
                          const char* call) {
  if (comm->capturedBy == captureId) return yaliSuccess;
  auto* held = new std::shared_ptr<DeviceResources>(comm->res);
  cudaUserObject_t object;
  cudaError_t e = cudaUserObjectCreate(
      &object, held, [](void* p) { delete static_cast<std::shared_ptr<DeviceResources>*>(p); }, 1,
      cudaUserObjectNoDestructorSync);
  if (e != cudaSuccess) {
    delete held;
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: cudaUserObjectCreate: %s", call, cudaGetErrorString(e));
  }
  e = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (e != cudaSuccess) {
    cudaUserObjectRelease(object, 1);  // runs the destructor: drops `held`
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: cudaGraphRetainUserObject: %s", call, cudaGetErrorString(e));
  }
  comm->capturedBy = captureId;
  return yaliSuccess;
}

yaliResult_t launchNow(PlannedLaunch& plan) {
  yaliComm* comm = plan.comm.get();
  if (!comm->res)
    return fail(yaliInvalidUsage, comm, "%s: comm was destroyed or aborted before the group ended", plan.call);
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", plan.call, comm->device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long captureId = 0;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamGetCaptureInfo(plan.stream, &capture, &captureId, &graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliInvalidArgument, comm, "%s: stream=%p: cudaStreamGetCaptureInfo: %s", plan.call,
                static_cast<void*>(plan.stream), cudaGetErrorString(e));
  }
  if (capture == cudaStreamCaptureStatusInvalidated)
    return fail(yaliInvalidUsage, comm, "%s: stream=%p is in an invalidated stream capture", plan.call,
                static_cast<void*>(plan.stream));
  const bool captured = capture == cudaStreamCaptureStatusActive;
  if (captured) {
    yaliResult_t r = holdForGraph(comm, captureId, graph, plan.call);
    if (r != yaliSuccess) return r;
    for (Registration* reg : plan.registrations)
      if (reg != nullptr) reg->captured = true;
  }
  // Last guard: the selector's choice must fit the window (a violation would overwrite memory).
  std::string why;
  if (!choiceFits(plan.choice, plan.bytes, comm->selector.limits(), &why))
    return fail(yaliInternalError, comm, "%s: the selector chose %s for %zu bytes, which does not fit: %s",
                plan.call, algoName(plan.choice.algo), plan.bytes, why.c_str());
  DeviceArgs& args = plan.args;
  args.epochHint = ++comm->launches;
  args.eagerSeq = captured ? 0 : comm->eagerLaunches + 1;
  args.regEpoch = comm->regEpoch;
  const bool programmatic = comm->settings.programmaticLaunch && comm->smMajor >= 9;
  e = launchAlgorithm(plan.choice.algo, plan.dtype, plan.op, plan.choice.ctas, plan.choice.threads, args,
                      programmatic, plan.stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: kernel launch (%s, %d blocks) failed: %s", plan.call,
                algoName(plan.choice.algo), plan.choice.ctas, cudaGetErrorString(e));
  }
  if (!captured) comm->eagerLaunches = args.eagerSeq;
  return yaliSuccess;
}

}  // namespace

yaliResult_t enqueue(PlannedLaunch plan) {
  if (group.depth > 0) {
    group.pending.push_back(std::move(plan));
    return yaliSuccess;
  }
  return launchNow(plan);
}

yaliResult_t groupStart() {
  ++group.depth;
  return yaliSuccess;
}

yaliResult_t groupEnd() {
  if (group.depth == 0)
    return fail(yaliInvalidUsage, nullptr, "yaliGroupEnd: called without a matching yaliGroupStart");
  if (--group.depth > 0) return yaliSuccess;
  std::vector<PlannedLaunch> pending;
  pending.swap(group.pending);
  yaliResult_t first = yaliSuccess;
  for (PlannedLaunch& plan : pending) {
    std::lock_guard<std::mutex> lock(plan.comm->mutex);
    yaliResult_t r = launchNow(plan);
    if (r != yaliSuccess && first == yaliSuccess) first = r;
  }
  return first;
}

bool hasPendingLaunches(const yaliComm* comm) {
  return std::any_of(group.pending.begin(), group.pending.end(),
                     [&](const PlannedLaunch& p) { return p.comm.get() == comm; });
}

void dropPendingLaunches(const yaliComm* comm) {
  auto& v = group.pending;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const PlannedLaunch& p) { return p.comm.get() == comm; }),
          v.end());
}

}  // namespace yali
