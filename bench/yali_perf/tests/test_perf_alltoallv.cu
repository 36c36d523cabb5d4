// Host test of -C alltoallv's logic, with no GPU: its options; the routing (every token's choices
// distinct and in range, counts summing to tokens x topk, each distribution's shape, the same
// routing for the same seed whatever --tokens); the reference layouts against a brute-force
// reconstruction from the routing; the row check (data_check.cuh) on simulated outputs, right and
// wrong; the table and the JSON. Compiled by nvcc for data_check.cuh; makes no CUDA call. Prints
// "N passed, N failed" last; non-zero exit on failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "alltoallv_plan.h"
#include "alltoallv_report.h"
#include "data_check.cuh"
#include "json_writer.h"
#include "perf_args.h"
#include "perf_test_support.h"

using namespace yali_perf;

namespace {

using namespace yali_perf_test;

bool ParseFails(const std::vector<std::string>& words, const std::string& error_part) {
  PerfArgs args;
  std::string error;
  if (Parse(words, &args, &error)) return false;
  if (error.find(error_part) == std::string::npos) {
    std::printf("  error '%s' lacks '%s'\n", error.c_str(), error_part.c_str());
    return false;
  }
  return true;
}

RoutingSpec Spec(int nranks, size_t tokens, int topk, int experts, TokenDist dist) {
  RoutingSpec spec;
  spec.nranks = nranks;
  spec.tokens = tokens;
  spec.topk = topk;
  spec.experts = experts;
  spec.dist = dist;
  spec.zipf_s = 1.0;
  spec.hot_share = 0.5;
  spec.seed = 42;
  return spec;
}

std::vector<int64_t> ExpertCounts(const RoutingSpec& spec, int rank) {
  std::vector<int64_t> counts(spec.experts, 0);
  for (int32_t g : RouteTokens(spec, rank)) ++counts[g];
  return counts;
}

// ---- Options ------------------------------------------------------------------------------------

void TestOptions() {
  PerfArgs args;
  EXPECT(ParseOk({"-C", "alltoallv"}, &args) && RunsAlltoAllv(args));
  // The issue's layer by default, in bf16.
  EXPECT(args.dtypes == std::vector<DType>({DType::kBfloat16}));
  EXPECT(args.alltoallv.tokens == std::vector<size_t>({4096}) && args.alltoallv.hidden == 7168 &&
         args.alltoallv.topk == 8 && args.alltoallv.experts == 256 &&
         args.alltoallv.dists == std::vector<TokenDist>({TokenDist::kUniform}) &&
         args.alltoallv.align_rows == 1);
  EXPECT(ParseOk({"-C", "alltoallv", "-d", "float"}, &args) &&
         args.dtypes == std::vector<DType>({DType::kFloat}));
  // Lists and ranges (doubling), with K suffixes; duplicates dropped.
  EXPECT(ParseOk({"-C", "alltoallv", "--tokens", "1K:4K,512,1024"}, &args) &&
         args.alltoallv.tokens == std::vector<size_t>({1024, 2048, 4096, 512}));
  EXPECT(ParseOk({"-C", "alltoallv", "--tokens=3:20"}, &args) &&
         args.alltoallv.tokens == std::vector<size_t>({3, 6, 12}));
  EXPECT(ParseOk({"-C", "alltoallv", "--dist", "zipf,hot", "--zipf-s", "1.5", "--hot-share",
                  "0.75", "--hidden", "4096", "--topk", "6", "--experts", "64", "--align", "128",
                  "--seed", "0x10"},
                 &args));
  EXPECT(args.alltoallv.dists == std::vector<TokenDist>({TokenDist::kZipf, TokenDist::kHot}));
  EXPECT(args.alltoallv.zipf_s == 1.5 && args.alltoallv.hot_share == 0.75);
  EXPECT(args.alltoallv.hidden == 4096 && args.alltoallv.topk == 6 &&
         args.alltoallv.experts == 64 && args.alltoallv.align_rows == 128 &&
         args.alltoallv.seed == 16);
  EXPECT(ParseOk({"-C", "alltoallv", "--dist", "all"}, &args) && args.alltoallv.dists.size() == 3);
  EXPECT(ParseOk({"-C", "alltoallv", "-G", "10", "-n", "5", "--impl", "yali", "-R", "1"}, &args));

  // Not in -C all (its sizes are tokens), alone, and its options only with it.
  EXPECT(ParseOk({"-C", "all"}, &args) &&
         std::find(args.collectives.begin(), args.collectives.end(), CollId::kAlltoAllv) ==
             args.collectives.end());
  EXPECT(std::find(NamedCollectives().begin(), NamedCollectives().end(), CollId::kAlltoAllv) !=
         NamedCollectives().end());
  EXPECT(std::string(CollName(CollId::kAlltoAllv)) == "alltoallv");
  EXPECT(static_cast<int>(CollId::kAlltoAllv) == 8);  // yaliCollAlltoAllv
  EXPECT(ParseFails({"-C", "alltoallv,allreduce"}, "runs alone"));
  EXPECT(ParseFails({"--tokens", "4096"}, "--tokens applies to -C alltoallv only"));
  EXPECT(ParseFails({"-C", "allreduce", "--dist", "zipf"}, "applies to -C alltoallv only"));
  for (const char* option : {"-b", "-e", "-f", "-i"})
    Expect(ParseFails({"-C", "alltoallv", option, "2"}, "does not apply to -C alltoallv"),
           std::string(option) + " refused with alltoallv", __LINE__);
  EXPECT(ParseFails({"-C", "alltoallv", "-o", "max"}, "it reduces nothing"));
  EXPECT(ParseFails({"-C", "alltoallv", "-r", "1"}, "it has no root"));
  EXPECT(ParseFails({"-C", "alltoallv", "--inplace", "1"}, "never runs in place"));
  EXPECT(ParseFails({"-C", "alltoallv", "--zipf-s", "2"}, "--zipf-s needs --dist zipf"));
  EXPECT(ParseFails({"-C", "alltoallv", "--hot-share", "0.2"}, "--hot-share needs --dist hot"));
  EXPECT(ParseFails({"-C", "alltoallv", "--topk", "9", "--experts", "8"}, "is more than"));
  EXPECT(ParseFails({"--tune", "-C", "alltoallv"}, "does not apply to --tune"));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--tokens", "0"}, {"--tokens", "8:4"}, {"--tokens", "x"},
        {"--hidden", "0"}, {"--topk", "0"}, {"--experts", "2000"}, {"--dist", "pareto"},
        {"--zipf-s", "-1"}, {"--hot-share", "1"}, {"--align", "0"}, {"--seed", "-3"}}) {
    std::vector<std::string> words = {"-C", "alltoallv"};
    words.insert(words.end(), bad.begin(), bad.end());
    Expect(ParseFails(words, "bad value"), bad[0] + " " + bad[1] + " refused", __LINE__);
  }

  const std::string usage = PerfUsage("yali-perf");
  for (const char* needle : {"alltoallv", "--tokens <list>", "--dist <list>", "--zipf-s",
                             "--hot-share", "--align <rows>", "--experts <n>", "--topk <k>"})
    Expect(usage.find(needle) != std::string::npos, std::string("usage has ") + needle, __LINE__);
  std::istringstream lines(usage);
  bool narrow = true;
  for (std::string line; std::getline(lines, line);) narrow = narrow && line.size() <= 100;
  EXPECT(narrow);
}

// ---- Routing ------------------------------------------------------------------------------------

void TestWeights() {
  const std::vector<double> uniform = ExpertWeights(Spec(4, 1, 1, 32, TokenDist::kUniform));
  EXPECT(uniform.size() == 32);
  EXPECT(std::all_of(uniform.begin(), uniform.end(),
                     [](double w) { return std::fabs(w - 1.0 / 32) < 1e-12; }));

  // Zipf: the weights, sorted, are 1/(i+1)^s normalized; which expert gets which is a permutation
  // drawn from the seed alone (so every rank agrees), and not the identity.
  RoutingSpec zipf = Spec(4, 1, 1, 32, TokenDist::kZipf);
  zipf.zipf_s = 1.2;
  std::vector<double> weights = ExpertWeights(zipf);
  EXPECT(std::fabs(std::accumulate(weights.begin(), weights.end(), 0.0) - 1.0) < 1e-12);
  std::vector<double> sorted = weights;
  std::sort(sorted.rbegin(), sorted.rend());
  bool zipf_shape = true;
  for (size_t i = 1; i < sorted.size(); ++i)
    zipf_shape = zipf_shape &&
                 std::fabs(sorted[i] / sorted[0] - std::pow(i + 1.0, -1.2)) < 1e-9;
  EXPECT(zipf_shape);
  EXPECT(!std::is_sorted(weights.rbegin(), weights.rend()));
  EXPECT(ExpertWeights(zipf) == weights);
  RoutingSpec reseeded = zipf;
  reseeded.seed = 43;
  EXPECT(ExpertWeights(reseeded) != weights);
  zipf.zipf_s = 0;  // exponent 0: uniform
  weights = ExpertWeights(zipf);
  EXPECT(std::fabs(weights[0] - weights[31]) < 1e-15);

  // Hot: kHotRank's experts share hot_share, evenly; the rest share the remainder.
  RoutingSpec hot = Spec(4, 1, 1, 32, TokenDist::kHot);
  hot.hot_share = 0.7;
  weights = ExpertWeights(hot);
  double on_hot = 0;
  for (int g = 0; g < 32; ++g)
    if (g / hot.LocalExperts() == kHotRank) on_hot += weights[g];
  EXPECT(std::fabs(on_hot - 0.7) < 1e-12);
  EXPECT(std::fabs(weights[31] - 0.3 / 24) < 1e-12);
  // Every expert on one rank: nothing to favour.
  weights = ExpertWeights(Spec(1, 1, 1, 8, TokenDist::kHot));
  EXPECT(std::fabs(weights[0] - weights[7]) < 1e-15);
}

void TestRouting() {
  for (TokenDist dist : {TokenDist::kUniform, TokenDist::kZipf, TokenDist::kHot}) {
    for (int topk : {1, 3, 8}) {
      const RoutingSpec spec = Spec(4, 300, topk, 16, dist);
      const std::vector<int32_t> routing = RouteTokens(spec, 1);
      const std::string label =
          std::string(TokenDistName(dist)) + " top-" + std::to_string(topk);
      Expect(routing.size() == spec.RowsPerRank(), label + ": one expert per (token, choice)",
             __LINE__);
      bool distinct = true;
      bool in_range = true;
      for (size_t t = 0; t < spec.tokens; ++t) {
        std::set<int32_t> chosen(routing.begin() + t * topk, routing.begin() + (t + 1) * topk);
        distinct = distinct && chosen.size() == static_cast<size_t>(topk);
        in_range = in_range && *chosen.begin() >= 0 && *chosen.rbegin() < spec.experts;
      }
      Expect(distinct, label + ": a token's choices are distinct", __LINE__);
      Expect(in_range, label + ": choices are global experts", __LINE__);
      const std::vector<int64_t> counts = ExpertCounts(spec, 1);
      Expect(std::accumulate(counts.begin(), counts.end(), int64_t(0)) ==
                 static_cast<int64_t>(spec.RowsPerRank()),
             label + ": counts sum to tokens x topk", __LINE__);
      // Determinism: the same routing again; another rank's differs; a token's choices do not
      // depend on how many tokens there are.
      Expect(RouteTokens(spec, 1) == routing, label + ": deterministic", __LINE__);
      Expect(RouteTokens(spec, 2) != routing, label + ": ranks differ", __LINE__);
      RoutingSpec fewer = spec;
      fewer.tokens = 100;
      const std::vector<int32_t> prefix = RouteTokens(fewer, 1);
      Expect(std::equal(prefix.begin(), prefix.end(), routing.begin()),
             label + ": token t routes alike whatever --tokens", __LINE__);
    }
  }
  // Topk = every expert: each token takes them all (the draw falls back to the scan).
  const RoutingSpec all = Spec(2, 20, 8, 8, TokenDist::kHot);
  const std::vector<int64_t> every = ExpertCounts(all, 0);
  EXPECT(std::all_of(every.begin(), every.end(), [](int64_t c) { return c == 20; }));
}

// With one choice per token the draws are independent: each expert's count is binomial around
// tokens x its weight. Allowing 5 standard deviations keeps the test far from flaky while a wrong
// distribution (the hot rank not favoured, zipf upside down) is off by dozens of them.
bool CountsFollowWeights(const RoutingSpec& spec, int rank) {
  const std::vector<double> weights = ExpertWeights(spec);
  const std::vector<int64_t> counts = ExpertCounts(spec, rank);
  bool ok = true;
  for (size_t g = 0; g < weights.size(); ++g) {
    const double mean = spec.tokens * weights[g];
    const double sigma = std::sqrt(spec.tokens * weights[g] * (1 - weights[g]));
    if (std::fabs(counts[g] - mean) > 5 * sigma + 1) {
      std::printf("  %s expert %zu: %lld picks, expected %.1f +- %.1f\n", TokenDistName(spec.dist),
                  g, static_cast<long long>(counts[g]), mean, sigma);
      ok = false;
    }
  }
  return ok;
}

void TestDistributionShapes() {
  const RoutingSpec uniform = Spec(8, 20000, 1, 64, TokenDist::kUniform);
  EXPECT(CountsFollowWeights(uniform, 3));
  RoutingSpec zipf = Spec(8, 20000, 1, 64, TokenDist::kZipf);
  EXPECT(CountsFollowWeights(zipf, 3));
  RoutingSpec hot = Spec(8, 20000, 1, 64, TokenDist::kHot);
  hot.hot_share = 0.6;
  EXPECT(CountsFollowWeights(hot, 5));

  // Top-8 over 256 experts, DeepSeek-like. Uniform: every rank receives about its share (skew
  // near 1). Hot: rank 0 receives far more than the others, and the skew says so. Zipf: the most
  // popular expert is picked most.
  const AlltoAllvPlan even = BuildPlan(Spec(8, 2048, 8, 256, TokenDist::kUniform), 1, {});
  EXPECT(ReceiveSkew(even) > 1.0 && ReceiveSkew(even) < 1.1);
  const AlltoAllvPlan skewed = BuildPlan(Spec(8, 2048, 8, 256, TokenDist::kHot), 1, {});
  EXPECT(skewed.max_recv_rows == skewed.recv_rows[kHotRank]);
  EXPECT(ReceiveSkew(skewed) > 2.5);
  for (int d = 1; d < 8; ++d) EXPECT(skewed.recv_rows[d] < skewed.recv_rows[kHotRank] / 3);
  RoutingSpec zipf8 = Spec(8, 2048, 8, 256, TokenDist::kZipf);
  const std::vector<double> weights = ExpertWeights(zipf8);
  const std::vector<int64_t> counts = ExpertCounts(zipf8, 2);
  const size_t top = std::max_element(weights.begin(), weights.end()) - weights.begin();
  EXPECT(std::max_element(counts.begin(), counts.end()) - counts.begin() ==
         static_cast<std::ptrdiff_t>(top));
  EXPECT(ReceiveSkew(BuildPlan(zipf8, 1, {})) > ReceiveSkew(even));
}

// ---- Layouts ------------------------------------------------------------------------------------

// Rank d's expected layouts, rebuilt by brute force from every rank's routing: scan every (s, t,
// k) for each expert instead of sorting.
struct BruteLayout {
  std::vector<int64_t> expert_ids;
  std::vector<int64_t> expert_offsets;
  std::vector<int64_t> expert_counts;
  std::vector<int64_t> rank_ids;
  std::vector<int64_t> rank_rows;
  std::vector<int64_t> send_ids;
};

BruteLayout Brute(const RoutingSpec& spec, size_t align, int d) {
  const int n = spec.nranks;
  const int local = spec.LocalExperts();
  std::vector<std::vector<int32_t>> routing;
  for (int s = 0; s < n; ++s) routing.push_back(RouteTokens(spec, s));
  auto rows_for = [&](int s, int g) {
    std::vector<int64_t> ids;
    for (size_t t = 0; t < spec.tokens; ++t)
      for (int k = 0; k < spec.topk; ++k)
        if (routing[s][t * spec.topk + k] == g) ids.push_back(RowId(spec, s, t, k));
    return ids;
  };
  BruteLayout b;
  b.expert_counts.assign(static_cast<size_t>(local) * n, 0);
  b.rank_rows.assign(n, 0);
  for (int e = 0; e < local; ++e) {
    while (e > 0 && b.expert_ids.size() % align != 0) b.expert_ids.push_back(kNoRow);
    b.expert_offsets.push_back(static_cast<int64_t>(b.expert_ids.size()));
    for (int s = 0; s < n; ++s) {
      const std::vector<int64_t> ids = rows_for(s, d * local + e);
      b.expert_counts[static_cast<size_t>(e) * n + s] = static_cast<int64_t>(ids.size());
      b.expert_ids.insert(b.expert_ids.end(), ids.begin(), ids.end());
    }
  }
  b.expert_offsets.push_back(static_cast<int64_t>(b.expert_ids.size()));
  for (int s = 0; s < n; ++s)
    for (int e = 0; e < local; ++e) {
      const std::vector<int64_t> ids = rows_for(s, d * local + e);
      b.rank_rows[s] += static_cast<int64_t>(ids.size());
      b.rank_ids.insert(b.rank_ids.end(), ids.begin(), ids.end());
    }
  for (int g = 0; g < spec.experts; ++g) {
    const std::vector<int64_t> ids = rows_for(d, g);
    b.send_ids.insert(b.send_ids.end(), ids.begin(), ids.end());
  }
  return b;
}

void TestLayouts() {
  for (TokenDist dist : {TokenDist::kUniform, TokenDist::kZipf, TokenDist::kHot}) {
    for (size_t align : {size_t(1), size_t(4), size_t(7)}) {
      const RoutingSpec spec = Spec(3, 37, 3, 12, dist);
      const AlltoAllvPlan plan = BuildPlan(spec, align, {0, 1, 2});
      const std::string label =
          std::string(TokenDistName(dist)) + " align " + std::to_string(align);
      size_t received = 0;
      size_t largest_extent = 0;
      bool same = plan.layouts.size() == 3;
      for (int d = 0; d < 3 && same; ++d) {
        const RankLayout& got = plan.layouts[d];
        const BruteLayout want = Brute(spec, align, d);
        same = same && got.rank == d && got.expert_ids == want.expert_ids &&
               got.expert_offsets == want.expert_offsets &&
               got.expert_counts == want.expert_counts && got.rank_ids == want.rank_ids &&
               got.rank_rows == want.rank_rows && got.send_ids == want.send_ids;
        same = same && got.send_rows == ExpertCounts(spec, d);
        received += plan.recv_rows[d];
        same = same && plan.recv_rows[d] == got.rank_ids.size();
        largest_extent = std::max<size_t>(largest_extent, got.expert_offsets.back());
        // Every segment starts aligned, and every row sent lands once somewhere.
        for (size_t e = 0; e + 1 < got.expert_offsets.size(); ++e)
          same = same && got.expert_offsets[e] % static_cast<int64_t>(align) == 0;
      }
      Expect(same, label + ": layouts match the brute-force ones", __LINE__);
      Expect(received == 3 * spec.RowsPerRank(), label + ": every row received once", __LINE__);
      Expect(plan.capacity_rows >= largest_extent && plan.capacity_rows % align == 0 &&
                 plan.capacity_rows < largest_extent + align,
             label + ": capacity is the largest extent, aligned", __LINE__);
      // The sizes alone (no layouts asked for) agree.
      const AlltoAllvPlan sizes = BuildPlan(spec, align, {});
      Expect(sizes.layouts.empty() && sizes.capacity_rows == plan.capacity_rows &&
                 sizes.recv_rows == plan.recv_rows,
             label + ": sizes without layouts", __LINE__);
    }
  }
  // One rank's layout alone is that rank's part of the whole.
  const RoutingSpec spec = Spec(4, 50, 2, 8, TokenDist::kZipf);
  const AlltoAllvPlan whole = BuildPlan(spec, 2, {0, 1, 2, 3});
  const AlltoAllvPlan mine = BuildPlan(spec, 2, {2});
  EXPECT(mine.layouts.size() == 1 && mine.layouts[0].expert_ids == whole.layouts[2].expert_ids &&
         mine.layouts[0].rank_ids == whole.layouts[2].rank_ids);
}

// ---- The row check ------------------------------------------------------------------------------

// What CountWrongRows counts, on the host: a buffer of rows against the ids it must hold.
template <typename T>
size_t WrongElements(const std::vector<T>& buffer, const std::vector<int64_t>& ids,
                     const AlltoAllvRows& rows) {
  size_t wrong = 0;
  for (size_t r = 0; r < ids.size(); ++r)
    for (size_t c = 0; c < rows.hidden; ++c)
      if (check::BitsOf(buffer[r * rows.hidden + c]) !=
          check::BitsOf(check::AlltoAllvExpected<T>(rows, ids[r], c)))
        ++wrong;
  return wrong;
}

template <typename T>
std::vector<T> Filled(const std::vector<int64_t>& ids, const AlltoAllvRows& rows) {
  std::vector<T> buffer(ids.size() * rows.hidden);
  for (size_t r = 0; r < ids.size(); ++r)
    for (size_t c = 0; c < rows.hidden; ++c)
      buffer[r * rows.hidden + c] = check::AlltoAllvExpected<T>(rows, ids[r], c);
  return buffer;
}

template <typename T>
void CheckRowsOfType(DType dtype) {
  const RoutingSpec spec = Spec(3, 40, 2, 6, TokenDist::kHot);
  const AlltoAllvPlan plan = BuildPlan(spec, 4, {1});
  std::vector<int64_t> ids = plan.layouts[0].expert_ids;
  ids.resize(plan.capacity_rows + 3, kNoRow);  // positions past the end
  AlltoAllvRows rows;
  rows.dtype = dtype;
  rows.hidden = 5;
  rows.rows_per_rank = spec.RowsPerRank();
  rows.seed = RowSeed(spec, dtype);
  const std::string label = DTypeName(dtype);
  const std::vector<T> right = Filled<T>(ids, rows);
  Expect(WrongElements(right, ids, rows) == 0, label + ": the right output passes", __LINE__);

  // The first two rows that hold rows: swapped, each element of both is wrong.
  std::vector<size_t> held;
  for (size_t r = 0; r < ids.size(); ++r)
    if (ids[r] != kNoRow) held.push_back(r);
  std::vector<T> swapped = right;
  for (size_t c = 0; c < rows.hidden; ++c)
    std::swap(swapped[held[0] * rows.hidden + c], swapped[held[1] * rows.hidden + c]);
  Expect(WrongElements(swapped, ids, rows) >= rows.hidden,
         label + ": swapped rows are wrong", __LINE__);
  // A row never written keeps the poison.
  std::vector<T> unwritten = right;
  for (size_t c = 0; c < rows.hidden; ++c)
    unwritten[held[2] * rows.hidden + c] = check::AllOnes<T>();
  Expect(WrongElements(unwritten, ids, rows) == rows.hidden,
         label + ": an unwritten row is wrong", __LINE__);
  // A row written where none belongs (padding or past the end).
  const size_t empty = std::find(ids.begin(), ids.end(), kNoRow) - ids.begin();
  std::vector<T> stray = right;
  for (size_t c = 0; c < rows.hidden; ++c)
    stray[empty * rows.hidden + c] = right[held[0] * rows.hidden + c];
  Expect(WrongElements(stray, ids, rows) == rows.hidden,
         label + ": a write into padding is wrong", __LINE__);
  // Another rank's row, or the same row of another case: wrong too.
  std::vector<int64_t> other = ids;
  other[held[0]] = (other[held[0]] + static_cast<int64_t>(spec.RowsPerRank())) %
                   static_cast<int64_t>(spec.nranks * spec.RowsPerRank());
  Expect(WrongElements(Filled<T>(other, rows), ids, rows) > 0,
         label + ": another rank's row is wrong", __LINE__);
  AlltoAllvRows reseeded = rows;
  reseeded.seed ^= 1;
  Expect(WrongElements(Filled<T>(ids, reseeded), ids, rows) > 0,
         label + ": another case's data is wrong", __LINE__);
}

void TestRowCheck() {
  CheckRowsOfType<__nv_bfloat16>(DType::kBfloat16);
  CheckRowsOfType<__half>(DType::kHalf);
  CheckRowsOfType<float>(DType::kFloat);
  CheckRowsOfType<__nv_fp8_e4m3>(DType::kF8e4m3);
  CheckRowsOfType<int8_t>(DType::kInt8);
  CheckRowsOfType<uint64_t>(DType::kUint64);
  // No row's element is ever the poison.
  AlltoAllvRows rows;
  rows.hidden = 64;
  rows.rows_per_rank = 100;
  bool never_poison = true;
  for (int64_t id = 0; id < 400; ++id)
    for (size_t c = 0; c < rows.hidden; ++c)
      never_poison = never_poison &&
                     check::BitsOf(check::AlltoAllvElement<uint8_t>(rows, id, c)) != 0xff &&
                     check::BitsOf(check::AlltoAllvElement<__nv_bfloat16>(rows, id, c)) != 0xffff;
  EXPECT(never_poison);
}

// ---- Table and JSON -----------------------------------------------------------------------------

std::vector<std::string> Fields(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> fields;
  for (std::string field; stream >> field;) fields.push_back(field);
  return fields;
}

VarLine SampleLine() {
  VarLine line;
  line.tokens = 4096;
  line.rows_per_rank = 32768;
  line.bytes_per_rank = 32768 * 14336;
  line.max_recv_rows = 40000;
  line.capacity_rows = 40000;
  line.skew = 40000.0 / 32768;
  for (size_t c = 0; c < VarColumns().size(); ++c) {
    VarCell cell;
    cell.state = VarCell::State::kMeasured;
    cell.time_us = 100.0 * (c + 1);
    cell.algbw_gbs = line.bytes_per_rank / (cell.time_us * 1e3);
    cell.checked = true;
    cell.samples_us = {cell.time_us};
    line.cells.push_back(cell);
  }
  return line;
}

void TestReport() {
  EXPECT(VarColumnIndex("dispatch") == 0 && VarColumnIndex("nccl_p2p") >= 0 &&
         VarColumnIndex("nope") == -1);
  for (const VarRatio& ratio : VarRatios())
    Expect(VarColumnIndex(ratio.over) >= 0 && VarColumnIndex(ratio.under) >= 0,
           std::string("ratio ") + ratio.name + " names columns", __LINE__);
  // The host-count forms, and only they, take the round trip; NCCL runs only the host form.
  for (const VarColumn& column : VarColumns()) {
    Expect(column.host_round_trip == (column.form == VarForm::kHostCounts),
           std::string(column.name) + ": round trip iff host counts", __LINE__);
    Expect(std::string(column.impl) != "nccl" || column.form == VarForm::kHostCounts,
           std::string(column.name) + ": NCCL has the host form only", __LINE__);
  }

  VarLine line = SampleLine();
  const int nccl = VarColumnIndex("nccl_p2p");
  const int dispatch = VarColumnIndex("dispatch");
  EXPECT(std::fabs(LineRatio(line, VarRatios()[0]) -
                   line.cells[nccl].time_us / line.cells[dispatch].time_us) < 1e-12);

  // Header and rows share their column count, so that awk and pandas read the table.
  const std::string header = VarTableHeader();
  const size_t newline = header.find('\n');
  const std::vector<std::string> units = Fields(header.substr(newline + 1));
  const size_t fields = 5 + 2 * VarColumns().size() + 1 + VarRatios().size();
  // The units line: a field over each column but the ratios (and the leading '#').
  EXPECT(units.size() == 1 + fields - VarRatios().size() && units[1] == "/rank" &&
         units[6] == "(us)" && units[7] == "#wrong");
  std::vector<std::string> row = Fields(VarTableRow(line));
  EXPECT(row.size() == fields && row[0] == "4096" && row[1] == "32768");
  EXPECT(row[5] == "100.00" && row[6] == "0");
  // Rows line up with the header: same length.
  EXPECT(VarTableRow(line).size() == newline + 1);

  line.cells[nccl].state = VarCell::State::kNotRun;
  line.cells[dispatch].state = VarCell::State::kSkipped;
  line.cells[dispatch].note = "refused";
  line.cells[1].checked = false;
  row = Fields(VarTableRow(line));
  EXPECT(row.size() == fields && row[5] == "skipped" && row[6] == "-" && row[8] == "N/A");
  EXPECT(row[5 + 2 * nccl] == "-" && row[fields - 1 - VarRatios().size()] == "-");
  EXPECT(LineRatio(line, VarRatios()[0]) < 0);

  AlltoAllvArgs args;
  JsonWriter json;
  json.BeginObject();
  json.Key("alltoallv");
  WriteVarJson(json, args, 8, {SampleLine(), line});
  json.EndObject();
  const std::string text = json.text();
  for (const char* needle :
       {"\"hidden\": 7168", "\"topk\": 8", "\"experts\": 256", "\"local_experts\": 32",
        "\"distribution\": \"uniform\"", "\"tokens\": 4096", "\"dispatch\": {", "\"combine\": {",
        "\"nccl_p2p\": {", "\"status\": \"skipped\"", "\"reason\": \"refused\"",
        "\"status\": \"not_run\"", "\"nccl/disp\": null", "\"host/dev\": ", "\"wrong\": 0",
        "\"wrong\": null", "\"time_us\": 100", "\"host_round_trip\": true", "\"row_bytes\": 14336"})
    Expect(text.find(needle) != std::string::npos, std::string("JSON has ") + needle, __LINE__);

  const std::string heading = VarBlockHeading(args, TokenDist::kZipf, DType::kBfloat16, 8);
  EXPECT(heading.find("zipf (s 1.00)") != std::string::npos &&
         heading.find("256 experts (32 per rank)") != std::string::npos &&
         heading.find("14336 B rows") != std::string::npos);
}

}  // namespace

int main() {
  TestOptions();
  TestWeights();
  TestRouting();
  TestDistributionShapes();
  TestLayouts();
  TestRowCheck();
  TestReport();
  return Summary();
}
