// The functions of nccl.h that YALI takes part in. Each replaces the weak forward of forwards.cc
// (the linker keeps these strong definitions); everything else goes to NCCL unchanged.
//
//   communicators  ncclCommInitRank, InitRankConfig, InitRankScalable, InitAll, Split, Shrink, Grow:
//                  the real comm first, then YALI beside it (comm.h: adopt); Finalize, Destroy,
//                  Abort, Revoke: YALI's side first, then NCCL's
//   collectives    AllReduce, ReduceScatter, AllGather, Broadcast, Bcast, Reduce, AlltoAll, Gather,
//                  Scatter: YALI where routing.h says so, else NCCL
//   groups         both libraries' group calls, YALI's end first (a simulated end: YALI's drops its part),
//                  then the copies back of the calls staged in the group (stageInGroup), then the
//                  calls deferred to the group's end (a hierarchical call and every later one)
//   point-to-point ncclSend, ncclRecv: YALI's on a comm of one node (routeSendRecv), else NCCL's; placed or
//                  refused in a group that defers calls
//   errors         ncclCommGetAsyncError: NCCL's, else a call's failure at the end of a group NCCL ended
//                  in the background, else YALI's, else the hierarchical path's cross-node status;
//                  ncclGetLastError: whoever failed last
//   registration   ncclCommRegister/Deregister: NCCL's and YALI's
//
// Every one of them first asks whether the communicator is ours (comm.h: ours): NCCL calls some of
// its own API through the dynamic linker (ncclBcast calls ncclBroadcast), and those calls, with
// NCCL's handles, go straight back to NCCL.
#include <stdio.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nccl.h>

#include "nccl_abi/comm.h"
#include "nccl_abi/diag.h"
#include "nccl_abi/env.h"
#include "nccl_abi/group_streams.h"
#include "nccl_abi/nccl_api.h"
#include "nccl_abi/routing.h"
#include "nccl_abi/yali_lib.h"
#include "vocabulary.h"
#include "yali/yali.h"

#define YALI_NCCL_EXPORT __attribute__((visibility("default")))

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0),
              "libyali-nccl needs nccl.h from NCCL 2.19 or newer (ncclCommRegister, ncclCommSplit)");

namespace yali::nccl_abi {
namespace {

// ---- Communicators ----------------------------------------------------------------------------------

// `make` creates the real comm into the pointer it is given; the program gets our handle for it
// (adopt). That pointer is our Comm's own `real`, made first: NCCL writes a split's or shrink's
// child only when the child's init job ends, which inside a group is the outermost ncclGroupEnd,
// after this call returned. (A local variable here, as before, left the program with NULL and NCCL
// writing into a dead stack frame.) What NCCL makes of `config` (a NULL config: NCCL's default, or
// `parent`'s settings for a split, shrink or grow of one) is read after the call, whose first call
// on this rank loads NCCL's configuration file into the environment (isBlocking says why).
// `childExpected`: a split with a color, or a shrink (adopt).
// `groupKey`: the comm's key for the order of a group's deferred calls (Comm::groupKey).
template <typename Make>
ncclResult_t create(ncclComm_t* out, const ncclConfig_t* config, Comm* parent, uint64_t groupKey, Make make,
                    bool childExpected = false) {
  if (out == nullptr) return make(out);  // NCCL reports the NULL
  Comm* c = new Comm;
  c->groupKey = groupKey;
  const ncclResult_t r = make(&c->real);
  c->blocking = isBlocking(config, parent != nullptr ? parent->blocking : true);
  // Not after a failure: NCCL may have failed before it read its settings (a bad rank or config),
  // and a comm that was not made shares nothing.
  if (r == ncclSuccess || r == ncclInProgress)
    c->sharesResources = sharesResources(config, parent != nullptr && parent->sharesResources);
  // A non-blocking parent's child (a split with a color, a shrink): NCCL writes it from its
  // background whatever the child's config says (the split's group takes the parent's blocking:
  // init.cc, ncclCommInitChildComm; group.cc, ncclAsyncLaunch), and the program polls for it.
  if (childExpected && parent != nullptr && !parent->blocking && (r == ncclSuccess || r == ncclInProgress)) {
    adoptWhenWritten(c, out, parent);
    return r;
  }
  adopt(c, r, out, childExpected);
  // A set-up round that waited for a peer until YALI_TIMEOUT_MS (comm.h, Comm::setUpError).
  if (r == ncclSuccess && *out != nullptr) {
    const ncclResult_t setUp = static_cast<ncclResult_t>(c->setUpError.load());
    if (setUp != ncclSuccess) return setUp;
  }
  return r;
}

// ---- Collectives ------------------------------------------------------------------------------------

// `count` elements of `type` (an int, as CallShape holds it), in bytes; 0 for a type not valid.
size_t bytesOf(size_t count, int type) {
  return validDataType(type) ? count * dataTypeSize(static_cast<DataType>(type)) : 0;
}

// YALI's type and op for a call decideRoute accepted (ints, as CallShape holds them).
yaliDataType_t toYaliType(int t) { return static_cast<yaliDataType_t>(t); }  // routing.cc: same values
yaliRedOp_t toYaliOp(int op) { return static_cast<yaliRedOp_t>(op); }

// One collective call as the program made it (a step of the hierarchical path: as YALI was called).
struct Call {
  const char* function;  // "ncclAllReduce", ...
  CallShape shape;
  size_t count;  // the call's own count argument (the log's size class, the staging's sizes)
  int root;      // 0 for a collective without one
  const void* send;
  void* recv;
  cudaStream_t stream;
};

// Where a call YALI refused goes, when the refusal is not this rank's error (sortRefusal):
enum class Detour {
  kNone,
  kRunFlat,  // NCCL takes the call, on every rank
  kStage,    // YALI takes it on copies (stage)
};

// What a call or step came to where a refusal may send it elsewhere: a detour, or else `result`
// (NCCL's, YALI's as NCCL's, or this rank's error). The detour is kept beside the ncclResult_t, not
// in it: a value outside NCCL's results (these were -1 and -2) is outside the enum's range, which
// is undefined behaviour (scripts/host_sanitize.sh undefined reported its loads).
struct Outcome {
  Outcome(ncclResult_t r) : result(r) {}  // implicit: every result is an outcome
  Outcome(Detour d) : detour(d) {}
  bool succeeded() const { return detour == Detour::kNone && result == ncclSuccess; }

  Detour detour = Detour::kNone;
  ncclResult_t result = ncclSuccess;  // ncclSuccess with a detour
};

// YALI refused `call` on y (yaliInvalidArgument): kRunFlat when yaliAlgoInfo, which checks the
// call's scalars and never its buffers, refuses it too (the reason holds on every rank, routing.h
// says why that matters); kStage when it accepts it (the reason is this rank's buffers); YALI's
// error when it fails otherwise (the comm ended meanwhile). *why: YALI's refusal, for the log.
Outcome sortRefusal(yaliComm_t y, const Call& call, std::string* why) {
  *why = lib().yaliGetLastError(nullptr);  // before yaliAlgoInfo writes its own
  yaliAlgoInfo_t algo;
  // NULL buffers: only the scalar checks are wanted, not a look-up of the buffers' registrations.
  const yaliResult_t r = lib().yaliAlgoInfo(y, call.shape.collective, nullptr, nullptr, call.count,
                                            toYaliType(call.shape.type), toYaliOp(call.shape.op), call.root, &algo);
  if (r == yaliSuccess) return Detour::kStage;
  if (r == yaliInvalidArgument) return Detour::kRunFlat;
  noteFailure(Failure::kYali);
  info(-1, "%s: sorting YALI's refusal (%s): yaliAlgoInfo failed: %s", call.function, why->c_str(),
       lib().yaliGetLastError(nullptr));
  return toNcclResult(r);
}

const char* const kStagedLog = " [staged through libyali-nccl's scratch]";

// One copy of a staged call, on its stream (cudaMemcpyDefault: the buffer YALI refused may be host
// memory); nothing for 0 bytes. A copy that fails is this rank's error, as NCCL's for a bad pointer.
ncclResult_t stagingCopy(const Call& call, void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return ncclSuccess;
  const cudaError_t err = lib().cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, call.stream);
  if (err == cudaSuccess) return ncclSuccess;
  return shimFail(ncclInvalidArgument,
                  "%s: YALI refused this rank's buffers, and copying %s failed (%zu bytes, from %p to %p): %s",
                  call.function, what, bytes, src, dst, lib().cudaGetErrorString(err));
}

// The staging scratch for layout l, or null with *r set: it grows only outside a capture. In a
// capture that would need it to grow, *r is kRunFlat where the caller may run the call on NCCL
// (`flatFallback`), else an error.
char* stagingScratch(Comm* c, const Call& call, const StagingLayout& l, unsigned long long context,
                     const std::string& why, bool flatFallback, Outcome* r) {
  cudaError_t err = cudaSuccess;
  char* scratch = static_cast<char*>(scratchOf(c, &c->staging, l.totalBytes, context == 0, &err));
  if (scratch != nullptr || l.totalBytes == 0) return scratch;  // 0: nothing to copy (count 0)
  if (err == cudaErrorStreamCaptureUnsupported && flatFallback)
    *r = Detour::kRunFlat;
  else if (err == cudaErrorStreamCaptureUnsupported)
    *r = shimFail(ncclInvalidArgument,
                  "%s: YALI refused this rank's buffers (%s), and staging them needs %zu bytes of scratch, which "
                  "cannot be allocated during a stream capture: pass buffers YALI takes, or make the same call "
                  "once outside the capture first",
                  call.function, why.c_str(), l.totalBytes);
  else
    *r = shimFail(ncclUnhandledCudaError, "%s: allocating %zu bytes of staging scratch failed: %s", call.function,
                  l.totalBytes, lib().cudaGetErrorString(err));
  return nullptr;
}

// Whether the comm's device has memory pools (cudaMallocAsync); false where it cannot be told.
// Asked at each call staged in a group (a host-side attribute read, on a path that copies anyway).
bool hasMemoryPools(const Comm* c) {
  int supported = 0;
  if (lib().cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, c->device) == cudaSuccess)
    return supported != 0;
  lib().cudaGetLastError();
  return false;
}

// stage() inside ncclGroupStart/End (issue 20). YALI launches the group's calls at its outermost
// end, so the shared staging scratch, whose copy back follows the call at once, cannot serve: the
// copy back would run before YALI's kernel, and the next staged call of the group would overwrite
// the scratch before the first one's kernel read it. So the call gets memory of its own,
// cudaMallocAsync'd on its stream (stream-ordered: no host wait, no device-wide synchronization),
// the input this rank reads is copied in now (on the stream, so before the group's launch), `run`
// queues the YALI call on the copies in YALI's group like any other call, and the output's copy
// back and the free wait for the outermost ncclGroupEnd, after yaliGroupEnd launched the group
// (comm.h, StagedCall; comm.cc, finishStagedCalls: what is skipped, and when). Every rank so runs
// the same library, as outside a group; the peers' calls and this one launch in the same group.
// Where this cannot work the call goes to NCCL, as every such refusal in a group did before
// (kRunFlat: right where every rank refuses alike, and the ranks apart where one rank alone does):
//  - the call's stream is being captured (or its capture status cannot be read): the allocation and
//    the copy in would be captured now, while YALI's launch, the copy back and the free at the
//    group's end land in that capture only if it is still going on then (it may have ended, and
//    the graph would then replay a copy in that no launch follows). Not staged;
//  - the device has no memory pools (cudaDevAttrMemoryPoolsSupported): no cudaMallocAsync, and a
//    cudaMalloc/cudaFree per call would synchronize the device.
// Failures after that are this rank's errors, as outside a group: the allocation or the event
// behind the copy in (ncclUnhandledCudaError), the copy in (ncclInvalidArgument), the YALI call
// (its error); memory already allocated is then freed on the stream (nothing of the call was
// queued).
// The input is copied at the call, not at the group's end, so that a copy that fails is this
// rank's error before anything of the call is queued (at the end, the queued call would run on
// whatever the memory held: a wrong result on every rank, silently). The cost: what the program
// enqueues on the stream between the call and ncclGroupEnd, and writes into sendbuff, is not seen
// by the staged call (NCCL's kernel, launched at the end, would see it). NCCL_ABI.md says so.
template <typename Run>
Outcome stageInGroup(Comm* c, const Call& call, const std::string& why, Run run, bool* ran) {
  const StagingLayout l =
      stagingLayout(call.shape.collective, c->rank, call.root, c->nranks, call.count, bytesOf(1, call.shape.type));
  DeviceGuard onCommDevice(c->device);
  if (mayBeCaptured(call.stream) || !hasMemoryPools(c)) return Detour::kRunFlat;
  char* memory = nullptr;
  if (l.totalBytes > 0) {
    void* p = nullptr;
    const cudaError_t err = lib().cudaMallocAsync(&p, l.totalBytes, call.stream);
    if (err != cudaSuccess) {
      lib().cudaGetLastError();
      return shimFail(ncclUnhandledCudaError,
                      "%s: YALI refused this rank's buffers (%s) inside ncclGroupStart/End, and allocating %zu bytes "
                      "of staging memory for them failed: %s",
                      call.function, why.c_str(), l.totalBytes, lib().cudaGetErrorString(err));
    }
    memory = static_cast<char*>(p);
  }
  char* in = memory;
  char* out = memory != nullptr ? memory + l.recvOffset : nullptr;
  ncclResult_t r = stagingCopy(call, in, call.send, l.sendBytes, "sendbuff into the staging memory");
  // An event behind the copy in, for the memory's free where its stream cannot take it at the
  // group's end (comm.h, StagedCall).
  cudaEvent_t copiedIn = nullptr;
  if (r == ncclSuccess && memory != nullptr) {
    cudaError_t err = lib().cudaEventCreateWithFlags(&copiedIn, cudaEventDisableTiming);
    if (err == cudaSuccess) err = lib().cudaEventRecord(copiedIn, call.stream);
    if (err != cudaSuccess) {
      lib().cudaGetLastError();
      r = shimFail(ncclUnhandledCudaError,
                   "%s: YALI refused this rank's buffers (%s) inside ncclGroupStart/End, and recording an event "
                   "behind their copy into the staging memory failed: %s",
                   call.function, why.c_str(), lib().cudaGetErrorString(err));
    }
  }
  if (r == ncclSuccess) {
    *ran = true;
    r = run(l.sendBytes > 0 ? in : nullptr, l.recvBytes > 0 ? out : nullptr);
  }
  if (r != ncclSuccess) {
    // Nothing of the call was queued: the memory goes now, after the copy in, in stream order.
    if (memory != nullptr) lib().cudaFreeAsync(memory, call.stream);
    if (copiedIn != nullptr) lib().cudaEventDestroy(copiedIn);
    return r;
  }
  if (memory != nullptr)
    stageUntilGroupEnd(
        {c, c->yali, c->device, call.stream, memory, out, call.recv, l.recvBytes, call.function, copiedIn});
  if (debugEnabled())
    logRoute(c, (std::string(call.function) + kStagedLog).c_str(), bytesOf(call.count, call.shape.type), true,
             ("YALI refused this rank's buffers, in a group: " + why).c_str());
  return ncclSuccess;
}

// Runs a call YALI refused for this rank's buffers (sortRefusal: kStage) on YALI anyway, on copies
// of them in the comm's staging scratch (routing.h, stagingLayout), so that this rank meets its
// peers in YALI: the input this rank reads is copied in, `run(send, recv)` calls YALI (or the
// hierarchical steps) on the copies, and the output this rank writes is copied back, all on the
// call's stream, after the scratch's last user on another stream (Scratch, StreamOrder), with the
// comm's device current (stream 0 is that device's legacy stream). Inside a group, on memory of
// the call's own, copied back at the group's end (stageInGroup). Where staging cannot work:
//  - in a capture whose scratch would have to grow, and in a group where stageInGroup cannot work
//    (a captured stream, no memory pools), it returns kRunFlat when `flatFallback` (the flat
//    path): the call runs on NCCL, as every refusal did before staging existed. That is right when
//    every rank refuses alike (an in-place AlltoAll, host buffers everywhere) and leaves the ranks
//    apart when one rank alone does (NCCL_ABI.md, "What runs where"); an error there would fail the
//    first case for sure. The hierarchical path passes false: its other ranks run hierarchical
//    (and it never stages in a group: its calls made in a group run after the group's end).
//  - otherwise (a copy that fails, the staged call failing) an error, never NCCL; the peers' YALI
//    calls end with YALI's bounded timeout.
// *ran: run was called (false: nothing of YALI's was enqueued).
// Out of a group it is stageIn, run, stageOut: the hierarchical path run leg by leg (HierRun)
// calls the two halves itself, around legs that other calls' legs separate.
struct Staging {
  StagingLayout layout;
  unsigned long long context = 0;  // scratchContext's, for scratchUsed
  char* in = nullptr;              // the copies the call runs on
  char* out = nullptr;
};

// The scratch ordered after its last user and this rank's input copied in. An error where that
// fails, with nothing left to undo (a failed copy in: the scratch's use already noted).
Outcome stageIn(Comm* c, const Call& call, const std::string& why, bool flatFallback, Staging* st) {
  st->layout =
      stagingLayout(call.shape.collective, c->rank, call.root, c->nranks, call.count, bytesOf(1, call.shape.type));
  DeviceGuard onCommDevice(c->device);
  Outcome r = scratchContext(call.function, call.stream, &st->context);
  char* scratch = r.succeeded() ? stagingScratch(c, call, st->layout, st->context, why, flatFallback, &r) : nullptr;
  if (r.succeeded()) r = scratchBefore(c, &c->staging, call.function, call.stream, st->context);
  if (!r.succeeded()) return r;
  st->in = scratch;
  st->out = scratch + st->layout.recvOffset;
  r = stagingCopy(call, st->in, call.send, st->layout.sendBytes, "sendbuff into the staging scratch");
  if (!r.succeeded()) scratchUsed(&c->staging, call.function, call.stream, st->context);
  return r;
}

// After the staged run, which came to r: the output copied back where it succeeded (a staged
// hierarchical call that went flat comes with kRunFlat: HierRun::finish), the scratch's use noted
// (whatever r: what the run enqueued stays).
Outcome stageOut(Comm* c, const Call& call, const Staging& st, Outcome r, const std::string& why) {
  DeviceGuard onCommDevice(c->device);
  if (r.succeeded())
    r = stagingCopy(call, call.recv, st.out, st.layout.recvBytes, "the staging scratch into recvbuff");
  const ncclResult_t noted = scratchUsed(&c->staging, call.function, call.stream, st.context);
  if (!r.succeeded()) return r;
  if (debugEnabled())
    logRoute(c, (std::string(call.function) + kStagedLog).c_str(), bytesOf(call.count, call.shape.type), true,
             ("YALI refused this rank's buffers: " + why).c_str());
  return noted;
}

template <typename Run>
Outcome stage(Comm* c, const Call& call, const std::string& why, bool flatFallback, Run run, bool* ran) {
  *ran = false;
  if (inGroup() && flatFallback) return stageInGroup(c, call, why, run, ran);
  if (inGroup())
    return shimFail(ncclInvalidArgument,
                    "%s: YALI refused this rank's buffers (%s) inside ncclGroupStart/End, where libyali-nccl cannot "
                    "stage them (YALI runs the group's calls at its end)",
                    call.function, why.c_str());
  DeviceGuard onCommDevice(c->device);
  Staging st;
  const Outcome in = stageIn(c, call, why, flatFallback, &st);
  if (!in.succeeded()) return in;
  *ran = true;
  const ncclResult_t r = run(st.layout.sendBytes > 0 ? st.in : nullptr, st.layout.recvBytes > 0 ? st.out : nullptr);
  return stageOut(c, call, st, r, why);
}

// ---- Calls deferred to the outermost ncclGroupEnd -------------------------------------------------
//
// A hierarchical collective made inside ncclGroupStart/End cannot join the group (routeHier says
// why): it waits, whole, for the outermost ncclGroupEnd, and runs there after the group's launches.
// From that call on, every later call of the group on the same comm waits too, and at the end each
// comm's calls run in call order. Left in the group, a later call on that comm would run before the
// hierarchical one, while NCCL matches a comm's calls by issue order (a hierarchical AllReduce's
// tail of count % L elements runs on the comm itself, and a peer may make both calls outside a
// group): the ranks would wait for each other for ever. The comms' deferred calls run comm by comm,
// in the order of the comms' keys (Comm::groupKey, the same on every rank of a comm: routing.h,
// commKeyOfIds), not in call order: NCCL launches a group's comms in an order of its own (by a hash
// of each), so a program may make a group's calls on two comms in a different order on each rank,
// and where the two share a stream the ranks must still run them in one order. Calls on other comms
// (one node, or no hierarchical call of theirs in the group) join the libraries' group at the call
// and launch first, on every rank alike. Until session 42 every later collective of the group
// waited, whatever its comm, and the deferred calls ran in call order, which matched a peer making
// the same calls outside a group but not one making them in another order inside one (NCCL_ABI.md,
// the review finding (2)).
// A group without a hierarchical call (torch's coalescing) is untouched, and so are a comm's calls
// made before its first hierarchical call of the group.
//
// Point-to-point calls (ncclSend, ncclRecv: routePointToPoint) depend on their group: a rank's
// sends and receives to its peers must be issued in one group, or a large transfer can wait for a
// receive issued behind it. So the deferred calls between two hierarchical calls (a stretch) run as
// one group (until session 43 only where they held a point-to-point call or calls on several GPUs,
// one by one otherwise; NCCL keeps a comm's calls in issue order either way, and launches a
// group's together). A point-to-point call on a comm with a
// hierarchy (NCCL's: point-to-point across nodes stays NCCL's) made in a group is always deferred,
// and runs after the comm's other deferred calls of the group, whatever its place among them: one
// rank may send before its hierarchical AllReduce while its peer receives after its own, and NCCL
// keeps no order between a group's collectives and its point-to-point calls (neither does libyali:
// yali.h, point-to-point last), so both ranks run the transfer after the AllReduce, in one group.
// Until session 43 such a call made after the comm's hierarchical call while an earlier one of the
// group on that comm had gone into the libraries' group was refused (ncclInvalidUsage): its group
// would have been split. A point-to-point call on another comm joins the libraries' group at the
// call.

class HierRun;
std::vector<ncclResult_t> runLegWise(const std::vector<HierRun*>& round);

struct DeferredCall {
  Comm* comm;          // ours, or null: NCCL's own handle (a split under an NCCL environment plugin)
  ncclComm_t handle;   // the program's: the comm the call is ordered on
  cudaStream_t stream;
  const char* function;
  bool hierarchical;   // runs alone, between the stretches of deferred calls around it
  bool pointToPoint;   // its stretch runs as one group
  bool dropped;        // its comm was freed inside the group (dropDeferredCalls): not run
  std::function<ncclResult_t()> run;   // the call as made, routed at the group's end
  std::function<ncclResult_t()> flat;  // hierarchical: the call as one flat NCCL call
  std::shared_ptr<HierRun> legWise;    // hierarchical: the call, to run leg by leg (runLegWise)
  // The call's reduction op, as CallShape holds it (ignored where it does not reduce): a custom one
  // (ncclRedOpCreate*, >= ncclNumOps) must live until the call is made at the group's end
  // (ncclRedOpDestroy).
  int op = ncclSum;
};

// The deferred calls of this thread's open group (NCCL's and YALI's groups are per thread too).
struct DeferredGroup {
  std::vector<DeferredCall> calls;
  // Per comm (the program's handle): its hierarchical calls deferred so far; a comm in here defers
  // its later collectives (a comm freed inside the group leaves: dropDeferredCalls).
  std::map<ncclComm_t, int> hierarchicalOf;
  // ncclRedOpDestroy calls held until the deferred calls that use the op have been made: NCCL lets
  // a program destroy an op as soon as the last call given it returns (nccl.h), and copies the
  // op's state at that call; a deferred call reaches NCCL only at the group's end. (Handle, op.)
  std::vector<std::pair<ncclComm_t, ncclRedOp_t>> heldOpDestroys;
  // A call of the group refused at the call (routePointToPoint, refuseInGroupWhileSetUp): the whole
  // group fails at its outermost end (endGroup), as NCCL's does after an error of one of its calls.
  ncclResult_t refusal = ncclSuccess;
};
thread_local DeferredGroup tlsDeferred;

// refuseWhileSetUp (comm.h) for a call that NCCL, refusing it on a comm in progress, counts as its
// group's error (ncclGroupErrCheck: collectives, sends and receives, split, shrink, finalize): made
// inside ncclGroupStart/End, the refusal fails the whole group at its end (endGroup), whose other
// calls then do not run, as in NCCL (third review, Session 32).
ncclResult_t refuseInGroupWhileSetUp(const Comm* c, const char* function) {
  const ncclResult_t refused = refuseWhileSetUp(c, function);
  if (refused != ncclSuccess && inGroup() && tlsDeferred.refusal == ncclSuccess) tlsDeferred.refusal = refused;
  return refused;
}

// Whether this thread's open group defers a call made now on `handle`: one after a hierarchical
// call of the same comm.
bool deferringCallsOf(ncclComm_t handle) {
  return inGroup() && tlsDeferred.hierarchicalOf.count(handle) != 0;
}

void deferUntilGroupEnd(DeferredCall d) {
  if (d.hierarchical) ++tlsDeferred.hierarchicalOf[d.handle];
  tlsDeferred.calls.push_back(std::move(d));
}

// A point-to-point call (ncclSend, ncclRecv): `run` issues it to NCCL with the real comm. Inside a
// group, on a comm with a hierarchy, it waits for the group's end and runs after the comm's other
// deferred calls (see above); on any other comm it joins the libraries' group at the call.
template <typename Run>
ncclResult_t routePointToPoint(const char* function, ncclComm_t handle, cudaStream_t stream, Run run) {
  Comm* c = ours(handle);
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, function); refused != ncclSuccess) return refused;
  if (!inGroup()) return run();
  noteGroupStream(c, stream);  // joined with the comm's other streams of the group at its end
  if (c == nullptr || c->hier == nullptr) return run();
  tlsDeferred.calls.push_back(DeferredCall{c, handle, stream, function, false, true, false, run, nullptr, nullptr});
  return ncclSuccess;
}

// The earlier of two results: a failure over ncclInProgress (a non-blocking comm's call under way)
// over ncclSuccess.
ncclResult_t firstOf(ncclResult_t a, ncclResult_t b) {
  if (a != ncclSuccess && a != ncclInProgress) return a;
  if (b != ncclSuccess && b != ncclInProgress) return b;
  return a == ncclInProgress ? a : b;
}

// At the outermost ncclGroupEnd or ncclGroupSimulateEnd, after both libraries' ends and leaveGroup:
// the deferred calls run, comm by comm in the order of the comms' keys (each comm's in call order:
// "call order" below means that order), unless the group was simulated or failed (`run` false: a
// simulated group's calls do not run, as in NCCL, nor do those of a group a refusal failed). They
// run also where an end failed (on another comm of the group, say): a hierarchical call's peers on
// other nodes wait in NCCL for its cross step, without a bound, and the hierarchical steps send it
// even after a failed YALI step (markFailedAtCall).
// Each hierarchical call runs alone, as made outside a group; the calls between two of them run as
// one group (see above; a single collective alone).
// One thread driving the ranks of several GPUs in the group (nccl-tests -g N, one process per
// node): their calls must be issued inside one group, as NCCL requires of such a thread and as
// YALI does (yali.h: a kernel launch or NCCL's connection on first use can wait for a rank this
// thread has not reached yet). Where the hierarchical calls are on more than one device, their
// steps depend on each other across the GPUs (each GPU's YALI step waits for the node's other
// GPUs' steps), so one call cannot run whole before the next; they run leg by leg (runLegWise), in
// rounds: round k holds each device's k-th hierarchical call, the calls of each device keep their
// order, and a round's legs end before the next round starts. Every rank so issues the steps a
// process driving its GPU alone issues, in the same order: the same NCCL calls across nodes on the
// same comms, so such a node and a node of one process per GPU meet (before, this case ran the
// hierarchical calls flat, which a node of the other kind does not: both waited for ever). One
// call per device per round, because a rank's calls share its comm's scratch and status words,
// and because NCCL matches a comm's calls by issue order: two calls of one GPU in one round would
// issue both cross steps before the first call's tail, unlike a rank driving its GPU alone.
// The other deferred calls run between the rounds, where their device's order puts them: stretch
// k (after the device's k-th hierarchical call, before its next) runs after round k, as one group
// where it spans several devices or holds a point-to-point call. A call on NCCL's own handle
// counts on no device; it runs after every hierarchical call made before it. The group's
// point-to-point calls run in the latest of their stretches: an earlier one joins it with its whole
// stretch where no call of that stretch has a hierarchical call after it on its device (a GPU
// without hierarchical calls left). Where a device's hierarchical call lies between them on one
// GPU and not on another, their group would be split: every deferred call then runs in one group
// instead, the hierarchical ones flat, as before (NCCL_ABI.md says this is open).
// `inProgress`: NCCL's end of the group returned ncclInProgress (endGroup): a call's failure then
// also goes to its comm (noteAsyncFailure), where the program's poll finds it. Returns the first
// failure, else ncclInProgress where a run said so (a non-blocking comm's call), else ncclSuccess.
ncclResult_t runDeferredCallsOf(DeferredGroup& group, bool run, bool inProgress) {
  std::vector<DeferredCall>& calls = group.calls;
  calls.erase(std::remove_if(calls.begin(), calls.end(), [](const DeferredCall& d) { return d.dropped; }),
              calls.end());
  if (calls.empty()) return ncclSuccess;
  // Comm by comm, in the order of their keys (every rank of a comm has the same), each comm's calls
  // in call order, its point-to-point calls last; the comms of one thread's GPUs made from one
  // unique id share a key and keep their calls' order among them (the legs below rely on it).
  // A comm's point-to-point calls after its other calls (see above: NCCL keeps no order between a
  // group's collectives and its point-to-point calls, and ranks may place them differently).
  if (!settings().testCallOrder) {
    std::stable_sort(calls.begin(), calls.end(), [](const DeferredCall& a, const DeferredCall& b) {
      if (a.comm->groupKey != b.comm->groupKey) return a.comm->groupKey < b.comm->groupKey;
      return !a.pointToPoint && b.pointToPoint;
    });
  } else {
    static const bool warned =
        (warn(-1, "testing: a group's deferred calls run in call order (YALI_NCCL_TEST_CALL_ORDER)"), true);
    (void)warned;
  }
  if (!run) {
    for (const DeferredCall& d : calls)
      info(d.comm != nullptr ? d.comm->rank : -1, "%s: deferred to the group's end: not run (%s)", d.function,
           group.refusal != ncclSuccess ? "the group failed: a call in it was refused" : "the group was simulated");
    return ncclSuccess;
  }
  std::vector<size_t> all(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) all[i] = i;
  // Whether the group's hierarchical calls are on more than one device (this thread drives several).
  bool several = false;
  const DeferredCall* firstHier = nullptr;
  for (const DeferredCall& d : calls) {
    if (!d.hierarchical) continue;
    if (firstHier == nullptr) firstHier = &d;
    several = several || d.comm->device != firstHier->comm->device;
  }
  ncclResult_t result = ncclSuccess;
  auto account = [&](const DeferredCall& d, ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress && inProgress && d.comm != nullptr)
      noteAsyncFailure(d.comm, r, ncclGetLastError(d.handle));
    result = firstOf(result, r);
  };
  // The calls `at` as one group of both libraries (ours: a YALI call joins YALI's part, a call YALI
  // refuses for this rank's buffers is staged as in any group); `flat`: the hierarchical ones flat.
  auto runAsOneGroup = [&](const std::vector<size_t>& at, bool flat) {
    const ncclResult_t started = ncclGroupStart();
    result = firstOf(result, started);
    for (size_t i : at) {
      DeferredCall& d = calls[i];
      if (flat && d.hierarchical)
        info(d.comm->rank, "%s: in a group of this thread's calls on several GPUs: flat NCCL, in one group",
             d.function);
      account(d, flat && d.hierarchical ? d.flat() : d.run());
    }
    if (started == ncclSuccess) result = firstOf(result, ncclGroupEnd());
  };
  // A stretch of calls between hierarchical ones: as one group (a single collective alone, as made
  // outside a group).
  auto runStretch = [&](const std::vector<size_t>& at) {
    if (at.size() == 1 && !calls[at[0]].pointToPoint) {
      account(calls[at[0]], calls[at[0]].run());
    } else {
      runAsOneGroup(at, false);
    }
  };
  if (!several) {
    for (size_t i = 0; i < calls.size();) {
      if (calls[i].hierarchical) {
        account(calls[i], calls[i].run());
        ++i;
        continue;
      }
      std::vector<size_t> stretch;
      for (; i < calls.size() && !calls[i].hierarchical; ++i) stretch.push_back(i);
      runStretch(stretch);
    }
    return result;
  }
  // Several devices: rounds numbered comm family by family (a run of calls of one groupKey: the
  // ranks of one comm on this thread's GPUs), in the order above; within a family, a hierarchical
  // call's round is its device's count of that family's hierarchical calls so far, after the
  // earlier families' rounds; another call's stretch is the last round of its device before it
  // (0: none yet). So a family's k-th calls on every GPU share a round whatever other comms' calls
  // the GPUs made before them (GPU 0 AllReduce(A) then AllReduce(W), GPU 1 only AllReduce(W): W's
  // two calls in one round, as a process per GPU issues them; numbered per GPU across families
  // until session 43, W's calls fell into different rounds, and NCCL's connection on first use,
  // inside the first round's group, waited for W's step this thread had not issued yet).
  std::vector<int> index(calls.size());
  std::map<int, int> lastRoundOf;  // device -> the round of its latest hierarchical call so far
  int rounds = 0;
  for (size_t i = 0; i < calls.size();) {
    const uint64_t family = calls[i].comm->groupKey;
    std::map<int, int> inFamily;  // device -> the family's hierarchical calls on it so far
    int familyRounds = 0;
    for (; i < calls.size() && calls[i].comm->groupKey == family; ++i) {
      const int device = calls[i].comm->device;
      if (calls[i].hierarchical) {
        const int k = ++inFamily[device];
        familyRounds = std::max(familyRounds, k);
        index[i] = lastRoundOf[device] = rounds + k;
      } else {
        index[i] = lastRoundOf[device];
      }
    }
    rounds += familyRounds;
  }
  // The group's point-to-point calls must run in one stretch: the latest of theirs, `last`. One in
  // an earlier stretch k moves there with all of stretch k where no call of stretch k has a
  // hierarchical call after it on its device (its device's calls keep their order, and stretch k's
  // calls their group; GPU 2 receiving in a group where GPUs 0 and 1 make a hierarchical call
  // each and GPU 0 then sends: review of 633a7a7, F1). Otherwise the group would be split: every
  // deferred call then runs in one group, the hierarchical ones flat, as before.
  int last = -1;
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].pointToPoint) last = std::max(last, index[i]);
  std::set<int> moved;  // earlier stretches that join stretch `last`
  bool splitsPointToPoint = false;
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].pointToPoint && index[i] < last) moved.insert(index[i]);
  for (size_t i = 0; i < calls.size() && !splitsPointToPoint; ++i) {
    const DeferredCall& d = calls[i];
    if (d.hierarchical || moved.count(index[i]) == 0) continue;
    splitsPointToPoint = lastRoundOf[d.comm->device] > index[i];
  }
  if (splitsPointToPoint) {
    runAsOneGroup(all, true);
    return result;
  }
  for (size_t i = 0; i < calls.size(); ++i)
    if (!calls[i].hierarchical && moved.count(index[i]) != 0) index[i] = last;
  for (int k = 0; k <= rounds; ++k) {
    std::vector<size_t> stretch;
    for (size_t i = 0; i < calls.size(); ++i)
      if (!calls[i].hierarchical && index[i] == k) stretch.push_back(i);
    if (!stretch.empty()) runStretch(stretch);
    if (k == rounds) break;
    std::vector<size_t> at;
    std::vector<HierRun*> round;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!calls[i].hierarchical || index[i] != k + 1) continue;
      at.push_back(i);
      round.push_back(calls[i].legWise.get());
    }
    const std::vector<ncclResult_t> results = runLegWise(round);
    for (size_t j = 0; j < at.size(); ++j) account(calls[at[j]], results[j]);
  }
  return result;
}

// The open group's deferred calls (runDeferredCallsOf), then the op destroys held for them
// (DeferredGroup::heldOpDestroys), whatever became of the calls (a simulated group's too).
ncclResult_t runDeferredCalls(bool run, bool inProgress) {
  DeferredGroup group;
  std::swap(group, tlsDeferred);
  const ncclResult_t result = runDeferredCallsOf(group, run, inProgress);
  for (const auto& [handle, op] : group.heldOpDestroys) {
    const ncclResult_t r = callReal<Api::ncclRedOpDestroy>(op, realArg(handle));
    if (r != ncclSuccess) info(-1, "ncclRedOpDestroy held until the group's end failed: %d", static_cast<int>(r));
  }
  return result;
}

// YALI's error for a call (not a refusal), as the matching ncclResult_t.
ncclResult_t yaliFailed(const Comm* c, const char* function, yaliResult_t r) {
  noteFailure(Failure::kYali);
  info(c->rank, "%s on YALI failed: %s", function, lib().yaliGetLastError(nullptr));
  return toNcclResult(r);
}

// One collective call. YALI runs it when the comm has YALI and the call is one YALI takes
// (routing.h): `viaYali(y, send, recv)` with the call's buffers. A call YALI refuses
// (yaliInvalidArgument) runs on NCCL instead when the reason is in its scalars, which every rank
// shares, else on YALI through the staging scratch (sortRefusal, stage); YALI's other errors are
// returned, as the matching ncclResult_t. Made in a group after a hierarchical call of its comm, it
// waits for the group's end and is routed there (deferringCallsOf): `viaYali` and `viaNccl` hold the
// call's arguments by value.
template <typename ViaYali, typename ViaNccl>
ncclResult_t routeCall(const Call& call, ncclComm_t handle, ViaYali viaYali, ViaNccl viaNccl) {
  Comm* c = ours(handle);
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, call.function); refused != ncclSuccess) return refused;
  noteGroupStream(c, call.stream);  // joined with the comm's other streams of the group at its end
  if (deferringCallsOf(handle)) {
    DeferredCall d{c, handle, call.stream, call.function, false, false, false,
                   [call, handle, viaYali, viaNccl] { return routeCall(call, handle, viaYali, viaNccl); },
                   nullptr, nullptr};
    d.op = call.shape.op;
    deferUntilGroupEnd(std::move(d));
    return ncclSuccess;
  }
  if (c == nullptr) return viaNccl(handle);
  const yaliComm_t y = c->yali;
  const size_t bytes = bytesOf(call.count, call.shape.type);
  const Route route = decideRoute(y != nullptr, c->disabled, call.shape);
  if (route != Route::kYali) {
    if (debugEnabled())
      logRoute(c, call.function, bytes, false,
               c->hier != nullptr ? "several nodes: flat NCCL for this collective"
               : route == Route::kNoYaliComm
                   ? ("no YALI communicator (" + (c->noYali.empty() ? std::string("ended") : c->noYali) + ")").c_str()
                   : routeReason(route));
    return viaNccl(c->real);
  }
  const yaliResult_t r = viaYali(y, call.send, call.recv);
  if (r == yaliSuccess) {
    logRoute(c, call.function, bytes, true, "");
    return ncclSuccess;
  }
  if (r != yaliInvalidArgument) return yaliFailed(c, call.function, r);
  std::string why;
  const Outcome sorted = sortRefusal(y, call, &why);
  if (sorted.detour == Detour::kRunFlat) {
    if (debugEnabled()) logRoute(c, call.function, bytes, false, ("YALI refused it: " + why).c_str());
    return viaNccl(c->real);
  }
  if (sorted.detour != Detour::kStage) return sorted.result;
  bool ran = false;
  auto runStaged = [&](const void* send, void* recv) {
    const yaliResult_t staged = viaYali(y, send, recv);  // a refusal here too: this rank's error
    return staged == yaliSuccess ? ncclSuccess : yaliFailed(c, call.function, staged);
  };
  const Outcome staged = stage(c, call, why, /*flatFallback=*/true, runStaged, &ran);
  if (staged.detour != Detour::kRunFlat) return staged.result;
  if (debugEnabled())
    logRoute(c, call.function, bytes, false,
             ("YALI refused this rank's buffers (" + why +
              ") where libyali-nccl cannot stage them (a capture before its scratch exists; in a group, a "
              "captured stream or a device without memory pools)")
                 .c_str());
  return viaNccl(c->real);
}

// Whether c's YALI comm y takes point-to-point calls, asked once by a send that moves nothing:
// libyali refuses every one (yaliInvalidUsage) where YALI_P2P_CHANNELS=0, a setting its ranks agree
// on, so every rank of the comm reaches the same verdict. Not decided while the comm has failed
// (its calls then report the failure, whatever the route).
bool yaliTakesSendRecv(Comm* c, yaliComm_t y) {
  const int known = c->sendRecvOnYali.load(std::memory_order_acquire);
  if (known >= 0) return known == 1;
  yaliResult_t async = yaliSuccess;
  if (lib().yaliCommGetAsyncError(y, &async) != yaliSuccess || async != yaliSuccess) return true;
  const yaliResult_t r = lib().yaliSend(nullptr, 0, yaliInt8, 0, y, nullptr);
  if (r != yaliSuccess && r != yaliInvalidUsage) return true;
  c->sendRecvOnYali.store(r == yaliSuccess ? 1 : 0, std::memory_order_release);
  return r == yaliSuccess;
}

// A point-to-point call (ncclSend, ncclRecv) that routePointToPoint runs (now, or from the group's
// deferred calls). YALI runs it where the comm has a YALI communicator of all its ranks (one node:
// YALI's ranks are NCCL's) and YALI_NCCL_DISABLE leaves "sendrecv" on. The route depends on the
// comm alone (its set-up's verdict, the same on every rank), never on the call: both calls of a
// pair meet in the same library, and a pair's calls keep their order, which both libraries match
// in (the k-th send with the k-th receive). A call whose type YALI lacks or whose peer is out of
// range goes to NCCL, which reports it (never valid NCCL: no peer waits for it). A buffer YALI
// refuses (not device memory of the comm's GPU, or shorter than the call) is this rank's error:
// the peer's matching call is on YALI, where NCCL would never meet it. A group's YALI calls run at
// its end as one launch per comm (yali.h), its NCCL calls as NCCL's group. Several nodes (a
// hierarchy): NCCL's, all of them.
template <typename ViaYali, typename ViaNccl>
ncclResult_t routeSendRecv(const char* function, ncclComm_t handle, ncclDataType_t type, size_t count, int peer,
                           ViaYali viaYali, ViaNccl viaNccl) {
  Comm* c = ours(handle);
  if (c == nullptr) return viaNccl(handle);
  const size_t bytes = bytesOf(count, type);
  const yaliComm_t y = c->hier == nullptr ? c->yali : nullptr;
  const char* why = nullptr;
  if (c->hier != nullptr) why = "several nodes: point-to-point stays on NCCL";
  else if (y == nullptr) why = "no YALI communicator";
  else if (c->disabled & kSendRecvMask) why = "YALI_NCCL_DISABLE";
  else if (!yaliTakesSendRecv(c, y)) why = "YALI's point-to-point is off (YALI_P2P_CHANNELS=0)";
  else if (!validDataType(type)) why = "a data type YALI does not have";
  else if (peer < 0 || peer >= c->nranks) why = "a peer out of range (NCCL reports it)";
  if (why != nullptr) {
    if (debugEnabled()) logRoute(c, function, bytes, false, why);
    return viaNccl(c->real);
  }
  const yaliResult_t r = viaYali(y);
  if (r == yaliSuccess) {
    logRoute(c, function, bytes, true, "");
    return ncclSuccess;
  }
  // A refusal inside a group fails the whole group at its end, as NCCL's group fails after one of
  // its calls failed (endGroup): its other calls, the peers' matching ones included, do not run.
  if (inGroup() && tlsDeferred.refusal == ncclSuccess)
    tlsDeferred.refusal = r == yaliInvalidArgument ? ncclInvalidArgument : toNcclResult(r);
  if (r != yaliInvalidArgument) return yaliFailed(c, function, r);
  return shimFail(ncclInvalidArgument,
                  "%s: YALI runs this communicator's point-to-point calls and refused this one (%s); its peer's "
                  "matching call goes to YALI too, where NCCL would never meet it",
                  function, lib().yaliGetLastError(nullptr));
}

// ---- The hierarchical path (several nodes of L ranks: routing.h, decideHierRoute) ------------------
//
// Three steps per call, all on the caller's stream: stream order is the only synchronization
// between them (each library waits for what the stream holds before its own work starts), so the
// path is capturable. Between calls, every hierarchical call is ordered across streams by an
// event once a second stream is used (routing.h, StreamOrder): the scratch (AllGather,
// ReduceScatter) and the cross-node status words (AllReduce, ReduceScatter) are the comm's. The steps
// already enqueued stay when a later one fails (their peers made them too).
//
// Refusals. YALI's first step refusing the call for its scalars (sortRefusal: kRunFlat; nothing
// the program sees written yet) sends it to flat NCCL, on every rank alike. Refusing it for this
// rank's buffers, which only AllReduce's YALI steps read (AllGather's and ReduceScatter's read the
// scratch), stages the whole call (HierRun::stageFirstStep). Any other refusal is this rank's
// error, as below.
//
// Failures across nodes (ARCHITECTURE.md, "Errors"). The ranks of other nodes wait in NCCL for
// this rank's NCCL steps and consume the data they carry, so in AllReduce and ReduceScatter:
//  - a YALI step that fails at the call (an error, a refusal that may not go flat, or a staging
//    that failed) still lets this rank enqueue every NCCL step of the call (the cross step,
//    AllReduce's flat tail), skips the remaining YALI steps and returns its error: no peer waits
//    for a step that never comes;
//  - the cross step carries this rank's YALI status beside the data (crossStep): a YALI kernel
//    that failed after its launch leaves unspecified values, which reach the other nodes flagged.
// AllGather needs neither: its NCCL step comes first and moves the program's own input, so a
// failure of its YALI step (at the call or on the device) touches only this node's outputs, and
// this node's YALI comm reports it on each of its ranks.

const char* const kHierLog = " [hierarchical: YALI in the node, NCCL across nodes]";

// Decides the call's path and gets its scratch. *hier: take the hierarchical path (with *scratch
// when it needs one); otherwise the caller runs it flat, as NCCL's. The path is decided on what
// every rank decides alike (the agreed scratch size: comm.h, Scratch::agreed): a scratch this rank
// alone could not have (cudaMalloc failed, now or at an earlier growth) keeps the hierarchical path,
// with *scratch null and *noScratch the error, so that the call's NCCL steps, which the ranks of
// other nodes wait for, still go (hierAllGather, hierReduceScatter).
// The call's route (decideHierRoute, on what every rank has alike; never on this thread's group
// depth) into *hc; logged when it is not the hierarchical path.
HierRoute hierRouteOf(Comm* c, const Call& call, HierCall* hc) {
  Hierarchy* h = c->hier;
  const Route route = decideRoute(h->yali != nullptr, c->disabled, call.shape);
  // A stream whose state cannot be read counts as captured: nothing is allocated then.
  *hc = HierCall{call.shape.collective, call.count, bytesOf(1, call.shape.type),
                 route == Route::kYali && mayBeCaptured(call.stream), 0};
  hc->scratchBytes = scratchBytes(&h->scratch);
  const HierRoute hr = decideHierRoute(h->layout, route, *hc);
  if (hr != HierRoute::kHierarchical && debugEnabled())
    logRoute(c, call.function, call.count * hc->elementSize, false,
             (std::string("several nodes, flat NCCL: ") +
              (hr == HierRoute::kRefused ? routeReason(route) : hierRouteReason(hr)))
                 .c_str());
  return hr;
}

ncclResult_t planHier(Comm* c, const Call& call, bool* hier, char** scratch, ncclResult_t* noScratch) {
  Hierarchy* h = c->hier;
  *hier = false;
  HierCall hc{};
  if (hierRouteOf(c, call, &hc) != HierRoute::kHierarchical) return ncclSuccess;
  const size_t need = hierScratchBytes(h->layout, hc);
  if (need > 0) {
    cudaError_t err = cudaSuccess;
    *scratch = static_cast<char*>(scratchOf(c, &h->scratch, need, !hc.capturing, &err));
    if (*scratch == nullptr)  // this rank alone may lack the memory: an error, never a different path
      *noScratch = shimFail(ncclUnhandledCudaError, "%s: allocating %zu bytes of hierarchical scratch failed: %s",
                            call.function, need, lib().cudaGetErrorString(err));
  }
  *hier = true;
  return ncclSuccess;
}

ncclResult_t yaliStepFailed(Comm* c, const char* function, yaliResult_t r) {
  noteFailure(Failure::kYali);
  info(c->rank, "%s: YALI's step of the hierarchical path failed: %s", function, lib().yaliGetLastError(nullptr));
  return toNcclResult(r);
}

// The legs of a hierarchical call, in order. Each kind's steps fall into them:
//   kFirstYali  YALI's ReduceScatter in the node: AllReduce's; ReduceScatter's, with its copies
//               into the scratch before it
//   kCross      NCCL's step across nodes (crossStep; AllGather's AllGather, without a status)
//   kLastYali   YALI's AllGather in the node: AllReduce's; AllGather's, with its copies out of the
//               scratch after it
//   kTail       AllReduce's tail of count % L elements, one flat NCCL AllReduce on the comm
// Outside a group a call runs its legs in turn, which is its steps in the order the comments on
// hierAllReduce, hierAllGather and hierReduceScatter give. One thread driving several GPUs runs
// each leg of several calls in one group of the leg's library (runLegWise). So each leg has a part
// inside that group and one after it (`afterGroup`): what must follow the group's launches on the
// stream (the cross-node status' copy to the host, AllGather's copies out of the scratch), or read
// what the group's end returned (whether the cross step was enqueued).
enum class Leg { kFirstYali, kCross, kLastYali, kTail };
constexpr Leg kLegs[] = {Leg::kFirstYali, Leg::kCross, Leg::kLastYali, Leg::kTail};
bool isYaliLeg(Leg leg) { return leg == Leg::kFirstYali || leg == Leg::kLastYali; }

// How a hierarchical call's YALI steps met a refusal: `staged`, its steps run on staged copies of
// this rank's buffers (HierRun::stageFirstStep: a refusal is then this rank's error); `refusal`,
// YALI's message, when a step was sorted into kRunFlat or kStage.
struct HierAttempt {
  bool staged = false;
  std::string refusal;
};

// One hierarchical call's state between its legs (HierRun keeps it; the collective's legs read and
// write it).
struct HierState {
  const void* send = nullptr;  // the program's buffers, or their staged copies (only AllReduce's)
  void* recv = nullptr;
  char* scratch = nullptr;  // null: none needed, or this rank could not have it (planHier)
  HierAttempt attempt;
  // This rank's YALI steps failed at the call (an error, a refusal that may not go flat, a copy
  // standing for a step, a staging or a scratch that failed): its error. The remaining YALI steps
  // are skipped; the NCCL steps still go, since the ranks of other nodes wait for them.
  ncclResult_t failed = ncclSuccess;
  ncclResult_t cross = ncclSuccess;      // the cross step's result (crossStep, crossStatus)
  bool enqueued = false;                 // the cross step's NCCL group was enqueued
  cudaError_t statusCopy = cudaSuccess;  // the copies into the status words (crossStep)
  ncclResult_t tail = ncclSuccess;       // AllReduce's tail
  bool queued = false;                   // the current leg queued work in its group (HierRun::legFailed)
  // The steps are over: `outcome` is the call's (kRunFlat: it runs flat; kStage: it is staged).
  bool over = false;
  Outcome outcome = ncclSuccess;
  void end(Outcome o) {
    over = true;
    outcome = o;
  }
};

// The NCCL step across nodes, with this rank's status beside it:
//   1. the status words <- [0] YALI's failure flag (stream-ordered after this rank's YALI
//      launches), [1] the failed-at-the-call word (Hierarchy::kAtCall: 1 once a YALI step of this
//      comm failed at the call);
//   2. one real group: `data` (the call's NCCL step on crossComm) and an AllReduce(max) of the
//      status words on crossComm, so that the status travels in the same NCCL launch as the data;
//   3. the host-mapped words <- the reduced status, which ncclCommGetAsyncError reads.
// Both sources are sticky and copied at every call, in a captured graph's replays too (they are
// read when the copy runs), so once a failure happened on some node, every later call's reduced
// status, and the host words, stay nonzero on every node: a later call or replay cannot hide an
// earlier failure. Cost per call: three small copies and one 8-byte AllReduce in the data step's
// group. A status copy that fails is returned after the NCCL steps were enqueued anyway (with
// whatever the status words held: the previous reduced values), and this rank sends 1 from then on.
// crossStep makes 1 and 2 (kCross inside its group), crossStatus 3 (after it: in an open group,
// NCCL launches 2 at the group's end, and 3 must follow that on the stream). s->enqueued: the NCCL
// group was enqueued (whatever the cross step returns), so the call's other steps, which its
// peers wait for, go on; false when NCCL failed at the call.
template <typename Data>
void crossStep(Comm* c, cudaStream_t stream, HierState* s, Data data) {
  Hierarchy* h = c->hier;
  s->enqueued = false;
  s->statusCopy = lib().cudaMemcpyAsync(h->statusDevice, h->yaliFailure, sizeof(int32_t), cudaMemcpyDefault, stream);
  const cudaError_t atCall = lib().cudaMemcpyAsync(h->statusDevice + 1, h->statusHost + Hierarchy::kAtCall,
                                                   sizeof(int32_t), cudaMemcpyDefault, stream);
  if (s->statusCopy == cudaSuccess) s->statusCopy = atCall;
  ncclResult_t r = callReal<Api::ncclGroupStart>();
  if (r != ncclSuccess) {
    s->cross = r;  // nothing enqueued: NCCL failed at the call
    return;
  }
  r = data();
  if (r == ncclSuccess)
    r = callReal<Api::ncclAllReduce>(h->statusDevice, h->statusDevice, Hierarchy::kStatusWords, ncclInt32, ncclMax,
                                     h->crossComm, stream);
  const ncclResult_t ended = callReal<Api::ncclGroupEnd>();
  if (r == ncclSuccess) r = ended;
  s->cross = r;
  s->enqueued = s->queued = r == ncclSuccess;
}

void crossStatus(Comm* c, const char* function, cudaStream_t stream, HierState* s) {
  if (!s->enqueued) return;
  Hierarchy* h = c->hier;
  cudaError_t copied = s->statusCopy;
  if (copied == cudaSuccess)
    copied = lib().cudaMemcpyAsync(h->statusHost + Hierarchy::kCrossStatus, h->statusDevice,
                                   Hierarchy::kStatusWords * sizeof(int32_t), cudaMemcpyDefault, stream);
  if (copied == cudaSuccess) return;
  h->markFailedAtCall();
  s->cross = shimFail(ncclUnhandledCudaError, "%s: hierarchical path: copying the cross-node status: %s", function,
                      lib().cudaGetErrorString(copied));
}

// Copies every run of blocks between the program's buffer and the scratch layout, on the stream.
ncclResult_t copyBlocks(Comm* c, char* program, char* scratch, size_t blockBytes, bool toScratch,
                        cudaStream_t stream) {
  for (const CopyRun& run : copyRuns(c->hier->layout)) {
    char* p = program + run.program * blockBytes;
    char* s = scratch + run.scratch * blockBytes;
    const cudaError_t err = lib().cudaMemcpyAsync(toScratch ? s : p, toScratch ? p : s, run.blocks * blockBytes,
                                                  cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess)
      return shimFail(ncclUnhandledCudaError, "hierarchical path: cudaMemcpyAsync failed: %s",
                      lib().cudaGetErrorString(err));
  }
  return ncclSuccess;
}

// What a hierarchical call does after its first YALI step (`step`, as YALI was called) returned yr:
// ncclSuccess: goes on; kRunFlat: YALI refused the call's scalars, the same on every rank (the call
// runs flat); kStage: YALI refused this rank's buffers, which the step read from the program
// (`programBuffers`, and the call is not staged yet): the call is staged. Anything else is this
// rank's error, returned after the call's NCCL steps: YALI's, or a refusal of buffers that staging
// would not change (libyali-nccl's scratch, or the staged copies).
Outcome firstYaliStep(Comm* c, const Call& step, yaliResult_t yr, bool programBuffers, HierAttempt* attempt) {
  if (yr == yaliSuccess) return ncclSuccess;
  if (yr != yaliInvalidArgument) return yaliStepFailed(c, step.function, yr);
  const Outcome sorted = sortRefusal(c->hier->yali, step, &attempt->refusal);
  if (sorted.detour != Detour::kStage || (programBuffers && !attempt->staged)) return sorted;
  return shimFail(ncclInvalidArgument, "%s: hierarchical path: YALI refused its step on %s: %s", step.function,
                  attempt->staged ? "the staged copies of this rank's buffers" : "libyali-nccl's scratch",
                  attempt->refusal.c_str());
}

// AllReduce: YALI ReduceScatter of the first L * shard elements into this local rank's shard (in
// the program's recvbuff), NCCL AllReduce of the shard across nodes (in place), YALI AllGather of
// the shards (in place); the tail of count % L elements is one flat NCCL AllReduce. Its part of
// `leg` (Leg says which steps each leg holds).
void hierAllReduce(Comm* c, size_t count, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream, Leg leg,
                   bool afterGroup, HierState* s) {
  Hierarchy* h = c->hier;
  const yaliComm_t y = h->yali;
  const size_t es = bytesOf(1, type);
  const AllReduceSplit split = allReduceSplit(count, h->layout.localSize);
  const char* send = static_cast<const char*>(s->send);
  char* recv = static_cast<char*>(s->recv);
  char* mine = recv + h->localRank * split.shard * es;  // in place for YALI when send == recv
  switch (leg) {
    case Leg::kFirstYali: {
      if (afterGroup || s->failed != ncclSuccess) return;
      const Call step{"ncclAllReduce", {yaliCollReduceScatter, type, op}, split.shard, 0, send, mine, stream};
      const yaliResult_t yr =
          lib().yaliReduceScatter(send, mine, split.shard, toYaliType(type), toYaliOp(op), y, stream);
      s->queued = yr == yaliSuccess;
      const Outcome first = firstYaliStep(c, step, yr, true, &s->attempt);
      if (first.detour != Detour::kNone) return s->end(first);  // nothing of the call enqueued
      s->failed = first.result;
      return;
    }
    case Leg::kCross:
      if (!afterGroup) {
        if (s->failed != ncclSuccess) h->markFailedAtCall();  // this call's cross step sends 1 already
        crossStep(c, stream, s, [&] {
          return callReal<Api::ncclAllReduce>(mine, mine, split.shard, type, op, h->crossComm, stream);
        });
        return;
      }
      crossStatus(c, "ncclAllReduce", stream, s);
      // NCCL failed at the call: its error, as before. A status copy that failed after the group was
      // enqueued is returned at the end: the call's other steps go on (the node peers wait for the
      // AllGather, every rank for the tail).
      if (!s->enqueued && s->failed == ncclSuccess) s->end(s->cross);
      return;
    case Leg::kLastYali:
      // YALI's AllGather only when its ReduceScatter was enqueued (its node peers then wait for it).
      if (!afterGroup && s->failed == ncclSuccess) {
        const yaliResult_t yr = lib().yaliAllGather(mine, recv, split.shard, toYaliType(type), y, stream);
        s->queued = yr == yaliSuccess;
        if (yr != yaliSuccess) s->failed = yaliStepFailed(c, "ncclAllReduce", yr);
      }
      if (afterGroup && s->failed != ncclSuccess) h->markFailedAtCall();  // sticky: once is enough
      return;
    case Leg::kTail: {
      if (afterGroup) {
        s->end(s->failed != ncclSuccess ? s->failed : s->cross != ncclSuccess ? s->cross : s->tail);
        return;
      }
      // The tail is a flat NCCL AllReduce that every rank of every node waits for: enqueued whatever
      // YALI returned.
      if (split.tail == 0) return;
      const size_t head = split.shard * h->layout.localSize * es;
      s->tail = callReal<Api::ncclAllReduce>(send + head, recv + head, split.tail, type, op, c->real, stream);
      s->queued = s->tail == ncclSuccess;
      return;
    }
  }
}

// AllGather: NCCL AllGather across nodes into this local rank's part of the scratch (cross rank =
// node index), YALI AllGather of the parts (in place): the scratch then holds every rank's block at
// scratchSlot; copies put them in rank order. Its part of `leg`.
void hierAllGather(Comm* c, size_t sendcount, ncclDataType_t type, cudaStream_t stream, Leg leg, bool afterGroup,
                   HierState* s) {
  Hierarchy* h = c->hier;
  const size_t block = sendcount * bytesOf(1, type);
  const size_t part = block * h->layout.nodes;
  char* const scratch = s->scratch;
  char* mine = scratch + h->localRank * part;
  switch (leg) {
    case Leg::kFirstYali:
    case Leg::kTail: return;
    case Leg::kCross:
      if (afterGroup) {
        if (s->cross != ncclSuccess) s->end(s->cross);
        return;
      }
      if (scratch == nullptr) {
        // This rank has no scratch (planHier): only the NCCL step, whose cross peers wait for our
        // block, into the program's recvbuff: at its start, where NCCL writes `part` bytes without
        // touching sendbuff, or in place (the cross comm's rank is our node index) where sendbuff
        // lies inside them. The node's YALI step is skipped, so this node's other ranks fail within
        // YALI_TIMEOUT_MS. (Buffers that overlap otherwise, which NCCL does not allow either, still
        // get the step at recvbuff's start: what it writes there is this rank's failed output.)
        const char* send = static_cast<const char*>(s->send);
        char* recv = static_cast<char*>(s->recv);
        const size_t whole = block * h->layout.nodeOf.size();
        char* into = recv;
        const bool overlaps = !(send + block <= recv || send >= recv + part);
        if (overlaps && send >= recv + h->node * block && send - h->node * block + part <= recv + whole)
          into = const_cast<char*>(send) - h->node * block;
        callReal<Api::ncclAllGather>(s->send, into, sendcount, type, h->crossComm, stream);
        s->end(s->failed);
        return;
      }
      s->cross = callReal<Api::ncclAllGather>(s->send, mine, sendcount, type, h->crossComm, stream);
      s->queued = s->cross == ncclSuccess;
      return;
    case Leg::kLastYali: {
      if (afterGroup) {
        // A failure here (or of the group's end) touches only this node's outputs.
        s->end(s->failed != ncclSuccess ? s->failed
                                        : copyBlocks(c, static_cast<char*>(s->recv), scratch, block, false, stream));
        return;
      }
      const size_t count = sendcount * h->layout.nodes;
      const Call step{"ncclAllGather", {yaliCollAllGather, type, ncclSum}, count, 0, mine, scratch, stream};
      const yaliResult_t yr = lib().yaliAllGather(mine, scratch, count, toYaliType(type), h->yali, stream);
      s->queued = yr == yaliSuccess;
      const Outcome first = firstYaliStep(c, step, yr, false, &s->attempt);
      // A detour off the scratch is kRunFlat (firstYaliStep): only the scratch was written.
      if (first.detour != Detour::kNone) return s->end(first);
      s->failed = first.result;
      return;
    }
  }
}

// ReduceScatter: copies put the program's blocks in the scratch layout, YALI ReduceScatter inside
// the node (in place: this local rank's part gets the node's sum of the blocks of its local index,
// in node order), NCCL ReduceScatter of that part across nodes into recvbuff. Its part of `leg`.
void hierReduceScatter(Comm* c, size_t recvcount, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream, Leg leg,
                       bool afterGroup, HierState* s) {
  Hierarchy* h = c->hier;
  const size_t block = recvcount * bytesOf(1, type);
  char* const send = const_cast<char*>(static_cast<const char*>(s->send));
  char* const scratch = s->scratch;
  // Without a scratch (planHier: this rank could not have it), the cross step reads the program's
  // sendbuff, whose first nodes blocks stand in for the node's sums: what it sends means nothing,
  // and its status 1 says so.
  char* mine = scratch != nullptr ? scratch + h->localRank * block * h->layout.nodes : send;
  switch (leg) {
    case Leg::kFirstYali: {
      if (afterGroup || s->failed != ncclSuccess) return;
      // A copy into the scratch that fails at the call counts as a YALI step failing at the call:
      // this rank skips YALI's step (its node peers' step then fails within YALI_TIMEOUT_MS, and
      // their flags reach their cross peers) and still sends the cross step.
      s->failed = copyBlocks(c, send, scratch, block, true, stream);
      if (s->failed != ncclSuccess) return;
      const size_t count = recvcount * h->layout.nodes;
      const Call step{"ncclReduceScatter", {yaliCollReduceScatter, type, op}, count, 0, scratch, mine, stream};
      const yaliResult_t yr =
          lib().yaliReduceScatter(scratch, mine, count, toYaliType(type), toYaliOp(op), h->yali, stream);
      s->queued = yr == yaliSuccess;
      const Outcome first = firstYaliStep(c, step, yr, false, &s->attempt);
      if (first.detour != Detour::kNone) return s->end(first);  // kRunFlat, off the scratch
      s->failed = first.result;
      return;
    }
    case Leg::kCross:
      if (!afterGroup) {
        if (s->failed != ncclSuccess) h->markFailedAtCall();  // this call's cross step sends 1 already
        crossStep(c, stream, s, [&] {
          return callReal<Api::ncclReduceScatter>(mine, s->recv, recvcount, type, op, h->crossComm, stream);
        });
        return;
      }
      crossStatus(c, "ncclReduceScatter", stream, s);
      s->end(s->failed != ncclSuccess ? s->failed : s->cross);
      return;
    case Leg::kLastYali:
    case Leg::kTail: return;
  }
}

// A collective's part of a leg: hierAllReduce, ... with the call's arguments bound.
using HierLegs = std::function<void(Leg, bool, HierState*)>;

// One hierarchical call, leg by leg: begin, then each leg's part inside its group and after it,
// then finish. Outside a group (routeHier) the legs run in turn, without groups (run): the steps in
// the order of the comments above, nothing of another call between them. At the end of a group in
// which one thread drives several GPUs (runLegWise), each leg runs for several calls at once, in
// one group of the leg's library.
// A call that goes flat (planHier decided so, its comm was aborted inside the group, or YALI
// refused its first step for its scalars: kRunFlat) runs `flat` in its next NCCL leg: kCross, or
// kTail for AllGather, whose refusal comes after its cross step; on every rank alike.
// A call whose first step YALI refused for this rank's buffers (kStage, AllReduce only) is staged
// there and then (stageIn; the first step made again on the copies), and copied back at finish
// (stageOut); where the staging fails, its steps go on without YALI's (s.failed), so that the
// ranks of other nodes, waiting in NCCL, get the call's NCCL steps (status 1).
class HierRun {
 public:
  HierRun(Comm* c, const Call& call, HierLegs legs, std::function<ncclResult_t()> flat)
      : c_(c), call_(call), legs_(std::move(legs)), flat_(std::move(flat)) {}

  Comm* comm() const { return c_; }

  // Decides the route (planHier) and orders the call after the scratch's last user; nothing of
  // the call is enqueued yet. An error here (the ordering failed) ends the call, as before.
  void begin() {
    if (c_->hier == nullptr) {  // aborted inside the group: NCCL reports the aborted comm's NULL
      flat_state_ = Flat::kPending;
      return;
    }
    // The route's capture check (stream 0 is the current device's legacy stream) and the steps' own
    // copies and events go to the comm's device. At a group's end one thread plans every GPU's
    // deferred calls, the current device being whichever the program set last: without this, GPU
    // 0's call on stream 0 read GPU 1's legacy stream's capture status (review of 633a7a7, F5).
    DeviceGuard onCommDevice(c_->device);
    bool hier = false;
    char* scratch = nullptr;
    ncclResult_t noScratch = ncclSuccess;
    const ncclResult_t planned = planHier(c_, call_, &hier, &scratch, &noScratch);
    if (planned != ncclSuccess) return s_.end(planned);
    if (!hier) {
      flat_state_ = Flat::kPending;
      return;
    }
    // The scratch and the cross-node status words (crossStep) are the comm's, shared by its calls
    // on every stream: each call is ordered after their last user. Without it, on two streams
    // (FSDP2), one call's copy of its local status into the status word could land between
    // another's NCCL AllReduce of that word and its copy to the host word, which would then read 0
    // after a failure.
    ncclResult_t ordered = scratchContext(call_.function, call_.stream, &context_);
    if (ordered == ncclSuccess)
      ordered = scratchBefore(c_, &c_->hier->scratch, call_.function, call_.stream, context_);
    if (ordered != ncclSuccess) return s_.end(ordered);
    hier_ = true;
    s_.send = call_.send;
    s_.recv = call_.recv;
    s_.scratch = scratch;
    s_.failed = noScratch;  // the steps then send only what the ranks of other nodes wait for
  }

  void leg(Leg leg, bool afterGroup) {
    if (!afterGroup) s_.queued = false;
    if (flat_state_ == Flat::kPending) {
      if (afterGroup || isYaliLeg(leg)) return;
      flatResult_ = flat_();  // every rank runs it (the refusal holds on every rank)
      flat_state_ = Flat::kRan;
      s_.queued = true;
      return;
    }
    if (s_.over || flat_state_ == Flat::kRan) return;
    DeviceGuard onCommDevice(c_->device);
    legs_(leg, afterGroup, &s_);
    if (s_.over && s_.outcome.detour == Detour::kStage) stageFirstStep();
    if (s_.over && s_.outcome.detour == Detour::kRunFlat) {
      if (debugEnabled())
        logRoute(c_, call_.function, bytesOf(call_.count, call_.shape.type), false,
                 ("YALI refused its step: " + s_.attempt.refusal).c_str());
      flat_state_ = Flat::kPending;
    }
  }

  // The group around `leg` failed with r: at its start (`atStart`: nothing of the leg ran, the
  // part after the group still runs), or at its end (what the leg had queued there). Either way,
  // as if that work had failed at the call: a YALI step's failure skips the later YALI steps and
  // sends status 1 in the cross step; the cross step counts as not enqueued; the tail's and a flat
  // call's failure is the call's.
  void legFailed(Leg leg, ncclResult_t r, bool atStart) {
    if (atStart && flat_state_ == Flat::kPending && !isYaliLeg(leg)) {
      flat_state_ = Flat::kRan;
      flatResult_ = r;
      return;
    }
    if (atStart ? s_.over || flat_state_ != Flat::kNone : !s_.queued) return;
    if (flat_state_ == Flat::kRan) {
      flatResult_ = r;
    } else if (isYaliLeg(leg)) {
      if (s_.failed == ncclSuccess) s_.failed = r;
    } else if (leg == Leg::kCross) {
      s_.enqueued = false;
      s_.cross = r;
    } else {
      s_.tail = r;
    }
  }

  // After the last leg: the staged output copied back, the scratch's use noted (whatever the steps
  // returned: what they enqueued stays), the route logged. The call's result.
  ncclResult_t finish() {
    if (flat_state_ == Flat::kPending) {  // no NCCL leg came after the refusal (none does: defensive)
      flatResult_ = flat_();
      flat_state_ = Flat::kRan;
    }
    if (!hier_) return flat_state_ == Flat::kRan ? flatResult_ : s_.outcome.result;
    DeviceGuard onCommDevice(c_->device);
    Outcome r = flat_state_ == Flat::kRan ? Outcome(Detour::kRunFlat) : s_.outcome;
    if (staged_) r = stageOut(c_, call_, staging_, r, stagedWhy_);
    const ncclResult_t noted = scratchUsed(&c_->hier->scratch, call_.function, call_.stream, context_);
    if (flat_state_ == Flat::kRan) return flatResult_;  // even if the note failed
    // No detour is left here: leg() stages a kStage at once, and a kRunFlat call returned above.
    if (r.succeeded())
      logRoute(c_, (std::string(call_.function) + kHierLog).c_str(), bytesOf(call_.count, call_.shape.type), true,
               "");
    return r.succeeded() ? noted : r.result;
  }

  // Outside a group: every leg in turn, no group around any.
  ncclResult_t run() {
    begin();
    for (Leg leg : kLegs) {
      this->leg(leg, false);
      this->leg(leg, true);
    }
    return finish();
  }

 private:
  enum class Flat { kNone, kPending, kRan };

  // YALI refused the first step for this rank's buffers (kStage): the call is staged now and the
  // step made again, on the copies, inside the first leg's group (the copy in goes on the stream at
  // once, before the group launches the step). Where the staging fails before the step, the call
  // goes on without YALI's steps.
  void stageFirstStep() {
    s_.over = false;
    s_.outcome = ncclSuccess;
    s_.attempt.staged = true;
    stagedWhy_ = s_.attempt.refusal;
    // Without flatFallback, stageIn has no detour to take: its outcome is a result.
    s_.failed = stageIn(c_, call_, stagedWhy_, /*flatFallback=*/false, &staging_).result;
    if (s_.failed == ncclSuccess) {
      staged_ = true;
      s_.send = staging_.layout.sendBytes > 0 ? staging_.in : nullptr;
      s_.recv = staging_.layout.recvBytes > 0 ? staging_.out : nullptr;
    }
    s_.queued = false;
    legs_(Leg::kFirstYali, false, &s_);
  }

  Comm* const c_;
  const Call call_;
  const HierLegs legs_;
  const std::function<ncclResult_t()> flat_;
  HierState s_;
  bool hier_ = false;  // begin took the hierarchical path: finish notes the scratch's use
  unsigned long long context_ = 0;
  Flat flat_state_ = Flat::kNone;
  ncclResult_t flatResult_ = ncclSuccess;
  bool staged_ = false;  // stageIn succeeded: finish copies back (stageOut)
  Staging staging_;
  std::string stagedWhy_;
};

// One round of hierarchical calls of one thread on several GPUs (runDeferredCalls: at most one per
// device), leg by leg: each leg's part of every call inside one group of the leg's library (YALI's
// for kFirstYali and kLastYali, NCCL's own for kCross and kTail), in call order, then each call's
// part after the group. Every rank so issues its call's steps in the order a rank driving its GPU
// alone does (the same NCCL calls on the same comms, one call after another), and each GPU's YALI
// step launches with the other GPUs' steps of the node that it waits for. A group that fails at
// its start or end fails that leg's work of every call in it (HierRun::legFailed). The calls'
// results, in order.
std::vector<ncclResult_t> runLegWise(const std::vector<HierRun*>& round) {
  for (HierRun* run : round) {
    info(run->comm()->rank, "hierarchical call in a group of this thread's calls on several GPUs: leg by leg, "
                            "each leg of the GPUs' calls in one group");
    run->begin();
  }
  // Opens (`start`) or closes the group of the leg's library: YALI's for its steps, NCCL's own
  // for the cross steps and tails. A failure as an ncclResult_t.
  auto legGroup = [](Leg leg, bool start) {
    if (!isYaliLeg(leg)) return start ? callReal<Api::ncclGroupStart>() : callReal<Api::ncclGroupEnd>();
    const yaliResult_t y = start ? lib().yaliGroupStart() : lib().yaliGroupEnd();
    if (y == yaliSuccess) return ncclSuccess;
    noteFailure(Failure::kYali);
    info(-1, "%s for a leg of hierarchical calls failed: %s", start ? "yaliGroupStart" : "yaliGroupEnd",
         lib().yaliGetLastError(nullptr));
    return toNcclResult(y);
  };
  for (Leg leg : kLegs) {
    const ncclResult_t started = legGroup(leg, true);
    if (started != ncclSuccess) {
      for (HierRun* run : round) run->legFailed(leg, started, /*atStart=*/true);
    } else {
      for (HierRun* run : round) run->leg(leg, false);
      const ncclResult_t ended = legGroup(leg, false);
      if (ended != ncclSuccess)
        for (HierRun* run : round) run->legFailed(leg, ended, /*atStart=*/false);
    }
    for (HierRun* run : round) run->leg(leg, true);
  }
  std::vector<ncclResult_t> results;
  for (HierRun* run : round) results.push_back(run->finish());
  return results;
}

// A collective of a hierarchical comm: `legs(leg, afterGroup, state)` when planHier says so, else
// `flat()`. Both capture the call's arguments by value: inside a group they outlive the call.
// Inside ncclGroupStart/End (issue: the route depended on the group depth, which NCCL lets differ
// between ranks). The route is decided as outside a group (hierRouteOf: the call's arguments, the
// comm, its capture and agreed scratch), so every rank takes the same one wherever it made the call:
//  - flat: the NCCL call joins NCCL's part of the group now, as any flat call;
//  - hierarchical: the whole call waits for the outermost ncclGroupEnd (deferUntilGroupEnd) and
//    runs there, as outside a group, after both libraries launched the group (runDeferredCalls;
//    leg by leg with the calls on the thread's other GPUs, runLegWise).
//    Its steps cannot join the program's group: each reads the previous one's output, and YALI's
//    group launches before NCCL's, so YALI's AllGather would run before the NCCL step it gathers.
// Why not flat for every call in a group (the other way to make the route rank-independent): that
// needs a property every rank shares, and there is none for "in a group"; turning the hierarchical
// path off for a whole comm would cost every ungrouped call (torch's DDP AllReduce) its speed.
// NCCL itself launches a grouped collective only at the outermost ncclGroupEnd, so a program
// cannot expect it to have started before. What it could observe is the order: the deferred call
// runs after the group's launches, so a later call of the group on the same comm would run before
// it, unlike on a peer that makes both outside a group; hence the comm's later calls of the group
// wait too (deferringCallsOf, and the section on deferred calls above).
template <typename Flat>
ncclResult_t routeHier(Comm* c, const Call& call, HierLegs legs, Flat flat) {
  if (inGroup()) {
    noteGroupStream(c, call.stream);  // joined with the comm's other streams of the group at its end
    HierCall hc{};
    const bool hier = hierRouteOf(c, call, &hc) == HierRoute::kHierarchical;
    if (!hier && !deferringCallsOf(handleOf(c))) return flat();
    // A flat call after a hierarchical one of its comm waits too (deferringCallsOf), flat at the end as
    // decided now. At the end the comm may have been aborted inside the group (its hierarchy kept,
    // its YALI side gone: flat, where NCCL reports the aborted comm's NULL; HierRun::begin) or
    // freed (dropDeferredCalls).
    std::function<ncclResult_t()> run = flat;
    std::shared_ptr<HierRun> legWise;
    if (hier) {
      legWise = std::make_shared<HierRun>(c, call, std::move(legs), flat);
      run = [legWise] { return legWise->run(); };
    }
    DeferredCall d{c, handleOf(c), call.stream, call.function, hier, false, false, std::move(run), flat, legWise};
    d.op = call.shape.op;
    deferUntilGroupEnd(std::move(d));
    return ncclSuccess;
  }
  HierRun run(c, call, std::move(legs), flat);
  return run.run();
}

}  // namespace

// Marked, not erased (runDeferredCallsOf erases them); the comm's places in the group go, so that a
// comm made later in the group at the same address starts afresh.
void dropDeferredCalls(Comm* c) {
  tlsDeferred.hierarchicalOf.erase(handleOf(c));
  for (DeferredCall& d : tlsDeferred.calls) {
    if (d.comm != c || d.dropped) continue;
    info(c->rank, "%s: deferred to the group's end: not run (its comm ended inside the group)", d.function);
    d.dropped = true;
    d.comm = nullptr;
  }
  // The comm's ops went with it (NCCL frees a comm's ops at its destroy): no destroy is left to make.
  auto& held = tlsDeferred.heldOpDestroys;
  const ncclComm_t handle = handleOf(c);
  held.erase(std::remove_if(held.begin(), held.end(), [handle](const auto& h) { return h.first == handle; }),
             held.end());
}

}  // namespace yali::nccl_abi

using namespace yali::nccl_abi;  // NOLINT: the definitions below are the C API, at global scope

// ---- Communicators ----------------------------------------------------------------------------------

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                           int rank) {
  return create(comm, nullptr, nullptr, commKeyOfIds(&commId, sizeof commId), [&](ncclComm_t* real) {
    return callReal<Api::ncclCommInitRank>(real, nranks, commId, rank);
  });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                                 int rank, ncclConfig_t* config) {
  return create(comm, config, nullptr, commKeyOfIds(&commId, sizeof commId), [&](ncclComm_t* real) {
    return callReal<Api::ncclCommInitRankConfig>(real, nranks, commId, rank, config);
  });
}

#ifdef YALI_NCCL_HAS_ncclCommInitRankScalable
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                                   ncclUniqueId* commIds, ncclConfig_t* config) {
  const uint64_t key = commIds != nullptr && nId > 0 ? commKeyOfIds(commIds, sizeof(ncclUniqueId) * nId) : 0;
  return create(newcomm, config, nullptr, key, [&](ncclComm_t* real) {
    return callReal<Api::ncclCommInitRankScalable>(real, nranks, myrank, nId, commIds, config);
  });
}
#endif

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  const ncclResult_t r = callReal<Api::ncclCommInitAll>(comm, ndev, devlist);
  if ((r != ncclSuccess && r != ncclInProgress) || comm == nullptr || ndev <= 0) return r;
  const bool blocking = isBlocking(nullptr, true);
  // A non-blocking one (NCCL_COMM_BLOCKING=0: NCCL's ncclCommInitAll takes no config) returns
  // ncclInProgress from its group's end (init.cc): set up in the background once NCCL made it
  // (adoptClique). Before Session 33's change it was NCCL only, and its ncclInProgress left the
  // program with NCCL's own handles.
  if (!ncclEnvPluginInUse() && (r == ncclSuccess || !blocking)) {
    adoptClique(comm, ndev, devlist, r, blocking);
    return r;
  }
  for (int i = 0; i < ndev; ++i) {  // NCCL only (adopt)
    Comm* c = new Comm;
    c->real = comm[i];
    c->clique = true;  // every rank is here: none answers a set-up (comm.cc, adopt)
    c->blocking = blocking;
    c->sharesResources = sharesResources(nullptr, false);
    adopt(c, r, &comm[i]);
  }
  return r;
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                                        ncclConfig_t* config) {
  Comm* parent = ours(comm);
  if (parent == nullptr) return callReal<Api::ncclCommSplit>(comm, color, key, newcomm, config);
  // A non-blocking parent's split completes in NCCL's background whatever the child's config says:
  // the call returns ncclSuccess with *newcomm NULL, and NCCL's thread writes the child later, while
  // the program polls for it (torch with TORCH_NCCL_USE_COMM_NONBLOCKING=1 polls the parent, then
  // spins on it). Its child goes to a Comm of ours, which a thread of ours hands the program once
  // NCCL wrote it and its set-up ended, the parent in progress until then (create,
  // adoptWhenWritten; until Session 33 the program got NCCL's own handle, NCCL only). A split
  // without a color makes no child: NCCL gets the program's own pointer, blocking parent or not,
  // into which it writes NULL, at once and again when the split's job ends (init.cc,
  // ncclCommInitRankFunc stores the child, NULL here, into *newcomm), which NCCL may run in its
  // background against our verdict on the parent (dropChildless). Never a Comm of ours: one freed
  // because no child came took that late write in freed memory (a ThreadSanitizer run of the host
  // tests, Session 35: heap-use-after-free by the fake NCCL's thread). Wherever NCCL reads its settings through an environment plugin
  // (ncclEnvPluginInUse), NCCL may take the parent for non-blocking where we could not see it: NCCL
  // gets the program's pointer, and the program NCCL's own handle, which every function here passes
  // through untouched (ours() is null for it), as every comm is NCCL only then anyway.
  // A parent still being set up in the background is "in progress" to the program (its
  // ncclCommGetAsyncError says so), and NCCL refuses a split of a comm in progress
  // (ncclCommEnsureReady: ncclInvalidArgument); so do we, rather than run NCCL's split on the real
  // comm beside the set-up's rounds (review, Session 32).
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(parent, "ncclCommSplit"); refused != ncclSuccess)
    return refused;
  // Counted on every rank of the parent, a color or not, so that the children's keys agree.
  const uint64_t childKey = childCommKey(parent->groupKey, parent->childrenMade.fetch_add(1), color);
  if (ncclEnvPluginInUse() || color == NCCL_SPLIT_NOCOLOR)
    return callReal<Api::ncclCommSplit>(parent->real, color, key, newcomm, config);
  return create(
      newcomm, config, parent, childKey,
      [&](ncclComm_t* real) { return callReal<Api::ncclCommSplit>(parent->real, color, key, real, config); },
      /*childExpected=*/true);
}

#ifdef YALI_NCCL_HAS_ncclCommShrink
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                                         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  Comm* parent = ours(comm);
  if (parent == nullptr)
    return callReal<Api::ncclCommShrink>(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  // A parent still being set up: a shrink that aborts its operations stops the set-up first, as an
  // abort does; any other is refused, as NCCL refuses a shrink of a comm in progress (refuseWhileSetUp).
  bool aborting = false;
#ifdef NCCL_SHRINK_ABORT
  aborting = (shrinkFlags & NCCL_SHRINK_ABORT) != 0;
#endif
  if (aborting && !handOverPending(parent))
    cancelSetUp(parent);
  else if (const ncclResult_t refused = refuseInGroupWhileSetUp(parent, "ncclCommShrink"); refused != ncclSuccess)
    return refused;
  waitForSetUp(parent);  // its background set-up or answer, if any (ended, or stopped)
#ifdef NCCL_SHRINK_ABORT
  // NCCL aborts the parent's operations first; so does YALI with its own (the parent is usually
  // broken when a program shrinks it).
  // The splits' aborts run together with the shrink, which aborts the real comm's operations
  // (abortTogether says why).
  std::vector<ncclComm_t> splits;
  if (shrinkFlags & NCCL_SHRINK_ABORT) {
    endHierarchy(parent, true, false, "aborted by ncclCommShrink(NCCL_SHRINK_ABORT)", &splits);
    endYali(parent, true, "aborted by ncclCommShrink(NCCL_SHRINK_ABORT)");
  }
#else
  std::vector<ncclComm_t> splits;
#endif
  return abortTogether(
      splits,
      [&] {
        // A non-blocking parent's shrink completes in NCCL's background: its child is handed over
        // once NCCL wrote it, as a split's (see there); under an environment plugin, NCCL's own handle.
        const uint64_t childKey = childCommKey(parent->groupKey, parent->childrenMade.fetch_add(1), -2);
        if (ncclEnvPluginInUse())
          return callReal<Api::ncclCommShrink>(parent->real, excludeRanksList, excludeRanksCount, newcomm, config,
                                               shrinkFlags);
        return create(
            newcomm, config, parent, childKey,
            [&](ncclComm_t* real) {
              return callReal<Api::ncclCommShrink>(parent->real, excludeRanksList, excludeRanksCount, real, config,
                                                   shrinkFlags);
            },
            true);
      },
      !parent->sharesResources);
}
#endif

#ifdef YALI_NCCL_HAS_ncclCommGrow
// NCCL 2.30: existing ranks pass their comm, new ranks NULL; the grown comm is a new one on all of
// them, set up like any other.
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                                       int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  Comm* parent = ours(comm);
  if (comm != nullptr && parent == nullptr)
    return callReal<Api::ncclCommGrow>(comm, nRanks, uniqueId, rank, newcomm, config);
  if (const ncclResult_t refused = refuseWhileSetUp(parent, "ncclCommGrow"); refused != ncclSuccess) return refused;
  const uint64_t key = uniqueId != nullptr ? commKeyOfIds(uniqueId, sizeof *uniqueId) : 0;
  return create(newcomm, config, parent, key, [&](ncclComm_t* real) {
    return callReal<Api::ncclCommGrow>(parent != nullptr ? parent->real : nullptr, nRanks, uniqueId, rank, real,
                                       config);
  });
}
#endif

// Finalize and Destroy return NCCL's failure, else the first failure to end the comm's other parts
// (endHierarchy, endYali): a YALI destroy that fails says the comm's YALI calls had not finished
// and will do nothing when they run, which the program must learn.
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommFinalize>(comm);
  // NCCL refuses to tear down a comm in progress (abort is the way out of one): so do we while its
  // background set-up runs, which is not stopped (refuseWhileSetUp).
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, "ncclCommFinalize"); refused != ncclSuccess)
    return refused;
  waitForSetUp(c);  // joins an ended background set-up or answer
  c->revokedOrFinalized = true;
  ncclResult_t ended = endHierarchy(c, false, true, "finalized");
  // Finalize flushes the comm's operations; yaliCommDestroy waits for YALI's (this rank's, bounded),
  // and no collective may follow a finalize.
  const ncclResult_t yali = endYali(c, false, "finalized");
  if (ended == ncclSuccess) ended = yali;
  const ncclResult_t r = callReal<Api::ncclCommFinalize>(c->real);
  return r != ncclSuccess ? r : ended;
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommDestroy>(comm);
  // NCCL refuses to tear down a comm in progress (abort is the way out of one): so do we while its
  // background set-up runs, which is not stopped (refuseWhileSetUp).
  if (const ncclResult_t refused = refuseWhileSetUp(c, "ncclCommDestroy"); refused != ncclSuccess) return refused;
  waitForSetUp(c);  // joins an ended background set-up or answer
  ncclResult_t ended = endHierarchy(c, false, false, "destroyed");
  const ncclResult_t yali = endYali(c, false, "destroyed");
  if (ended == ncclSuccess) ended = yali;
  const ncclResult_t r = callReal<Api::ncclCommDestroy>(c->real);
  // The program may abort a comm whose destroy failed: the Comm is kept. NCCL refuses to destroy a
  // comm that failed and keeps it, so c->real stays for that abort; when NCCL's is gone, later calls
  // reach NCCL with a NULL comm, as after an abort (which also aborts a split NCCL did not destroy).
  if (r != ncclSuccess) return r;
  if (ended != ncclSuccess) {
    c->real = nullptr;
    return ended;
  }
  freeComm(c);
  return ncclSuccess;
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommAbort>(comm);
  // Its background answer to the set-up, if any, stops waiting (a watchdog's abort of a comm whose
  // init never completed must not wait for YALI_TIMEOUT_MS first), then is joined.
  cancelSetUp(c);
  waitForSetUp(c);
  std::vector<ncclComm_t> splits;
  endHierarchy(c, true, false, "aborted", &splits);
  endYali(c, true, "aborted");
  ncclComm_t real = c->real;
  // Abort is the call another thread makes while one is stuck in this comm (a watchdog): the Comm
  // is kept, not freed, so that a call racing with it reads our memory, and a later call with the
  // handle reaches NCCL with a NULL comm and gets its error. A few dozen bytes per aborted comm, and
  // its scratch buffers and status words, which an abort cannot free safely (comm.cc,
  // releaseMemory); a destroy of the handle frees them all.
  c->real = nullptr;
  const ncclResult_t r = abortTogether(splits, [real] { return callReal<Api::ncclCommAbort>(real); }, !c->sharesResources);
  finishHandOver(c);  // children whose hand-over the abort stopped (NCCL's abort joined their jobs)
  return r;
}

#ifdef YALI_NCCL_HAS_ncclCommRevoke
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommRevoke>(comm, revokeFlags);
  // Flags NCCL refuses (NCCL_REVOKE_DEFAULT, 0, is the only one) stop nothing: on a comm still being
  // set up, refused here, before the set-up that its siblings share is stopped.
  if (revokeFlags != 0)
    if (const ncclResult_t refused = refuseWhileSetUp(c, "ncclCommRevoke"); refused != ncclSuccess) return refused;
  // A second revoke, or one after a finalize, NCCL refuses without joining anything: refused here
  // before it stops a child's hand-over that NCCL would have let finish.
  if (c->revokedOrFinalized) return callReal<Api::ncclCommRevoke>(c->real, revokeFlags);
  cancelSetUp(c);  // as abort
  waitForSetUp(c);
  // Revoke stops the operations in flight; YALI's abort does (peers learn of it), and the comm
  // serves only tear-down, split and shrink afterwards.
  std::vector<ncclComm_t> splits;
  endHierarchy(c, true, false, "revoked", &splits);
  endYali(c, true, "revoked");
  const ncclResult_t r = abortTogether(
      splits, [&] { return callReal<Api::ncclCommRevoke>(c->real, revokeFlags); }, !c->sharesResources);
  // NCCL marks the comm revoked before any step of its revoke that can fail (init.cc), and refuses
  // another revoke from then on, whatever this one returned (a review of a5d1ad9).
  c->revokedOrFinalized = true;
  finishHandOver(c);  // children whose hand-over the revoke stopped
  return r;
}
#endif

// ---- Reduction ops -----------------------------------------------------------------------------------

// NCCL lets a program destroy an op as soon as the last call given it returns (nccl.h), and torch
// does so right after each call, inside its coalescing groups too. A call this thread's open group
// deferred to its end (runDeferredCalls) is made there, so the destroy of its op waits for it
// (DeferredGroup::heldOpDestroys): made now, NCCL would refuse the op at the end (this rank skips the
// call, its peers wait), or, its freed handle handed out again by a later ncclRedOpCreate* in the
// group, run the call with that op's scalar (review of eadc0e9-2d80420, Session 30).
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (inGroup()) {
    for (const DeferredCall& d : tlsDeferred.calls) {
      if (d.dropped || d.handle != comm || d.op != op) continue;
      tlsDeferred.heldOpDestroys.push_back({comm, op});
      return ncclSuccess;
    }
  }
  if (const ncclResult_t refused = refuseWhileSetUp(ours(comm), "ncclRedOpDestroy"); refused != ncclSuccess)
    return refused;
  return callReal<Api::ncclRedOpDestroy>(op, realArg(comm));
}

// ---- Errors -----------------------------------------------------------------------------------------

namespace {

// Whether NCCL reported an asynchronous error (or ncclInProgress: a non-blocking comm's init still
// running). An error is then the last failure, for ncclGetLastError, as YALI's is below.
bool ncclReported(ncclResult_t async) {
  if (async != ncclSuccess && async != ncclInProgress) noteFailure(Failure::kNccl);
  return async != ncclSuccess;
}

}  // namespace

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommGetAsyncError>(comm, asyncError);
  // The comm's set-up (or answer to its peers') still running in the background (comm.h,
  // Comm::background: NCCL's init under way, or the set-up's rounds), during which the program must
  // not use the comm yet. NCCL's comm is not asked meanwhile: that thread polls it, and NCCL's
  // ncclCommGetAsyncError must not run on two threads at once (init.cc: the call that finds the
  // comm's init or group done completes its group job, which frees it; review, Session 32); nor is
  // the set-up's error final before it ends (a timed-out id round's is withdrawn once its agreement
  // completes).
  if (asyncError != nullptr && c->setUpPending.load(std::memory_order_acquire)) {
    *asyncError = ncclInProgress;
    return ncclSuccess;
  }
  const ncclResult_t r = callReal<Api::ncclCommGetAsyncError>(c->real, asyncError);
  if (r != ncclSuccess || asyncError == nullptr) return r;
  // The set-up: a round that timed out (the comm has an unmatched collective queued: to be
  // aborted). Before a group-end failure: it came first, and NCCL too reports its first error.
  // Also over NCCL's ncclInProgress (NCCL's own errors still come first): the set-up runs only once
  // NCCL's init completed (a blocking comm's creating call returned; answerNoWhenReady waits for
  // it), so NCCL's ncclInProgress after it is a group left in NCCL's background, the set-up's own
  // one that timed out among them (waitWhileInProgress), which may never end: a program polling for
  // the end of ncclInProgress would poll for ever. Before the set-up gave up (setUpError unset: NCCL's
  // init still running, or the set-up still waiting) ncclInProgress is returned, as NCCL says.
  const int setUp = c->setUpError.load();
  if (setUp != ncclSuccess && (*asyncError == ncclSuccess || *asyncError == ncclInProgress)) {
    noteFailure(Failure::kNccl);
    *asyncError = static_cast<ncclResult_t>(setUp);
    return r;
  }
  if (ncclReported(*asyncError)) return r;
  // A call of this comm that failed at the end of a group NCCL ended in the background.
  std::string failedAtGroupEnd;
  const ncclResult_t groupEnd = asyncFailureOf(c, &failedAtGroupEnd);
  if (groupEnd != ncclSuccess) {
    *asyncError = shimFail(groupEnd, "at the end of a group that NCCL ended in the background (ncclGroupEnd returned "
                                     "ncclInProgress): %s",
                           failedAtGroupEnd.c_str());
    return r;
  }
  // A hierarchical comm: its two NCCL splits, then its node's YALI comm.
  Hierarchy* h = c->hier;
  for (ncclComm_t split : {h != nullptr ? h->nodeComm : nullptr, h != nullptr ? h->crossComm : nullptr}) {
    if (split == nullptr) continue;
    const ncclResult_t got = callReal<Api::ncclCommGetAsyncError>(split, asyncError);
    if (got != ncclSuccess) return got;
    if (ncclReported(*asyncError)) return ncclSuccess;
  }
  const yaliComm_t y = h != nullptr ? h->yali : c->yali;
  if (y != nullptr) {
    yaliResult_t e = yaliSuccess;
    const yaliResult_t got = lib().yaliCommGetAsyncError(y, &e);
    if (got != yaliSuccess) e = got;
    if (e != yaliSuccess) {
      noteFailure(Failure::kYali);
      *asyncError = toNcclResult(e);
      return r;
    }
  }
  // Last, the hierarchical path's cross-node status (crossStep): a YALI step failed on some node,
  // so what this rank's hierarchical AllReduce and ReduceScatter got from there is not valid. A
  // read of host-mapped memory that the device writes (after an abort too; null once destroyed).
  const int32_t* status = h != nullptr ? h->statusHost : nullptr;
  bool failedSomewhere = false;
  for (int i = 0; status != nullptr && i < Hierarchy::kStatusWords; ++i)
    failedSomewhere |= __atomic_load_n(status + Hierarchy::kCrossStatus + i, __ATOMIC_ACQUIRE) != 0;
  if (failedSomewhere) {
    *asyncError = shimFail(ncclRemoteError,
                           "a YALI step of the hierarchical path (YALI in the node, NCCL across nodes) failed on "
                           "some node of this communicator (rank %d learned it from its cross-node status): "
                           "its hierarchical AllReduce and ReduceScatter results are invalid from that call on",
                           c->rank);
  }
  return r;
}

extern "C" YALI_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  switch (lastFailure()) {
    case Failure::kShim: return shimLastError();
    case Failure::kYali: {
      // The comm's own YALI comm first (its node's on a hierarchical comm), else this thread's.
      Comm* c = ours(comm);
      if (c != nullptr && c->setUpPending.load(std::memory_order_acquire)) c = nullptr;  // still being set up
      const yaliComm_t y = c == nullptr ? nullptr : c->hier != nullptr ? c->hier->yali : c->yali;
      const char* m = y != nullptr ? lib().yaliGetLastError(y) : "";
      if (m == nullptr || m[0] == '\0') m = lib().yaliGetLastError(nullptr);
      if (m != nullptr && m[0] != '\0') return m;
      break;
    }
    default: break;
  }
  return callReal<Api::ncclGetLastError>(realComm(comm));
}

// ---- Groups -----------------------------------------------------------------------------------------

// YALI's group calls are made whenever libyali could be opened (yali_lib.h: opened here at the
// latest, and the outcome never changes), so its groups nest exactly as NCCL's.
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  const YaliLib* y = yaliLib();
  if (y != nullptr) {
    const yaliResult_t r = y->yaliGroupStart();
    if (r != yaliSuccess) {
      noteFailure(Failure::kYali);
      return toNcclResult(r);
    }
  }
  const ncclResult_t r = callReal<Api::ncclGroupStart>();
  if (r != ncclSuccess) {
    if (y != nullptr) y->yaliGroupEnd();  // nothing was queued in it
    return r;
  }
  enterGroup();
  return ncclSuccess;
}

namespace {

// ncclGroupEnd and ncclGroupSimulateEnd: YALI ends its part of the group first, then NCCL ends its
// own; both always run, so that both libraries' groups stay balanced. ncclGroupEnd launches YALI's
// part (yaliGroupEnd); ncclGroupSimulateEnd drops it (yaliGroupSimulateEnd), as NCCL drops the
// tasks of a simulated group, so that the program may issue the same group for real afterwards
// (launched at the simulation too, an in-place sum came out doubled). YALI's part is left out of
// NCCL's estimate. Only the outermost end decides, in both libraries.
//
// The calls staged in the group (stageInGroup) are finished by leaveGroup, after both ends: their
// copies back go on their streams behind yaliGroupEnd's launches there. They are copied back
// wherever YALI's part was launched (not simulated, yaliGroupEnd succeeded), whatever NCCL's end
// returned: the staged kernels then run, their peers get their results, and so must this rank's
// output (an NCCL failure on another comm of the group left it stale before: a review's finding,
// Session 28). A staged call's failure at the end (a capture begun meanwhile: ncclInvalidUsage) is
// returned where both ends succeeded.
// NCCL's end returning ncclInProgress (a non-blocking comm in the group: NCCL ends the group in the
// background) is returned as it is: the program then polls the group's comms until they leave that
// state, and may stop at an error. A staged or deferred call's failure at the end goes to its comm
// instead (noteAsyncFailure), where that poll finds it. (A review's finding B, Session 28: the
// staged call's failure was returned in place of ncclInProgress.)
//
// A call refused at the call inside the group (routePointToPoint: ncclInvalidUsage) fails the whole
// group at its outermost end, as NCCL's group does when one of its calls failed (group.cc: the
// thread's ncclGroupError ends the group with that error, its tasks dropped, nothing launched):
// YALI's part is dropped (yaliGroupSimulateEnd), NCCL's is made to fail as it would have (one call
// NCCL refuses in it, on a NULL comm: enqueue.cc's CommCheck sets the group's error), the staged
// and deferred calls are not made, and the end returns the refusal. (Review, Session 30: the
// group's other calls launched and its end returned ncclSuccess, where NCCL fails it whole.)
template <typename EndReal>
ncclResult_t endGroup(bool simulate, EndReal endReal) {
  const YaliLib* lib = yaliLib();
  const ncclResult_t refusal = atOutermostGroupEnd() ? tlsDeferred.refusal : ncclSuccess;
  const bool drop = simulate || refusal != ncclSuccess;
  if (refusal != ncclSuccess) {
    info(-1, "the group fails at its end: a call in it was refused (its error was returned at the call)");
    callReal<Api::ncclAllReduce>(nullptr, nullptr, 0, ncclInt8, ncclSum, nullptr, nullptr);
  }
  // Each comm's streams of the group, joined before and after its work as NCCL joins them
  // (group_streams.cc); taken here, since the deferred calls below may make groups of their own.
  const std::vector<GroupStream> streams = atOutermostGroupEnd() ? takeGroupStreams() : std::vector<GroupStream>{};
  if (!drop) joinGroupStreams(streams);
  const yaliResult_t y = lib == nullptr ? yaliSuccess : drop ? lib->yaliGroupSimulateEnd() : lib->yaliGroupEnd();
  const ncclResult_t r = endReal();
  const bool launched = !drop && y == yaliSuccess;
  const bool inProgress = r == ncclInProgress;
  const ncclResult_t staged = leaveGroup(r == ncclSuccess, launched, inProgress);
  // The group's hierarchical calls and the calls made after the first of them (routeHier,
  // deferringCallsOf), at the outermost end, behind its launches, comm by comm (runDeferredCalls).
  const ncclResult_t deferred = inGroup() ? ncclSuccess : runDeferredCalls(!drop, inProgress);
  if (!drop) joinGroupStreams(streams);
  if (refusal != ncclSuccess) return refusal;
  if (y != yaliSuccess) {
    noteFailure(Failure::kYali);
    info(-1, "%s failed: %s", simulate ? "yaliGroupSimulateEnd" : "yaliGroupEnd", lib->yaliGetLastError(nullptr));
    return toNcclResult(y);
  }
  if (r != ncclSuccess) return r;  // ncclInProgress included: the failures went to their comms
  if (staged != ncclSuccess) return staged;
  return deferred;
}

}  // namespace

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  return endGroup(false, [] { return callReal<Api::ncclGroupEnd>(); });
}

#ifdef YALI_NCCL_HAS_ncclGroupSimulateEnd
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return endGroup(true, [&] { return callReal<Api::ncclGroupSimulateEnd>(simInfo); });
}
#endif

// ---- Registration -----------------------------------------------------------------------------------

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                                           void** handle) {
  Comm* c = ours(comm);
  if (c == nullptr) return callReal<Api::ncclCommRegister>(comm, buff, size, handle);
  if (const ncclResult_t refused = refuseWhileSetUp(c, "ncclCommRegister"); refused != ncclSuccess) return refused;
  return registerBuffer(c, buff, size, handle);
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  Comm* c = ours(comm);
  if (const ncclResult_t refused = refuseWhileSetUp(c, "ncclCommDeregister"); refused != ncclSuccess) return refused;
  Registration* reg = c != nullptr ? ourRegistration(handle) : nullptr;
  if (reg == nullptr) return callReal<Api::ncclCommDeregister>(realComm(comm), handle);
  // A handle of another comm: NCCL refuses a handle it cannot find among the comm's registrations
  // (ncclInvalidUsage) and frees nothing, and so do we. The handle stays its owner's, whose
  // deregistration or destroy frees it (once).
  if (reg->comm != c)
    return shimFail(ncclInvalidUsage,
                    "ncclCommDeregister: handle=%p was registered with another communicator (%p, rank %d), not "
                    "with comm=%p (rank %d)",
                    handle, static_cast<void*>(reg->comm), reg->comm->rank, static_cast<void*>(c), c->rank);
  return deregisterBuffer(c, reg);
}

// ---- Collectives ------------------------------------------------------------------------------------

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                        cudaStream_t stream) {
  const Call call{"ncclAllReduce", {yaliCollAllReduce, datatype, op}, count, 0, sendbuff, recvbuff, stream};
  Comm* c = ours(comm);
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, call.function); refused != ncclSuccess) return refused;
  if (c != nullptr && c->hier != nullptr)
    return routeHier(
        c, call,
        [=](Leg leg, bool afterGroup, HierState* s) {
          hierAllReduce(c, count, datatype, op, stream, leg, afterGroup, s);
        },
        [=] { return callReal<Api::ncclAllReduce>(sendbuff, recvbuff, count, datatype, op, c->real, stream); });
  return routeCall(
      call, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliAllReduce(send, recv, count, toYaliType(datatype), toYaliOp(op), y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclAllReduce>(sendbuff, recvbuff, count, datatype, op, real, stream);
      });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                            ncclDataType_t datatype, ncclRedOp_t op,
                                                            ncclComm_t comm, cudaStream_t stream) {
  const Call call{"ncclReduceScatter", {yaliCollReduceScatter, datatype, op}, recvcount, 0, sendbuff, recvbuff, stream};
  Comm* c = ours(comm);
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, call.function); refused != ncclSuccess) return refused;
  if (c != nullptr && c->hier != nullptr)
    return routeHier(
        c, call,
        [=](Leg leg, bool afterGroup, HierState* s) {
          hierReduceScatter(c, recvcount, datatype, op, stream, leg, afterGroup, s);
        },
        [=] {
          return callReal<Api::ncclReduceScatter>(sendbuff, recvbuff, recvcount, datatype, op, c->real, stream);
        });
  return routeCall(
      call, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliReduceScatter(send, recv, recvcount, toYaliType(datatype), toYaliOp(op), y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclReduceScatter>(sendbuff, recvbuff, recvcount, datatype, op, real, stream);
      });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                        ncclDataType_t datatype, ncclComm_t comm,
                                                        cudaStream_t stream) {
  const Call call{"ncclAllGather", {yaliCollAllGather, datatype, ncclSum}, sendcount, 0, sendbuff, recvbuff, stream};
  Comm* c = ours(comm);
  if (const ncclResult_t refused = refuseInGroupWhileSetUp(c, call.function); refused != ncclSuccess) return refused;
  if (c != nullptr && c->hier != nullptr)
    return routeHier(
        c, call,
        [=](Leg leg, bool afterGroup, HierState* s) {
          hierAllGather(c, sendcount, datatype, stream, leg, afterGroup, s);
        },
        [=] { return callReal<Api::ncclAllGather>(sendbuff, recvbuff, sendcount, datatype, c->real, stream); });
  return routeCall(
      call, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliAllGather(send, recv, sendcount, toYaliType(datatype), y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclAllGather>(sendbuff, recvbuff, sendcount, datatype, real, stream);
      });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                                        cudaStream_t stream) {
  return routeCall(
      {"ncclBroadcast", {yaliCollBroadcast, datatype, ncclSum}, count, root, sendbuff, recvbuff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliBroadcast(send, recv, count, toYaliType(datatype), root, y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclBroadcast>(sendbuff, recvbuff, count, datatype, root, real, stream);
      });
}

// YALI's side is yaliBroadcast in place (what yaliBcast is), so that a staged call, whose input and
// output are two copies, takes the same entry point.
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                                    ncclComm_t comm, cudaStream_t stream) {
  return routeCall(
      {"ncclBcast", {yaliCollBroadcast, datatype, ncclSum}, count, root, buff, buff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliBroadcast(send, recv, count, toYaliType(datatype), root, y, stream);
      },
      [=](ncclComm_t real) { return callReal<Api::ncclBcast>(buff, count, datatype, root, real, stream); });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                                     ncclComm_t comm, cudaStream_t stream) {
  return routeCall(
      {"ncclReduce", {yaliCollReduce, datatype, op}, count, root, sendbuff, recvbuff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliReduce(send, recv, count, toYaliType(datatype), toYaliOp(op), root, y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclReduce>(sendbuff, recvbuff, count, datatype, op, root, real, stream);
      });
}

#ifdef YALI_NCCL_HAS_ncclAlltoAll
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                                       ncclDataType_t datatype, ncclComm_t comm,
                                                       cudaStream_t stream) {
  return routeCall(
      {"ncclAlltoAll", {yaliCollAlltoAll, datatype, ncclSum}, count, 0, sendbuff, recvbuff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliAlltoAll(send, recv, count, toYaliType(datatype), y, stream);
      },
      [=](ncclComm_t real) { return callReal<Api::ncclAlltoAll>(sendbuff, recvbuff, count, datatype, real, stream); });
}
#endif

#ifdef YALI_NCCL_HAS_ncclGather
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                                     cudaStream_t stream) {
  return routeCall(
      {"ncclGather", {yaliCollGather, datatype, ncclSum}, count, root, sendbuff, recvbuff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliGather(send, recv, count, toYaliType(datatype), root, y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclGather>(sendbuff, recvbuff, count, datatype, root, real, stream);
      });
}
#endif

#ifdef YALI_NCCL_HAS_ncclScatter
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                                      cudaStream_t stream) {
  return routeCall(
      {"ncclScatter", {yaliCollScatter, datatype, ncclSum}, count, root, sendbuff, recvbuff, stream}, comm,
      [=](yaliComm_t y, const void* send, void* recv) {
        return lib().yaliScatter(send, recv, count, toYaliType(datatype), root, y, stream);
      },
      [=](ncclComm_t real) {
        return callReal<Api::ncclScatter>(sendbuff, recvbuff, count, datatype, root, real, stream);
      });
}
#endif

// ---- Point-to-point -----------------------------------------------------------------------------------

// NCCL's, with the real comm; inside a group that holds a hierarchical call, placed where its group
// and its order both hold, or refused (routePointToPoint).
extern "C" YALI_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                                   ncclComm_t comm, cudaStream_t stream) {
  return routePointToPoint("ncclSend", comm, stream, [=] {
    return routeSendRecv(
        "ncclSend", comm, datatype, count, peer,
        [=](yaliComm_t y) { return lib().yaliSend(sendbuff, count, toYaliType(datatype), peer, y, stream); },
        [=](ncclComm_t real) { return callReal<Api::ncclSend>(sendbuff, count, datatype, peer, real, stream); });
  });
}

extern "C" YALI_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                                   ncclComm_t comm, cudaStream_t stream) {
  return routePointToPoint("ncclRecv", comm, stream, [=] {
    return routeSendRecv(
        "ncclRecv", comm, datatype, count, peer,
        [=](yaliComm_t y) { return lib().yaliRecv(recvbuff, count, toYaliType(datatype), peer, y, stream); },
        [=](ncclComm_t real) { return callReal<Api::ncclRecv>(recvbuff, count, datatype, peer, real, stream); });
  });
}
