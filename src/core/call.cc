#include "core/call.h"

#include <string.h>

#include <string>

#include "collectives/registry.h"
#include "core/comm.h"
#include "core/comm_access.h"
#include "core/enqueue.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/pattern.h"
#include "core/registration.h"

namespace yali {
namespace {

// Whether some row of `c` that the selector may choose needs a registered buffer (`flag`: the
// output, needsRegisteredRecv, or the input, needsRegisteredSend); only then does the call look the
// buffer up.
bool mayUseRegistered(const yaliComm* comm, Collective c, bool AlgorithmDesc::*flag) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].collective == c && rows[i].*flag && comm->selector.mayChoose(rows[i].id)) return true;
  return false;
}

// A call's fields folded into 32 bits (FNV-1a), the handshakes' tags.
template <size_t N>
uint32_t tagOf(const uint64_t (&fields)[N]) {
  const uint64_t h = fnv1a(fields, sizeof(fields));
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// The tag that every rank's kernel compares with its peers' at entry when it touches their
// registered outputs (block_ops.cuh: enterWithTag): the algorithm, the call, and the registration
// (and, for twoshot_direct, the offset) of the output, folded into 32 bits (FNV-1a).
// The direct exchanges tell each other their offsets at entry (exchange.cuh), so theirs leaves the
// offset out; twoshot_direct writes at its own offset into every peer's output, so the offsets must
// agree.
uint32_t registeredTag(Algo algo, const CollCall& c, const RegisteredSpan& recv) {
  const bool offsetsAgree = algorithm(algo).family == Family::kTwoshot;
  const uint64_t fields[] = {static_cast<uint64_t>(algo), static_cast<uint64_t>(c.collective), c.count,
                             static_cast<uint64_t>(c.datatype), static_cast<uint64_t>(c.op),
                             static_cast<uint64_t>(c.root), recv.registration->id,
                             offsetsAgree ? recv.offset : ~0ull};
  return tagOf(fields);
}

// Step 1 and 2 of call.h, shared by submitCall and describeCall. Fills the sizes.
struct Sizes {
  size_t elem = 0;
  size_t piece = 0;     // bytes
  size_t sendBytes = 0; // what this rank reads from sendbuff (0: unused)
  size_t recvBytes = 0; // what it writes into recvbuff (0: unused)
};

// yali.h's names of a call's count and buffer arguments, for its messages: yaliReduceScatter's
// count is recvcount, yaliAllGather's sendcount; yaliBcast has one buffer, buff. By the entry
// point's name, not the collective: yaliAlgoInfo describes a ReduceScatter with its own `count`.
const char* countArgName(const CollCall& c) {
  if (strcmp(c.name, "yaliReduceScatter") == 0) return "recvcount";
  if (strcmp(c.name, "yaliAllGather") == 0) return "sendcount";
  return "count";
}
const char* bufferArgName(const CollCall& c, bool send) {
  if (strcmp(c.name, "yaliBcast") == 0) return "buff";
  return send ? "sendbuff" : "recvbuff";
}

yaliResult_t checkScalars(yaliComm* comm, const CollCall& c, Sizes* s) {
  const CollectiveShape shape = collectiveShape(c.collective);
  yaliResult_t r = checkDataType(comm, c.datatype, c.name);
  if (r != yaliSuccess) return r;
  const DataType dtype = static_cast<DataType>(c.datatype);
  if (shape.reduces) {
    if (c.op < 0 || c.op >= kNumRedOps)
      return fail(yaliInvalidArgument, comm, "%s: op=%d is not a yaliRedOp_t (sum, prod, max, min, avg)", c.name, c.op);
    if (!opSupports(static_cast<RedOp>(c.op), dtype))
      return fail(yaliInvalidArgument, comm, "%s: op=avg is for floating types only, datatype=%d is %s", c.name,
                  c.datatype, dataTypeName(dtype));
  }
  if (shape.rooted && (c.root < 0 || c.root >= comm->nranks))
    return fail(yaliInvalidArgument, comm, "%s: root=%d is out of range [0, nranks-1=%d]", c.name, c.root,
                comm->nranks - 1);
  s->elem = dataTypeSize(dtype);
  const size_t n = static_cast<size_t>(comm->nranks);
  if (c.count > SIZE_MAX / s->elem / n)
    return fail(yaliInvalidArgument, comm,
                "%s: %s=%zu overflows a byte size (x %zu-byte elements x nranks=%zu: the window's pieces)", c.name,
                countArgName(c), c.count, s->elem, n);
  s->piece = c.count * s->elem;  // every collective's count is per piece (pattern.h)
  const Extents e = extentsOf(c.collective, comm->rank, c.root, comm->nranks);
  s->sendBytes = e.sendPieces * s->piece;
  s->recvBytes = e.recvPieces * s->piece;
  return yaliSuccess;
}

// The output's registration on this rank, for the algorithms that write into registered outputs.
RegisteredSpan registeredOutput(yaliComm* comm, const CollCall& c, const Sizes& s, uint64_t recvId) {
  if (comm->registrations.live.empty() || c.recv == nullptr || s.recvBytes == 0 ||
      !mayUseRegistered(comm, c.collective, &AlgorithmDesc::needsRegisteredRecv))
    return RegisteredSpan();
  return findRegistered(comm, c.recv, s.recvBytes, recvId);
}

// What the selector is asked about: AllReduce's message, every other collective's piece.
size_t selectorBytes(const Sizes& s) { return s.piece; }

// The input's registration, for the algorithms that read every peer's input: the copy engines
// (copy_engine.h) and the pull exchange (exchange.cuh: exchangePull). For the copy engines, `ref`
// is the offset within it that every rank's call must share (in place in the slot layout,
// sendbuff == recvbuff + rank * count: AllGather, and Gather as nccl-tests lays it out on every
// rank: the output's, the input being our block of it), and `copyEngines` says whether they may run
// (not inside a stream capture, nor where the driver lacks the memory operations, nor where the
// in-place reference would wrap); the pull exchange tells its peers its own offset (span.offset).
// A rank that reads nothing of its own input (Broadcast and Scatter receivers) still passes one
// laid out like the root's: it is looked up with the root's extent.
struct SendRegistration {
  RegisteredSpan span;
  size_t ref = 0;
  bool inPlaceSlot = false;  // sendbuff == recvbuff + rank * count (AllGather, Gather)
  bool copyEngines = false;
};
SendRegistration registeredInput(yaliComm* comm, const CollCall& c, const Sizes& s, uint64_t sendId, bool haveId) {
  SendRegistration out;
  if (comm->registrations.live.empty() ||
      !mayUseRegistered(comm, c.collective, &AlgorithmDesc::needsRegisteredSend) || c.send == nullptr)
    return out;
  const int n = comm->nranks;
  size_t bytes = s.sendBytes;
  if (bytes == 0) bytes = extentsOf(c.collective, c.root, c.root, n).sendPieces * s.piece;
  if (bytes == 0) return out;
  if (!haveId) {
    AllocationInfo info;
    std::string ignored;
    if (!queryAllocation(c.send, &info, &ignored)) return out;
    sendId = info.bufferId;
  }
  // A watched failure word needs a kernel to read it (yaliCommWatchFailureWord): no copy engines.
  out.copyEngines = comm->copyEngineOk && comm->failureWatch == nullptr;
  if (c.stream != nullptr && out.copyEngines) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c.stream, &capture) != cudaSuccess) {
      cudaGetLastError();
      out.copyEngines = false;
    } else if (capture != cudaStreamCaptureStatusNone) {
      out.copyEngines = false;
    }
  }
  out.span = findRegistered(comm, c.send, bytes, sendId);
  if (out.span.registration == nullptr) return out;
  const size_t mine = static_cast<size_t>(comm->rank) * s.piece;
  out.inPlaceSlot = (c.collective == Collective::kAllGather || c.collective == Collective::kGather) &&
                    c.recv != nullptr && static_cast<const char*>(c.send) == static_cast<const char*>(c.recv) + mine;
  // In place, the output starts `mine` bytes before the input: inside the registration only when
  // the input lies at least that far into it (else the reference would wrap: the path without a
  // registered input then).
  if (out.inPlaceSlot && out.span.offset < mine) {
    out.copyEngines = false;
    return out;
  }
  out.ref = out.inPlaceSlot ? out.span.offset - mine : out.span.offset;
  return out;
}

// The copy-engine handshake's value (copy_engine.h): the call and where every rank's input lies;
// never 0 (the words' idle value).
uint32_t copyEngineTag(Algo algo, const CollCall& c, const SendRegistration& in) {
  const uint64_t fields[] = {static_cast<uint64_t>(algo), static_cast<uint64_t>(c.collective), c.count,
                             static_cast<uint64_t>(c.datatype), static_cast<uint64_t>(c.root),
                             in.span.registration->id, in.ref, in.inPlaceSlot ? 1ull : 0ull};
  const uint32_t tag = tagOf(fields);
  return tag == 0 ? 1 : tag;
}

}  // namespace

bool rangesOverlap(uint64_t a, uint64_t aLen, uint64_t b, uint64_t bLen) {
  return aLen > 0 && bLen > 0 && (a >= b ? a - b < bLen : b - a < aLen);
}

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  return a != nullptr && b != nullptr &&
         rangesOverlap(reinterpret_cast<uint64_t>(a), aBytes, reinterpret_cast<uint64_t>(b), bBytes);
}

yaliResult_t submitCall(yaliComm_t handle, const CollCall& c) {
  LockedComm locked(handle, c.name);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  Sizes s;
  yaliResult_t r = checkScalars(comm, c, &s);
  if (r != yaliSuccess) return r;
  r = checkAsync(comm, c.name);
  if (r != yaliSuccess) return r;
  if (c.count == 0) return yaliSuccess;
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", c.name, comm->device);
  AllocationInfo sendInfo, recvInfo;
  if (s.sendBytes > 0) {
    r = checkBuffer(comm, c.send, bufferArgName(c, true), s.elem, s.sendBytes, c.name, &sendInfo);
    if (r != yaliSuccess) return r;
  }
  if (s.recvBytes > 0) {
    // In place at the input's address: CUDA's answer for the input is the output's too.
    if (s.sendBytes > 0 && c.recv == c.send) {
      recvInfo = sendInfo;
      r = checkQueriedBuffer(comm, c.recv, bufferArgName(c, false), s.elem, s.recvBytes, c.name, recvInfo);
    } else {
      r = checkBuffer(comm, c.recv, bufferArgName(c, false), s.elem, s.recvBytes, c.name, &recvInfo);
    }
    if (r != yaliSuccess) return r;
  }
  const char* send = static_cast<const char*>(c.send);
  const char* recv = static_cast<const char*>(c.recv);
  if (overlaps(send, s.sendBytes, recv, s.recvBytes) && !inPlaceLayout(c.collective, comm->rank, c.root, s.piece, send, recv))
    return fail(yaliInvalidArgument, comm,
                "%s: sendbuff=%p (%zu bytes) and recvbuff=%p (%zu bytes) overlap, and not in place (%s)", c.name,
                c.send, s.sendBytes, c.recv, s.recvBytes, inPlaceRule(c.collective));

  const RegisteredSpan reg = registeredOutput(comm, c, s, recvInfo.bufferId);
  const SendRegistration in = registeredInput(comm, c, s, sendInfo.bufferId, s.sendBytes > 0);
  PlannedLaunch plan;
  plan.comm = locked.shared();
  plan.call = c.name;
  plan.choice = comm->selector.choose(c.collective, selectorBytes(s), reg.registration != nullptr,
                                      in.span.registration != nullptr, in.copyEngines);
  plan.dtype = static_cast<DataType>(c.datatype);
  plan.op = collectiveShape(c.collective).reduces ? static_cast<RedOp>(c.op) : RedOp::kSum;
  plan.bytes = selectorBytes(s);
  plan.stream = c.stream;
  DeviceArgs& args = plan.args;
  args = baseDeviceArgs(comm);
  args.send = c.send;
  args.recv = c.recv;
  args.slotBytes = plan.choice.slotBytes;
  args.teamsPerBlock = plan.choice.teams;
  const Algo algo = plan.choice.algo;
  if (c.collective == Collective::kAllReduce) {
    args.count = c.count;
  } else if (algorithm(algo).family == Family::kTwoshot) {  // broadcast_twoshot, reduce_twoshot
    fillTwoshot(c.collective, comm->rank, c.root, c.count, s.elem, &args);
  } else {
    args.count = s.recvBytes;  // the exchanges poison bytes (device_state.h)
    fillPattern(c.collective, comm->rank, comm->nranks, c.root, s.piece, send, recv, &args);
  }
  if (algorithm(algo).needsRegisteredSend) {
    // Every rank's input as mapped here, and which inputs hold one block per receiver. The copy
    // engines read every input at the shared offset; the pull exchange at the offset each rank
    // tells its peers (exchange.cuh: enterRegistered), so its tag leaves the offset out.
    // (The pull exchange's Reduce, reduce_pull: no input holds pieces per receiver, so the root
    // reads every input from its offset on, and the pattern's recvFrom, 0 on the other ranks, says
    // that only the root reduces.)
    const bool copyEngine = algorithm(algo).family == Family::kCopyEngine;
    args.peerSrcByRank = peerSrcByRankOf(c.collective, c.root, comm->nranks);
    for (int p = 0; p < comm->nranks; ++p)
      args.peerRecv[p] = in.span.registration->peerBase[p] +
                         (copyEngine ? in.ref + (in.inPlaceSlot ? p * s.piece : 0) : 0);
    args.registeredOffset = in.span.offset;
    args.callTag = copyEngine ? copyEngineTag(algo, c, in) : registeredTag(algo, c, in.span);
    plan.registrations[0] = in.span.registration;
    if (in.span.stale) {
      // A new allocation where registered memory was freed: a tag no peer has, so every rank's
      // handshake times out before anything is read from it.
      args.callTag = poisonedTag(args.callTag, comm->rank) | 1u;
      plan.hostNote = "this rank's input lies where registered memory was freed without "
                      "yaliCommDeregister (a new allocation at the old address)";
    }
  } else if (algorithm(algo).needsRegisteredRecv) {
    const bool exchange = algorithm(algo).family == Family::kExchangeDirect;
    for (int p = 0; p < comm->nranks; ++p)
      args.peerRecv[p] = reg.registration->peerBase[p] + (exchange ? 0 : reg.offset);
    args.registeredOffset = reg.offset;
    args.callTag = registeredTag(algo, c, reg);
    plan.registrations[0] = reg.registration;
    if (reg.stale) {
      // The memory under a registration was freed and allocated again: take part in the entry
      // handshake with a tag no peer has, so that every rank stops before a peer writes into the
      // new allocation.
      args.callTag = poisonedTag(args.callTag, comm->rank);
      plan.hostNote = "this rank's buffer lies where registered memory was freed without "
                      "yaliCommDeregister (a new allocation at the old address)";
      logInfo("%s: rank %d: a buffer lies in freed registered memory", c.name, comm->rank);
    }
  }
  return enqueue(std::move(plan));
}

yaliResult_t describeCall(yaliComm_t handle, const CollCall& c, yaliAlgoInfo_t* info) {
  const char* name = c.name;
  LockedComm locked(handle, name);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  if (info == nullptr) return fail(yaliInvalidArgument, comm, "%s: info is NULL", name);
  if (c.collective < Collective::kAllReduce || static_cast<int>(c.collective) >= kNumCollectives)
    return fail(yaliInvalidArgument, comm, "%s: collective=%d is not a yaliCollective_t", name,
                static_cast<int>(c.collective));
  Sizes s;
  yaliResult_t r = checkScalars(comm, c, &s);
  if (r != yaliSuccess) return r;
  // A buffer CUDA does not know (or NULL) lies in no registration.
  AllocationInfo recvInfo;
  std::string ignored;
  if (c.recv == nullptr || !queryAllocation(c.recv, &recvInfo, &ignored)) recvInfo = AllocationInfo();
  const RegisteredSpan reg = registeredOutput(comm, c, s, recvInfo.bufferId);
  const SendRegistration in = registeredInput(comm, c, s, 0, false);
  const AlgoChoice choice = comm->selector.choose(c.collective, selectorBytes(s), reg.registration != nullptr,
                                                  in.span.registration != nullptr, in.copyEngines);
  memset(info, 0, sizeof(*info));
  strncpy(info->algorithm, c.count == 0 ? "none" : algoName(choice.algo), sizeof(info->algorithm) - 1);
  info->ctas = c.count == 0 ? 0 : choice.ctas;
  info->threads = c.count == 0 ? 0 : choice.threads;
  info->chunkBytes = c.count == 0 ? 0 : choice.slotBytes;
  return yaliSuccess;
}

}  // namespace yali
