#include "alltoallv_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace yali_perf {
namespace {

// SplitMix64 (the generator and its finalizer, as data_check.cuh's Mix64): small, fast, and the
// same numbers on every machine, which is what lets every rank regenerate every routing.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ull;
    return Mix64(state_);
  }
  // Uniform in [0, 1), from the top 53 bits.
  double Unit() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t state_;
};

// Salts that keep the streams of the different uses of one seed apart.
constexpr uint64_t kPopularitySalt = 0x706f70756c6172ull;  // "popular"
constexpr uint64_t kTokenSalt = 0x746f6b656eull;           // "token"
constexpr uint64_t kRowSalt = 0x726f7773ull;                // "rows"

// A choice drawn from the whole distribution is redrawn when the token already chose that expert;
// after this many redraws in a row (a token that has taken most of the weight, e.g. every expert
// of the hot rank) the choice is drawn from the remaining experts directly, by one scan.
constexpr int kMaxRedraws = 16;

size_t AlignUp(size_t value, size_t align) { return (value + align - 1) / align * align; }

}  // namespace

std::vector<double> ExpertWeights(const RoutingSpec& spec) {
  const size_t experts = static_cast<size_t>(spec.experts);
  std::vector<double> weights(experts, 1.0);
  switch (spec.dist) {
    case TokenDist::kUniform: break;
    case TokenDist::kZipf: {
      std::vector<size_t> popularity(experts);  // [i]: the expert of popularity rank i
      std::iota(popularity.begin(), popularity.end(), size_t(0));
      Stream stream(Mix64(spec.seed ^ kPopularitySalt));
      for (size_t i = experts; i > 1; --i)  // Fisher-Yates
        std::swap(popularity[i - 1], popularity[stream.Next() % i]);
      for (size_t i = 0; i < experts; ++i)
        weights[popularity[i]] = std::pow(static_cast<double>(i + 1), -spec.zipf_s);
      break;
    }
    case TokenDist::kHot: {
      const size_t local = static_cast<size_t>(spec.LocalExperts());
      if (experts > local) {
        for (size_t g = 0; g < experts; ++g)
          weights[g] = g / local == static_cast<size_t>(kHotRank)
                           ? spec.hot_share / local
                           : (1.0 - spec.hot_share) / (experts - local);
      }
      break;
    }
  }
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : weights) w /= total;
  return weights;
}

std::vector<int32_t> RouteTokens(const RoutingSpec& spec, int rank) {
  const std::vector<double> weights = ExpertWeights(spec);
  const size_t experts = weights.size();
  std::vector<double> cumulative(experts);
  std::partial_sum(weights.begin(), weights.end(), cumulative.begin());
  const double total = cumulative.back();
  const size_t topk = static_cast<size_t>(spec.topk);
  std::vector<int32_t> routing(spec.tokens * topk);
  // chosen_by[g]: the last token that chose expert g, plus 1 (0: none), so that nothing is cleared
  // between tokens.
  std::vector<size_t> chosen_by(experts, 0);
  for (size_t t = 0; t < spec.tokens; ++t) {
    Stream stream(Mix64(spec.seed ^ kTokenSalt ^ Mix64((static_cast<uint64_t>(rank) << 40) ^ t)));
    double chosen_weight = 0;
    for (size_t k = 0; k < topk; ++k) {
      size_t pick = experts;
      for (int draw = 0; draw < kMaxRedraws && pick == experts; ++draw) {
        const double target = stream.Unit() * total;
        size_t g = static_cast<size_t>(
            std::upper_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin());
        g = std::min(g, experts - 1);
        if (chosen_by[g] != t + 1) pick = g;
      }
      if (pick == experts) {
        // Among the experts this token has not chosen, by their weights.
        double target = stream.Unit() * (total - chosen_weight);
        for (size_t g = 0; g < experts; ++g) {
          if (chosen_by[g] == t + 1) continue;
          pick = g;  // the last one left when rounding leaves target >= 0 to the end
          target -= weights[g];
          if (target < 0) break;
        }
      }
      chosen_by[pick] = t + 1;
      chosen_weight += weights[pick];
      routing[t * topk + k] = static_cast<int32_t>(pick);
    }
  }
  return routing;
}

AlltoAllvPlan BuildPlan(const RoutingSpec& spec, size_t align_rows, const std::vector<int>& ranks) {
  const int n = spec.nranks;
  const size_t experts = static_cast<size_t>(spec.experts);
  const int local_experts = spec.LocalExperts();
  const size_t rows_per_rank = spec.RowsPerRank();
  const bool with_ids = !ranks.empty();

  // Every rank's rows to each global expert, and (for the layouts) its row ids in send order: a
  // stable counting sort of its choices by expert, so each expert's rows keep their (t, k) order.
  std::vector<std::vector<int64_t>> send_rows(n, std::vector<int64_t>(experts, 0));
  std::vector<std::vector<size_t>> first_row(n, std::vector<size_t>(experts + 1, 0));
  std::vector<std::vector<int64_t>> send_ids(n);
  for (int s = 0; s < n; ++s) {
    const std::vector<int32_t> routing = RouteTokens(spec, s);
    for (int32_t g : routing) ++send_rows[s][g];
    for (size_t g = 0; g < experts; ++g) first_row[s][g + 1] = first_row[s][g] + send_rows[s][g];
    if (!with_ids) continue;
    std::vector<size_t> next(first_row[s].begin(), first_row[s].end() - 1);
    send_ids[s].resize(rows_per_rank);
    for (size_t slot = 0; slot < routing.size(); ++slot)
      send_ids[s][next[routing[slot]]++] = static_cast<int64_t>(s * rows_per_rank + slot);
  }
  // The rows of sender s for global expert g, in its send order.
  auto segment = [&](int s, size_t g, std::vector<int64_t>* out) {
    out->insert(out->end(), send_ids[s].begin() + first_row[s][g],
                send_ids[s].begin() + first_row[s][g + 1]);
  };

  AlltoAllvPlan plan;
  plan.spec = spec;
  plan.align_rows = align_rows;
  plan.recv_rows.assign(n, 0);
  size_t largest_extent = 0;
  for (int d = 0; d < n; ++d) {
    size_t end = 0;
    for (int e = 0; e < local_experts; ++e) {
      if (e > 0) end = AlignUp(end, align_rows);
      const size_t g = static_cast<size_t>(d) * local_experts + e;
      for (int s = 0; s < n; ++s) {
        end += static_cast<size_t>(send_rows[s][g]);
        plan.recv_rows[d] += static_cast<size_t>(send_rows[s][g]);
      }
    }
    largest_extent = std::max(largest_extent, end);
    plan.max_recv_rows = std::max(plan.max_recv_rows, plan.recv_rows[d]);
  }
  plan.capacity_rows = AlignUp(largest_extent, align_rows);

  for (int d : ranks) {
    RankLayout layout;
    layout.rank = d;
    layout.send_rows = send_rows[d];
    layout.send_ids = send_ids[d];
    layout.expert_counts.assign(static_cast<size_t>(local_experts) * n, 0);
    layout.expert_offsets.assign(local_experts + 1, 0);
    for (int e = 0; e < local_experts; ++e) {
      const size_t start = e == 0 ? 0 : AlignUp(layout.expert_ids.size(), align_rows);
      layout.expert_ids.resize(start, kNoRow);  // the padding before this segment
      layout.expert_offsets[e] = static_cast<int64_t>(start);
      const size_t g = static_cast<size_t>(d) * local_experts + e;
      for (int s = 0; s < n; ++s) {
        layout.expert_counts[static_cast<size_t>(e) * n + s] = send_rows[s][g];
        segment(s, g, &layout.expert_ids);
      }
    }
    layout.expert_offsets[local_experts] = static_cast<int64_t>(layout.expert_ids.size());
    layout.rank_rows.assign(n, 0);
    for (int s = 0; s < n; ++s) {
      for (int e = 0; e < local_experts; ++e) {
        const size_t g = static_cast<size_t>(d) * local_experts + e;
        layout.rank_rows[s] += send_rows[s][g];
        segment(s, g, &layout.rank_ids);
      }
    }
    plan.layouts.push_back(std::move(layout));
  }
  return plan;
}

double ReceiveSkew(const AlltoAllvPlan& plan) {
  const size_t mean = plan.spec.RowsPerRank();
  return mean == 0 ? 1.0 : static_cast<double>(plan.max_recv_rows) / static_cast<double>(mean);
}

uint64_t RowSeed(const RoutingSpec& spec, DType dtype) {
  uint64_t seed = Mix64(spec.seed ^ kRowSalt);
  seed = Mix64(seed ^ (static_cast<uint64_t>(dtype) + 1));
  seed = Mix64(seed ^ (static_cast<uint64_t>(spec.dist) + 1));
  return Mix64(seed ^ spec.tokens);
}

const std::vector<VarColumn>& VarColumns() {
  static const std::vector<VarColumn> kColumns = {
      {"dispatch", "yali", VarForm::kExpertDispatch, false, "yaliExpertDispatch"},
      {"combine", "yali", VarForm::kExpertCombine, false, "yaliExpertCombine"},
      {"dev_counts", "yali", VarForm::kDeviceCounts, false, "yaliAlltoAllvDeviceCounts"},
      {"host_counts", "yali", VarForm::kHostCounts, true,
       "yaliAlltoAll (split sizes), copy, sync, yaliAlltoAllv"},
      {"nccl_p2p", "nccl", VarForm::kHostCounts, true,
       "ncclAlltoAll (split sizes), copy, sync, grouped ncclSend/ncclRecv"},
  };
  return kColumns;
}

const std::vector<VarRatio>& VarRatios() {
  static const std::vector<VarRatio> kRatios = {
      // What torch does with NCCL against YALI's dispatch (which also lands rows expert-major).
      {"nccl/disp", "nccl_p2p", "dispatch"},
      // The host round trip's price, in one library and one layout.
      {"host/dev", "host_counts", "dev_counts"},
      // Library against library, same form and round trip.
      {"nccl/host", "nccl_p2p", "host_counts"},
  };
  return kRatios;
}

int VarColumnIndex(const char* name) {
  const std::vector<VarColumn>& columns = VarColumns();
  for (size_t i = 0; i < columns.size(); ++i)
    if (std::strcmp(columns[i].name, name) == 0) return static_cast<int>(i);
  return -1;
}

}  // namespace yali_perf
