// The shape of each collective, nccl-tests style: how a message size (-b .. -e) becomes the count
// passed to the call, how large each rank's input and output are, where the input and output lie
// in place, and the busBW factor. Host-only, so that the conventions are unit-tested without a GPU.
//
// nccl-tests (src/<collective>.cu, GetCollByteCount and GetBw) is the reference, so that a row of
// yali-perf and a row of nccl-tests at the same -b/-e size measure the same thing:
//   - count = size / element size; collectives that split a buffer among the ranks (reducescatter,
//     allgather, gather, scatter, alltoall, and rs_ag here) use per-rank blocks of
//     (count / nranks) rounded down to a multiple of 16 bytes.
//   - the size column is the larger of a rank's input and output (nccl-tests' max(sendBytes,
//     recvBytes)), and algBW = size / time for every collective.
//   - busBW = algBW * factor: 2(n-1)/n for allreduce (and rs_ag), (n-1)/n for reducescatter,
//     allgather, alltoall, gather and scatter, 1 for broadcast, reduce and sendrecv.
//   - sendrecv (src/sendrecv.cu): count = size / element size, sent whole to rank+1 while as many
//     are received from rank-1, so the size column is count * element size.
#ifndef YALI_PERF_COLL_SHAPE_H_
#define YALI_PERF_COLL_SHAPE_H_

#include <cstddef>
#include <string>

#include "perf_args.h"

namespace yali_perf {

struct CollShape {
  size_t count = 0;       // elements passed to the call (nccl-tests' paramcount)
  size_t send_count = 0;  // elements of each rank's input
  size_t recv_count = 0;  // elements of each rank's output buffer
  // In place, the input starts at recv + rank * send_in_place_offset and the output at
  // recv + rank * recv_in_place_offset (elements): what NCCL defines as in place per collective.
  size_t send_in_place_offset = 0;
  size_t recv_in_place_offset = 0;
  size_t bytes = 0;  // the size column: max(send_count, recv_count) * element size
};

// The shape for a message of `requested_bytes` (a size of the sweep) of `element_bytes` elements.
// Alltoallv has none (all zero): its cases are sized by their routing (alltoallv_plan.h).
CollShape ShapeFor(CollId coll, size_t requested_bytes, size_t element_bytes, int nranks);

// busBW = algBW * BusFactor: the bandwidth each rank's links need, comparable across rank counts.
double BusFactor(CollId coll, int nranks);
const char* BusFactorText(CollId coll);  // "2(n-1)/n", "(n-1)/n" or "1"

// A line for the report: "allreduce", "allreduce via reducescatter+allgather", ...
const char* CollDescription(CollId coll);

bool CollReduces(CollId coll);  // takes a reduction op (the others only move data)
bool CollHasRoot(CollId coll);  // broadcast, reduce, gather, scatter
// Every rank's output is the same (the harness then compares them bitwise with rank 0's).
bool CollSameOutputEverywhere(CollId coll);
// NCCL defines an in-place form (alltoall has none; YALI refuses overlapping buffers for it.
// sendrecv has none either: see CollNoInPlaceReason).
bool CollHasInPlace(CollId coll);
// Why a collective without an in-place form (CollHasInPlace false) runs out of place only: the
// note and the JSON's skip reason of its in-place half.
std::string CollNoInPlaceReason(CollId coll);

// Elements of `rank`'s output that the collective writes (and the check reads), starting at the
// output pointer: 0 on the ranks of reduce and gather that are not the root.
size_t OutputCount(CollId coll, const CollShape& shape, int rank, int root, int nranks);

}  // namespace yali_perf

#endif  // YALI_PERF_COLL_SHAPE_H_
