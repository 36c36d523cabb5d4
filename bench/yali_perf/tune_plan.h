// The host-only half of `yali-perf --tune`: the tuning-file line, the candidate sets of each step,
// their scores, the LL/two-shot threshold rule, and the file and JSON texts. tune.cc runs the
// candidates on the GPUs; everything here is a pure function of the measured numbers, so that it
// is unit-tested without a GPU (tests/test_perf_args.cc), including a round trip through the
// library's own parser.
//
// The steps, in order (each uses the choices of the steps before it):
//   1. two-shot geometry (threads x ctas cap x max slot) at 64M and 256M, highest sum of busBW;
//   2. two-shot min slot at 256K, 1M and 4M, lowest sum of times;
//   3. LL geometry (threads x ctas cap) at 4K, 64K and 256K, lowest sum of times;
//   4. the LL/two-shot crossover (ll_max) at 4K, 8K, ... up to the LL capacity.
// Then, for each exchange collective that --tune-colls names (TuneExchanges(); all by default), at
// the current world size and with the AllReduce choices above (their geometry keys serve the
// exchanges too):
//   5. the LL -> staged crossover (`<coll>_ll_max`) at pieces of 4K, 8K, ... up to the LL capacity,
//      by ChooseLLMax's rule;
//   6. where the collective has a row for registered outputs (`<coll>_direct_min`: allgather,
//      broadcast, scatter, alltoall), the crossover on buffers registered with yaliCommRegister
//      between `<coll>_direct` and what the selector runs without it (LL up to step 5's value,
//      staged above), at pieces of 4K, 8K, ... up to what the buffers hold, by the mirror rule:
//      direct from the first size of the run of wins that reaches the largest size.
// Left to the built-in table (not written): the copy-engine rows (*_ce_min), the rooted
// two-shot rows (broadcast_twoshot_min, reduce_twoshot_min) and the pull rows
// (reducescatter_pull_min, reduce_pull_min), all 0 (never) by default.
#ifndef YALI_PERF_TUNE_PLAN_H_
#define YALI_PERF_TUNE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "json_writer.h"
#include "perf_args.h"

namespace yali_perf {

// An optional key of a tuning-file line (an exchange's threshold: `allgather_ll_max`, ...).
struct TuningKey {
  std::string key;
  int64_t value = 0;
};

// One entry of a YALI tuning file (src/tuning/selector.h). yali-perf cannot link the library's
// internal formatTuningEntry, so FormatTuningLine writes the same 9 `key=value` words in the same
// order, then the `extra` keys in their order; the host test checks the first 9 against
// formatTuningEntry and the whole line against the library's parser.
struct TuningLine {
  int sm_major = 9;
  int nranks = 2;
  int64_t ll_max = 0;
  int ll_threads = 512;
  int ll_ctas = 32;
  int twoshot_threads = 512;
  int twoshot_ctas = 32;
  int64_t twoshot_min_slot = 8 << 10;
  int64_t twoshot_max_slot = 128 << 10;
  std::vector<TuningKey> extra;  // the exchanges' thresholds (steps 5 and 6); empty: 9 keys
};

std::string FormatTuningLine(const TuningLine& line);

// "4K", "256K", "1M", "64M" for whole KiB / MiB; the byte count otherwise.
std::string SizeLabel(size_t bytes);

// The largest message any step measures: what the buffers are allocated for (2 x 256M per GPU).
size_t TuneLargestMessageBytes();

// YALI_ALGO's spellings.
enum class TuneAlgo { kTwoshot, kOneshotLL };
const char* TuneAlgoName(TuneAlgo algo);

// One timed size of one configuration, reduced over ranks (the slowest rank's time).
struct TuneMeasurement {
  size_t bytes = 0;
  double time_us = 0;
  double busbw_gbs = 0;
  bool checked = false;
  uint64_t wrong = 0;
  // What the library's selector said it ran (yaliAllReduceAlgoInfo), for the log and the JSON.
  std::string algo;
  int ctas = 0;
  int threads = 0;
  size_t slot_bytes = 0;
};

struct TuneCandidate {
  TuningLine line;  // the whole entry the communicators were created with
  std::vector<TuneMeasurement> measurements;  // one per TuneStep::sizes, in that order
  bool rejected = false;                      // some measurement had #wrong > 0
  double score = 0;
};

enum class TuneStepKind { kTwoshotGeometry, kTwoshotMinSlot, kLLGeometry };

struct TuneStep {
  TuneStepKind kind = TuneStepKind::kTwoshotGeometry;
  TuneAlgo algo = TuneAlgo::kTwoshot;  // forced with YALI_ALGO while measuring
  std::vector<size_t> sizes;
  std::vector<TuneCandidate> candidates;
  int chosen = -1;     // index into candidates, -1 until ChooseBest (or when all are rejected)
  int runner_up = -1;  // second best, for the file's comment
};

const char* TuneStepName(TuneStepKind kind);  // "twoshot_geometry", ...
// Higher is better for busBW sums (step 1), lower for time sums (steps 2 and 3).
bool HigherIsBetter(TuneStepKind kind);
// The keys a step varies, as "threads=512 ctas=32 max_slot=128K".
std::string CandidateParams(TuneStepKind kind, const TuningLine& line);

// The candidate sets. `base` carries the choices of earlier steps; sizes above `max_bytes` (what
// the buffers hold, and for LL also the LL capacity) are left out.
//  - Two-shot geometry: threads {256, 512, 1024} x ctas {8, 16, 24, 32} x max slot {32K, 64K,
//    128K, 256K}, without the combinations whose ctas x slot exceeds the staging per sender
//    (the selector would shrink their slot, so they would repeat a smaller candidate). 32 CTAs
//    is the most that large messages may take (the rest of the GPU stays for compute).
//  - Min slot: {2K, 4K, 8K, 16K, 32K}, each at most the chosen max slot.
//  - LL: threads {256, 512, 1024} x ctas cap {8, 16, 32, 64}.
TuneStep TwoshotGeometryStep(const TuningLine& base, int64_t staging_bytes, size_t max_bytes);
TuneStep TwoshotMinSlotStep(const TuningLine& base, size_t max_bytes);
TuneStep LLGeometryStep(const TuningLine& base, size_t max_bytes);

// Sets each candidate's score, then step->chosen and step->runner_up among the candidates that
// are not rejected (the first one on a tie: every rank holds the same numbers, so every rank
// picks the same candidate). chosen stays -1 when every candidate was rejected.
void ChooseBest(TuneStep* step);

// Step 4. ll_max is the last size of the first run of sizes at which LL is faster than two-shot:
// LL keeps every size up to where it first loses after winning. Sizes before the first win stay
// with LL too (one threshold cannot exclude them); 0 when LL never wins. A size where LL's result
// was wrong counts as a loss for LL; where only two-shot's was wrong, as a win.
struct Crossover {
  std::vector<size_t> sizes;
  std::vector<TuneMeasurement> ll;       // per size
  std::vector<TuneMeasurement> twoshot;  // per size
  int64_t ll_max = 0;
  std::string reason;  // one line for the file: what LL beat and where it stopped
};
std::vector<size_t> CrossoverSizes(int64_t ll_capacity, size_t max_bytes);  // 4K, 8K, ...
void ChooseLLMax(Crossover* crossover, int64_t ll_capacity);

// ---- Steps 5 and 6: the exchange collectives ----

// An exchange collective and its rows in the library's registry (src/collectives/registry.cc):
// `<name>_ll` (up to `<name>_ll_max`), `<name>_staged` (the fallback) and, with has_direct,
// `<name>_direct` (from `<name>_direct_min`, registered outputs only). yali-perf cannot link the
// registry; the host test checks every name and key here against it.
struct TuneExchange {
  CollId coll = CollId::kAllGather;
  bool has_direct = false;
};
// ReduceScatter, AllGather, Broadcast, Reduce, Gather, Scatter, AlltoAll: the order of the steps
// and of the keys on the line.
const std::vector<TuneExchange>& TuneExchanges();
// What --tune-colls may name: allreduce (always tuned: the line's 9 mandatory keys are its), then
// TuneExchanges()' collectives.
const std::vector<CollId>& TunableCollectives();

enum class ExchangeRule {
  kLLMax,      // step 5: `<coll>_ll` against `<coll>_staged`, both forced with YALI_ALGO
  kDirectMin,  // step 6: `<coll>_direct` (forced) against the selector's choice without it
};
// "allgather_ll", "allgather_staged", "allgather_direct".
std::string ExchangeAlgoName(CollId coll, const char* suffix);
// The key a rule sets: "allgather_ll_max" or "allgather_direct_min".
std::string ExchangeKey(CollId coll, ExchangeRule rule);
// The environment settings that override an exchange's table thresholds (the library's
// YALI_<ALGO>_MAX_BYTES / _MIN_BYTES of its ll, direct, copy-engine and rooted two-shot rows), and
// AllReduce's two (YALI_MAX_CTAS, YALI_ONESHOT_LL_MAX_BYTES): --tune clears them while it measures
// (they would replace the candidates' values) and restores them after.
std::vector<std::string> TuneEnvOverrides();

// One crossover of one exchange collective: `candidate` is the row whose threshold is chosen (LL
// for kLLMax, direct for kDirectMin), `baseline` what runs instead (staged; the choice without
// direct). Sizes are in two units: yali-perf's size column (the larger of a rank's input and
// output, coll_shape.h) for the tables, and the selector's bytes (one piece: the bytes one rank
// sends to one receiver, count x element size) for the key, which the library compares with them.
struct ExchangeCrossover {
  CollId coll = CollId::kAllGather;
  ExchangeRule rule = ExchangeRule::kLLMax;
  std::vector<size_t> sizes;   // yali-perf's size column, per size
  std::vector<size_t> pieces;  // the selector's bytes, per size
  std::vector<TuneMeasurement> candidate;  // per size
  std::vector<TuneMeasurement> baseline;   // per size
  int64_t value = 0;   // the key's value in piece bytes (0: never)
  std::string reason;  // one line for the file
  // Not measured (the library would not run the candidate, e.g. no registration): the key stays
  // off the line (the built-in value applies) and `reason` says why.
  bool skipped = false;
};
// The sizes of a crossover (measurements empty): pieces of 4K, 8K, ... for `nranks` ranks of
// `element_bytes` elements whose message fits `max_bytes`; kLLMax also stops at the LL capacity.
ExchangeCrossover ExchangeCrossoverSizes(CollId coll, ExchangeRule rule, int nranks,
                                         size_t element_bytes, int64_t ll_capacity,
                                         size_t max_bytes);
// Sets value and reason. A size where the candidate was wrong counts as a loss for it; where only
// the baseline was wrong, as a win.
//  - kLLMax: ChooseLLMax's rule: LL keeps every size up to where it first loses after winning
//    (sizes before its first win too; 0 when it never wins).
//  - kDirectMin: the mirror: direct takes every size from the first of the run of wins that ends
//    at its last win (sizes above that last win too: one threshold cannot exclude them); 0 when
//    it never wins.
void ChooseExchangeThreshold(ExchangeCrossover* crossover, int64_t ll_capacity);
// The line's key for a chosen crossover.
TuningKey ExchangeTuningKey(const ExchangeCrossover& crossover);
// Marks a crossover skipped: its key is left to the built-in table, for `why`.
void SkipExchangeCrossover(ExchangeCrossover* crossover, const std::string& why);

// How much a whole --tune runs, for the header and the user's planning: communicator sets created
// (one per candidate and per side of each crossover) and timed measurements (each one size of one
// configuration: a checked or unchecked call, -w warmup calls and -n timed calls). An upper bound:
// step 2's candidates depend on step 1's choice.
struct TuneCount {
  int configurations = 0;
  int measurements = 0;
};
TuneCount CountTuneRuns(int nranks, size_t element_bytes, int64_t ll_capacity,
                        int64_t staging_bytes, size_t max_bytes,
                        const std::vector<CollId>& exchanges);

// After the choice: the selector's automatic choice and time with the built-in table and with the
// written one, at a few sizes (for the summary and the JSON; the file itself holds no such line).
struct TuneComparison {
  std::vector<size_t> sizes;
  std::vector<TuneMeasurement> builtin;  // per size
  std::vector<TuneMeasurement> tuned;    // per size
};
std::vector<size_t> ComparisonSizes(size_t max_bytes);  // 4K, 64K, 256K, 1M, 4M, 64M, 256M

// What the file's header says about the run.
struct TuneHeader {
  std::string date;
  std::string hostname;
  std::string gpu_name;
  int sm_major = 0;
  int nranks = 0;
  bool multi_process = false;
  std::string dtype;
  std::string command;
  int iters = 0;
  int warmup = 0;
  int yali_version = -1;
  int64_t ll_capacity = 0;    // YALI_LL_BUFFER_BYTES as the library rounds it
  int64_t staging_bytes = 0;  // YALI_STAGING_BYTES as the library rounds it
};

// The tuning file: '#' comment lines (the run, then one per chosen value saying what it beat and
// the LL/two-shot table, then each exchange crossover's reason and table, and what was left to the
// built-in table), then the one data line. Without exchanges, the 9-key file of steps 1-4 alone.
std::string TuningFileText(const TuneHeader& header, const std::vector<TuneStep>& steps,
                           const Crossover& crossover, const TuningLine& chosen,
                           const std::vector<ExchangeCrossover>& exchanges = {});

// Writes the key "tune" and its object (header, every candidate with its params, measurements and
// score, the crossover, the exchange crossovers, the comparison, the chosen entry and its line)
// into an open JSON object.
void WriteTuneJson(JsonWriter& json, const TuneHeader& header, const std::vector<TuneStep>& steps,
                   const Crossover& crossover, const TuneComparison& comparison,
                   const TuningLine& chosen, const std::string& file_path,
                   const std::vector<ExchangeCrossover>& exchanges = {});

}  // namespace yali_perf

#endif  // YALI_PERF_TUNE_PLAN_H_
