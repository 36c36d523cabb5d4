#include "core/pattern.h"

namespace yali {

Extents extentsOf(Collective c, int rank, int root, int n) {
  const size_t all = static_cast<size_t>(n);
  switch (c) {
    case Collective::kAllReduce: return {1, 1};
    case Collective::kReduceScatter: return {all, 1};
    case Collective::kAllGather: return {1, all};
    case Collective::kBroadcast: return {rank == root ? 1u : 0u, 1};
    case Collective::kReduce: return {1, rank == root ? 1u : 0u};
    case Collective::kGather: return {1, rank == root ? all : 0};
    case Collective::kScatter: return {rank == root ? all : 0, 1};
    case Collective::kAlltoAll:
    case Collective::kAlltoAllv: return {all, all};  // AlltoAllv: yaliAlgoInfo's count per peer
  }
  return {0, 0};
}

// NCCL's in-place layouts: the only overlaps of input and output a call may have.
bool inPlaceLayout(Collective c, int rank, int root, size_t piece, const char* send, const char* recv) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce: return send == recv;
    case Collective::kReduceScatter: return recv == send + static_cast<size_t>(rank) * piece;
    case Collective::kAllGather: return send == recv + static_cast<size_t>(rank) * piece;
    case Collective::kGather: return rank == root && send == recv + static_cast<size_t>(root) * piece;
    case Collective::kScatter: return rank == root && recv == send + static_cast<size_t>(root) * piece;
    case Collective::kAlltoAll:
    case Collective::kAlltoAllv: return false;
  }
  return false;
}

const char* inPlaceRule(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce: return "in place means sendbuff == recvbuff";
    case Collective::kReduceScatter: return "in place means recvbuff == sendbuff + rank * recvcount";
    case Collective::kAllGather: return "in place means sendbuff == recvbuff + rank * sendcount";
    case Collective::kGather: return "in place means, on root, sendbuff == recvbuff + root * count";
    case Collective::kScatter: return "in place means, on root, recvbuff == sendbuff + root * count";
    case Collective::kAlltoAll: return "AlltoAll has no in-place form";
    case Collective::kAlltoAllv: return "AlltoAllv has no in-place form";
  }
  return "";
}

// This rank's pattern of pieces for the exchange kernels (device_state.h: DeviceArgs, exchange.cuh):
// who sends to whom, and which offsets are a rank times the piece (else 0). A copied piece that
// would land on itself (in place) is dropped from both masks.
void fillPattern(Collective c, int me, int n, int root, size_t piece, const char* send, const char* recv,
                 DeviceArgs* a) {
  const uint32_t everyone = (n >= 32 ? 0xFFFFFFFFu : ((1u << n) - 1));
  const uint32_t rootBit = 1u << root;
  a->pieceBytes = piece;
  a->sendTo = a->recvFrom = a->srcByRank = a->dstByRank = a->peerDstByRank = 0;
  bool reduces = false;
  switch (c) {
    case Collective::kReduceScatter:  // block d of our input to d; every rank's block `me` reduced
      a->sendTo = a->recvFrom = everyone;
      a->srcByRank = everyone;
      reduces = true;
      break;
    case Collective::kAllGather:  // our input to everyone; rank s's lands at s * piece everywhere
      a->sendTo = a->recvFrom = everyone;
      a->dstByRank = a->peerDstByRank = everyone;
      break;
    case Collective::kBroadcast:  // root's input to everyone
      a->sendTo = me == root ? everyone : 0;
      a->recvFrom = rootBit;
      break;
    case Collective::kReduce:  // every input to root, reduced there
      a->sendTo = rootBit;
      a->recvFrom = me == root ? everyone : 0;
      reduces = true;
      break;
    case Collective::kGather:  // every input to root, rank s's at s * piece
      a->sendTo = rootBit;
      a->recvFrom = me == root ? everyone : 0;
      a->dstByRank = everyone;
      a->peerDstByRank = rootBit;
      break;
    case Collective::kScatter:  // root's block d to d
      a->sendTo = me == root ? everyone : 0;
      a->recvFrom = rootBit;
      a->srcByRank = everyone;
      break;
    case Collective::kAlltoAll:  // block d to d, rank s's at s * piece
      a->sendTo = a->recvFrom = everyone;
      a->srcByRank = a->dstByRank = a->peerDstByRank = everyone;
      break;
    case Collective::kAllReduce: break;
  }
  const uint32_t self = 1u << me;
  const size_t ownSrc = (a->srcByRank & self) ? static_cast<size_t>(me) * piece : 0;
  const size_t ownDst = (a->dstByRank & self) ? static_cast<size_t>(me) * piece : 0;
  if (!reduces && (a->sendTo & self) && (a->recvFrom & self) && send + ownSrc == recv + ownDst) {
    a->sendTo &= ~self;
    a->recvFrom &= ~self;
  }
  // The launch covenant (exchange.cuh): patterns in which some rank hears from only some peers
  // exchange arrival flags. Decided per collective, so that every rank decides alike.
  a->arrive = collectiveShape(c).rooted ? 1u : 0u;
}

uint32_t peerSrcByRankOf(Collective c, int root, int n) {
  uint32_t mask = 0;
  for (int p = 0; p < n; ++p)
    if (extentsOf(c, p, root, n).sendPieces == static_cast<size_t>(n) && n > 1) mask |= 1u << p;
  return mask;
}

void fillTwoshot(Collective c, int me, int root, size_t count, size_t elemSize, DeviceArgs* a) {
  a->root = root;
  a->count = c == Collective::kBroadcast ? count * elemSize : count;
  if (c == Collective::kReduce && me != root) a->recv = nullptr;
}

}  // namespace yali
