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

}  // namespace yali
