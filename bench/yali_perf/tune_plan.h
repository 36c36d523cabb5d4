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
#ifndef YALI_PERF_TUNE_PLAN_H_
#define YALI_PERF_TUNE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "json_writer.h"

namespace yali_perf {

// One entry of a YALI tuning file (src/tuning/selector.h). yali-perf cannot link the library's
// internal formatTuningEntry, so FormatTuningLine writes the same 9 `key=value` words in the same
// order; the host test checks the two against each other.
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
// the LL/two-shot table), then the one data line.
std::string TuningFileText(const TuneHeader& header, const std::vector<TuneStep>& steps,
                           const Crossover& crossover, const TuningLine& chosen);

// Writes the key "tune" and its object (header, every candidate with its params, measurements and
// score, the crossover, the comparison, the chosen entry and its line) into an open JSON object.
void WriteTuneJson(JsonWriter& json, const TuneHeader& header, const std::vector<TuneStep>& steps,
                   const Crossover& crossover, const TuneComparison& comparison,
                   const TuningLine& chosen, const std::string& file_path);

}  // namespace yali_perf

#endif  // YALI_PERF_TUNE_PLAN_H_
