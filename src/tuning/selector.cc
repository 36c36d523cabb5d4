#include "tuning/selector.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <mutex>
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
//  - twoshot_direct_min (and the removed direct's direct_min): the algorithms for registered
//    buffers. Measured
//    (nvidia-h200-x2, 2026-11-22, commit 457d7dd, yali-perf -R 1, one process per GPU, fp32 busBW
//    GB/s, docs/PERF.md "Registered buffers"), n = 2, against the staged choice:
//      direct (NVLink reads of the inputs, writes into the outputs): 64K 6.4 vs 15.0, 1M 83.5 vs
//      104.3, 16M 271.8 vs 273.4, 1G 308.2 vs 306.0: never ahead, so it was removed (its key
//      direct_min is refused). Its reads wait on NVLink latency; 4 vectors per source in flight
//      instead of 2 did not help (1G 304.3).
//      twoshot_direct (twoshot_push storing into the peers' outputs, no copy-out): 4M 179.3 vs
//      208.3 (oneshot_pull), 16M 280.9 vs 273.4, 64M 307.4 vs 291.3, 256M 321.1 vs 302.9, 1G 328.2
//      vs 306.0: from 16 MB. n = 4: not measured (no x4 machine was lent); the same kernels with a
//      larger copy-out saved, so the n = 2 values. n = 8: not measured, off.
// Measured on nvidia-h200-x4 (2026-11-22, `yali-perf --tune -g 2`, docs/PERF.md): at n = 2 LL beats
// two-shot up to 512K (12.4 vs 15.0 us), two-shot wins at 1M; 512 threads x 32 blocks x 128K slots
// was the best of 28 geometries at 64M + 256M, and an 8K minimum slot the best at 256K..4M. At n = 4
// the single-process tune is host-launch-bound, so ll_max there comes from one-process-per-GPU and
// graph runs: LL 4.8 us at 64K against two-shot 13 us at 256K (graph mode).
//  - The exchanges (every collective but AllReduce): *_ll_max, the largest piece (bytes one rank
//    sends to one receiver) sent as LL packets. LL sends each piece with its flags (twice the
//    bytes) but no round trip; the staged path costs two round trips per step. Measured at n = 2
//    (nvidia-h200-x2, 2026-11-30, one process per GPU, fp32, docs/PERF.md "Session 44"): LL is
//    faster up to 512 KB pieces for every exchange, eager and in graphs (at a 512 KB piece 7.3-8.6
//    against 10.2-11.0 us in graphs); at 1 MB pieces staged is faster eager for all seven and in
//    graphs for five (AllGather 2 MB: 13.3 against 14.1 us; Broadcast level, Reduce 0.4 us slower),
//    so 512 KB there. At n > 2 both paths send to n-1 peers, LL twice the bytes, so the crossover
//    piece falls about as 1/(n-1): 256 KB, the first estimate, is kept at n >= 3 (not measured).
//    *_direct_min 1 MB (not measured): writing into registered outputs saves the receiver's
//    copy-out, but its entry and leave handshakes cost two round trips.
// Each row is a tuning-file line (the format parseTuningText reads): the AllReduce keys, then the
// exchanges' LL thresholds, then kBuiltinExchanges; together every key. builtinTuning takes the
// row of the largest nranks at or under the world size.
constexpr const char* kExchangeLL512K =
    " reducescatter_ll_max=524288 allgather_ll_max=524288 broadcast_ll_max=524288 reduce_ll_max=524288"
    " gather_ll_max=524288 scatter_ll_max=524288 alltoall_ll_max=524288";
constexpr const char* kExchangeLL256K =
    " reducescatter_ll_max=262144 allgather_ll_max=262144 broadcast_ll_max=262144 reduce_ll_max=262144"
    " gather_ll_max=262144 scatter_ll_max=262144 alltoall_ll_max=262144";
struct BuiltinRow {
  const char* allreduce;   // sm, nranks and the AllReduce keys
  const char* exchangeLL;  // the exchanges' *_ll_max
};
// n = 3 has n = 2's AllReduce keys: it took the n = 2 row until the exchanges' thresholds differed.
const BuiltinRow kBuiltinTable[] = {
    {"sm=9 nranks=2 ll_max=524288 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 "
     "twoshot_min_slot=8192 twoshot_max_slot=131072 twoshot_push_min=1 frugal_min=67108864 frugal_ctas=32 "
     "oneshot_pull_max=4194304 frugal_teams=2 twoshot_direct_min=16777216",
     kExchangeLL512K},
    {"sm=9 nranks=3 ll_max=524288 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 "
     "twoshot_min_slot=8192 twoshot_max_slot=131072 twoshot_push_min=1 frugal_min=67108864 frugal_ctas=32 "
     "oneshot_pull_max=4194304 frugal_teams=2 twoshot_direct_min=16777216",
     kExchangeLL256K},
    {"sm=9 nranks=4 ll_max=262144 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 "
     "twoshot_min_slot=8192 twoshot_max_slot=131072 twoshot_push_min=1 frugal_min=67108864 frugal_ctas=32 "
     "oneshot_pull_max=524288 frugal_teams=2 twoshot_direct_min=16777216",
     kExchangeLL256K},
    {"sm=9 nranks=8 ll_max=65536 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 "
     "twoshot_min_slot=8192 twoshot_max_slot=131072 twoshot_push_min=1 frugal_min=67108864 frugal_ctas=32 "
     "oneshot_pull_max=0 frugal_teams=1 twoshot_direct_min=0",
     kExchangeLL256K},
};
// Appended to every row above: the exchanges' other thresholds (the same at every world size).
// broadcast_twoshot and reduce_twoshot (the rooted collectives on two-shot's pipeline, so that the
// root's links carry 2(n-1)/n of the message instead of (n-1) times it) are 0, never by default:
// they have not run on a GPU yet. What they should beat (nvidia-h200-x4, one process per GPU, fp32,
// root 0, n = 4): broadcast_direct 1 GB 9620 us (111 GB/s busBW) against NCCL's 2972; 16 MB 162.6
// against 64.4 us; reduce_staged 1 GB 8908 us against NCCL's 2947. Their sweep sets the thresholds.
// The copy-engine rows (*_ce_min) are 0, never by default: they trade speed for SMs left free,
// which only the caller can weigh (YALI_<NAME>_MIN_BYTES or YALI_ALGO opt in; yali.h).
// reducescatter_pull and reduce_pull (registered inputs, no staging) are 0 too until they have run
// on several GPUs: what reducescatter_pull should beat (nvidia-h200-x4, fp32, n = 4, Session 15):
// reducescatter_staged 1 GB at 276 GB/s busBW against NCCL's best 326; reduce_pull, reduce_staged
// (1 GB 8908 us against NCCL's 2947, above).
const char* const kBuiltinExchanges =
    " allgather_ce_min=0 broadcast_ce_min=0 gather_ce_min=0 scatter_ce_min=0 alltoall_ce_min=0"
    " reducescatter_pull_min=0 reduce_pull_min=0"
    " allgather_direct_min=1048576 broadcast_direct_min=1048576 scatter_direct_min=1048576"
    " alltoall_direct_min=1048576"
    " broadcast_twoshot_min=0 reduce_twoshot_min=0";

// Two-shot and staged slots are 256-byte multiples: every pipeline's slot then starts as aligned as
// the staging, result and gather areas (256 bytes), and a rank's shard of a tile, which
// tile_split.h rounds up to 16 bytes, never runs past its slot.
constexpr size_t kSlotAlign = 256;
// oneshot_pull's runs are 16-byte multiples: its copies are 16-byte vectors.
constexpr size_t kPullRunAlign = 16;

// Byte arithmetic that cannot wrap for any size_t (messages up to SIZE_MAX, tuning values up to
// INT64_MAX).
size_t ceilDiv(size_t v, size_t d) { return v / d + (v % d != 0); }
size_t roundDown(size_t v, size_t m) { return v / m * m; }
size_t roundUp(size_t v, size_t m) { return ceilDiv(v, m) * m; }  // callers keep v <= SIZE_MAX - m
size_t saturatingMul(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b; }
// A byte count or limit from an int64_t setting, table or SelectorLimits field; negative is none.
size_t asBytes(int64_t v) { return v > 0 ? static_cast<size_t>(v) : 0; }

// The tuning's smallest slot (and oneshot_pull run), as a 256-byte multiple: a tuning file may give
// any value from 256 up.
size_t minSlotOf(const TuningEntry& e) {
  return roundUp(std::max(kSlotAlign, asBytes(e.twoshotMinSlotBytes)), kSlotAlign);
}

Family familyOf(Algo a) { return algorithm(a).family; }
bool slotted(Family f) { return f == Family::kTwoshot || f == Family::kExchangeStaged; }
bool usesLL(Family f) { return f == Family::kOneshotLL || f == Family::kExchangeLL; }

// The tuning keys other than the thresholds (which come from the registry's rows). `mandatory`:
// what every line must give (what `yali-perf --tune` writes).
struct GeometryKey {
  const char* key;
  int64_t TuningEntry::*field;
  int64_t min;
  int64_t max;
  bool mandatory;
};
const GeometryKey kGeometryKeys[] = {
    {"sm", &TuningEntry::smMajor, 1, 1000, true},
    {"nranks", &TuningEntry::nranks, 2, kMaxRanks, true},
    {"ll_threads", &TuningEntry::llThreads, 64, 1024, true},
    {"ll_ctas", &TuningEntry::llMaxCtas, 1, kMaxCtas, true},
    {"twoshot_threads", &TuningEntry::twoshotThreads, 64, 1024, true},
    {"twoshot_ctas", &TuningEntry::twoshotMaxCtas, 1, kMaxCtas, true},
    {"twoshot_min_slot", &TuningEntry::twoshotMinSlotBytes, 256, INT64_MAX, true},
    {"twoshot_max_slot", &TuningEntry::twoshotMaxSlotBytes, 256, INT64_MAX, true},
    {"frugal_min", &TuningEntry::frugalMinBytes, 0, INT64_MAX, false},
    {"frugal_ctas", &TuningEntry::frugalMaxCtas, 1, kMaxCtas, false},
    {"frugal_teams", &TuningEntry::frugalTeams, 1, kMaxTeamsPerBlock, false},
};
// The one threshold every line must give: one-shot LL's, measured by `yali-perf --tune`.
constexpr const char* kMandatoryThresholdKey = "ll_max";
constexpr int kMandatoryKeys = 9;

// Keys of algorithms that were removed. A table that still sets one was tuned for an algorithm that
// no longer exists, so it is refused rather than half applied.
const std::map<std::string, std::string> kRemovedKeys = {
    {"ce_min", "copy_engine was removed (measured slower than twoshot_push at every size, docs/PERF.md \"Copy engines\")"},
    {"ce_ctas", "copy_engine was removed (measured slower than twoshot_push at every size, docs/PERF.md \"Copy engines\")"},
    {"direct_min", "the AllReduce direct algorithm was removed (never ahead of the staged algorithms, docs/PERF.md \"Registered buffers\")"},
};

const AlgorithmDesc* rowOfKey(const std::string& key) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].tuningKey != nullptr && key == rows[i].tuningKey) return &rows[i];
  return nullptr;
}

// Parses `text`; a line's missing optional keys come from `fallback(sm, nranks)`, or, when it is
// null, are an error (the built-in table gives every key).
bool parseLines(const std::string& text, TuningEntry (*fallback)(int, int), std::vector<TuningEntry>* out,
                std::string* error) {
  std::istringstream lines(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(lines, line)) {
    ++lineNo;
    const std::string where = "line " + std::to_string(lineNo) + ": ";
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    std::map<std::string, int64_t> given;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq == std::string::npos) {
        *error = where + "'" + word + "' is not key=value";
        return false;
      }
      const std::string key = word.substr(0, eq);
      long long v;
      try {
        size_t used = 0;
        v = std::stoll(word.substr(eq + 1), &used);
        if (used != word.size() - eq - 1) throw std::invalid_argument("trailing");
      } catch (...) {
        *error = where + "'" + word + "' has no integer value";
        return false;
      }
      auto removed = kRemovedKeys.find(key);
      if (removed != kRemovedKeys.end()) {
        *error = where + "'" + key + "': " + removed->second + "; delete the key";
        return false;
      }
      const bool geometry = std::any_of(std::begin(kGeometryKeys), std::end(kGeometryKeys),
                                        [&](const GeometryKey& k) { return key == k.key; });
      if (!geometry && rowOfKey(key) == nullptr) {
        *error = where + "unknown key '" + key + "'";
        return false;
      }
      if (!given.emplace(key, v).second) {
        *error = where + "'" + key + "' appears twice";
        return false;
      }
    }
    if (given.empty()) continue;
    int mandatory = 0;
    for (const GeometryKey& k : kGeometryKeys) mandatory += k.mandatory && given.count(k.key);
    mandatory += static_cast<int>(given.count(kMandatoryThresholdKey));
    if (mandatory != kMandatoryKeys) {
      *error = where + "expected the " + std::to_string(kMandatoryKeys) +
               " keys sm, nranks, ll_max, ll_threads, ll_ctas, twoshot_threads, twoshot_ctas, "
               "twoshot_min_slot, twoshot_max_slot; found " + std::to_string(mandatory);
      return false;
    }
    TuningEntry e{};
    const int sm = static_cast<int>(given["sm"]);
    const int nranks = static_cast<int>(std::min<int64_t>(std::max<int64_t>(given["nranks"], 1), kMaxRanks));
    const TuningEntry base = fallback != nullptr ? fallback(sm, nranks) : TuningEntry{};
    auto value = [&](const char* key, int64_t min, int64_t max, int64_t fromBase, int64_t* out) {
      auto it = given.find(key);
      if (it == given.end()) {
        if (fallback == nullptr) {
          *error = where + "'" + key + "' is missing (the built-in table gives every key)";
          return false;
        }
        *out = fromBase;
        return true;
      }
      if (it->second < min || it->second > max) {
        *error = where + "'" + key + "=" + std::to_string(it->second) + "' is out of range [" +
                 std::to_string(min) + ", " + std::to_string(max) + "]";
        return false;
      }
      *out = it->second;
      return true;
    };
    for (const GeometryKey& k : kGeometryKeys)
      if (!value(k.key, k.min, k.max, base.*k.field, &(e.*k.field))) return false;
    int count = 0;
    const AlgorithmDesc* rows = algorithms(&count);
    for (int i = 0; i < count; ++i) {
      if (rows[i].tuningKey == nullptr) continue;
      if (!value(rows[i].tuningKey, 0, INT64_MAX, base.thresholds[i], &e.thresholds[i])) return false;
    }
    auto threadsOk = [](int64_t t) { return t % 32 == 0; };
    if (!threadsOk(e.llThreads) || !threadsOk(e.twoshotThreads) || e.twoshotMaxSlotBytes < e.twoshotMinSlotBytes) {
      *error = where + "thread counts must be whole warps and twoshot_max_slot >= twoshot_min_slot";
      return false;
    }
    out->push_back(e);
  }
  return true;
}

// The built-in table, parsed once (its text is checked by a host test, so this cannot fail).
const std::vector<TuningEntry>& builtinEntries() {
  static const std::vector<TuningEntry> entries = [] {
    std::vector<TuningEntry> v;
    std::string error;
    for (const BuiltinRow& row : kBuiltinTable) {
      if (!parseLines(std::string(row.allreduce) + row.exchangeLL + kBuiltinExchanges, nullptr, &v, &error)) {
        // A defect of this file, caught by the host tests before it ships; never run on without it.
        fprintf(stderr, "yali: the built-in tuning table is malformed: %s\n", error.c_str());
        abort();
      }
    }
    return v;
  }();
  return entries;
}

}  // namespace

TuningEntry builtinTuning(int smMajor, int nranks) {
  // Other architectures use Hopper's figures until measured: the algorithms are the same.
  const std::vector<TuningEntry>& table = builtinEntries();
  TuningEntry e = table.front();
  for (const TuningEntry& row : table)
    if (row.nranks <= nranks) e = row;  // sorted by nranks
  e.smMajor = smMajor;
  e.nranks = nranks;
  return e;
}

bool parseTuningText(const std::string& text, std::vector<TuningEntry>* out, std::string* error) {
  return parseLines(text, builtinTuning, out, error);
}

std::string formatTuningEntry(const TuningEntry& e) {
  std::ostringstream s;
  s << "sm=" << e.smMajor << " nranks=" << e.nranks << " ll_max=" << e.thresholds[static_cast<int>(Algo::kOneshotLL)]
    << " ll_threads=" << e.llThreads << " ll_ctas=" << e.llMaxCtas << " twoshot_threads=" << e.twoshotThreads
    << " twoshot_ctas=" << e.twoshotMaxCtas << " twoshot_min_slot=" << e.twoshotMinSlotBytes
    << " twoshot_max_slot=" << e.twoshotMaxSlotBytes;
  return s.str();
}

bool Selector::init(const Settings& settings, const SelectorLimits& limits, std::string* error) {
  settings_ = settings;
  limits_ = limits;
  // What the choices below rely on: a world size, one slot of staging, one warp per block.
  bool threadsOk = true;
  for (int t : limits.maxThreads) threadsOk = threadsOk && t >= 32;
  if (limits.nranks < 1 || limits.nranks > kMaxRanks || asBytes(limits.stagingBytes) < kSlotAlign || !threadsOk) {
    *error = "selector limits out of range: nranks=" + std::to_string(limits.nranks) +
             " stagingBytes=" + std::to_string(limits.stagingBytes) + " (and every kernel needs 32 threads)";
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
  if (settings.maxCtas > 0) {
    // YALI_MAX_CTAS lowers the LL cap and replaces both block caps (the frugal one included). It
    // also means one pipeline per block: the blocks the user asked for, with the geometry that was
    // measured for them (docs/PERF.md "Teams").
    entry_.llMaxCtas = std::min<int64_t>(entry_.llMaxCtas, settings.maxCtas);
    entry_.twoshotMaxCtas = settings.maxCtas;
    entry_.frugalMaxCtas = settings.maxCtas;
    entry_.frugalTeams = 1;
  }
  return true;
}

void Selector::limitBlocks(int maxBlocks) {
  maxBlocks = std::max(1, maxBlocks);
  entry_.llMaxCtas = std::min<int64_t>(entry_.llMaxCtas, maxBlocks);
  entry_.twoshotMaxCtas = std::min<int64_t>(entry_.twoshotMaxCtas, maxBlocks);
  entry_.frugalMaxCtas = std::min<int64_t>(entry_.frugalMaxCtas, maxBlocks);
}

// Threads of `a` per block: the tuning's, in whole warps within what its kernels can launch.
static int threadsFor(const TuningEntry& e, const SelectorLimits& limits, Algo a) {
  const int64_t wanted = usesLL(familyOf(a)) ? e.llThreads : e.twoshotThreads;
  const int64_t limit = limits.maxThreads[static_cast<int>(a)] / 32 * 32;
  return static_cast<int>(std::max<int64_t>(32, std::min(wanted, limit)));
}

AlgoChoice Selector::ll(size_t bytes, Algo a) const {
  const size_t packets = ceilDiv(bytes, 8);
  const int threads = threadsFor(entry_, limits_, a);
  const int ctas = static_cast<int>(
      std::min<size_t>(asBytes(entry_.llMaxCtas), std::max<size_t>(1, ceilDiv(packets, static_cast<size_t>(threads)))));
  return {a, std::max(ctas, 1), threads, 0};
}

AlgoChoice Selector::oneshotPull(size_t bytes) const {
  // Runs of at least the minimum slot per block, as many blocks as the two-shot cap: each block's
  // reads of n - 1 peers need the SMs' combined load slots to fill the links.
  const size_t minRun = minSlotOf(entry_);
  const size_t ctas =
      std::max<size_t>(1, std::min<size_t>(ceilDiv(bytes, minRun), asBytes(entry_.twoshotMaxCtas)));
  // bytes fit the copy-in buffer (at most INT64_MAX), so rounding up cannot wrap.
  const size_t run = roundUp(ceilDiv(bytes, ctas), kPullRunAlign);
  return {Algo::kOneshotPull, static_cast<int>(ctas), threadsFor(entry_, limits_, Algo::kOneshotPull), run};
}

bool Selector::frugal(size_t bytes) const {
  return entry_.frugalMinBytes > 0 && bytes >= asBytes(entry_.frugalMinBytes);
}

// Blocks for `pieces` pieces of the min slot within the cap (the frugal one from frugalMinBytes of
// message up).
size_t Selector::ctasFor(size_t bytes, size_t pieces) const {
  const size_t cap = asBytes(frugal(bytes) ? entry_.frugalMaxCtas : entry_.twoshotMaxCtas);
  return std::max<size_t>(1, std::min(pieces, cap));
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
  size_t ctas = ctasFor(bytes, bytes / n / minSlotOf(entry_));  // n * min slot may not fit a size_t
  // Teams (independent pipelines per block) in the frugal range, when every pipeline gets a
  // min-size slot and each team keeps at least two warps. Where staging cannot hold a minimum slot
  // for every pipeline, teams go first (they gained 0-5 %, blocks much more: docs/PERF.md "Teams"),
  // then blocks.
  const int threads = threadsFor(entry_, limits_, variant);
  int teams = frugal(bytes) ? static_cast<int>(entry_.frugalTeams) : 1;
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

// A staged exchange of `bytes` per piece: pipelines of one block each (no teams), as many as the
// piece has minimum slots, within the cap and what staging holds; the slot spreads the piece evenly
// over them. Frugality counts what each rank moves (every piece of a rank's nranks).
AlgoChoice Selector::staged(size_t bytes, Algo a) const {
  const size_t staging = roundDown(asBytes(limits_.stagingBytes), kSlotAlign);
  const size_t minSlot = std::min(minSlotOf(entry_), staging);
  const size_t maxSlot = std::max(minSlot, roundDown(asBytes(entry_.twoshotMaxSlotBytes), kSlotAlign));
  const size_t moved = saturatingMul(bytes, static_cast<size_t>(limits_.nranks));
  const size_t ctas = std::max<size_t>(1, std::min(ctasFor(moved, bytes / minSlot), staging / minSlot));
  const size_t slotCap = std::min(maxSlot, roundDown(staging / ctas, kSlotAlign));
  const size_t slot = std::max(minSlot, roundUp(std::min(ceilDiv(bytes, ctas), slotCap), kSlotAlign));
  return {a, static_cast<int>(ctas), threadsFor(entry_, limits_, a), slot, 1};
}

AlgoChoice Selector::geometry(Algo a, size_t bytes) const {
  switch (familyOf(a)) {
    case Family::kOneshotLL:
    case Family::kExchangeLL: return ll(bytes, a);
    case Family::kOneshotPull: return oneshotPull(bytes);
    case Family::kTwoshot: return twoshot(bytes, a);
    case Family::kExchangeStaged: return staged(bytes, a);
    case Family::kCopyEngine: return {a, 0, 0, 0, 1};  // no kernel: no blocks
    case Family::kExchangeDirect:
    case Family::kExchangePull: {
      const size_t moved = saturatingMul(bytes, static_cast<size_t>(limits_.nranks));
      return {a, static_cast<int>(ctasFor(moved, bytes / minSlotOf(entry_))), threadsFor(entry_, limits_, a), 0, 1};
    }
  }
  return twoshot(bytes, Algo::kTwoshot);
}

bool Selector::fitsBuffer(Algo a, size_t bytes) const {
  if (usesLL(familyOf(a))) return bytes <= asBytes(limits_.llPayloadBytes);
  if (familyOf(a) == Family::kOneshotPull) return bytes <= asBytes(limits_.pullBufferBytes);
  return true;
}

// Whether a call whose output (recv) and input (send) are registered or not, and that may or may not
// take the copy engines, may take row `a`.
static bool registrationsAllow(const AlgorithmDesc& a, bool recvRegistered, bool sendRegistered,
                               bool copyEngines) {
  return (!a.needsRegisteredRecv || recvRegistered) && (!a.needsRegisteredSend || sendRegistered) &&
         (a.family != Family::kCopyEngine || copyEngines);
}

// The threshold in force for row i: the setting unless -2, then the table's.
static int64_t thresholdOf(const Settings& s, const TuningEntry& e, int i) {
  return s.thresholds[i] == kThresholdTable ? e.thresholds[i] : s.thresholds[i];
}

// Whether row i may be chosen under `s` with the tuning entry `e`: YALI_ALGO forces it, it is its
// collective's fallback, or its threshold is not 0. The one rule of mayChoose and choosableAlgos,
// so that the window (laid out from the latter) holds whatever the former allows.
static bool mayChooseUnder(const Settings& s, const TuningEntry& e, int i) {
  const AlgorithmDesc& row = algorithm(static_cast<Algo>(i));
  return s.forcedAlgo[static_cast<int>(row.collective)] == i || row.bound == Bound::kFallback ||
         thresholdOf(s, e, i) != kThresholdDisabled;
}

bool Selector::mayChoose(Algo a) const { return mayChooseUnder(settings_, entry_, static_cast<int>(a)); }

static_assert(kNumAlgos < 64, "choosableAlgos: one bit per algorithm (and algoBit(kNumAlgos) - 1 for all)");

uint64_t choosableAlgos(const Settings& settings, int nranks) {
  // The tables Selector::init may take its entry from: the built-in line for nranks (the same on
  // every architecture) and the tuning file's lines for nranks, one per sm.
  std::vector<TuningEntry> tables = {builtinTuning(9, nranks)};
  std::string err;
  if (!parseTuningText(settings.tuningText, &tables, &err)) return algoBit(kNumAlgos) - 1;  // init refuses it
  uint64_t mask = 0;
  for (int i = 0; i < kNumAlgos; ++i)
    for (const TuningEntry& e : tables)
      if (e.nranks == tables.front().nranks && mayChooseUnder(settings, e, i)) mask |= algoBit(i);
  return mask;
}

uint32_t windowRegionsFor(const Settings& settings, int nranks) {
  const uint64_t algos = choosableAlgos(settings, nranks);
  uint32_t regions = kAlwaysRegions;
  for (int i = 0; i < kNumAlgos; ++i)
    if (algos & algoBit(i)) regions |= algoRegions(static_cast<Algo>(i));
  if (settings.p2pChannels > 0) regions |= kRegionP2P;  // yaliSend and yaliRecv: no row
  return regions;
}

bool regionsLaidOut(Algo a, uint32_t laidOut, std::string* why) {
  const uint32_t missing = algoRegions(a) & ~laidOut;
  if (missing == 0) return true;
  if (why != nullptr)
    *why = std::string(algoName(a)) + " needs the window's " + regionNames(missing) +
           ", which this comm did not lay out (no algorithm its settings may choose needs it)";
  return false;
}

AlgoChoice Selector::choose(Collective collective, size_t bytes, bool recvRegistered, bool sendRegistered,
                            bool copyEngines) const {
  // Byte counts compare as size_t, every limit and threshold converted from its int64_t without a
  // sign: a message of 2^63 bytes or more is larger than every one of them.
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  const int ci = static_cast<int>(collective);
  const AlgorithmDesc* fallback = nullptr;
  for (int i = 0; i < count; ++i)
    if (rows[i].collective == collective && rows[i].bound == Bound::kFallback) fallback = &rows[i];
  // Forced (YALI_ALGO): taken when the buffers allow it; forced on an output that is not registered,
  // the call gets the automatic choice among the rest; forced on a message larger than its buffer,
  // the collective's fallback.
  const int forced = settings_.forcedAlgo[ci];
  if (forced >= 0) {
    const Algo a = static_cast<Algo>(forced);
    if (registrationsAllow(algorithm(a), recvRegistered, sendRegistered, copyEngines))
      return geometry(fitsBuffer(a, bytes) ? a : fallback->id, bytes);
  }
  // Each threshold (env.h): the setting unless -2, then the table's: -1 means every size, 0 never,
  // >0 bytes. kUpTo rows take messages up to it (within their buffers), kFrom rows from it up.
  for (int i = 0; i < count; ++i) {
    const AlgorithmDesc& row = rows[i];
    if (row.collective != collective) continue;
    if (!registrationsAllow(row, recvRegistered, sendRegistered, copyEngines)) continue;
    const int64_t threshold = thresholdOf(settings_, entry_, i);
    bool take = false;
    switch (row.bound) {
      case Bound::kUpTo:
        take = fitsBuffer(row.id, bytes) && (threshold == kThresholdAlways || (threshold > 0 && bytes <= asBytes(threshold)));
        break;
      case Bound::kFrom:
        take = threshold == kThresholdAlways || (threshold > 0 && bytes >= asBytes(threshold));
        break;
      case Bound::kFallback: take = true; break;
    }
    if (take) return geometry(row.id, bytes);
  }
  return geometry(fallback->id, bytes);
}

bool choiceFits(const AlgoChoice& c, size_t bytes, const SelectorLimits& limits, std::string* why) {
  const int a = static_cast<int>(c.algo);
  std::string problem;
  if (a < 0 || a >= kNumAlgos) {
    problem = "algorithm " + std::to_string(a) + " does not exist";
  } else if (familyOf(c.algo) == Family::kCopyEngine) {
    if (c.ctas != 0 || c.threads != 0) problem = "a copy-engine algorithm launches no blocks";
  } else if (c.ctas < 1 || c.ctas > kMaxCtas) {
    problem = std::to_string(c.ctas) + " blocks, outside [1, " + std::to_string(kMaxCtas) + "]";
  } else {
    const Family family = familyOf(c.algo);
    const int maxThreads = limits.maxThreads[a];
    const size_t pipelines = static_cast<size_t>(c.ctas) * static_cast<size_t>(std::max(c.teams, 1));
    if (c.threads < 32 || c.threads > 1024 || c.threads % 32 != 0 || c.threads > maxThreads) {
      problem = std::to_string(c.threads) + " threads per block: not whole warps within [32, " +
                std::to_string(std::min(1024, maxThreads)) + "]";
    } else if (c.teams < 1 || c.teams > kMaxTeamsPerBlock || (c.teams > 1 && family != Family::kTwoshot)) {
      problem = std::to_string(c.teams) + " teams per block";
    } else if (c.teams > 1 && (c.threads % (32 * c.teams) != 0 || c.threads / c.teams < 64)) {
      problem = std::to_string(c.teams) + " teams of " + std::to_string(c.threads) +
                " threads: not whole warps of at least 64 threads each";
    } else if (slotted(family) && (c.slotBytes < kSlotAlign || c.slotBytes % kSlotAlign != 0)) {
      problem = std::to_string(c.slotBytes) + "-byte slots: not a multiple of 256 bytes";
    } else if (slotted(family) && c.slotBytes > asBytes(limits.stagingBytes) / pipelines) {
      problem = std::to_string(pipelines) + " pipelines of " + std::to_string(c.slotBytes) +
                "-byte slots exceed the " + std::to_string(limits.stagingBytes) + " bytes of staging";
    } else if (family == Family::kOneshotPull && bytes > asBytes(limits.pullBufferBytes)) {
      problem = "the message exceeds the " + std::to_string(limits.pullBufferBytes) + "-byte copy-in buffer";
    } else if (family == Family::kOneshotPull &&
               (c.slotBytes % kPullRunAlign != 0 || c.slotBytes < ceilDiv(bytes, static_cast<size_t>(c.ctas)))) {
      problem = std::to_string(c.ctas) + " runs of " + std::to_string(c.slotBytes) +
                " bytes: not 16-byte multiples covering the message";
    } else if (usesLL(family) && bytes > asBytes(limits.llPayloadBytes)) {
      problem = "the message exceeds the " + std::to_string(limits.llPayloadBytes) + "-byte LL buffer";
    }
  }
  if (problem.empty()) return true;
  if (why != nullptr) *why = std::string(algoName(c.algo)) + " for " + std::to_string(bytes) + " bytes: " + problem;
  return false;
}

}  // namespace yali
