#include "tuning/selector.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "collectives/common/device_state.h"

namespace yali {
namespace {

// Built-in tuning for Hopper (H100/H200 with NVSwitch, NV18 between every pair).
// Initial values, before any sweep on hardware:
//  - ll_max: one-shot LL moves 2x the payload (flags) to each of n-1 peers but has no barrier;
//    two-shot moves ~2(n-1)/n of the payload with two flag round trips per step. With ~1.5 us per
//    round trip and ~350 GB/s links, the crossover is near 2 * 1.5 us * 350 GB/s / (2(n-1) -
//    2(n-1)/n) ~ 512 KB at n = 2 and a quarter of that at n = 4.
//  - threads 512 per block: enough 16-byte accesses in flight per SM for NVLink latency.
//  - two-shot ctas: 64 below 64 MB, 32 from 64 MB up (frugal_min / frugal_ctas: the budget for
//    large messages, which users overlap with compute). Measured (nvidia-h200-x4, 2026-11-22,
//    twoshot_push, one process per GPU, docs/PERF.md "Blocks and slot size"): 64 blocks against 32
//    at 16 MB: 278 vs 258 GB/s busBW (n = 2), 292 vs 273 (n = 4); at 4 MB 193 vs 190, 214 vs 203.
//    At 1 GB 64 blocks (with 8 MB staging) reach 346 / 335 against 303 / 317, which is why
//    YALI_MAX_CTAS=64 is the documented override for users who do not overlap.
//  - slots: 8 KB minimum keeps per-step flag costs below data time; 128 KB maximum keeps the
//    staging footprint at 2 * n * 32 * 128 KB. Measured at 32 blocks, 1 GB, n = 2: 64 KB slots
//    252 GB/s, 128 KB 303, 256 KB 297, 512 KB 316 (but 303 against 317 at n = 4).
//  - push_min: twoshot_push (all-gather by NVLink writes plus a local copy) against twoshot (by
//    NVLink reads). Measured (nvidia-h200-x4, one process per GPU, fp32, docs/PERF.md): push is
//    faster at every size from 256K to 1G at n = 2 and n = 4 (1G: 311 vs 279 GB/s busBW at n = 2,
//    313 vs 263 at n = 4), so it is used for every two-shot size (push_min = 1 byte).
//  - pull_max: oneshot_pull (copy-in, one flag exchange, NVLink reads) above the LL range.
//    Measured (nvidia-h200-x4, 2026-11-22, one process per GPU, fp32, busBW GB/s, docs/PERF.md
//    "One-shot pull"): n = 2: 512K LL 68.0 vs pull 65.4; 1M pull 108.7 vs twoshot_push 83.3;
//    2M 159.8 vs 134.1; 4M 205.9 vs 193.7; 8M twoshot_push 249 (pull does not fit 4 MB), so
//    pull_max = 4M. n = 4: 512K pull 62.5 vs twoshot_push 58.2 (LL 48.6); 1M 91.5 vs 101.5, so
//    pull_max = 512K (LL keeps 256K: 41.0 vs 41.2). n = 8: not measured (no 8-GPU machine when it
//    was written); each rank would read 7 inputs, so it stays off.
//  - copy_engine was removed: measured slower than twoshot_push at every size, docs/PERF.md
//    "Copy engines".
//  - frugal_teams: two teams of 256 threads per block from frugal_min up, i.e. 64 pipelines of
//    64 KB slots in 32 blocks (4 MB staging). Measured (nvidia-h200-x4, 2026-11-22, twoshot_push,
//    fp32 busBW GB/s, two runs, docs/PERF.md "Teams"): n = 4 64M 306-308 vs 294-298, 256M 319-321
//    vs 305-308, 1G 323-325 vs 311-315; n = 2 64M 289-292 vs 285-287, 256M 298-302 vs 298-301,
//    1G 301-308 vs 300. Below 64 MB (64 blocks) teams lost (16M n = 2: 268 vs 275; 4M n = 4: 205
//    vs 212), hence frugal range only. n = 8: not measured, 1.
//  - direct_min / twoshot_direct_min: the algorithms for registered buffers. Measured
//    (nvidia-h200-x2, 2026-11-22, commit 457d7dd, yali-perf -R 1, one process per GPU, fp32 busBW
//    GB/s, docs/PERF.md "Registered buffers"), n = 2, against the staged choice:
//      direct (NVLink reads of the inputs, writes into the outputs): 64K 6.4 vs 15.0, 1M 83.5 vs
//      104.3, 16M 271.8 vs 273.4, 1G 308.2 vs 306.0: never ahead, so off (0). Its reads wait on
//      NVLink latency; 4 vectors per source in flight instead of 2 did not help (1G 304.3).
//      twoshot_direct (twoshot_push storing into the peers' outputs, no copy-out): 4M 179.3 vs
//      208.3 (oneshot_pull), 16M 280.9 vs 273.4, 64M 307.4 vs 291.3, 256M 321.1 vs 302.9, 1G 328.2
//      vs 306.0: from 16 MB. n = 4: not measured (no x4 machine was lent); the same kernels with a
//      larger copy-out saved, so the n = 2 values. n = 8: not measured, off.
// Measured on nvidia-h200-x4 (2026-11-22, `yali-perf --tune -g 2`, docs/PERF.md): at n = 2 LL beats
// two-shot up to 512K (12.4 vs 15.0 us), two-shot wins at 1M; 512 threads x 32 blocks x 128K slots
// was the best of 28 geometries at 64M + 256M, and an 8K minimum slot the best at 256K..4M. At n = 4
// the single-process tune is host-launch-bound, so ll_max there comes from one-process-per-GPU and
// graph runs: LL 4.8 us at 64K against two-shot 13 us at 256K (graph mode).
const TuningEntry kBuiltinTables[] = {
    // sm nranks ll_max  llT  llC  2sT  2sC  minSlot  maxSlot   pushMin frugalMin frugalC pullMax  fTeams directMin 2sDirectMin
    {9, 2, 512 << 10, 512, 32, 512, 64, 8 << 10, 128 << 10, 1, 64 << 20, 32, 4 << 20, 2, 0, 16 << 20},
    {9, 4, 256 << 10, 512, 32, 512, 64, 8 << 10, 128 << 10, 1, 64 << 20, 32, 512 << 10, 2, 0, 16 << 20},
    {9, 8, 64 << 10, 512, 32, 512, 64, 8 << 10, 128 << 10, 1, 64 << 20, 32, 0, 1, 0, 0},
};

// Two-shot slots are 256-byte multiples: every pipeline's slot then starts as aligned as the
// staging, result and gather areas (256 bytes), and a rank's shard of a tile, which tile_split.h
// rounds up to 16 bytes, never runs past its slot.
constexpr size_t kSlotAlign = 256;
// oneshot_pull's runs are 16-byte multiples: its copies are 16-byte vectors.
constexpr size_t kPullRunAlign = 16;

// Byte arithmetic that cannot wrap for any size_t (messages up to SIZE_MAX, tuning values up to
// INT64_MAX).
size_t ceilDiv(size_t v, size_t d) { return v / d + (v % d != 0); }
size_t roundDown(size_t v, size_t m) { return v / m * m; }
size_t roundUp(size_t v, size_t m) { return ceilDiv(v, m) * m; }  // callers keep v <= SIZE_MAX - m
// A byte count or limit from an int64_t setting, table or SelectorLimits field; negative is none.
size_t asBytes(int64_t v) { return v > 0 ? static_cast<size_t>(v) : 0; }

// The tuning's smallest two-shot slot (and oneshot_pull run), as a 256-byte multiple: a tuning file
// may give any value from 256 up.
size_t minSlotOf(const TuningEntry& e) {
  return roundUp(std::max(kSlotAlign, asBytes(e.twoshotMinSlotBytes)), kSlotAlign);
}

bool isTwoshotVariant(Algo a) {
  return a == Algo::kTwoshot || a == Algo::kTwoshotPush || a == Algo::kTwoshotDirect;
}

// The tuning file's optional keys and their allowed ranges; a line that leaves one out takes the
// built-in value (parseTuningText).
const std::map<std::string, std::pair<int64_t, int64_t>> kOptionalKeys = {
    {"twoshot_push_min", {0, INT64_MAX}}, {"frugal_min", {0, INT64_MAX}},
    {"frugal_ctas", {1, kMaxCtas}},       {"oneshot_pull_max", {0, INT64_MAX}},
    {"frugal_teams", {1, kMaxTeamsPerBlock}}, {"direct_min", {0, INT64_MAX}},
    {"twoshot_direct_min", {0, INT64_MAX}},
};

// The keys of the removed copy_engine. A table that still sets them was tuned for an algorithm that
// no longer exists, so it is refused rather than half applied.
const std::set<std::string> kCopyEngineKeys = {"ce_min", "ce_ctas"};

// Names by Algo value (YALI_ALGO, yaliAlgoInfo_t, logs).
const char* const kAlgoNames[] = {"oneshot_ll",   "twoshot", "twoshot_push",
                                  "oneshot_pull", "direct",  "twoshot_direct"};
static_assert(std::size(kAlgoNames) == kNumAlgos, "one name per Algo value");

}  // namespace

size_t dataTypeSize(DataType t) { return t == DataType::kFloat32 ? 4 : 2; }

const char* algoName(Algo a) {
  const int i = static_cast<int>(a);
  return i >= 0 && i < kNumAlgos ? kAlgoNames[i] : "unknown";
}

bool algoFromName(const std::string& name, Algo* out) {
  for (int i = 0; i < kNumAlgos; ++i) {
    if (name == kAlgoNames[i]) {
      *out = static_cast<Algo>(i);
      return true;
    }
  }
  return false;
}

std::string algoNameList() {
  std::string list;
  for (int i = 0; i < kNumAlgos; ++i) list += (i ? ", " : "") + std::string(kAlgoNames[i]);
  return list;
}

TuningEntry builtinTuning(int smMajor, int nranks) {
  // Other architectures use Hopper's figures until measured: the algorithms are the same.
  const TuningEntry* best = &kBuiltinTables[0];
  for (const TuningEntry& e : kBuiltinTables) {
    if (e.nranks <= nranks) best = &e;  // tables are sorted by nranks
  }
  TuningEntry e = *best;
  e.smMajor = smMajor;
  e.nranks = nranks;
  return e;
}

bool parseTuningText(const std::string& text, std::vector<TuningEntry>* out, std::string* error) {
  std::istringstream lines(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(lines, line)) {
    ++lineNo;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    TuningEntry e{};
    int seen = 0;
    std::map<std::string, int64_t> optional;  // optional keys given on this line
    while (words >> word) {
      size_t eq = word.find('=');
      if (eq == std::string::npos) {
        *error = "line " + std::to_string(lineNo) + ": '" + word + "' is not key=value";
        return false;
      }
      std::string key = word.substr(0, eq);
      long long v;
      try {
        size_t used = 0;
        v = std::stoll(word.substr(eq + 1), &used);
        if (used != word.size() - eq - 1) throw std::invalid_argument("trailing");
      } catch (...) {
        *error = "line " + std::to_string(lineNo) + ": '" + word + "' has no integer value";
        return false;
      }
      if (key == "sm") e.smMajor = static_cast<int>(v);
      else if (key == "nranks") e.nranks = static_cast<int>(v);
      else if (key == "ll_max") e.oneshotLLMaxBytes = v;
      else if (key == "ll_threads") e.llThreads = static_cast<int>(v);
      else if (key == "ll_ctas") e.llMaxCtas = static_cast<int>(v);
      else if (key == "twoshot_threads") e.twoshotThreads = static_cast<int>(v);
      else if (key == "twoshot_ctas") e.twoshotMaxCtas = static_cast<int>(v);
      else if (key == "twoshot_min_slot") e.twoshotMinSlotBytes = v;
      else if (key == "twoshot_max_slot") e.twoshotMaxSlotBytes = v;
      else if (kOptionalKeys.count(key)) {
        optional[key] = v;
        continue;  // optional keys are not counted among the nine
      } else if (kCopyEngineKeys.count(key)) {
        *error = "line " + std::to_string(lineNo) + ": '" + key +
                 "': copy_engine was removed (measured slower than twoshot_push at every size, "
                 "docs/PERF.md \"Copy engines\"); delete the key";
        return false;
      } else {
        *error = "line " + std::to_string(lineNo) + ": unknown key '" + key + "'";
        return false;
      }
      ++seen;
    }
    if (seen == 0 && optional.empty()) continue;
    if (seen != 9) {
      *error = "line " + std::to_string(lineNo) + ": expected 9 keys, found " + std::to_string(seen);
      return false;
    }
    auto threadsOk = [](int t) { return t >= 64 && t <= 1024 && t % 32 == 0; };
    bool optionalOk = true;
    for (const auto& kv : optional) {
      const std::pair<int64_t, int64_t>& range = kOptionalKeys.at(kv.first);
      optionalOk = optionalOk && kv.second >= range.first && kv.second <= range.second;
    }
    if (e.nranks < 2 || e.nranks > kMaxRanks || !threadsOk(e.llThreads) ||
        !threadsOk(e.twoshotThreads) || e.llMaxCtas < 1 || e.llMaxCtas > kMaxCtas ||
        e.twoshotMaxCtas < 1 || e.twoshotMaxCtas > kMaxCtas || e.twoshotMinSlotBytes < 256 ||
        e.twoshotMaxSlotBytes < e.twoshotMinSlotBytes || e.oneshotLLMaxBytes < 0 || !optionalOk) {
      *error = "line " + std::to_string(lineNo) + ": a value is out of range";
      return false;
    }
    // Each optional key: the line's value, or the built-in table's for this world size.
    const TuningEntry builtin = builtinTuning(e.smMajor, e.nranks);
    auto given = [&](const char* key, int64_t builtinValue) {
      auto it = optional.find(key);
      return it == optional.end() ? builtinValue : it->second;
    };
    e.twoshotPushMinBytes = given("twoshot_push_min", builtin.twoshotPushMinBytes);
    e.frugalMinBytes = given("frugal_min", builtin.frugalMinBytes);
    e.frugalMaxCtas = static_cast<int>(given("frugal_ctas", builtin.frugalMaxCtas));
    e.oneshotPullMaxBytes = given("oneshot_pull_max", builtin.oneshotPullMaxBytes);
    e.frugalTeams = static_cast<int>(given("frugal_teams", builtin.frugalTeams));
    e.directMinBytes = given("direct_min", builtin.directMinBytes);
    e.twoshotDirectMinBytes = given("twoshot_direct_min", builtin.twoshotDirectMinBytes);
    out->push_back(e);
  }
  return true;
}

std::string formatTuningEntry(const TuningEntry& e) {
  std::ostringstream s;
  s << "sm=" << e.smMajor << " nranks=" << e.nranks << " ll_max=" << e.oneshotLLMaxBytes
    << " ll_threads=" << e.llThreads << " ll_ctas=" << e.llMaxCtas
    << " twoshot_threads=" << e.twoshotThreads << " twoshot_ctas=" << e.twoshotMaxCtas
    << " twoshot_min_slot=" << e.twoshotMinSlotBytes << " twoshot_max_slot=" << e.twoshotMaxSlotBytes;
  return s.str();
}

bool Selector::init(const Settings& settings, const SelectorLimits& limits, std::string* error) {
  settings_ = settings;
  limits_ = limits;
  // What the choices below rely on: a world size, one slot of staging, one warp per block.
  if (limits.nranks < 1 || limits.nranks > kMaxRanks || asBytes(limits.stagingBytes) < kSlotAlign ||
      limits.maxLLThreads < 32 || limits.maxTwoshotThreads < 32) {
    *error = "selector limits out of range: nranks=" + std::to_string(limits.nranks) + " stagingBytes=" +
             std::to_string(limits.stagingBytes) + " maxLLThreads=" + std::to_string(limits.maxLLThreads) +
             " maxTwoshotThreads=" + std::to_string(limits.maxTwoshotThreads);
    return false;
  }
  entry_ = builtinTuning(limits.smMajor, limits.nranks);
  std::vector<TuningEntry> entries;
  std::string err;
  if (!parseTuningText(settings.tuningText, &entries, &err)) {
    *error = "YALI_TUNING_FILE='" + settings.tuningFile + "': " + err;
    return false;
  }
  for (const TuningEntry& e : entries)
    if (e.smMajor == limits.smMajor && e.nranks == limits.nranks) entry_ = e;
  // Whole warps, within what the kernels can launch.
  entry_.llThreads = std::min(entry_.llThreads, limits.maxLLThreads / 32 * 32);
  entry_.twoshotThreads = std::min(entry_.twoshotThreads, limits.maxTwoshotThreads / 32 * 32);
  if (settings.maxCtas > 0) {
    // YALI_MAX_CTAS lowers the LL cap and replaces both two-shot caps (the frugal one included).
    // It also means one pipeline per block: the blocks the user asked for, with the geometry that
    // was measured for them (docs/PERF.md "Teams").
    entry_.llMaxCtas = std::min<int>(entry_.llMaxCtas, static_cast<int>(settings.maxCtas));
    entry_.twoshotMaxCtas = static_cast<int>(settings.maxCtas);
    entry_.frugalMaxCtas = static_cast<int>(settings.maxCtas);
    entry_.frugalTeams = 1;
  }
  return true;
}

void Selector::limitBlocks(int maxBlocks) {
  maxBlocks = std::max(1, maxBlocks);
  entry_.llMaxCtas = std::min(entry_.llMaxCtas, maxBlocks);
  entry_.twoshotMaxCtas = std::min(entry_.twoshotMaxCtas, maxBlocks);
  entry_.frugalMaxCtas = std::min(entry_.frugalMaxCtas, maxBlocks);
}

AlgoChoice Selector::oneshotLL(size_t bytes) const {
  const size_t packets = ceilDiv(bytes, 8);
  const size_t threads = static_cast<size_t>(entry_.llThreads);
  const int ctas =
      static_cast<int>(std::min<size_t>(entry_.llMaxCtas, std::max<size_t>(1, ceilDiv(packets, threads))));
  return {Algo::kOneshotLL, ctas, entry_.llThreads, 0};
}

AlgoChoice Selector::oneshotPull(size_t bytes) const {
  // Runs of at least the two-shot minimum slot per block, as many blocks as the two-shot cap: each
  // block's reads of n - 1 peers need the SMs' combined load slots to fill the links.
  const size_t minRun = minSlotOf(entry_);
  const size_t ctas =
      std::max<size_t>(1, std::min<size_t>(ceilDiv(bytes, minRun), static_cast<size_t>(entry_.twoshotMaxCtas)));
  // bytes fit the copy-in buffer (at most INT64_MAX), so rounding up cannot wrap.
  const size_t run = roundUp(ceilDiv(bytes, ctas), kPullRunAlign);
  return {Algo::kOneshotPull, static_cast<int>(ctas), entry_.twoshotThreads, run};
}

bool Selector::frugal(size_t bytes) const {
  return entry_.frugalMinBytes > 0 && bytes >= asBytes(entry_.frugalMinBytes);
}

// Blocks for a message cut into pieces of the min slot per rank: one per piece, within the cap
// (the frugal one from frugalMinBytes up).
size_t Selector::ctasFor(size_t bytes) const {
  const size_t n = static_cast<size_t>(limits_.nranks);
  const size_t pieces = bytes / n / minSlotOf(entry_);  // n * min slot may not fit a size_t
  const size_t cap = static_cast<size_t>(frugal(bytes) ? entry_.frugalMaxCtas : entry_.twoshotMaxCtas);
  return std::max<size_t>(1, std::min(pieces, cap));
}

AlgoChoice Selector::direct(size_t bytes) const {
  return {Algo::kDirect, static_cast<int>(ctasFor(bytes)), entry_.twoshotThreads, 0};
}

AlgoChoice Selector::twoshot(size_t bytes, Algo variant) const {
  const size_t n = static_cast<size_t>(limits_.nranks);
  const size_t staging = roundDown(asBytes(limits_.stagingBytes), kSlotAlign);  // >= 256: init
  // Slot bounds as 256-byte multiples; the minimum wins over the maximum, and staging over both:
  // when staging holds less than one minimum slot, the one pipeline takes all of it.
  const size_t minSlot = std::min(minSlotOf(entry_), staging);
  const size_t maxSlot = std::max(minSlot, roundDown(asBytes(entry_.twoshotMaxSlotBytes), kSlotAlign));
  const size_t minSlots = bytes / n / minSlot;
  // Staging holds this many pipelines of minimum slots: pipeline p uses bytes [p * slot,
  // (p + 1) * slot) of every sender's area.
  const size_t pipelinesThatFit = staging / minSlot;
  size_t ctas = ctasFor(bytes);
  // Teams (independent pipelines per block) in the frugal range, when every pipeline gets a
  // min-size slot and each team keeps at least two warps. Where staging cannot hold a minimum slot
  // for every pipeline, teams go first (they gained 0-5 %, blocks much more: docs/PERF.md "Teams"),
  // then blocks.
  const int threads = entry_.twoshotThreads;
  int teams = frugal(bytes) ? entry_.frugalTeams : 1;
  if (teams < 1 || teams > kMaxTeamsPerBlock || threads % (32 * teams) != 0 || threads / teams < 64 ||
      minSlots < ctas * teams || ctas * teams > pipelinesThatFit)
    teams = 1;
  ctas = std::max<size_t>(1, std::min(ctas, pipelinesThatFit));
  const size_t pipelines = ctas * static_cast<size_t>(teams);
  // Slot: the message spread evenly over the pipelines, within [min, max] and what staging holds
  // per pipeline (at least minSlot, by the cuts above).
  const size_t slotCap = std::min(maxSlot, roundDown(staging / pipelines, kSlotAlign));
  const size_t even = ceilDiv(ceilDiv(bytes, n), pipelines);  // n * pipelines may not fit a size_t
  const size_t slot = std::max(minSlot, roundUp(std::min(even, slotCap), kSlotAlign));
  return {variant, static_cast<int>(ctas), threads, slot, teams};
}

AlgoChoice Selector::choose(size_t bytes, bool sendRegistered, bool recvRegistered) const {
  // Byte counts compare as size_t, every limit and threshold converted from its int64_t without a
  // sign: a message of 2^63 bytes or more is larger than every one of them.
  const bool llFits = bytes <= asBytes(limits_.llPayloadBytes);
  const bool pullFits = bytes <= asBytes(limits_.pullBufferBytes);
  // Each threshold setting (env.h): -2 takes the table's value, -1 means every size, 0 never, >0
  // bytes. The one-shot ones are upper bounds within their buffers, the others lower bounds.
  auto resolve = [](int64_t setting, int64_t table) { return setting == kThresholdTable ? table : setting; };
  auto upTo = [bytes](int64_t max, bool fits) {
    return fits && (max == kThresholdAlways || (max > 0 && bytes <= asBytes(max)));
  };
  auto from = [bytes](int64_t min) { return min == kThresholdAlways || (min > 0 && bytes >= asBytes(min)); };
  Algo forced;
  const bool isForced = !settings_.algo.empty() && algoFromName(settings_.algo, &forced);
  // The algorithms for registered buffers first. Forced on buffers they cannot take, the call gets
  // the automatic choice among the others.
  if (recvRegistered) {
    if (sendRegistered &&
        (isForced ? forced == Algo::kDirect : from(resolve(settings_.directMinBytes, entry_.directMinBytes))))
      return direct(bytes);
    if (isForced ? forced == Algo::kTwoshotDirect
                 : from(resolve(settings_.twoshotDirectMinBytes, entry_.twoshotDirectMinBytes)))
      return twoshot(bytes, Algo::kTwoshotDirect);
  }
  if (isForced && forced != Algo::kDirect && forced != Algo::kTwoshotDirect) {
    // A forced one-shot that does not fit its buffer falls back to two-shot (logged by the caller).
    if (forced == Algo::kOneshotLL && llFits) return oneshotLL(bytes);
    if (forced == Algo::kOneshotPull && pullFits) return oneshotPull(bytes);
    return twoshot(bytes, forced == Algo::kTwoshotPush ? Algo::kTwoshotPush : Algo::kTwoshot);
  }
  if (upTo(resolve(settings_.oneshotLLMaxBytes, entry_.oneshotLLMaxBytes), llFits)) return oneshotLL(bytes);
  if (upTo(resolve(settings_.oneshotPullMaxBytes, entry_.oneshotPullMaxBytes), pullFits))
    return oneshotPull(bytes);
  const int64_t pushMin = resolve(settings_.twoshotPushMinBytes, entry_.twoshotPushMinBytes);
  return twoshot(bytes, from(pushMin) ? Algo::kTwoshotPush : Algo::kTwoshot);
}

bool choiceFits(const AlgoChoice& c, size_t bytes, const SelectorLimits& limits, std::string* why) {
  const int a = static_cast<int>(c.algo);
  std::string problem;
  if (a < 0 || a >= kNumAlgos) {
    problem = "algorithm " + std::to_string(a) + " does not exist";
  } else if (c.ctas < 1 || c.ctas > kMaxCtas) {
    problem = std::to_string(c.ctas) + " blocks, outside [1, " + std::to_string(kMaxCtas) + "]";
  } else {
    const int maxThreads = c.algo == Algo::kOneshotLL ? limits.maxLLThreads : limits.maxTwoshotThreads;
    const bool twoshotVariant = isTwoshotVariant(c.algo);
    const size_t pipelines = static_cast<size_t>(c.ctas) * static_cast<size_t>(std::max(c.teams, 1));
    if (c.threads < 32 || c.threads > 1024 || c.threads % 32 != 0 || c.threads > maxThreads) {
      problem = std::to_string(c.threads) + " threads per block: not whole warps within [32, " +
                std::to_string(std::min(1024, maxThreads)) + "]";
    } else if (c.teams < 1 || c.teams > kMaxTeamsPerBlock || (c.teams > 1 && !twoshotVariant)) {
      problem = std::to_string(c.teams) + " teams per block";
    } else if (c.teams > 1 && (c.threads % (32 * c.teams) != 0 || c.threads / c.teams < 64)) {
      problem = std::to_string(c.teams) + " teams of " + std::to_string(c.threads) +
                " threads: not whole warps of at least 64 threads each";
    } else if (twoshotVariant && (c.slotBytes < kSlotAlign || c.slotBytes % kSlotAlign != 0)) {
      problem = std::to_string(c.slotBytes) + "-byte slots: not a multiple of 256 bytes";
    } else if (twoshotVariant && c.slotBytes > asBytes(limits.stagingBytes) / pipelines) {
      problem = std::to_string(pipelines) + " pipelines of " + std::to_string(c.slotBytes) +
                "-byte slots exceed the " + std::to_string(limits.stagingBytes) + " bytes of staging";
    } else if (c.algo == Algo::kOneshotPull && bytes > asBytes(limits.pullBufferBytes)) {
      problem = "the message exceeds the " + std::to_string(limits.pullBufferBytes) + "-byte copy-in buffer";
    } else if (c.algo == Algo::kOneshotPull &&
               (c.slotBytes % kPullRunAlign != 0 || c.slotBytes < ceilDiv(bytes, static_cast<size_t>(c.ctas)))) {
      problem = std::to_string(c.ctas) + " runs of " + std::to_string(c.slotBytes) +
                " bytes: not 16-byte multiples covering the message";
    } else if (c.algo == Algo::kOneshotLL && bytes > asBytes(limits.llPayloadBytes)) {
      problem = "the message exceeds the " + std::to_string(limits.llPayloadBytes) + "-byte LL buffer";
    }
  }
  if (problem.empty()) return true;
  if (why != nullptr)
    *why = std::string(algoName(c.algo)) + " for " + std::to_string(bytes) + " bytes: " + problem;
  return false;
}

}  // namespace yali
