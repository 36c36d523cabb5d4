// -C alltoallv's cases as data: the routing of every rank's tokens, the reference layout of every
// buffer, and the columns of a line. Host-only, so that all of it is unit-tested without a GPU
// (tests/test_perf_alltoallv.cc); alltoallv.cc runs it.
//
// Routing. Each token of each rank picks `topk` distinct global experts, drawn by the case's
// distribution (ExpertWeights) from a random stream of its own: a pure function of (seed, rank,
// token). Every process regenerates every rank's routing, so each rank knows, with no exchange,
// which row every position of its outputs must hold.
//
// Rows. Row (s, t, k) is what rank s sends for the k-th choice of its token t. Its id is
// RowId = (s * tokens + t) * topk + k, and its element c is a pure function of (row seed, s,
// (t * topk + k) * hidden + c) (data_check.cuh: AlltoAllvElement), so every received row is
// checked exactly, element by element. Id kNoRow marks a position that no call may write (the
// padding between experts' segments, the capacity past the end): it must keep the poison.
//
// Layouts (yali.h, "AlltoAllv: uneven exchange"; E experts per rank, global expert g = d * E + e
// is local expert e of rank d):
//   send order    rank s's rows sorted by global expert, each expert's rows by (t, k): the
//                 dispatch's sendbuff and the combine's output. Sorted by expert is sorted by
//                 destination rank, so it is also the packed input of the 1-D forms.
//   expert-major  rank d's dispatch output: local expert e's segment starts at expertOffsets[e]
//                 (the previous segment's end rounded up to align_rows; expertOffsets[0] = 0) and
//                 holds rank 0's rows for g = d * E + e, then rank 1's, ... (each in its sender's
//                 order); expertOffsets[E] is the end of the last segment.
//   rank-major    rank d's output of the 1-D forms (yaliAlltoAllv, yaliAlltoAllvDeviceCounts,
//                 NCCL's send/recv): rank 0's rows for d, then rank 1's, ..., packed.
#ifndef YALI_PERF_ALLTOALLV_PLAN_H_
#define YALI_PERF_ALLTOALLV_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "perf_args.h"

namespace yali_perf {

// A position of a reference layout that holds no row (the poison must stay there).
constexpr int64_t kNoRow = -1;

// Everything that fixes every rank's routing in one case.
struct RoutingSpec {
  int nranks = 1;
  size_t tokens = 0;  // per rank
  int topk = 1;
  int experts = 1;  // in all, a multiple of nranks
  TokenDist dist = TokenDist::kUniform;
  double zipf_s = 1.0;
  double hot_share = 0.5;
  uint64_t seed = 0;

  int LocalExperts() const { return experts / nranks; }
  // Rows each rank sends: one per (token, choice), whatever the distribution.
  size_t RowsPerRank() const { return tokens * static_cast<size_t>(topk); }
};

// The rank whose experts --dist hot favours.
constexpr int kHotRank = 0;

// The weight of each global expert (sums to 1): uniform 1/X; zipf 1/(i+1)^s for the expert of
// popularity rank i, popularity a permutation of the experts drawn from the seed (the same on
// every rank, as a model's popular experts are popular for every rank's tokens, and spread over
// the ranks rather than all on rank 0); hot: kHotRank's E experts share hot_share, the others the
// rest (uniform when every expert is on kHotRank).
std::vector<double> ExpertWeights(const RoutingSpec& spec);

// Rank `rank`'s routing: [t * topk + k] = the global expert of token t's k-th choice; the choices
// of one token are distinct, each drawn by the weights among the experts not yet chosen. Token t
// draws from a stream seeded by (seed, rank, t), so its choices do not depend on --tokens.
std::vector<int32_t> RouteTokens(const RoutingSpec& spec, int rank);

inline int64_t RowId(const RoutingSpec& spec, int rank, size_t token, int choice) {
  return static_cast<int64_t>((static_cast<size_t>(rank) * spec.tokens + token) * spec.topk +
                              static_cast<size_t>(choice));
}

// What one rank sends and receives in one case: the inputs of its calls and the reference of its
// outputs.
struct RankLayout {
  int rank = 0;
  // Send side.
  std::vector<int64_t> send_rows;  // [X] rows to each global expert: the dispatch's sendCounts
  std::vector<int64_t> send_ids;   // [tokens * topk] row ids, in send order
  // Dispatch (expert-major).
  std::vector<int64_t> expert_counts;   // [E * n], [e * n + s]: the dispatch's recvCounts
  std::vector<int64_t> expert_offsets;  // [E + 1]: the dispatch's expertOffsets
  std::vector<int64_t> expert_ids;      // [expert_offsets[E]] row ids; kNoRow for padding
  // The 1-D forms (rank-major).
  std::vector<int64_t> rank_rows;  // [n] rows from each rank
  std::vector<int64_t> rank_ids;   // [sum of rank_rows] row ids
};

// One case: its spec, the sizes every rank agrees on, and the layouts of the ranks asked for.
struct AlltoAllvPlan {
  RoutingSpec spec;
  size_t align_rows = 1;
  // Rows each rank receives (the same as the rank-major rows), and the largest over ranks.
  std::vector<size_t> recv_rows;
  size_t max_recv_rows = 0;
  // The dispatch's capacityRows, the same on every rank: the largest expert-major extent
  // (expertOffsets[E]) over ranks, rounded up to align_rows, so that the busiest rank's output
  // fills it.
  size_t capacity_rows = 0;
  std::vector<RankLayout> layouts;  // in the order of BuildPlan's `ranks`
};

// Routes every rank's tokens and lays out the ranks in `ranks` (the ranks this process drives;
// none for the sizes alone).
AlltoAllvPlan BuildPlan(const RoutingSpec& spec, size_t align_rows, const std::vector<int>& ranks);

// The largest receive over ranks divided by the mean (= RowsPerRank(): every row sent is received
// once): 1 for a perfectly even exchange, nranks when one rank receives everything.
double ReceiveSkew(const AlltoAllvPlan& plan);

// The seed of the row data of one case: the same for every column and library at (seed, dtype,
// distribution, tokens), different elsewhere.
uint64_t RowSeed(const RoutingSpec& spec, DType dtype);

// The columns of a line of -C alltoallv, in table order. Each is one form of AlltoAllv on one
// library; `host_round_trip` forms read their counts on the host, so every call is preceded, as in
// torch, by an all-to-all of the split sizes (the library's AlltoAll of one int64 per rank), a
// copy of the counts to the host and a stream synchronization, and is timed with them; they cannot
// be captured into a graph with counts that change from step to step.
struct VarColumn {
  const char* name;  // the table's and the JSON's: "dispatch", "combine", ...
  const char* impl;  // the backend that runs it: "yali" or "nccl"
  VarForm form;
  bool host_round_trip;
  const char* call;  // what it calls, for the notes and the JSON
};
const std::vector<VarColumn>& VarColumns();

// The ratios of a line: time of column `over` / time of column `under`.
struct VarRatio {
  const char* name;  // the table's heading and the JSON's key
  const char* over;
  const char* under;
};
const std::vector<VarRatio>& VarRatios();

// The index of column `name` in VarColumns(), or -1.
int VarColumnIndex(const char* name);

}  // namespace yali_perf

#endif  // YALI_PERF_ALLTOALLV_PLAN_H_
