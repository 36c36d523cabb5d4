#include "core/enqueue.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "collectives/copy_engine/copy_engine.h"
#include "collectives/p2p/p2p.h"
#include "collectives/registry.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/thread_token.h"

namespace yali {
namespace {

// One stream a comm's calls use in the group being launched.
struct CommStream {
  yaliComm* comm;
  cudaStream_t stream;  // the legacy stream as 0 (it has two names)
};

struct GroupState {
  int depth = 0;
  std::vector<PlannedLaunch> pending;  // in call order
  // The (comm, stream) pairs of the group being launched (joinGroupStreams, below): kept for its
  // storage, so that a loop of groups allocates nothing for them either.
  std::vector<CommStream> streams;
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

// NCCL's ordering rule, which torch relies on: a comm's collectives run in the order they were
// issued, whatever streams they are on (ProcessGroupNCCL puts one comm's calls on its own stream
// and on the caller's, FSDP2 on its all-gather and reduce-scatter streams). YALI's kernels need it
// too: each reads the comm's epoch when it starts, so two of one comm running at once, or in
// another order on one rank than on its peers, would disagree about which call is which.
// A launch on another stream than the last launch of its context waits for that launch (an
// event). The contexts (yaliComm::LaunchOrder): eager launches, and the launches of one capture.
// A context that only ever uses one stream records no event (stream order suffices); from its
// first change of stream on, every launch of it records one. Within one capture the wait becomes a
// graph edge; eager launches wait for the last eager one, whatever was captured in between;
// across contexts (a graph's replay and eager calls, two captures) the serial event orders them
// once the comm has captured a call (waitAcrossContexts, below).
yaliComm::LaunchOrder& launchOrderOf(yaliComm* comm, unsigned long long context) {
  if (context == 0) return comm->eagerOrder;
  yaliComm::LaunchOrder& o = comm->captureOrder;
  if (o.context != context) {  // a new capture: nothing of it launched yet
    o.context = context;
    o.have = false;
    o.eventEveryLaunch = false;
    o.marked = false;
    o.serialRecord = nullptr;
    o.recordAfter.clear();
  }
  return o;
}

// cudaStreamPerThread names another stream in each host thread: two launches on it share a stream
// only when one thread made both, and only the thread that made a launch can mark it (noteLaunch
// marks every launch on it at once).
bool onStreamOf(const yaliComm::LaunchOrder& o, cudaStream_t stream) {
  return stream == o.stream && (stream != cudaStreamPerThread || o.thread == threadToken());
}

yaliResult_t orderAfterLastLaunch(yaliComm* comm, cudaStream_t stream, unsigned long long context,
                                  const char* call) {
  yaliComm::LaunchOrder& o = launchOrderOf(comm, context);
  if (!o.have || onStreamOf(o, stream)) return yaliSuccess;
  cudaError_t e = cudaSuccess;
  if (!o.marked && o.stream == cudaStreamPerThread && o.thread != threadToken())
    // another thread's: only its noteLaunch could mark it
    return fail(yaliUnhandledCudaError, comm,
                "%s: ordering after the comm's previous call, made on another thread's cudaStreamPerThread: its "
                "event record had failed (logged), so this call cannot be ordered after it",
                call);
  if (!o.marked && context == 0) {
    // The last eager launch's stream may have begun a capture since (the program's, or this
    // comm's own captured call): a record there would go into that graph and join this eager
    // launch to it. Its eager work can no longer be marked then; the program orders it against the
    // capture, as before eager launches were ordered across captures.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(o.stream, &status) != cudaSuccess) {
      cudaGetLastError();
    } else if (status != cudaStreamCaptureStatusNone) {
      return yaliSuccess;
    }
  }
  if (!o.marked) {
    // The context's first change of stream (or the first after a failed mark): its last launch was
    // not marked; everything queued on that stream so far (it, and perhaps later work of the
    // caller's) is.
    e = cudaEventRecord(o.event, o.stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(yaliUnhandledCudaError, comm,
                  "%s: ordering after the comm's previous call, on stream %p: cudaEventRecord: %s (was that stream "
                  "destroyed?)",
                  call, static_cast<void*>(o.stream), cudaGetErrorString(e));
    }
    o.eventEveryLaunch = true;
  }
  e = cudaStreamWaitEvent(stream, o.event, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: stream=%p: waiting for the comm's previous call: %s", call,
                static_cast<void*>(stream), cudaGetErrorString(e));
  }
  return yaliSuccess;
}

// After a launch: what the next one of its context orders itself after. Cannot fail the call: the
// launch is queued (and its peers' are), so an error here would report a call that runs. If the
// record fails, the context goes back to marking lazily: the next launch on another stream records
// on this one first (orderAfterLastLaunch), which covers this launch, and reports a failure itself.
void noteLaunch(yaliComm* comm, cudaStream_t stream, unsigned long long context) {
  yaliComm::LaunchOrder& o = launchOrderOf(comm, context);
  o.have = true;
  o.stream = stream;
  o.thread = threadToken();
  o.marked = false;
  if (!o.eventEveryLaunch && stream != cudaStreamPerThread) return;
  const cudaError_t e = cudaEventRecord(o.event, stream);
  if (e == cudaSuccess) {
    o.marked = true;
  } else {
    cudaGetLastError();
    o.eventEveryLaunch = false;
    logInfo("rank %d: cudaEventRecord after a launch on stream %p failed (%s); the next launch on another stream "
            "marks it instead",
            comm->rank, static_cast<void*>(stream), cudaGetErrorString(e));
  }
}

// Across contexts (DeviceResources::serial), from the comm's first captured call on: a graph's
// replays and the comm's other calls run in the order the host issued them (a replay in the order of
// its cudaGraphLaunch), as NCCL orders them (its graph mixing support). Before the launch: it waits
// for the last launch of any context, which recorded `serial`; inside a capture only the capture's
// first launch of the comm waits (its later ones follow it by the capture's own order, above), as
// an external event-wait node, which waits at each replay for the record current when the replay
// was launched. At the first capture the eager calls made so far are marked on their stream (unless
// that stream is the one capturing: its earlier work is then before the capture in stream order
// only, and a replay on another stream is ordered against it by the program; or the mark fails,
// logged: the first replay is then not ordered after the eager calls before it). Eager calls before
// any capture record nothing (the cost of an event per call is paid only by comms that capture).
// A graph launched from another thread while an eager call of the comm is being issued is ordered
// by whichever records `serial` last: the program orders such launches on the host (yali.h).
// YALI_GRAPH_MIXING=0 turns all of it off (the program then orders contexts; captures that allow no
// event nodes, such as conditional bodies or device-launched graphs, need that).
yaliResult_t waitAcrossContexts(yaliComm* comm, cudaStream_t stream, unsigned long long context, const char* call) {
  const bool captured = context != 0;
  if (!comm->settings.graphMixing || (!captured && !comm->everCaptured)) return yaliSuccess;
  cudaEvent_t serial = comm->res->serial;
  if (captured && !comm->everCaptured) {
    comm->everCaptured = true;
    const yaliComm::LaunchOrder& eager = comm->eagerOrder;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaSuccess;
    if (eager.have && eager.stream == cudaStreamPerThread && eager.thread != threadToken()) {
      // A record here would land on this thread's stream, not on the one they ran on.
      logInfo("rank %d: the comm's eager calls before its first capture ran on another thread's "
              "cudaStreamPerThread and cannot be marked from this thread: the first replay is not ordered after them",
              comm->rank);
    } else {
      if (eager.have) e = cudaStreamIsCapturing(eager.stream, &status);
      if (eager.have && e == cudaSuccess && status == cudaStreamCaptureStatusNone)
        e = cudaEventRecord(serial, eager.stream);
      if (e != cudaSuccess)
        logInfo("rank %d: marking the comm's eager calls before its first capture failed (%s)", comm->rank,
                cudaGetErrorString(e));
      cudaGetLastError();
    }
  }
  if (captured && launchOrderOf(comm, context).have) return yaliSuccess;  // not the capture's first
  const cudaError_t e = cudaStreamWaitEvent(stream, serial, captured ? cudaEventWaitExternal : 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(yaliUnhandledCudaError, comm, "%s: stream=%p: waiting for the comm's last call in another context: %s",
                call, static_cast<void*>(stream), cudaGetErrorString(e));
  }
  return yaliSuccess;
}

// The capture calls that carry edge data: CUDA 13 names them plainly, CUDA 12 with a suffix.
cudaError_t captureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, cudaGraph_t* graph,
                        const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* count) {
#if CUDART_VERSION >= 13000
  return cudaStreamGetCaptureInfo(stream, status, nullptr, graph, deps, edges, count);
#else
  return cudaStreamGetCaptureInfo_v3(stream, status, nullptr, graph, deps, edges, count);
#endif
}

cudaError_t updateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* nodes, size_t count, unsigned flags) {
#if CUDART_VERSION >= 13000
  return cudaStreamUpdateCaptureDependencies(stream, nodes, nullptr, count, flags);
#else
  return cudaStreamUpdateCaptureDependencies_v2(stream, nodes, nullptr, count, flags);
#endif
}

// One plain edge from -> to added to `graph` (add) or taken out of it.
cudaError_t changeEdge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to, bool add) {
#if CUDART_VERSION >= 13000
  return add ? cudaGraphAddDependencies(graph, &from, &to, nullptr, 1)
             : cudaGraphRemoveDependencies(graph, &from, &to, nullptr, 1);
#else
  return add ? cudaGraphAddDependencies_v2(graph, &from, &to, nullptr, 1)
             : cudaGraphRemoveDependencies_v2(graph, &from, &to, nullptr, 1);
#endif
}

cudaError_t dependentCount(cudaGraphNode_t node, size_t* count) {
#if CUDART_VERSION >= 13000
  return cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, count);
#else
  return cudaGraphNodeGetDependentNodes_v2(node, nullptr, nullptr, count);
#endif
}

// The capture's record node `record` moves from behind `from` (the nodes it follows now: the comm's
// previous launch) to behind `to` (the stream's capture dependencies right after the comm's newest
// launch: that launch): one record node per capture instead of one per call. Sound while nothing
// depends on the record (addSerialRecordNode never puts it in a stream's dependencies, so only an
// edit of the graph by the program could; checked); `to` ends after `from` (the comm's launches in
// one capture are ordered: stream order, or orderAfterLastLaunch's edge from another stream, and
// every kernel waits for the grids before it, device.cuh waitForPriorGrids, before it ends), so the
// record still ends after every launch it followed. False, with the graph as it was, when it cannot
// move; the caller then adds a new node.
bool moveSerialRecord(cudaGraph_t graph, cudaGraphNode_t record, const std::vector<cudaGraphNode_t>& from,
                      const std::vector<cudaGraphNode_t>& to) {
  size_t dependents = 0;
  cudaError_t e = dependentCount(record, &dependents);
  if (e != cudaSuccess || dependents != 0) {
    cudaGetLastError();
    return false;
  }
  for (size_t i = 0; i < to.size(); ++i) {
    if (std::find(from.begin(), from.end(), to[i]) != from.end()) continue;
    e = changeEdge(graph, to[i], record, true);
    if (e != cudaSuccess) {
      cudaGetLastError();
      for (size_t j = 0; j < i; ++j)  // the graph as it was
        if (std::find(from.begin(), from.end(), to[j]) == from.end()) changeEdge(graph, to[j], record, false);
      cudaGetLastError();
      return false;
    }
  }
  // Added first, then the old edges taken out: on a failure here the record follows both (ordered).
  for (cudaGraphNode_t old : from)
    if (std::find(to.begin(), to.end(), old) == to.end() && changeEdge(graph, old, record, false) != cudaSuccess)
      cudaGetLastError();
  return true;
}

// Inside a capture: the capture's record of `serial`, a node of the graph beside the stream, behind
// the comm's newest captured launch, so that it ends after every launch of the comm in the graph:
// added behind the first, then moved behind each later one (moveSerialRecord). It is a leaf: nothing
// in the capture is made to depend on it. What needs it is outside the graph: the comm's next launch
// in another context waits for `serial` (waitAcrossContexts), and an event-wait node inside a graph
// waits for the record current when its replay was launched, never for one of the same replay; the
// graph's replay ends after its leaves too. So the program's nodes and ours keep the edges the
// capture gave them:
//  - consecutive launches of the comm stay a chain of kernels with their programmatic edges (a
//    record in the stream between two launches took the edge away: +0.8 to 2.3 us a call on 2
//    H200s, PERF.md Session 25);
//  - the program's own work between two calls (a torch step's compute, nccl-tests hypercube's copy)
//    waits for our kernel alone. Until session 40 the record joined the stream's dependencies, so
//    that work waited for the record as well, and a new record node followed each call: 5 us more a
//    call than with no order at all on 2 H200s (hypercube -G 20 through the drop-in, 64 B: 13.7 us
//    against 8.5, PERF.md Session 40); a record node beside every call had cost as much in a graph
//    of 2000 calls (7.4 us a call at 4 KB against 3.1, Session 26).
// The graph is changed directly here, outside the stream's API: a capture of this stream from
// another thread at the same time is not supported (CUDA's graphs are not thread-safe), as yali.h
// says of two captures of one comm. False when no node could be placed.
bool addSerialRecordNode(yaliComm* comm, cudaStream_t stream, cudaEvent_t serial) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // asked for: without it a programmatic edge makes the query fail
  size_t count = 0;
  cudaError_t e = captureInfo(stream, &status, &graph, &deps, &edges, &count);
  if (e != cudaSuccess || status != cudaStreamCaptureStatusActive || graph == nullptr || count == 0) return false;
  yaliComm::LaunchOrder& o = comm->captureOrder;
  std::vector<cudaGraphNode_t> after(deps, deps + count);  // copied: deps lives until the next capture call
  if (o.serialRecord != nullptr && moveSerialRecord(graph, o.serialRecord, o.recordAfter, after)) {
    o.recordAfter = std::move(after);
    return true;
  }
  // A new node; it follows the previous one too, so that the records form a chain.
  std::vector<cudaGraphNode_t> behind = after;
  if (o.serialRecord != nullptr) behind.push_back(o.serialRecord);
  cudaGraphNode_t node = nullptr;
  e = cudaGraphAddEventRecordNode(&node, graph, behind.data(), behind.size(), serial);
  if (e != cudaSuccess) return false;
  o.serialRecord = node;
  o.recordAfter = std::move(after);
  return true;
}

// After the launch, before noteLaunch: what the next launch of any context waits for. Eagerly a
// record on the stream; inside a capture a node beside the stream (addSerialRecordNode), or, if it
// cannot be added, a record in the stream (which orders as well, at the cost above). Cannot fail
// the call (the launch is queued); a failed record is logged, and the next launch of another
// context is then ordered after the last recorded one only.
void recordAcrossContexts(yaliComm* comm, cudaStream_t stream, bool captured) {
  if (!comm->settings.graphMixing || !comm->everCaptured) return;
  cudaEvent_t serial = comm->res->serial;
  yaliComm::LaunchOrder& o = comm->captureOrder;
  if (captured) {
    if (addSerialRecordNode(comm, stream, serial)) return;
    cudaGetLastError();  // (only here: an eager call must not clear the program's pending error)
  }
  if (captured && o.serialRecord != nullptr) {
    // The fallback stays in the chain: the stream's record comes after the previous record node
    // too, and later records follow it through the stream.
    cudaError_t c = updateCaptureDependencies(stream, &o.serialRecord, 1, cudaStreamAddCaptureDependencies);
    if (c != cudaSuccess) {
      cudaGetLastError();
      logInfo("rank %d: chaining the comm's in-stream record after its last record node failed (%s)", comm->rank,
              cudaGetErrorString(c));
    }
    o.serialRecord = nullptr;
    o.recordAfter.clear();
  }
  const cudaError_t e = captured ? cudaEventRecordWithFlags(serial, stream, cudaEventRecordExternal)
                                 : cudaEventRecord(serial, stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    logInfo("rank %d: recording the comm's last call for other contexts on stream %p failed (%s)", comm->rank,
            static_cast<void*>(stream), cudaGetErrorString(e));
  }
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
  // Last guards, before anything of the call is recorded (a graph's hold, captured registrations).
  // The selector's choice must fit the window (a violation would overwrite memory).
  std::string why;
  // Point-to-point launches choose nothing; their rings must be laid out (submitP2P checks it at
  // the call: this is the last guard).
  if (plan.p2p && !(comm->windowRegions & kRegionP2P))
    return fail(yaliInternalError, comm, "%s: the window has no point-to-point rings", plan.call);
  if (!plan.p2p && !choiceFits(plan.choice, plan.bytes, comm->selector.limits(), &why))
    return fail(yaliInternalError, comm, "%s: the selector chose %s for %zu bytes, which does not fit: %s",
                plan.call, algoName(plan.choice.algo), plan.bytes, why.c_str());
  // And the window must hold every region it touches (core/window_layout.h: computeLayout lays out
  // only what the comm's settings may choose): a missing region would be a write into the next one.
  if (!plan.p2p && !regionsLaidOut(plan.choice.algo, comm->windowRegions, &why))
    return fail(yaliInternalError, comm, "%s: the selector chose %s: %s", plan.call, algoName(plan.choice.algo),
                why.c_str());
  const bool captured = capture == cudaStreamCaptureStatusActive;
  const bool copyEngines = !plan.p2p && algorithm(plan.choice.algo).family == Family::kCopyEngine;
  // submitCall never plans the copy engines inside a capture, so the stream began one between the
  // call, made inside a group, and the group's end. Refused before anything of the launch is
  // recorded (a graph's hold, a captured registration, the launch count).
  if (captured && copyEngines)
    return fail(yaliInvalidUsage, comm,
                "%s: stream=%p began a stream capture after the call was made inside the group; its "
                "plan (%s, the copy engines) cannot be captured: make the call inside the capture",
                plan.call, static_cast<void*>(plan.stream), algoName(plan.choice.algo));
  if (captured) {
    yaliResult_t r = holdForGraph(comm, captureId, graph, plan.call);
    if (r != yaliSuccess) return r;
    for (Registration* reg : plan.registrations)
      if (reg != nullptr) reg->captured = true;
  }
  const unsigned long long context = captured ? captureId : 0;
  yaliResult_t ordered = orderAfterLastLaunch(comm, plan.stream, context, plan.call);
  if (ordered == yaliSuccess) ordered = waitAcrossContexts(comm, plan.stream, context, plan.call);
  if (ordered != yaliSuccess) return ordered;
  if (plan.hostNote != nullptr) comm->setHostNote(plan.hostNote);
  DeviceArgs& args = plan.args;
  args.epochHint = ++comm->launches;
  args.eagerSeq = captured ? 0 : comm->eagerIssued.lastSeq + 1;
  args.regEpoch = comm->regEpoch;
  if (plan.p2p) {
    P2PLane lanes[kMaxP2PLanes];
    uint32_t copyLanes = 0;
    const int nlanes = planP2PLanes(plan.p2pOps, comm->p2pChannels, comm->layout, lanes, &copyLanes);
    const bool programmatic = comm->settings.programmaticLaunch && comm->smMajor >= 9;
    e = nlanes == 0 ? cudaSuccess
                    : launchP2P(args, plan.p2pOps, comm->p2pChannels, lanes, nlanes, copyLanes, programmatic, plan.stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(yaliUnhandledCudaError, comm, "%s: kernel launch (point-to-point, %zu calls, %d blocks) failed: %s",
                  plan.call, plan.p2pOps.size(), nlanes, cudaGetErrorString(e));
    }
    plan.choice.ctas = nlanes;  // what the eager count below adds
  } else if (copyEngines) {
    // No kernel (copy_engine.h); a capture was refused above.
    yaliResult_t issued = issueCopyEngine(comm, plan);
    if (issued != yaliSuccess) return issued;
  } else {
    const bool programmatic = comm->settings.programmaticLaunch && comm->smMajor >= 9;
    e = launchAlgorithm(plan.choice.algo, plan.dtype, plan.op, plan.choice.ctas, plan.choice.threads, args,
                        programmatic, plan.stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(yaliUnhandledCudaError, comm, "%s: kernel launch (%s, %d blocks) failed: %s", plan.call,
                  algoName(plan.choice.algo), plan.choice.ctas, cudaGetErrorString(e));
    }
  }
  // Issued: what destroy, deregister and the release wait for (comm.h: EagerMark). Every block of
  // an eager kernel launch counts itself out on the device (device.cuh: exitLaunch), admitted or
  // not, so the launch's share is its grid (launchAlgorithm: ctas blocks, one dimension).
  if (!captured) {
    EagerMark& issued = comm->eagerIssued;
    issued.lastSeq = args.eagerSeq;
    if (copyEngines) issued.copyEngineSeq = args.eagerSeq;
    else issued.kernelBlocks += static_cast<uint64_t>(plan.choice.ctas);
  }
  recordAcrossContexts(comm, plan.stream, captured);
  noteLaunch(comm, plan.stream, context);
  return yaliSuccess;
}

}  // namespace

yaliResult_t enqueue(PlannedLaunch plan) {
  if (group.depth > 0) {
    for (size_t i = 0; i < std::size(plan.registrations); ++i)
      if (plan.registrations[i] != nullptr) plan.queuedUses[i] = QueuedUse(plan.registrations[i]->queuedUses);
    group.pending.push_back(std::move(plan));
    return yaliSuccess;
  }
  return launchNow(plan);
}

yaliResult_t groupStart() {
  ++group.depth;
  return yaliSuccess;
}

namespace {

// A group whose calls on one comm use several streams, joined as NCCL joins such a group: as if it
// were posted on every one of them, its work waits for what each of them held, and each of them
// waits for its work (NCCL's guide, "Mixing multiple streams within the same ncclGroupStart/End()
// group"; per communicator). The launch order alone (orderAfterLastLaunch) gives less: a call waits
// for the comm's previous call only, so the group's first call does not wait for what another
// stream of the group held, and a stream whose call came early does not wait for the later ones.
// So the outermost end joins each such comm's streams twice, before its first launch and after its
// last: a star on the comm's device (the first stream waits for an event recorded on each other
// one, then each other one for an event recorded on the first), one event per device and thread,
// reused at once (a wait takes the event's state when it is issued). Nothing for a comm whose calls
// keep to one stream. Not joined: streams not all in one capture or all outside one (launchNow
// refuses nothing for it; their calls still run in call order), and streams whose capture state
// cannot be read.
// The distinct (comm, stream) pairs of `pending`, in call order, into *out (cleared first; its
// storage is the thread's GroupState::streams, reused by every group end).
void noteStreams(const std::vector<PlannedLaunch>& pending, std::vector<CommStream>* out) {
  out->clear();
  for (const PlannedLaunch& plan : pending) {
    const cudaStream_t s = plan.stream == cudaStreamLegacy ? nullptr : plan.stream;
    const auto same = [&](const CommStream& c) { return c.comm == plan.comm.get() && c.stream == s; };
    if (std::none_of(out->begin(), out->end(), same)) out->push_back(CommStream{plan.comm.get(), s});
  }
}

// Joins the streams of `comm` among `pairs` (two or more, from `first` on: the first of them is
// the star's centre), as above.
void joinStreamsOf(yaliComm* comm, const std::vector<CommStream>& pairs, size_t first) {
  ScopedDevice onDevice(comm->device);  // stream 0 is the current device's; the event is the streams'
  if (onDevice.status() != cudaSuccess) return;
  unsigned long long capture = 0;
  for (size_t i = first; i < pairs.size(); ++i) {
    if (pairs[i].comm != comm) continue;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(pairs[i].stream, &status, &id, nullptr) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (status == cudaStreamCaptureStatusNone) id = 0;
    if (status == cudaStreamCaptureStatusInvalidated || (i > first && id != capture)) return;
    capture = id;
  }
  thread_local std::vector<std::pair<int, cudaEvent_t>> events;  // this thread's, per device
  auto it = std::find_if(events.begin(), events.end(), [&](const auto& e) { return e.first == comm->device; });
  if (it == events.end()) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    it = events.insert(events.end(), {comm->device, e});
  }
  const cudaEvent_t e = it->second;
  const cudaStream_t centre = pairs[first].stream;
  cudaError_t err = cudaSuccess;
  for (size_t i = first + 1; i < pairs.size() && err == cudaSuccess; ++i) {
    if (pairs[i].comm != comm) continue;
    err = cudaEventRecord(e, pairs[i].stream);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(centre, e, 0);
  }
  if (err == cudaSuccess) err = cudaEventRecord(e, centre);
  for (size_t i = first + 1; i < pairs.size() && err == cudaSuccess; ++i)
    if (pairs[i].comm == comm) err = cudaStreamWaitEvent(pairs[i].stream, e, 0);
  if (err != cudaSuccess) cudaGetLastError();  // the calls still run in call order (orderAfterLastLaunch)
}

// Every comm of `pairs` with two streams or more, joined once (from its first pair).
void joinGroupStreams(const std::vector<CommStream>& pairs) {
  for (size_t i = 0; i < pairs.size(); ++i) {
    yaliComm* comm = pairs[i].comm;
    const auto ofComm = [&](const CommStream& c) { return c.comm == comm; };
    if (std::any_of(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(i), ofComm)) continue;  // done
    if (std::count_if(pairs.begin() + static_cast<std::ptrdiff_t>(i), pairs.end(), ofComm) < 2) continue;
    if (comm->settings.testNoGroupJoin != 0) continue;
    joinStreamsOf(comm, pairs, i);
  }
}

// The group's launches in the order every rank shares (endGroupLevel): by comm, the comms by their
// groupKey (a comm's calls keep their call order: stable). Ranks that make a group's calls on several
// comms in different orders, as NCCL allows (it orders a group's comms by their hash), then still
// launch them alike; in call order, two comms' kernels on one stream could wait on each other
// across ranks until YALI_TIMEOUT_MS.
void orderByComm(std::vector<PlannedLaunch>* plans) {
  std::stable_sort(plans->begin(), plans->end(), [](const PlannedLaunch& a, const PlannedLaunch& b) {
    return a.comm->groupKey < b.comm->groupKey;
  });
}

// Every comm's point-to-point calls of the group, fused into one launch per comm, moved behind the
// group's other launches (yali.h: every transfer of the group progresses at once, after the group's
// collectives on the comm, whose order on every rank is the same, so that no rank's point-to-point
// launch waits behind a collective its peer runs only after its own point-to-point launch). The
// fused launch runs on the stream of the comm's first point-to-point call (the group's streams of a
// comm are joined around its work: joinGroupStreams). Sends to self are paired with receives from
// self in call order into copies; where they do not pair (a count that differs, a send or receive
// left over), the comm's calls to self are dropped and yaliInvalidUsage returned, while its
// transfers with peers still run (their peers wait for them).
yaliResult_t fusePointToPoint(std::vector<PlannedLaunch>* pending) {
  if (std::none_of(pending->begin(), pending->end(), [](const PlannedLaunch& p) { return p.p2p; }))
    return yaliSuccess;  // no point-to-point call: the group as it is (and no allocation)
  std::vector<PlannedLaunch> fused;  // one per comm, in the order of the comms' first calls, then orderByComm
  std::vector<PlannedLaunch> rest;
  rest.reserve(pending->size());
  for (PlannedLaunch& plan : *pending) {
    if (!plan.p2p) {
      rest.push_back(std::move(plan));
      continue;
    }
    auto it = std::find_if(fused.begin(), fused.end(), [&](const PlannedLaunch& f) { return f.comm == plan.comm; });
    if (it == fused.end()) {
      fused.push_back(std::move(plan));
    } else {
      it->p2pOps.insert(it->p2pOps.end(), plan.p2pOps.begin(), plan.p2pOps.end());
    }
  }
  orderByComm(&fused);
  yaliResult_t first = yaliSuccess;
  for (PlannedLaunch& plan : fused) {
    yaliComm* comm = plan.comm.get();
    std::vector<P2POp> ops;
    std::vector<const P2POp*> selfSends;
    size_t selfRecvs = 0;
    for (const P2POp& op : plan.p2pOps)
      if (op.peer == comm->rank && op.kind == kP2PSend) selfSends.push_back(&op);
    bool paired = true;
    for (const P2POp& op : plan.p2pOps) {
      if (op.peer != comm->rank) {
        ops.push_back(op);
      } else if (op.kind == kP2PRecv) {
        if (selfRecvs < selfSends.size() && selfSends[selfRecvs]->bytes == op.bytes)
          ops.push_back(P2POp{selfSends[selfRecvs]->src, op.dst, op.bytes, comm->rank, kP2PCopy});
        else
          paired = false;
        ++selfRecvs;
      }
    }
    if (selfRecvs != selfSends.size()) paired = false;
    if (!paired) {
      ops.erase(std::remove_if(ops.begin(), ops.end(), [](const P2POp& op) { return op.kind == kP2PCopy; }), ops.end());
      std::lock_guard<std::mutex> lock(comm->mutex);
      const yaliResult_t r = fail(yaliInvalidUsage, comm,
                                  "yaliGroupEnd: rank %d's sends to itself (%zu) and receives from itself (%zu) in "
                                  "the group do not pair up in call order with equal bytes: none of them ran (its "
                                  "transfers with peers did)",
                                  comm->rank, selfSends.size(), selfRecvs);
      if (first == yaliSuccess) first = r;
    }
    plan.p2pOps = std::move(ops);
    if (!plan.p2pOps.empty()) rest.push_back(std::move(plan));
  }
  pending->swap(rest);
  return first;
}

// The end of a group level (`call`: the public function, for its message); the outermost end
// launches the queued calls (`launch`), each comm's in call order, the comms in groupKey order
// (orderByComm), the point-to-point calls last (fusePointToPoint), or drops them (yaliGroupSimulateEnd:
// enqueue.h says why that undoes them), and returns the first launch error. The queue is emptied
// before its plans run or go (destroy and abort look at it; a plan may hold its comm's last
// reference), and its storage comes back for the next group, so that a loop of groups allocates
// nothing per call.
yaliResult_t endGroupLevel(const char* call, bool launch) {
  if (group.depth == 0) return fail(yaliInvalidUsage, nullptr, "%s: called without a matching yaliGroupStart", call);
  if (--group.depth > 0) return yaliSuccess;
  std::vector<PlannedLaunch> pending;
  pending.swap(group.pending);
  yaliResult_t first = yaliSuccess;
  if (launch) {
    noteStreams(pending, &group.streams);  // the plans hold their comms until the end
    joinGroupStreams(group.streams);
    orderByComm(&pending);  // the collectives; fusePointToPoint orders the point-to-point launches after them
    first = fusePointToPoint(&pending);
    for (PlannedLaunch& plan : pending) {
      std::lock_guard<std::mutex> lock(plan.comm->mutex);
      yaliResult_t r = launchNow(plan);
      if (r != yaliSuccess && first == yaliSuccess) first = r;
    }
    joinGroupStreams(group.streams);
  }
  pending.clear();
  if (group.pending.empty()) group.pending.swap(pending);
  return first;
}

}  // namespace

yaliResult_t groupEnd() { return endGroupLevel("yaliGroupEnd", true); }

yaliResult_t groupSimulateEnd() { return endGroupLevel("yaliGroupSimulateEnd", false); }

bool inGroup() { return group.depth > 0; }

size_t pendingP2POps(const yaliComm* comm) {
  size_t ops = 0;
  for (const PlannedLaunch& p : group.pending)
    if (p.p2p && p.comm.get() == comm) ops += p.p2pOps.size();
  return ops;
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
