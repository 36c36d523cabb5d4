// What each collective reads, writes and exchanges (NCCL 2.28's semantics, yali.h), as data: the
// buffers a rank uses, NCCL's in-place layouts, and each rank's pattern of pieces for the exchange
// kernels. Host only, no CUDA call: the call path (call.cc) uses it, and a host test runs every
// collective's patterns through a simulated exchange (tests/host/internal/test_pattern.cc).
#pragma once

#include <stddef.h>

#include "collectives/common/device_state.h"
#include "vocabulary.h"

namespace yali {

// The buffers a rank uses, in pieces (a piece: the bytes one rank sends to one receiver; AllReduce:
// the message): 0 when the rank does not use the buffer (it may be NULL).
struct Extents {
  size_t sendPieces;
  size_t recvPieces;
};
Extents extentsOf(Collective c, int rank, int root, int n);

// Whether send and recv are in NCCL's in-place layout for `c` (the only overlap a call may have).
bool inPlaceLayout(Collective c, int rank, int root, size_t piece, const char* send, const char* recv);
// That layout in words, for error messages.
const char* inPlaceRule(Collective c);

// This rank's pattern of pieces (DeviceArgs: pieceBytes, sendTo, recvFrom, the offset masks,
// arrive) for every collective but AllReduce.
void fillPattern(Collective c, int me, int n, int root, size_t piece, const char* send, const char* recv,
                 DeviceArgs* a);

// DeviceArgs::peerSrcByRank for the algorithms that read their peers' inputs (the copy engines,
// the pull exchange): bit p when rank p's input holds one piece per receiver (the receiver's at
// receiver * piece: ReduceScatter, Scatter's root, AlltoAll), clear when it holds one piece, read
// at 0 (Reduce: every rank's whole input, which the root alone reads). The same on every rank.
uint32_t peerSrcByRankOf(Collective c, int root, int n);

// This rank's arguments for the two-shot kernel's rooted shapes (allreduce/twoshot.cuh, "Rooted
// shapes"; Broadcast: broadcast_twoshot, Reduce: reduce_twoshot), on top of the call's send and
// recv: `count` in the kernel's elements (Broadcast's kernel is byte-wise: count * elemSize bytes;
// Reduce: the call's count), the root, and recv null on a rank without an output (Reduce's
// non-roots: their recvbuff is not significant, and the kernel neither writes nor poisons it).
// Every rank runs the same tiles and steps whatever its part, so a call's remainder (a count not
// divisible by nranks) is the last tile's short shards, and any rank may be the root.
void fillTwoshot(Collective c, int me, int root, size_t count, size_t elemSize, DeviceArgs* a);

}  // namespace yali
