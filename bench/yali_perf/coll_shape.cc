#include "coll_shape.h"

#include <algorithm>

namespace yali_perf {
namespace {

// nccl-tests' per-rank block: count / nranks, rounded down to whole 16-byte units so that every
// rank's block starts aligned (for 16-byte elements and larger, any count would do).
size_t BlockCount(size_t count, size_t element_bytes, int nranks) {
  const size_t per_rank = count / static_cast<size_t>(nranks);
  const size_t unit = element_bytes >= 16 ? 1 : 16 / element_bytes;
  return per_rank / unit * unit;
}

}  // namespace

CollShape ShapeFor(CollId coll, size_t requested_bytes, size_t element_bytes, int nranks) {
  const size_t count = requested_bytes / element_bytes;
  const size_t n = static_cast<size_t>(nranks);
  CollShape shape;
  switch (coll) {
    case CollId::kAllReduce:
    case CollId::kBroadcast:
    case CollId::kReduce:
      // One buffer of `count` elements in and out; in place is send == recv.
      shape.count = shape.send_count = shape.recv_count = count;
      break;
    case CollId::kReduceScatter: {
      const size_t block = BlockCount(count, element_bytes, nranks);
      shape.count = block;
      shape.send_count = block * n;
      shape.recv_count = block;
      shape.recv_in_place_offset = block;  // recv == send + rank * block
      break;
    }
    case CollId::kAllGather:
    case CollId::kGather: {
      const size_t block = BlockCount(count, element_bytes, nranks);
      shape.count = block;
      shape.send_count = block;
      shape.recv_count = block * n;
      shape.send_in_place_offset = block;  // send == recv + rank * block
      break;
    }
    case CollId::kScatter: {
      const size_t block = BlockCount(count, element_bytes, nranks);
      shape.count = block;
      shape.send_count = block * n;
      shape.recv_count = block;
      shape.recv_in_place_offset = block;  // on the root, recv == send + root * block
      break;
    }
    case CollId::kAlltoAll: {
      const size_t block = BlockCount(count, element_bytes, nranks);
      shape.count = block;
      shape.send_count = shape.recv_count = block * n;
      break;
    }
    case CollId::kRsAg: {
      // An AllReduce of nranks whole blocks, so that reducescatter and allgather can split it;
      // the same sizes as the reducescatter rows.
      const size_t block = BlockCount(count, element_bytes, nranks);
      shape.count = shape.send_count = shape.recv_count = block * n;
      break;
    }
    case CollId::kSendRecv:
      // nccl-tests' sendrecv: `count` elements to rank+1, as many from rank-1 into a buffer of its
      // own (no per-rank blocks, no rounding); out of place only (CollHasInPlace).
      shape.count = shape.send_count = shape.recv_count = count;
      break;
    case CollId::kAlltoAllv:
      // Sized by its routing (alltoallv_plan.h), never by a message size: no shape.
      break;
  }
  shape.bytes = std::max(shape.send_count, shape.recv_count) * element_bytes;
  return shape;
}

double BusFactor(CollId coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case CollId::kAllReduce:
    case CollId::kRsAg:
      // Each rank sends and receives 2(n-1)/n of the data in a bandwidth-optimal AllReduce.
      return 2.0 * (n - 1) / n;
    case CollId::kReduceScatter:
    case CollId::kAllGather:
    case CollId::kAlltoAll:
    case CollId::kGather:
    case CollId::kScatter:
      // Each rank (the root, for gather and scatter) moves the n-1 blocks that are not its own.
      return (n - 1) / n;
    case CollId::kAlltoAllv:
      // Its table reports algbw only (bytes each rank sends / time): how much of a skewed
      // exchange crosses which links depends on the routing.
      return 1.0;
    case CollId::kBroadcast:
    case CollId::kReduce:
      // The whole message passes through the root's links (nccl-tests' factor 1).
      return 1.0;
    case CollId::kSendRecv:
      // Each rank sends the whole message over one link and receives one (nccl-tests' factor 1).
      return 1.0;
  }
  return 1.0;
}

const char* BusFactorText(CollId coll) {
  switch (coll) {
    case CollId::kAllReduce:
    case CollId::kRsAg: return "2(n-1)/n";
    case CollId::kBroadcast:
    case CollId::kReduce:
    case CollId::kSendRecv:
    case CollId::kAlltoAllv: return "1";
    default: return "(n-1)/n";
  }
}

const char* CollDescription(CollId coll) {
  if (coll == CollId::kRsAg) return "rs_ag (allreduce via reducescatter+allgather)";
  if (coll == CollId::kSendRecv) return "sendrecv (each rank sends to rank+1, receives from rank-1)";
  return CollName(coll);
}

bool CollReduces(CollId coll) {
  return coll == CollId::kAllReduce || coll == CollId::kReduceScatter ||
         coll == CollId::kReduce || coll == CollId::kRsAg;
}

bool CollHasRoot(CollId coll) {
  return coll == CollId::kBroadcast || coll == CollId::kReduce || coll == CollId::kGather ||
         coll == CollId::kScatter;
}

bool CollSameOutputEverywhere(CollId coll) {
  return coll == CollId::kAllReduce || coll == CollId::kAllGather ||
         coll == CollId::kBroadcast || coll == CollId::kRsAg;
}

bool CollHasInPlace(CollId coll) {
  return coll != CollId::kAlltoAll && coll != CollId::kAlltoAllv && coll != CollId::kSendRecv;
}

std::string CollNoInPlaceReason(CollId coll) {
  if (coll == CollId::kSendRecv)
    // nccl-tests (src/sendrecv.cu) runs its in-place half with recvbuff == sendbuff but reports no
    // errors for it ("We don't support in-place sendrecv"): each rank's receive overwrites the
    // data its own send reads, so neither the data nor the time means anything.
    return "NCCL defines no in-place sendrecv (nccl-tests runs it on one buffer, where the "
           "receive overwrites what the send reads, and leaves it unchecked): out-of-place only";
  return "NCCL defines no in-place " + std::string(CollName(coll)) +
         " and YALI refuses overlapping buffers for it: out-of-place only";
}

size_t OutputCount(CollId coll, const CollShape& shape, int rank, int root, int nranks) {
  switch (coll) {
    case CollId::kReduce:
    case CollId::kGather: return rank == root ? shape.recv_count : 0;
    default: return shape.recv_count;
  }
}

}  // namespace yali_perf
