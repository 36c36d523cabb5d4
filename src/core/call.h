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

// What submitCall would run (yaliAlgoInfo): checks the type, op, root and sizes, not the buffers
// (NULL or memory CUDA does not know is "not registered").
yaliResult_t describeCall(yaliComm_t handle, const CollCall& call, yaliAlgoInfo_t* info);

}  // namespace yali
