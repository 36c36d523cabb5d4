// yaliSend and yaliRecv (yali.h: "Point-to-point"): checked here, in the order of every call's
// checks (call.h), and queued as a point-to-point launch (enqueue.h: PlannedLaunch::p2p), which a
// group fuses with the comm's other point-to-point calls at its end (enqueue.cc:
// fusePointToPoint). The kernel and its protocol: collectives/p2p/p2p.h.
#include "core/call.h"

#include "collectives/common/device_state.h"
#include "core/comm.h"
#include "core/comm_access.h"
#include "core/enqueue.h"
#include "core/error.h"

namespace yali {

yaliResult_t submitP2P(yaliComm_t handle, const P2PCall& c) {
  const bool send = c.kind == kP2PSend;
  const char* name = send ? "yaliSend" : "yaliRecv";
  const char* bufferName = send ? "sendbuff" : "recvbuff";
  LockedComm locked(handle, name);
  if (!locked) return locked.error();
  yaliComm* comm = locked.get();
  yaliResult_t r = checkDataType(comm, c.datatype, name);
  if (r != yaliSuccess) return r;
  if (c.peer < 0 || c.peer >= comm->nranks)
    return fail(yaliInvalidArgument, comm, "%s: peer=%d is out of range [0, nranks-1=%d]", name, c.peer,
                comm->nranks - 1);
  r = checkAsync(comm, name);
  if (r != yaliSuccess) return r;
  if (comm->layout.p2pChannels == 0)
    return fail(yaliInvalidUsage, comm, "%s: point-to-point is off on this comm (YALI_P2P_CHANNELS=0)", name);
  if (c.count == 0) return yaliSuccess;
  const size_t elem = dataTypeSize(static_cast<DataType>(c.datatype));
  // Bytes travel in 60 bits of a slot's announcement (P2PSlotFlag::shape).
  if (c.count > (static_cast<size_t>(1) << 59) / elem)
    return fail(yaliInvalidArgument, comm, "%s: count=%zu is too large (x %zu-byte elements: over 2^59 bytes)", name,
                c.count, elem);
  const size_t bytes = c.count * elem;
  if (c.peer == comm->rank && !inGroup())
    return fail(yaliInvalidUsage, comm,
                "%s: peer=%d is this rank: a send to self and its receive must be made in one group "
                "(yaliGroupStart/End), or neither could ever end",
                name, c.peer);
  if (inGroup() && pendingP2POps(comm) >= static_cast<size_t>(kMaxP2POps))
    return fail(yaliInvalidUsage, comm,
                "%s: the open group already holds %d point-to-point calls on this comm, the most one group may "
                "(YALI_MAX_P2P_OPS)",
                name, kMaxP2POps);
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", name, comm->device);
  AllocationInfo info;
  r = checkBuffer(comm, c.buffer, bufferName, elem, bytes, name, &info);
  if (r != yaliSuccess) return r;

  PlannedLaunch plan;
  plan.comm = locked.shared();
  plan.call = name;
  plan.stream = c.stream;
  plan.p2p = true;
  plan.args = baseDeviceArgs(comm);
  P2POp op{};
  op.src = send ? static_cast<const char*>(c.buffer) : nullptr;
  op.dst = send ? nullptr : static_cast<char*>(const_cast<void*>(c.buffer));
  op.bytes = bytes;
  op.peer = c.peer;
  op.kind = c.kind;
  plan.p2pOps.push_back(op);
  return enqueue(std::move(plan));
}

}  // namespace yali
