// The one path of every collective call: each public entry point (api.cc) describes its call as a
// CollCall and hands it here. Checks (in this order, each failure named after the call and the
// argument, nothing touched), selection, the kernel's arguments, the launch (enqueue.h):
//   1. the comm (live, not failed), the type, the op (and opSupports), the root;
//   2. count 0: nothing to do; the byte sizes, which must not overflow;
//   3. the buffers this rank uses (pattern.h: extentsOf), each device memory of the comm's GPU,
//      aligned to the element, long enough where CUDA can tell; overlaps other than NCCL's
//      in-place layouts are refused;
//   4. registered outputs (yaliCommRegister), the selector's choice, the algorithm's arguments
//      (for the exchanges, this rank's pattern of pieces), the registered-call tag.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#include "collectives/common/device_state.h"
#include "vocabulary.h"
#include "yali/yali.h"

namespace yali {

struct CollCall {
  Collective collective;
  const char* name;  // the public call, for messages: "yaliAllGather"
  const void* send;
  void* recv;
  size_t count;  // as the public call takes it (per rank or per block: vocabulary of yali.h)
  int datatype;  // yaliDataType_t
  int op;        // yaliRedOp_t; ignored when the collective does not reduce
  int root;      // ignored when the collective has no root
  cudaStream_t stream;
};

// Checks, plans and enqueues `call` on the comm of `handle`.
yaliResult_t submitCall(yaliComm_t handle, const CollCall& call);

// Whether [a, a + aLen) and [b, b + bLen) share a byte (an empty range shares none). Written
// without a + aLen, which can wrap: an open extent reaches the end of the address space.
bool rangesOverlap(uint64_t a, uint64_t aLen, uint64_t b, uint64_t bLen);
// The same for two buffers (a NULL one overlaps nothing).
bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes);

// An AlltoAllv call, any form (device_state.h: VarMode; yali.h for each form's arguments). Fields a
// form does not take stay null / 0.
struct VarCall {
  VarMode mode;
  const char* name;  // the public call, for messages
  const void* send;
  void* recv;
  int datatype;  // the host and 1-D device forms; the expert forms move rows of layout->rowBytes
  // kVarHostCounts: host arrays of nranks entries, elements
  const size_t* sendcounts;
  const size_t* sdispls;
  const size_t* recvcounts;
  const size_t* rdispls;
  // the device forms: device int64 arrays
  const int64_t* sendCounts;
  const int64_t* sendDispls;  // kVarDeviceCounts only
  int64_t* recvCounts;        // outputs (not the combine)
  int64_t* recvOffsets;       // rdispls / expertOffsets
  size_t recvCapacity;        // kVarDeviceCounts: elements
  const yaliExpertLayout_t* layout;  // the expert forms
  cudaStream_t stream;
};

// Checks (call_alltoallv.cc: the counts on the host where they are there, every array and buffer,
// the extents the kernel checks the device counts against), plans and enqueues `call`.
yaliResult_t submitAlltoAllv(yaliComm_t handle, const VarCall& call);

// A point-to-point call (yaliSend: kind kP2PSend, yaliRecv: kP2PRecv).
struct P2PCall {
  uint32_t kind;       // P2PKind
  const void* buffer;  // sendbuff or recvbuff
  size_t count;
  int datatype;
  int peer;
  cudaStream_t stream;
};

// Checks (the datatype, the peer, the comm, the size, self outside a group, the group's limit, the
// buffer), plans and enqueues `call` (call_p2p.cc).
yaliResult_t submitP2P(yaliComm_t handle, const P2PCall& call);

// What submitCall would run (yaliAlgoInfo): checks the type, op, root and sizes, not the buffers
// (NULL or memory CUDA does not know is "not registered").
yaliResult_t describeCall(yaliComm_t handle, const CollCall& call, yaliAlgoInfo_t* info);

}  // namespace yali
