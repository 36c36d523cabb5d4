#include "tune_plan.h"
#include "coll_shape.h"
#include "text_format.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <iterator>
#include <sstream>

namespace yali_perf {
namespace {


// A value placed on a comment line: a newline inside it would end the comment and leave the rest
// for the library's parser.
std::string OneLine(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

constexpr size_t KiB = size_t(1) << 10;
constexpr size_t MiB = size_t(1) << 20;

// The sizes of each step. Large messages: 64M and 256M are past every slot/CTA ramp (n * 32 CTAs
// * 256K = 32M at n = 4), so the score is the steady-state bandwidth. Medium: 256K..4M is where
// the min slot decides how many blocks a message gets. Small: LL's range, from a single block
// (4K) to the LL capacity's neighbourhood (256K).
const size_t kGeometrySizes[] = {64 * MiB, 256 * MiB};
const size_t kMinSlotSizes[] = {256 * KiB, 1 * MiB, 4 * MiB};
const size_t kLLSizes[] = {4 * KiB, 64 * KiB, 256 * KiB};
const size_t kComparisonSizes[] = {4 * KiB,  64 * KiB, 256 * KiB, 1 * MiB,
                                   4 * MiB,  64 * MiB, 256 * MiB};

const int kLLThreadCandidates[] = {256, 512, 1024};
// The two-shot kernel holds 96 registers per thread: 1024 threads would need 96K of an SM's 64K
// registers and could not launch (the library clamps to what a kernel can launch).
const int kTwoshotThreadCandidates[] = {256, 512};
const int kTwoshotCtaCandidates[] = {8, 16, 24, 32};
const int64_t kMaxSlotCandidates[] = {32 << 10, 64 << 10, 128 << 10, 256 << 10};
const int64_t kMinSlotCandidates[] = {2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10};
// 64 is the library's kMaxCtas (the flag arrays are sized for it).
const int kLLCtaCandidates[] = {8, 16, 32, 64};

template <size_t N>
std::vector<size_t> SizesUpTo(const size_t (&sizes)[N], size_t max_bytes) {
  std::vector<size_t> kept;
  for (size_t bytes : sizes)
    if (bytes <= max_bytes) kept.push_back(bytes);
  return kept;
}

// "a + b = c us" for time scores, "a + b GB/s" for bandwidth scores.
std::string ScoreText(TuneStepKind kind, const TuneCandidate& candidate) {
  std::string text;
  for (size_t i = 0; i < candidate.measurements.size(); ++i) {
    const TuneMeasurement& m = candidate.measurements[i];
    text += (i ? " + " : "") + Format("%.1f", HigherIsBetter(kind) ? m.busbw_gbs : m.time_us);
  }
  if (HigherIsBetter(kind)) return text + " GB/s";
  if (candidate.measurements.size() > 1) text += Format(" = %.1f", candidate.score);
  return text + " us";
}

std::string StepKeys(TuneStepKind kind, const TuningLine& line) {
  switch (kind) {
    case TuneStepKind::kTwoshotGeometry:
      return Format("twoshot_threads=%d twoshot_ctas=%d twoshot_max_slot=%s", line.twoshot_threads,
                    line.twoshot_ctas, SizeLabel(line.twoshot_max_slot).c_str());
    case TuneStepKind::kTwoshotMinSlot:
      return "twoshot_min_slot=" + SizeLabel(line.twoshot_min_slot);
    case TuneStepKind::kLLGeometry:
      return Format("ll_threads=%d ll_ctas=%d", line.ll_threads, line.ll_ctas);
  }
  return "";
}

std::string JoinSizes(const std::vector<size_t>& sizes, const char* separator) {
  std::string text;
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? separator : "") + SizeLabel(sizes[i]);
  return text;
}

void WriteSizes(JsonWriter& json, const std::vector<size_t>& sizes) {
  json.BeginArray();
  for (size_t bytes : sizes) json.UInt(bytes);
  json.EndArray();
}

void WriteEntry(JsonWriter& json, const TuningLine& line) {
  json.BeginObject();
  json.Key("sm"); json.Int(line.sm_major);
  json.Key("nranks"); json.Int(line.nranks);
  json.Key("ll_max"); json.Int(line.ll_max);
  json.Key("ll_threads"); json.Int(line.ll_threads);
  json.Key("ll_ctas"); json.Int(line.ll_ctas);
  json.Key("twoshot_threads"); json.Int(line.twoshot_threads);
  json.Key("twoshot_ctas"); json.Int(line.twoshot_ctas);
  json.Key("twoshot_min_slot"); json.Int(line.twoshot_min_slot);
  json.Key("twoshot_max_slot"); json.Int(line.twoshot_max_slot);
  for (const TuningKey& extra : line.extra) {
    json.Key(extra.key); json.Int(extra.value);
  }
  json.EndObject();
}

void WriteMeasurements(JsonWriter& json, const std::vector<TuneMeasurement>& measurements) {
  json.BeginArray();
  for (const TuneMeasurement& m : measurements) {
    json.BeginObject();
    json.Key("bytes"); json.UInt(m.bytes);
    json.Key("time_us"); json.Double(m.time_us);
    json.Key("busbw_gbs"); json.Double(m.busbw_gbs);
    json.Key("wrong");
    if (m.checked) json.UInt(m.wrong); else json.Null();
    json.Key("algo"); json.String(m.algo);
    json.Key("ctas"); json.Int(m.ctas);
    json.Key("threads"); json.Int(m.threads);
    json.Key("slot_bytes"); json.UInt(m.slot_bytes);
    json.EndObject();
  }
  json.EndArray();
}

// The crossover rule shared by ll_max (step 4) and the exchanges' keys (steps 5 and 6): the
// candidate wins a size where its result was right and the baseline's wrong or slower.
bool CandidateWins(const TuneMeasurement& candidate, const TuneMeasurement& baseline) {
  return candidate.wrong == 0 && (baseline.wrong > 0 || candidate.time_us < baseline.time_us);
}

// Scanning the sizes in `order` (scan position -> size index), the first run of wins, as scan
// positions [first, last]; first == order.size() when the candidate never wins.
struct WinRun {
  size_t first = 0;
  size_t last = 0;
};
WinRun FirstRunOfWins(const std::vector<bool>& wins, const std::vector<size_t>& order) {
  WinRun run;
  const size_t n = order.size();
  while (run.first < n && !wins[order[run.first]]) ++run.first;
  run.last = run.first;
  while (run.last + 1 < n && wins[order[run.last + 1]]) ++run.last;
  return run;
}

}  // namespace

std::string FormatTuningLine(const TuningLine& line) {
  std::ostringstream s;
  s << "sm=" << line.sm_major << " nranks=" << line.nranks << " ll_max=" << line.ll_max
    << " ll_threads=" << line.ll_threads << " ll_ctas=" << line.ll_ctas
    << " twoshot_threads=" << line.twoshot_threads << " twoshot_ctas=" << line.twoshot_ctas
    << " twoshot_min_slot=" << line.twoshot_min_slot
    << " twoshot_max_slot=" << line.twoshot_max_slot;
  for (const TuningKey& extra : line.extra) s << " " << extra.key << "=" << extra.value;
  return s.str();
}

size_t TuneLargestMessageBytes() {
  size_t largest = 0;
  for (size_t bytes : kGeometrySizes) largest = bytes > largest ? bytes : largest;
  for (size_t bytes : kComparisonSizes) largest = bytes > largest ? bytes : largest;
  return largest;
}

std::string SizeLabel(size_t bytes) {
  if (bytes >= MiB && bytes % MiB == 0) return std::to_string(bytes / MiB) + "M";
  if (bytes >= KiB && bytes % KiB == 0) return std::to_string(bytes / KiB) + "K";
  return std::to_string(bytes);
}

const char* TuneAlgoName(TuneAlgo algo) {
  return algo == TuneAlgo::kOneshotLL ? "oneshot_ll" : "twoshot";
}

const char* TuneStepName(TuneStepKind kind) {
  switch (kind) {
    case TuneStepKind::kTwoshotGeometry: return "twoshot_geometry";
    case TuneStepKind::kTwoshotMinSlot: return "twoshot_min_slot";
    case TuneStepKind::kLLGeometry: return "ll_geometry";
  }
  return "?";
}

bool HigherIsBetter(TuneStepKind kind) { return kind == TuneStepKind::kTwoshotGeometry; }

std::string CandidateParams(TuneStepKind kind, const TuningLine& line) {
  switch (kind) {
    case TuneStepKind::kTwoshotGeometry:
      return Format("threads=%d ctas=%d max_slot=%s", line.twoshot_threads, line.twoshot_ctas,
                    SizeLabel(line.twoshot_max_slot).c_str());
    case TuneStepKind::kTwoshotMinSlot:
      return "min_slot=" + SizeLabel(line.twoshot_min_slot);
    case TuneStepKind::kLLGeometry:
      return Format("threads=%d ctas=%d", line.ll_threads, line.ll_ctas);
  }
  return "";
}

TuneStep TwoshotGeometryStep(const TuningLine& base, int64_t staging_bytes, size_t max_bytes) {
  TuneStep step;
  step.kind = TuneStepKind::kTwoshotGeometry;
  step.algo = TuneAlgo::kTwoshot;
  step.sizes = SizesUpTo(kGeometrySizes, max_bytes);
  for (int threads : kTwoshotThreadCandidates) {
    for (int ctas : kTwoshotCtaCandidates) {
      for (int64_t slot : kMaxSlotCandidates) {
        if (ctas * slot > staging_bytes) continue;
        TuneCandidate candidate;
        candidate.line = base;
        candidate.line.twoshot_threads = threads;
        candidate.line.twoshot_ctas = ctas;
        candidate.line.twoshot_max_slot = slot;
        // The file format requires min slot <= max slot.
        if (candidate.line.twoshot_min_slot > slot) candidate.line.twoshot_min_slot = slot;
        step.candidates.push_back(candidate);
      }
    }
  }
  return step;
}

TuneStep TwoshotMinSlotStep(const TuningLine& base, size_t max_bytes) {
  TuneStep step;
  step.kind = TuneStepKind::kTwoshotMinSlot;
  step.algo = TuneAlgo::kTwoshot;
  step.sizes = SizesUpTo(kMinSlotSizes, max_bytes);
  for (int64_t slot : kMinSlotCandidates) {
    if (slot > base.twoshot_max_slot) continue;
    TuneCandidate candidate;
    candidate.line = base;
    candidate.line.twoshot_min_slot = slot;
    step.candidates.push_back(candidate);
  }
  return step;
}

TuneStep LLGeometryStep(const TuningLine& base, size_t max_bytes) {
  TuneStep step;
  step.kind = TuneStepKind::kLLGeometry;
  step.algo = TuneAlgo::kOneshotLL;
  step.sizes = SizesUpTo(kLLSizes, max_bytes);
  for (int threads : kLLThreadCandidates) {
    for (int ctas : kLLCtaCandidates) {
      TuneCandidate candidate;
      candidate.line = base;
      candidate.line.ll_threads = threads;
      candidate.line.ll_ctas = ctas;
      step.candidates.push_back(candidate);
    }
  }
  return step;
}

void ChooseBest(TuneStep* step) {
  const bool higher = HigherIsBetter(step->kind);
  step->chosen = -1;
  step->runner_up = -1;
  for (size_t i = 0; i < step->candidates.size(); ++i) {
    TuneCandidate& candidate = step->candidates[i];
    candidate.score = 0;
    for (const TuneMeasurement& m : candidate.measurements)
      candidate.score += higher ? m.busbw_gbs : m.time_us;
  }
  auto better = [&](int a, int b) {  // strictly better: ties keep the earlier candidate
    if (b < 0) return true;
    double sa = step->candidates[a].score;
    double sb = step->candidates[b].score;
    return higher ? sa > sb : sa < sb;
  };
  for (size_t i = 0; i < step->candidates.size(); ++i) {
    const int index = static_cast<int>(i);
    if (step->candidates[i].rejected || step->candidates[i].measurements.empty()) continue;
    if (better(index, step->chosen)) {
      step->runner_up = step->chosen;
      step->chosen = index;
    } else if (better(index, step->runner_up)) {
      step->runner_up = index;
    }
  }
}

std::vector<size_t> CrossoverSizes(int64_t ll_capacity, size_t max_bytes) {
  std::vector<size_t> sizes;
  for (size_t bytes = 4 * KiB; static_cast<int64_t>(bytes) <= ll_capacity && bytes <= max_bytes;
       bytes *= 2)
    sizes.push_back(bytes);
  return sizes;
}

std::vector<size_t> ComparisonSizes(size_t max_bytes) {
  return SizesUpTo(kComparisonSizes, max_bytes);
}

void ChooseLLMax(Crossover* crossover, int64_t ll_capacity) {
  const std::vector<size_t>& sizes = crossover->sizes;
  const size_t n = sizes.size();
  std::vector<bool> ll_wins(n, false);
  std::vector<size_t> order(n);  // smallest size first
  for (size_t i = 0; i < n; ++i) {
    ll_wins[i] = CandidateWins(crossover->ll[i], crossover->twoshot[i]);
    order[i] = i;
  }
  auto times_at = [&](size_t i) {
    return Format("LL %.1f us vs two-shot %.1f us at %s", crossover->ll[i].time_us,
                  crossover->twoshot[i].time_us, SizeLabel(sizes[i]).c_str());
  };

  const WinRun run = FirstRunOfWins(ll_wins, order);
  const size_t first = run.first, last = run.last;
  if (first == n) {
    crossover->ll_max = 0;
    crossover->reason =
        n == 0 ? "ll_max: 0, no size fits the LL buffer"
               : "ll_max: 0, two-shot faster at every size tested (" + JoinSizes(sizes, ", ") +
                     "; " + times_at(0) + ")";
    return;
  }
  crossover->ll_max = static_cast<int64_t>(sizes[last]);

  std::string reason = "ll_max: LL faster up to " + SizeLabel(sizes[last]) + " (" + times_at(last);
  if (last + 1 < n) {
    const TuneMeasurement& ll = crossover->ll[last + 1];
    reason += "; " + std::string(ll.wrong > 0 ? "LL wrong" : "two-shot faster") + " at " +
              SizeLabel(sizes[last + 1]);
  } else if (static_cast<int64_t>(sizes[last]) * 2 > ll_capacity) {
    reason += "; " + SizeLabel(sizes[last]) + " is the LL capacity (YALI_LL_BUFFER_BYTES)";
  } else {
    reason += "; the largest size tested";
  }
  reason += ")";
  if (first > 0) {
    reason += "; two-shot faster at " + SizeLabel(sizes[0]) +
              (first > 1 ? ".." + SizeLabel(sizes[first - 1]) : std::string()) +
              ", kept on LL (one threshold)";
  }
  for (size_t i = last + 1; i < n; ++i) {
    if (ll_wins[i]) {
      reason += "; LL faster again at " + SizeLabel(sizes[i]) +
                ", not used (LL must win at every size from its first win on)";
      break;
    }
  }
  crossover->reason = reason;
}

// ---- Steps 5 and 6 ------------------------------------------------------------------------------

const std::vector<TuneExchange>& TuneExchanges() {
  // has_direct: the collectives whose registry has a `<name>_direct` row (the outputs every rank
  // writes into a peer's registered buffer). ReduceScatter and Reduce reduce at the receiver and
  // Gather writes into the root only: no such row.
  static const std::vector<TuneExchange> kExchanges = {
      {CollId::kReduceScatter, false}, {CollId::kAllGather, true}, {CollId::kBroadcast, true},
      {CollId::kReduce, false},        {CollId::kGather, false},   {CollId::kScatter, true},
      {CollId::kAlltoAll, true},
  };
  return kExchanges;
}

const std::vector<CollId>& TunableCollectives() {
  static const std::vector<CollId> kTunable = [] {
    std::vector<CollId> colls = {CollId::kAllReduce};
    for (const TuneExchange& exchange : TuneExchanges()) colls.push_back(exchange.coll);
    return colls;
  }();
  return kTunable;
}

std::string ExchangeAlgoName(CollId coll, const char* suffix) {
  return std::string(CollName(coll)) + "_" + suffix;
}

std::string ExchangeKey(CollId coll, ExchangeRule rule) {
  return ExchangeAlgoName(coll, rule == ExchangeRule::kLLMax ? "ll_max" : "direct_min");
}

std::vector<std::string> TuneEnvOverrides() {
  // The library's names (registry.cc, thresholdSettingName): YALI_ + the row's name in capitals +
  // _MAX_BYTES for rows bounded from above, _MIN_BYTES for rows bounded from below.
  std::vector<std::string> names = {"YALI_MAX_CTAS", "YALI_ONESHOT_LL_MAX_BYTES"};
  auto upper = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return text;
  };
  for (const TuneExchange& exchange : TuneExchanges()) {
    const std::string name = upper(CollName(exchange.coll));
    names.push_back("YALI_" + name + "_LL_MAX_BYTES");
    if (exchange.has_direct) names.push_back("YALI_" + name + "_DIRECT_MIN_BYTES");
    // The copy-engine rows: every exchange that only moves data (not the reducing ones).
    if (!CollReduces(exchange.coll)) names.push_back("YALI_" + name + "_CE_MIN_BYTES");
    if (exchange.coll == CollId::kBroadcast || exchange.coll == CollId::kReduce)
      names.push_back("YALI_" + name + "_TWOSHOT_MIN_BYTES");
    // The pull exchange on registered inputs (ReduceScatter's and Reduce's).
    if (exchange.coll == CollId::kReduceScatter || exchange.coll == CollId::kReduce)
      names.push_back("YALI_" + name + "_PULL_MIN_BYTES");
  }
  return names;
}

ExchangeCrossover ExchangeCrossoverSizes(CollId coll, ExchangeRule rule, int nranks,
                                         size_t element_bytes, int64_t ll_capacity,
                                         size_t max_bytes) {
  ExchangeCrossover crossover;
  crossover.coll = coll;
  crossover.rule = rule;
  // A message of n pieces for the collectives that split a buffer among the ranks (coll_shape.h),
  // of one for broadcast and reduce: ShapeFor turns it back into count = one piece.
  const size_t per_message =
      coll == CollId::kBroadcast || coll == CollId::kReduce ? 1 : static_cast<size_t>(nranks);
  for (size_t piece = 4 * KiB; piece <= max_bytes; piece *= 2) {
    if (rule == ExchangeRule::kLLMax && static_cast<int64_t>(piece) > ll_capacity) break;
    const CollShape shape = ShapeFor(coll, piece * per_message, element_bytes, nranks);
    if (shape.bytes > max_bytes) break;
    if (shape.count * element_bytes != piece) continue;  // not whole elements or 16-byte blocks
    crossover.sizes.push_back(shape.bytes);
    crossover.pieces.push_back(piece);
  }
  return crossover;
}

namespace {

// "LL", "staged", "direct", "without direct": the two sides of a crossover, for the texts.
const char* CandidateLabel(ExchangeRule rule) {
  return rule == ExchangeRule::kLLMax ? "LL" : "direct";
}
const char* BaselineLabel(ExchangeRule rule) {
  return rule == ExchangeRule::kLLMax ? "staged" : "without direct";
}

// A size in both units: "256K (1M)" where the piece and yali-perf's size differ.
std::string PieceLabel(const ExchangeCrossover& c, size_t i) {
  std::string label = SizeLabel(c.pieces[i]);
  if (c.sizes[i] != c.pieces[i]) label += " (" + SizeLabel(c.sizes[i]) + ")";
  return label;
}

}  // namespace

void ChooseExchangeThreshold(ExchangeCrossover* crossover, int64_t ll_capacity) {
  const ExchangeCrossover& c = *crossover;
  const size_t n = c.sizes.size();
  const bool up_to = c.rule == ExchangeRule::kLLMax;
  std::vector<bool> wins(n, false);
  for (size_t i = 0; i < n; ++i) wins[i] = CandidateWins(c.candidate[i], c.baseline[i]);
  const std::string key = ExchangeKey(c.coll, c.rule);
  const char* cand = CandidateLabel(c.rule);
  const char* base = BaselineLabel(c.rule);
  auto times_at = [&](size_t i) {
    return Format("%s %.1f us vs %s %.1f us at %s", cand, c.candidate[i].time_us, base,
                  c.baseline[i].time_us, PieceLabel(c, i).c_str());
  };
  const std::string units = "; sizes are pieces (yali-perf's size in parentheses)";

  // Scanning from the end the rule keeps its range on: up from the smallest size for kLLMax,
  // down from the largest for kDirectMin. `order[k]` is the k-th size scanned.
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = up_to ? k : n - 1 - k;
  const WinRun run = FirstRunOfWins(wins, order);
  const size_t first = run.first;  // scan position of the first win
  const size_t last = run.last;    // scan position of the last win of that run
  if (first == n) {
    crossover->value = 0;
    crossover->reason = n == 0 ? key + "=0: no size fits" + (up_to ? " the LL buffer" : " the buffers")
                               : key + "=0: " + base + " faster at every size tested (" +
                                     PieceLabel(c, 0) + ".." + PieceLabel(c, n - 1) + "; " +
                                     times_at(up_to ? 0 : n - 1) + ")" + units;
    return;
  }
  const size_t edge = order[last];  // the size where the candidate's range ends
  crossover->value = static_cast<int64_t>(c.pieces[edge]);

  std::string reason = key + "=" + SizeLabel(c.pieces[edge]) + ": " + cand + " faster " +
                       (up_to ? "up to " : "from ") + PieceLabel(c, edge) + " (" + times_at(edge);
  if (last + 1 < n) {
    const size_t next = order[last + 1];
    reason += "; " + std::string(c.candidate[next].wrong > 0 ? std::string(cand) + " wrong"
                                                             : std::string(base) + " faster") +
              " at " + PieceLabel(c, next);
  } else if (up_to && static_cast<int64_t>(c.pieces[edge]) * 2 > ll_capacity) {
    reason += "; " + SizeLabel(c.pieces[edge]) + " is the LL capacity (YALI_LL_BUFFER_BYTES)";
  } else {
    reason += up_to ? "; the largest size tested" : "; the smallest size tested";
  }
  reason += ")";
  if (first > 0) {
    const size_t a = order[0], b = order[first - 1];
    reason += "; " + std::string(base) + " faster at " + PieceLabel(c, std::min(a, b)) +
              (first > 1 ? ".." + PieceLabel(c, std::max(a, b)) : std::string()) + ", kept on " +
              cand + " (one threshold)";
  }
  for (size_t k = last + 1; k < n; ++k) {
    if (wins[order[k]]) {
      reason += "; " + std::string(cand) + " faster again at " + PieceLabel(c, order[k]) +
                ", not used (" + cand + " must win at every size " +
                (up_to ? "from its first win on)" : "from its threshold to its last win)");
      break;
    }
  }
  crossover->reason = reason + units;
}

TuningKey ExchangeTuningKey(const ExchangeCrossover& crossover) {
  return {ExchangeKey(crossover.coll, crossover.rule), crossover.value};
}

void SkipExchangeCrossover(ExchangeCrossover* crossover, const std::string& why) {
  crossover->skipped = true;
  crossover->value = 0;
  crossover->reason = ExchangeKey(crossover->coll, crossover->rule) +
                      ": not measured, left at the built-in value (" + OneLine(why) + ")";
}

TuneCount CountTuneRuns(int nranks, size_t element_bytes, int64_t ll_capacity,
                        int64_t staging_bytes, size_t max_bytes,
                        const std::vector<CollId>& exchanges) {
  TuneCount count;
  auto add = [&](size_t configurations, size_t sizes) {
    count.configurations += static_cast<int>(configurations);
    count.measurements += static_cast<int>(configurations * sizes);
  };
  TuningLine base;
  base.nranks = nranks;
  const TuneStep geometry = TwoshotGeometryStep(base, staging_bytes, max_bytes);
  add(geometry.candidates.size(), geometry.sizes.size());
  base.twoshot_max_slot = kMaxSlotCandidates[std::size(kMaxSlotCandidates) - 1];  // the most
  const TuneStep min_slot = TwoshotMinSlotStep(base, max_bytes);
  add(min_slot.candidates.size(), min_slot.sizes.size());
  const size_t ll_limit = std::min<size_t>(max_bytes, static_cast<size_t>(ll_capacity));
  const TuneStep ll = LLGeometryStep(base, ll_limit);
  add(ll.candidates.size(), ll.sizes.size());
  add(2, CrossoverSizes(ll_capacity, max_bytes).size());
  add(2, ComparisonSizes(max_bytes).size());
  for (const TuneExchange& exchange : TuneExchanges()) {
    bool named = false;
    for (CollId coll : exchanges) named = named || coll == exchange.coll;
    if (!named) continue;
    add(2, ExchangeCrossoverSizes(exchange.coll, ExchangeRule::kLLMax, nranks, element_bytes,
                                  ll_capacity, max_bytes).sizes.size());
    if (exchange.has_direct)
      add(2, ExchangeCrossoverSizes(exchange.coll, ExchangeRule::kDirectMin, nranks,
                                    element_bytes, ll_capacity, max_bytes).sizes.size());
  }
  return count;
}

std::string TuningFileText(const TuneHeader& header, const std::vector<TuneStep>& steps,
                           const Crossover& crossover, const TuningLine& chosen,
                           const std::vector<ExchangeCrossover>& exchanges) {
  std::string text = "# yali-perf --tune\n";
  text += "# date " + OneLine(header.date) + ", host " + OneLine(header.hostname) + "\n";
  text += Format("# GPU %s (compute capability major %d), nranks %d (%s), dtype %s\n",
                 OneLine(header.gpu_name).c_str(), header.sm_major, header.nranks,
                 header.multi_process ? "one process per GPU" : "one process driving every GPU",
                 header.dtype.c_str());
  text += "# command: " + OneLine(header.command) + "\n";
  text += Format("# timing: CUDA events around -n %d back-to-back out-of-place AllReduce (sum) "
                 "calls after -w %d, the slowest rank's time; each candidate's result checked\n",
                 header.iters, header.warmup);
  text += Format("# YALI version %d, YALI_LL_BUFFER_BYTES=%lld, YALI_STAGING_BYTES=%lld; "
                 "YALI_ONESHOT_LL_MAX_BYTES and YALI_MAX_CTAS, when set, override this table\n",
                 header.yali_version, static_cast<long long>(header.ll_capacity),
                 static_cast<long long>(header.staging_bytes));
  int rejected = 0;
  for (const TuneStep& step : steps) {
    for (const TuneCandidate& candidate : step.candidates) rejected += candidate.rejected;
    if (step.chosen < 0) continue;
    const TuneCandidate& best = step.candidates[step.chosen];
    const bool higher = HigherIsBetter(step.kind);
    std::string line = "# " + StepKeys(step.kind, best.line) + ": " +
                       (higher ? "highest busBW" : "lowest time") +
                       Format(" of %zu candidates at ", step.candidates.size()) + JoinSizes(step.sizes, " + ") +
                       ": " + ScoreText(step.kind, best);
    if (step.runner_up >= 0) {
      const TuneCandidate& second = step.candidates[step.runner_up];
      line += " (runner-up " + CandidateParams(step.kind, second.line) + ": " +
              ScoreText(step.kind, second) + ")";
    }
    text += line + "\n";
  }
  text += "# " + crossover.reason + "\n";
  if (!crossover.sizes.empty()) {
    text += Format("#   %8s %10s %14s  %s\n", "size", "LL (us)", "two-shot (us)", "faster");
    for (size_t i = 0; i < crossover.sizes.size(); ++i) {
      const TuneMeasurement& ll = crossover.ll[i];
      const TuneMeasurement& two = crossover.twoshot[i];
      const char* faster = ll.wrong > 0    ? "two-shot (LL wrong)"
                           : two.wrong > 0 ? "LL (two-shot wrong)"
                           : ll.time_us < two.time_us ? "LL"
                                                      : "two-shot";
      text += Format("#   %8s %10.2f %14.2f  %s\n", SizeLabel(crossover.sizes[i]).c_str(),
                     ll.time_us, two.time_us, faster);
    }
  }
  if (!exchanges.empty()) {
    text += Format("# exchanges (nranks %d): the same timing, out of place, root 0, sum where "
                   "they reduce; %s_ll_max: LL against staged (both forced with YALI_ALGO) on "
                   "plain buffers; %s_direct_min: direct (forced) against the selector's choice "
                   "without it (LL up to its new ll_max, staged above), on buffers registered "
                   "with yaliCommRegister; keys are bytes per piece (what one rank sends to one "
                   "receiver); YALI_<ALGO>_MAX_BYTES / _MIN_BYTES, when set, override them\n",
                   header.nranks, "<coll>", "<coll>");
    for (const ExchangeCrossover& x : exchanges) {
      text += "# " + x.reason + "\n";
      if (x.skipped || x.sizes.empty()) continue;
      text += Format("#   %8s %10s %12s %16s  %s\n", "piece", "size", CandidateLabel(x.rule),
                     BaselineLabel(x.rule), "faster");
      for (size_t i = 0; i < x.sizes.size(); ++i) {
        const TuneMeasurement& a = x.candidate[i];
        const TuneMeasurement& b = x.baseline[i];
        const std::string faster =
            a.wrong > 0   ? std::string(BaselineLabel(x.rule)) + " (" + CandidateLabel(x.rule) + " wrong)"
            : b.wrong > 0 ? std::string(CandidateLabel(x.rule)) + " (" + BaselineLabel(x.rule) + " wrong)"
            : a.time_us < b.time_us ? std::string(CandidateLabel(x.rule))
                                    : std::string(BaselineLabel(x.rule));
        text += Format("#   %8s %10s %9.2f us %13.2f us  %s\n", SizeLabel(x.pieces[i]).c_str(),
                       SizeLabel(x.sizes[i]).c_str(), a.time_us, b.time_us, faster.c_str());
      }
    }
    // What this file leaves to the built-in table: a key left off the line takes it.
    std::string untuned;
    for (const TuneExchange& exchange : TuneExchanges()) {
      bool measured = false;
      for (const ExchangeCrossover& x : exchanges) measured = measured || x.coll == exchange.coll;
      if (!measured) untuned += std::string(untuned.empty() ? "" : ", ") + CollName(exchange.coll);
    }
    text += "# left to the built-in table: the copy-engine rows (*_ce_min) and the rooted two-shot "
            "rows (broadcast_twoshot_min, reduce_twoshot_min), 0 (never) by default";
    if (!untuned.empty()) text += "; the keys of " + untuned + " (not in --tune-colls)";
    text += "\n";
  }
  if (rejected > 0)
    text += Format("# WARNING: %d candidate(s) gave wrong results and were rejected\n", rejected);
  return text + FormatTuningLine(chosen) + "\n";
}

void WriteTuneJson(JsonWriter& json, const TuneHeader& header, const std::vector<TuneStep>& steps,
                   const Crossover& crossover, const TuneComparison& comparison,
                   const TuningLine& chosen, const std::string& file_path,
                   const std::vector<ExchangeCrossover>& exchanges) {
  json.Key("tune");
  json.BeginObject();
  json.Key("file"); json.String(file_path);
  json.Key("sm_major"); json.Int(header.sm_major);
  json.Key("nranks"); json.Int(header.nranks);
  json.Key("dtype"); json.String(header.dtype);
  json.Key("ll_capacity_bytes"); json.Int(header.ll_capacity);
  json.Key("staging_bytes"); json.Int(header.staging_bytes);
  json.Key("steps");
  json.BeginArray();
  for (const TuneStep& step : steps) {
    json.BeginObject();
    json.Key("name"); json.String(TuneStepName(step.kind));
    json.Key("algo"); json.String(TuneAlgoName(step.algo));
    json.Key("score"); json.String(HigherIsBetter(step.kind) ? "sum_busbw_gbs" : "sum_time_us");
    json.Key("higher_is_better"); json.Bool(HigherIsBetter(step.kind));
    json.Key("sizes"); WriteSizes(json, step.sizes);
    json.Key("chosen");
    if (step.chosen >= 0) json.Int(step.chosen); else json.Null();
    json.Key("candidates");
    json.BeginArray();
    for (const TuneCandidate& candidate : step.candidates) {
      json.BeginObject();
      json.Key("params"); json.String(CandidateParams(step.kind, candidate.line));
      json.Key("entry"); WriteEntry(json, candidate.line);
      json.Key("rejected"); json.Bool(candidate.rejected);
      json.Key("score"); json.Double(candidate.score);
      json.Key("measurements"); WriteMeasurements(json, candidate.measurements);
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  json.Key("crossover");
  json.BeginObject();
  json.Key("sizes"); WriteSizes(json, crossover.sizes);
  json.Key("oneshot_ll"); WriteMeasurements(json, crossover.ll);
  json.Key("twoshot"); WriteMeasurements(json, crossover.twoshot);
  json.Key("ll_max"); json.Int(crossover.ll_max);
  json.Key("reason"); json.String(crossover.reason);
  json.EndObject();
  json.Key("exchanges");
  json.BeginArray();
  for (const ExchangeCrossover& x : exchanges) {
    json.BeginObject();
    json.Key("collective"); json.String(CollName(x.coll));
    json.Key("key"); json.String(ExchangeKey(x.coll, x.rule));
    json.Key("candidate"); json.String(ExchangeAlgoName(x.coll, x.rule == ExchangeRule::kLLMax ? "ll" : "direct"));
    json.Key("baseline");
    json.String(x.rule == ExchangeRule::kLLMax ? ExchangeAlgoName(x.coll, "staged") : "auto without direct");
    json.Key("registered"); json.Bool(x.rule == ExchangeRule::kDirectMin);
    json.Key("sizes"); WriteSizes(json, x.sizes);
    json.Key("piece_bytes"); WriteSizes(json, x.pieces);
    json.Key("candidate_measurements"); WriteMeasurements(json, x.candidate);
    json.Key("baseline_measurements"); WriteMeasurements(json, x.baseline);
    json.Key("skipped"); json.Bool(x.skipped);
    json.Key("value");
    if (x.skipped) json.Null(); else json.Int(x.value);
    json.Key("reason"); json.String(x.reason);
    json.EndObject();
  }
  json.EndArray();
  json.Key("comparison");
  json.BeginObject();
  json.Key("sizes"); WriteSizes(json, comparison.sizes);
  json.Key("builtin"); WriteMeasurements(json, comparison.builtin);
  json.Key("tuned"); WriteMeasurements(json, comparison.tuned);
  json.EndObject();
  json.Key("chosen"); WriteEntry(json, chosen);
  json.Key("line"); json.String(FormatTuningLine(chosen));
  json.EndObject();
}

}  // namespace yali_perf
