// AlltoAllv's call path (call.h: VarCall): every form checked here, then planned and enqueued like
// every other collective (enqueue.h). What the host cannot check, because the counts are on the
// device, the kernel checks against the extents computed here (exchange/alltoallv.cu).
#include <string.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/call.h"
#include "core/comm.h"
#include "core/comm_access.h"
#include "core/enqueue.h"
#include "core/error.h"
#include "core/registration.h"

namespace yali {
namespace {

constexpr size_t kMaxAlignRows = size_t{1} << 20;
// The piece size every rank plans its launch for (submitAlltoAllv).
constexpr size_t kPlanPieceBytes = size_t{4} << 20;

// Rows of rowBytes that a buffer whose extent the call does not know (the device counts decide)
// may hold: from `p` to the end of its allocation where CUDA knows it exactly (cudaMalloc memory;
// for cuMem memory CUDA reports the whole reserved address range, mapped or not: measured on an
// H100 on 2026-11-25, a 16 MB reservation with 8 MB mapped in three handles gave 16 MB for every
// pointer in it, so there the extent is open), and short of every one of `clips` (the
// call's other buffer and its count arrays) that lies above `p`, so that none can overlap it.
// 0 for NULL (a rank that moves nothing there).
yaliResult_t openExtentRows(yaliComm* comm, const VarCall& c, const void* p, const char* name, size_t rowBytes,
                            std::initializer_list<const void*> clips, size_t* rows) {
  *rows = 0;
  if (p == nullptr) return yaliSuccess;
  AllocationInfo info;
  yaliResult_t r = checkBuffer(comm, p, name, 1, 0, c.name, &info);
  if (r != yaliSuccess) return r;
  const uint64_t at = reinterpret_cast<uint64_t>(p);
  uint64_t end = info.legacyIpc ? info.start + info.size : UINT64_MAX;
  for (const void* clip : clips) {
    const uint64_t o = reinterpret_cast<uint64_t>(clip);
    if (clip != nullptr && o > at && o < end) end = o;
  }
  *rows = end > at ? (end - at) / rowBytes : 0;
  return yaliSuccess;
}

// A device int64 array of `entries` (an input or an output of the call); NULL allowed when optional.
yaliResult_t checkCountArray(yaliComm* comm, const VarCall& c, const void* p, const char* name, size_t entries,
                             bool optional) {
  if (p == nullptr && optional) return yaliSuccess;
  AllocationInfo info;
  return checkBuffer(comm, p, name, sizeof(int64_t), entries * sizeof(int64_t), c.name, &info);
}

// The host form: counts and displacements in elements, checked in full on the host.
yaliResult_t planHostCounts(yaliComm* comm, const VarCall& c, size_t elem, VarArgs* v, size_t* recvBytes) {
  const int n = comm->nranks;
  if (c.sendcounts == nullptr) return fail(yaliInvalidArgument, comm, "%s: sendcounts is NULL", c.name);
  if (c.recvcounts == nullptr) return fail(yaliInvalidArgument, comm, "%s: recvcounts is NULL", c.name);
  size_t sendEnd = 0, recvEnd = 0, sendAt = 0, recvAt = 0;
  const size_t limit = SIZE_MAX / elem;
  for (int p = 0; p < n; ++p) {
    const size_t sc = c.sendcounts[p], rc = c.recvcounts[p];
    const size_t sd = c.sdispls != nullptr ? c.sdispls[p] : sendAt;
    const size_t rd = c.rdispls != nullptr ? c.rdispls[p] : recvAt;
    if (sc > limit || sd > limit - sc)
      return fail(yaliInvalidArgument, comm, "%s: sendcounts[%d]=%zu at sdispls[%d]=%zu overflows the byte size",
                  c.name, p, sc, p, sd);
    if (rc > limit || rd > limit - rc)
      return fail(yaliInvalidArgument, comm, "%s: recvcounts[%d]=%zu at rdispls[%d]=%zu overflows the byte size",
                  c.name, p, rc, p, rd);
    // What the kernel takes (kMaxVarRows), refused here where the host knows it: the kernel would
    // fail the comm on every rank (a count), or read a displacement of 2^63 or more as negative.
    const size_t maxRows = static_cast<size_t>(kMaxVarRows);
    const struct {
      const char* name;
      size_t value;
      size_t rows;  // the entry's count: the displacement of an empty entry bounds nothing
    } entries[] = {{"sendcounts", sc, sc},
                   {c.sdispls != nullptr ? "sdispls" : "sdispls (NULL: packed, the sum of sendcounts before)", sd, sc},
                   {"recvcounts", rc, rc},
                   {c.rdispls != nullptr ? "rdispls" : "rdispls (NULL: packed, the sum of recvcounts before)", rd, rc}};
    for (const auto& e : entries)
      if (e.rows > 0 && e.value > maxRows)
        return fail(yaliInvalidArgument, comm, "%s: %s[%d]=%zu exceeds the largest AlltoAllv count or displacement, "
                    "%zu rows", c.name, e.name, p, e.value, maxRows);
    sendAt = sd + sc;
    recvAt = rd + rc;
    // An empty entry moves nothing: its displacement bounds nothing.
    if (sc > 0) sendEnd = std::max(sendEnd, sd + sc);
    if (rc > 0) recvEnd = std::max(recvEnd, rd + rc);
    v->hostSendCounts[p] = sc;
    v->hostSendDispls[p] = sd;
    v->hostRecvCounts[p] = rc;
    v->hostRecvDispls[p] = rd;
  }
  // Two senders' rows must not land on the same bytes: the result would depend on timing.
  for (int p = 0; p < n; ++p)
    for (int q = p + 1; q < n; ++q)
      if (rangesOverlap(v->hostRecvDispls[p], v->hostRecvCounts[p], v->hostRecvDispls[q], v->hostRecvCounts[q]))
        return fail(yaliInvalidArgument, comm,
                    "%s: rows from rank %d (rdispls[%d]=%zu, %zu elements) and rank %d (rdispls[%d]=%zu, %zu "
                    "elements) overlap in recvbuff",
                    c.name, p, p, static_cast<size_t>(v->hostRecvDispls[p]), static_cast<size_t>(v->hostRecvCounts[p]),
                    q, q, static_cast<size_t>(v->hostRecvDispls[q]), static_cast<size_t>(v->hostRecvCounts[q]));
  AllocationInfo info;
  yaliResult_t r;
  if (sendEnd > 0 && (r = checkBuffer(comm, c.send, "sendbuff", elem, sendEnd * elem, c.name, &info)) != yaliSuccess)
    return r;
  if (recvEnd > 0 && (r = checkBuffer(comm, c.recv, "recvbuff", elem, recvEnd * elem, c.name, &info)) != yaliSuccess)
    return r;
  if (overlaps(c.send, sendEnd * elem, c.recv, recvEnd * elem))
    return fail(yaliInvalidArgument, comm,
                "%s: sendbuff=%p (%zu bytes) and recvbuff=%p (%zu bytes) overlap (AlltoAllv has no in-place form)",
                c.name, c.send, sendEnd * elem, c.recv, recvEnd * elem);
  v->rankRows = sendEnd;
  v->expertRows = recvEnd;
  *recvBytes = recvEnd * elem;
  return yaliSuccess;
}

// The device forms: the counts' arrays, the layout, and the extents the kernel checks against.
yaliResult_t planDeviceCounts(yaliComm* comm, const VarCall& c, VarArgs* v, size_t* recvBytes) {
  const int n = comm->nranks;
  const bool expert = c.mode == kVarDispatch || c.mode == kVarCombine;
  size_t rowBytes = 0, alignRows = 1, capacityRows = 0;
  int E = 1;
  if (expert) {
    if (c.layout == nullptr) return fail(yaliInvalidArgument, comm, "%s: layout is NULL", c.name);
    rowBytes = c.layout->rowBytes;
    E = c.layout->localExperts;
    alignRows = c.layout->alignRows;
    capacityRows = c.layout->capacityRows;
    if (rowBytes == 0) return fail(yaliInvalidArgument, comm, "%s: layout->rowBytes is 0", c.name);
    if (E < 1 || E > kMaxLocalExperts)
      return fail(yaliInvalidArgument, comm, "%s: layout->localExperts=%d is out of range [1, %d]", c.name, E,
                  kMaxLocalExperts);
    if (n * E > kMaxExperts)
      return fail(yaliInvalidArgument, comm,
                  "%s: nranks x layout->localExperts = %d x %d experts exceeds YALI_MAX_EXPERTS=%d", c.name, n, E,
                  kMaxExperts);
    if (alignRows < 1 || alignRows > kMaxAlignRows)
      return fail(yaliInvalidArgument, comm, "%s: layout->alignRows=%zu is out of range [1, %zu]", c.name, alignRows,
                  kMaxAlignRows);
  } else {  // the datatype is checked (submitAlltoAllv)
    rowBytes = dataTypeSize(static_cast<DataType>(c.datatype));
    capacityRows = c.recvCapacity;
  }
  if (capacityRows > SIZE_MAX / rowBytes)
    return fail(yaliInvalidArgument, comm, "%s: %s=%zu rows of %zu bytes overflows the byte size", c.name,
                expert ? "layout->capacityRows" : "recvCapacity", capacityRows, rowBytes);
  const size_t groups = static_cast<size_t>(n) * E;
  const char* countsName = expert ? "sendCounts" : "sendcounts";
  yaliResult_t r = checkCountArray(comm, c, c.sendCounts, countsName, groups, false);
  if (r != yaliSuccess) return r;
  if (c.mode == kVarDeviceCounts && (r = checkCountArray(comm, c, c.sendDispls, "sdispls", n, true)) != yaliSuccess)
    return r;
  const size_t countsOut = c.mode == kVarDispatch ? groups : n;
  const size_t offsetsOut = c.mode == kVarDispatch ? static_cast<size_t>(E) + 1 : n;
  const char* countsOutName = c.mode == kVarDispatch ? "recvCounts" : "recvcounts";
  const char* offsetsOutName = c.mode == kVarDispatch ? "expertOffsets" : "rdispls";
  if (c.mode != kVarCombine) {
    if ((r = checkCountArray(comm, c, c.recvCounts, countsOutName, countsOut, true)) != yaliSuccess) return r;
    if ((r = checkCountArray(comm, c, c.recvOffsets, offsetsOutName, offsetsOut, true)) != yaliSuccess) return r;
    // The kernel reads the inputs in every block while block 0 writes the outputs.
    const struct {
      const void* p;
      size_t bytes;
      const char* name;
    } inputs[] = {{c.sendCounts, groups * 8, countsName}, {c.sendDispls, static_cast<size_t>(n) * 8, "sdispls"}},
      outputs[] = {{c.recvCounts, countsOut * 8, countsOutName}, {c.recvOffsets, offsetsOut * 8, offsetsOutName}};
    for (const auto& in : inputs)
      for (const auto& out : outputs)
        if (in.p != nullptr && overlaps(in.p, in.bytes, out.p, out.bytes))
          return fail(yaliInvalidArgument, comm, "%s: %s=%p and %s=%p overlap", c.name, in.name, in.p, out.name,
                      out.p);
  }
  // The expert-major buffer (the dispatch's output, the combine's input; the 1-D form's output)
  // holds capacityRows; the other side's extent is open (its counts are on the device).
  const bool expertIsRecv = c.mode != kVarCombine;
  const void* expertBuf = expertIsRecv ? c.recv : c.send;
  const void* rankBuf = expertIsRecv ? c.send : c.recv;
  AllocationInfo info;
  if (capacityRows > 0 &&
      (r = checkBuffer(comm, expertBuf, expertIsRecv ? "recvbuff" : "sendbuff", expert ? 1 : rowBytes,
                       capacityRows * rowBytes, c.name, &info)) != yaliSuccess)
    return r;
  size_t rankRows = 0;
  const char* rankName = expertIsRecv ? "sendbuff" : "recvbuff";
  const size_t tokenRows = expert ? c.layout->tokenRows : 0;
  if (tokenRows > 0) {
    // Given: exact, so the device check protects the tensors beside this one too.
    if (tokenRows > SIZE_MAX / rowBytes)
      return fail(yaliInvalidArgument, comm, "%s: layout->tokenRows=%zu rows of %zu bytes overflows the byte size",
                  c.name, tokenRows, rowBytes);
    if ((r = checkBuffer(comm, rankBuf, rankName, 1, tokenRows * rowBytes, c.name, &info)) != yaliSuccess) return r;
    rankRows = tokenRows;
  } else if ((r = openExtentRows(comm, c, rankBuf, rankName, rowBytes,
                                 {expertBuf, c.sendCounts, c.sendDispls, c.recvCounts, c.recvOffsets}, &rankRows)) !=
             yaliSuccess) {
    return r;
  }
  // The count arrays are read by every block while others write rows, and written by block 0
  // while others read rows: none may lie in the rows the call moves.
  {
    const struct {
      const void* p;
      size_t bytes;
      const char* name;
    } arrays[] = {{c.sendCounts, groups * 8, countsName},
                  {c.sendDispls, static_cast<size_t>(n) * 8, "sdispls"},
                  {c.recvCounts, countsOut * 8, countsOutName},
                  {c.recvOffsets, offsetsOut * 8, offsetsOutName}};
    for (const auto& a : arrays) {
      if (a.p == nullptr) continue;
      if (overlaps(a.p, a.bytes, expertBuf, capacityRows * rowBytes) || overlaps(a.p, a.bytes, rankBuf, rankRows * rowBytes))
        return fail(yaliInvalidArgument, comm, "%s: %s=%p lies in the rows of sendbuff=%p or recvbuff=%p", c.name,
                    a.name, a.p, c.send, c.recv);
    }
  }
  if (!expert && rankBuf != nullptr && reinterpret_cast<uintptr_t>(rankBuf) % rowBytes != 0)
    return fail(yaliInvalidArgument, comm, "%s: sendbuff=%p is not aligned to its element size (%zu bytes)", c.name,
                rankBuf, rowBytes);
  if (overlaps(expertBuf, capacityRows * rowBytes, rankBuf, rankRows * rowBytes) ||
      (capacityRows > 0 && expertBuf == rankBuf))
    return fail(yaliInvalidArgument, comm, "%s: sendbuff=%p and recvbuff=%p overlap (AlltoAllv has no in-place form)",
                c.name, c.send, c.recv);
  v->sendCounts = c.sendCounts;
  v->sendDispls = c.mode == kVarDeviceCounts ? c.sendDispls : nullptr;
  v->recvCounts = c.mode == kVarCombine ? nullptr : c.recvCounts;
  v->recvOffsets = c.mode == kVarCombine ? nullptr : c.recvOffsets;
  v->rowBytes = rowBytes;
  v->alignRows = alignRows;
  v->localExperts = static_cast<uint32_t>(E);
  v->expertRows = capacityRows;
  v->rankRows = rankRows;
  // A refused launch (failed comm) poisons the capacity it was given; the combine's output extent is
  // on the device, so it poisons nothing there (its outputs stay as they were; the comm's error says so).
  *recvBytes = expertIsRecv ? capacityRows * rowBytes : 0;
  return yaliSuccess;
}

}  // namespace

yaliResult_t submitAlltoAllv(yaliComm_t handle, const VarCall& c) {
  LockedComm locked(handle, c.name);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  yaliResult_t r = checkAsync(comm, c.name);
  if (r != yaliSuccess) return r;
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", c.name, comm->device);
  VarArgs v;
  memset(&v, 0, sizeof(v));
  v.mode = c.mode;
  size_t recvBytes = 0;
  // The forms that take a datatype (the expert forms move rows of layout->rowBytes).
  if (c.mode == kVarHostCounts || c.mode == kVarDeviceCounts) {
    r = checkDataType(comm, c.datatype, c.name);
    if (r != yaliSuccess) return r;
  }
  if (c.mode == kVarHostCounts) {
    const size_t elem = dataTypeSize(static_cast<DataType>(c.datatype));
    r = planHostCounts(comm, c, elem, &v, &recvBytes);
    v.rowBytes = elem;
    v.alignRows = 1;
    v.localExperts = 1;
  } else {
    r = planDeviceCounts(comm, c, &v, &recvBytes);
  }
  if (r != yaliSuccess) return r;
  // Every rank launches, even one that moves nothing: its peers wait for its counts.
  PlannedLaunch plan;
  plan.comm = locked.shared();
  plan.call = c.name;
  // The geometry (blocks, slot) must be the same on every rank: block b of a sender feeds block b of
  // each receiver, slot by slot. The counts differ by rank (and live on the device), so it is the
  // choice for one fixed piece size, not for this call's.
  plan.choice = comm->selector.choose(Collective::kAlltoAllv, kPlanPieceBytes, false);
  plan.dtype = DataType::kUint8;
  plan.op = RedOp::kSum;
  plan.bytes = kPlanPieceBytes;
  plan.stream = c.stream;
  DeviceArgs& args = plan.args;
  args = baseDeviceArgs(comm);
  args.send = c.send;
  args.recv = c.recv;
  args.count = recvBytes;  // what a refused launch poisons (bytes)
  args.slotBytes = plan.choice.slotBytes;
  args.teamsPerBlock = plan.choice.teams;
  args.var = v;
  return enqueue(std::move(plan));
}

}  // namespace yali
