// A group's streams, joined per communicator as NCCL joins them (group_streams.cc says why and how).
#pragma once

#include <vector>

#include <cuda_runtime.h>

#include "nccl_abi/comm.h"

namespace yali::nccl_abi {

// One stream that calls of one comm used inside this thread's open group.
struct GroupStream {
  const Comm* comm;  // only compared: never read through (the comm may be freed by the time)
  int device;        // the comm's, read at the call
  cudaStream_t stream;
};

// A call of `c` on `stream` made inside this thread's open group (collective, send, receive; YALI's,
// NCCL's, staged or deferred alike). Nothing outside a group, and nothing for a comm NCCL alone
// runs (null, or without YALI and hierarchy: NCCL joins its own streams).
void noteGroupStream(Comm* c, cudaStream_t stream);

// The open group's notes, taken at its outermost end (the calls that end makes in groups of their
// own, the deferred ones, note afresh, and their own ends join those).
std::vector<GroupStream> takeGroupStreams();

// Orders, for each comm with two streams or more in `used`, every one of them after the work each
// of them holds now. Called at the outermost end twice: before both libraries' ends (the group's
// work then starts after everything on every one of its streams) and once everything of the group
// was issued (every stream then waits for the group's work on all of them).
void joinGroupStreams(const std::vector<GroupStream>& used);

// `c` is being freed inside this thread's open group: its notes go (freeComm).
void forgetGroupStreams(const Comm* c);

}  // namespace yali::nccl_abi
