// The algorithm registry (collectives/registry.h): its rows' consistency, their settings and
// documentation, their kernel lookups (function pointers only: no GPU needed, nothing launches) and
// that the selector reaches every row.
#include <string.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collectives/kernels.h"
#include "collectives/p2p/p2p.h"
#include "core/window_layout.h"
#include "internal_support.h"

using namespace yali;
using namespace yali_internal_test;

namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool isAllReduceFamily(Family f) { return f == Family::kOneshotLL || f == Family::kOneshotPull || f == Family::kTwoshot; }
// The rooted collectives served by the two-shot kernel's rooted shapes (broadcast_twoshot,
// reduce_twoshot): off by default until they have run on a GPU.
bool isRootedTwoshot(const AlgorithmDesc& r) { return r.collective != Collective::kAllReduce && r.family == Family::kTwoshot; }
// The families whose messages are bounded by a buffer of the window (the selector's fitsBuffer).
bool buffered(Family f) { return f == Family::kOneshotLL || f == Family::kOneshotPull || f == Family::kExchangeLL; }

}  // namespace

// The rows: in Algo order; names and tuning keys unique and well formed; each collective's rows
// together, in Collective order, in the selector's order of preference (registered outputs first,
// then bounded from above, then from below), ending with its one fallback; families that fit the
// collective; buffered families bounded from above (the selector checks buffers only there).
TEST(registry_rows_consistent) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  REQUIRE(count == kNumAlgos);
  std::set<std::string> names, keys;
  const std::set<std::string> geometryKeys = {"sm", "nranks", "ll_threads", "ll_ctas", "twoshot_threads",
                                              "twoshot_ctas", "twoshot_min_slot", "twoshot_max_slot",
                                              "frugal_min", "frugal_ctas", "frugal_teams"};
  const std::set<std::string> removedKeys = {"ce_min", "ce_ctas", "direct_min"};
  for (int i = 0; i < count; ++i) {
    const AlgorithmDesc& r = rows[i];
    CHECK_MSG(static_cast<int>(r.id) == i, "row %d holds Algo %d", i, static_cast<int>(r.id));
    CHECK(&algorithm(static_cast<Algo>(i)) == &r);
    REQUIRE(r.name != nullptr);
    CHECK(std::string(algoName(r.id)) == r.name);
    CHECK_MSG(names.insert(r.name).second, "the name %s appears twice", r.name);
    const std::string name = r.name;
    CHECK_MSG(!name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
              "'%s': not lower case, digits and _", r.name);
    CHECK_MSG(name != "auto" && name != "none", "%s is reserved", r.name);
    CHECK_MSG(r.summary != nullptr && r.summary[0] != '\0', "%s has no summary", r.name);
    CHECK_MSG((r.kernel != nullptr) == (r.family != Family::kCopyEngine),
              "%s: a kernel lookup exactly when it is no copy-engine row", r.name);
    if (r.family == Family::kCopyEngine || r.family == Family::kExchangePull)
      CHECK_MSG(r.needsRegisteredSend && !r.needsRegisteredRecv && r.bound == Bound::kFrom,
                "%s: a copy-engine or pull row reads registered inputs, from its threshold up", r.name);
    else
      CHECK_MSG(!r.needsRegisteredSend, "%s needs registered inputs", r.name);
    if (r.family == Family::kExchangePull)
      CHECK_MSG(collectiveShape(r.collective).reduces, "%s: the pull exchange reduces", r.name);
    const int c = idx(r.collective);
    CHECK_MSG(c >= 0 && c < kNumCollectives, "%s: collective %d", r.name, c);
    if (r.bound == Bound::kFallback) {
      CHECK_MSG(r.tuningKey == nullptr, "the fallback %s has a tuning key", r.name);
      CHECK_MSG(!r.needsRegisteredRecv, "the fallback %s needs registered outputs", r.name);
      CHECK_MSG(!buffered(r.family), "the fallback %s is bounded by a buffer", r.name);
    } else {
      REQUIRE(r.tuningKey != nullptr);
      const std::string key = r.tuningKey;
      CHECK_MSG(keys.insert(key).second, "the tuning key %s appears twice", r.tuningKey);
      CHECK_MSG(geometryKeys.count(key) == 0 && removedKeys.count(key) == 0, "%s: the tuning key %s is taken", r.name,
                r.tuningKey);
      CHECK_MSG(endsWith(key, r.bound == Bound::kUpTo ? "_max" : "_min"), "%s: key %s for its bound", r.name, r.tuningKey);
    }
    if (buffered(r.family)) CHECK_MSG(r.bound == Bound::kUpTo, "%s is bounded by a buffer but not from above", r.name);
    if (r.family == Family::kExchangeDirect) CHECK_MSG(r.needsRegisteredRecv, "%s writes into outputs it needs registered", r.name);
    // AllReduce's families for AllReduce only; the exchanges' for the rest, named after the
    // collective and the family.
    if (r.collective == Collective::kAllReduce) {
      CHECK_MSG(isAllReduceFamily(r.family), "%s: an exchange family for AllReduce", r.name);
    } else {
      // Two-shot serves Broadcast and Reduce too (its rooted shapes); the one-shot families and
      // registered outputs stay AllReduce's.
      CHECK_MSG(!isAllReduceFamily(r.family) ||
                    (isRootedTwoshot(r) && (r.collective == Collective::kBroadcast || r.collective == Collective::kReduce) &&
                     !r.needsRegisteredRecv && r.bound == Bound::kFrom),
                "%s: an AllReduce family for an exchange", r.name);
      const char* suffix = r.family == Family::kTwoshot          ? "_twoshot"
                           : r.family == Family::kExchangeLL       ? "_ll"
                           : r.family == Family::kExchangeStaged ? "_staged"
                           : r.family == Family::kCopyEngine     ? "_ce"
                           : r.family == Family::kExchangePull   ? "_pull"
                                                                 : "_direct";
      CHECK_MSG(name == std::string(collectiveName(r.collective)) + suffix, "%s: expected %s%s", r.name,
                collectiveName(r.collective), suffix);
      if (r.tuningKey != nullptr)
        CHECK_MSG(std::string(r.tuningKey) == name + (r.bound == Bound::kUpTo ? "_max" : "_min"), "%s: key %s", r.name,
                  r.tuningKey);
    }
    if (i > 0) CHECK_MSG(idx(rows[i - 1].collective) <= c, "%s: the collectives' rows are not together in order", r.name);
  }
  CHECK(std::string(algoName(static_cast<Algo>(kNumAlgos))) == "unknown");
  CHECK(std::string(algoName(static_cast<Algo>(-1))) == "unknown");
  std::string list;
  for (int i = 0; i < count; ++i) list += (i ? ", " : "") + std::string(rows[i].name);
  CHECK(algoNameList() == list);
  // Per collective: some rows, one fallback and last; the order of preference.
  for (int c = 0; c < kNumCollectives; ++c) {
    const std::vector<const AlgorithmDesc*> own = rowsOf(collectiveAt(c));
    REQUIRE(own.size() >= 1);  // AlltoAllv has its fallback only
    int fallbacks = 0;
    for (const AlgorithmDesc* r : own) fallbacks += r->bound == Bound::kFallback;
    CHECK_MSG(fallbacks == 1, "%s has %d fallbacks", collectiveName(collectiveAt(c)), fallbacks);
    CHECK_MSG(own.back()->bound == Bound::kFallback, "%s's last row %s is no fallback", collectiveName(collectiveAt(c)),
              own.back()->name);
    // Rank in the order of preference: registered 0 (inputs, then outputs), up-to 1, from 2,
    // fallback 3.
    auto rank = [](const AlgorithmDesc* r) {
      if (r->needsRegisteredRecv || r->needsRegisteredSend) return 0;
      return r->bound == Bound::kUpTo ? 1 : r->bound == Bound::kFrom ? 2 : 3;
    };
    for (size_t k = 1; k < own.size(); ++k)
      CHECK_MSG(rank(own[k - 1]) <= rank(own[k]), "%s: %s before %s", collectiveName(collectiveAt(c)),
                own[k - 1]->name, own[k]->name);
    if (c != idx(Collective::kAllReduce)) {
      // AlltoAllv: its staged exchange only (no latency path yet: the note says why).
      if (c != idx(Collective::kAlltoAllv))
        CHECK_MSG(rowOf(collectiveAt(c), Family::kExchangeLL) != nullptr, "%s has no LL row",
                  collectiveName(collectiveAt(c)));
      CHECK_MSG(own.back()->family == Family::kExchangeStaged, "%s's fallback is not staged", collectiveName(collectiveAt(c)));
    }
  }
  // The collectives with a *_direct row: those whose outputs a peer can write whole pieces into.
  for (Collective c : {Collective::kAllGather, Collective::kBroadcast, Collective::kScatter, Collective::kAlltoAll})
    CHECK_MSG(rowOf(c, Family::kExchangeDirect) != nullptr, "%s lost its direct row", collectiveName(c));
  for (Collective c : {Collective::kReduceScatter, Collective::kReduce, Collective::kGather})
    CHECK_MSG(rowOf(c, Family::kExchangeDirect) == nullptr, "%s has a direct row", collectiveName(c));
}

// Every bounded row has its threshold setting, documented in settingDocs (default -2, agreed by
// every rank, the meaning naming the algorithm); no documented threshold belongs to no row.
TEST(registry_thresholds_documented) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  int docCount = 0;
  const SettingDoc* docs = settingDocs(&docCount);
  std::map<std::string, const SettingDoc*> byName;
  for (int i = 0; i < docCount; ++i) CHECK_MSG(byName.emplace(docs[i].name, &docs[i]).second, "%s twice", docs[i].name);
  std::set<std::string> thresholds;
  for (int i = 0; i < count; ++i) {
    const std::string name = thresholdSettingName(rows[i]);
    if (rows[i].bound == Bound::kFallback) {
      CHECK(name.empty());
      continue;
    }
    CHECK_MSG(!name.empty(), "%s has no threshold setting", rows[i].name);
    thresholds.insert(name);
    auto it = byName.find(name);
    if (it == byName.end()) {
      CHECK_MSG(false, "settingDocs does not document %s", name.c_str());
      continue;
    }
    CHECK_MSG(std::string(it->second->defaultValue) == "-2", "%s defaults to %s", name.c_str(), it->second->defaultValue);
    CHECK_MSG(it->second->agreed, "%s is not agreed", name.c_str());
    CHECK_MSG(std::string(it->second->meaning).find(rows[i].name) != std::string::npos, "%s's meaning: %s", name.c_str(),
              it->second->meaning);
    if (rows[i].needsRegisteredRecv)
      CHECK_MSG(std::string(it->second->meaning).find("registered") != std::string::npos, "%s's meaning: %s",
                name.c_str(), it->second->meaning);
  }
  for (int i = 0; i < docCount; ++i) {
    const std::string name = docs[i].name;
    if (endsWith(name, "_MAX_BYTES") || endsWith(name, "_MIN_BYTES"))
      CHECK_MSG(thresholds.count(name) == 1, "settingDocs documents %s, which is no row's threshold", docs[i].name);
  }
}

// Every row's kernel lookup: the reducing collectives' rows give a kernel for every (type, op)
// pair that opSupports() allows, a different one for each pair, and null for avg on integers and
// for values outside the enums; the data-moving rows give their one byte-wise kernel for any pair.
TEST(registry_kernel_lookups) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i) {
    const AlgorithmDesc& r = rows[i];
    if (r.kernel == nullptr) continue;  // a copy-engine row (registry_rows_consistent checks which)
    const bool reduces = collectiveShape(r.collective).reduces;
    std::set<KernelFn> seen;
    for (int t = 0; t < kNumDataTypes; ++t) {
      for (int op = 0; op < kNumRedOps; ++op) {
        const DataType type = static_cast<DataType>(t);
        const RedOp redOp = static_cast<RedOp>(op);
        const KernelFn fn = r.kernel(type, redOp);
        if (!reduces) {
          CHECK_MSG(fn != nullptr, "%s: no kernel for (%s, %s)", r.name, dataTypeName(type), redOpName(redOp));
          seen.insert(fn);
          continue;
        }
        if (opSupports(redOp, type)) {
          CHECK_MSG(fn != nullptr, "%s: no kernel for (%s, %s)", r.name, dataTypeName(type), redOpName(redOp));
          CHECK_MSG(seen.insert(fn).second, "%s: (%s, %s) shares another pair's kernel", r.name, dataTypeName(type),
                    redOpName(redOp));
        } else {
          CHECK_MSG(fn == nullptr, "%s: a kernel for (%s, %s), which opSupports refuses", r.name, dataTypeName(type),
                    redOpName(redOp));
        }
        if (redOp == RedOp::kAvg && !isFloatingType(type)) CHECK_MSG(fn == nullptr, "%s: avg on %s", r.name, dataTypeName(type));
      }
    }
    if (!reduces) {
      CHECK_MSG(seen.size() == 1, "%s: %zu kernels for a byte-wise algorithm", r.name, seen.size());
    } else {
      CHECK(r.kernel(static_cast<DataType>(kNumDataTypes), RedOp::kSum) == nullptr);
      CHECK(r.kernel(DataType::kFloat32, static_cast<RedOp>(kNumRedOps)) == nullptr);
      CHECK(r.kernel(static_cast<DataType>(-1), RedOp::kSum) == nullptr);
    }
  }
  // avg is for the floating types only, which are exactly the six NCCL has.
  int floating = 0;
  for (int t = 0; t < kNumDataTypes; ++t) {
    floating += isFloatingType(static_cast<DataType>(t));
    CHECK(opSupports(RedOp::kAvg, static_cast<DataType>(t)) == isFloatingType(static_cast<DataType>(t)));
    for (int op = 0; op < kNumRedOps; ++op)
      if (op != static_cast<int>(RedOp::kAvg))
        CHECK(opSupports(static_cast<RedOp>(op), static_cast<DataType>(t)));
  }
  CHECK_EQ(floating, 6);
}

// Every row is reachable: some (world size 2/4/8, bytes, registered output) with the default
// settings and table makes choose() return it, or else YALI_ALGO naming it does. The default table
// must reach every AllReduce row but the fallback, and every exchange's LL and staged rows (and its
// direct row, where it has one), but no copy-engine row (off by default); the rows only forcing
// reaches are printed.
TEST(registry_every_algorithm_is_reachable) {
  const Settings s = defaultSettings();
  std::vector<std::string> how(kNumAlgos);
  for (int n : {2, 4, 8}) {
    const Selector sel = makeSelector(s, n);
    std::set<size_t> sizes = {0, SIZE_MAX};
    for (int k = 0; k <= 40; ++k) sizes.insert(size_t(1) << k);
    std::vector<int64_t> bounds = {s.llBufferBytes, s.stagingBytes, s.pullBufferBytes};
    for (int64_t t : sel.entry().thresholds) bounds.push_back(t);
    for (int64_t t : bounds)
      if (t > 0)
        for (int64_t d : {-1, 0, 1}) sizes.insert(static_cast<size_t>(t) + static_cast<size_t>(d));
    for (int c = 0; c < kNumCollectives; ++c)
      for (size_t bytes : sizes)
        for (bool registered : {false, true}) {
          const Algo a = sel.choose(collectiveAt(c), bytes, registered).algo;
          if (how[idx(a)].empty())
            how[idx(a)] = "n=" + std::to_string(n) + " bytes=" + std::to_string(bytes) + (registered ? " registered" : "");
        }
  }
  std::vector<bool> byDefault(kNumAlgos);
  for (int a = 0; a < kNumAlgos; ++a) byDefault[a] = !how[a].empty();
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  std::string forcedOnly;
  for (int a = 0; a < count; ++a) {
    if (byDefault[a]) continue;
    const Settings f = forced(rows[a].name);
    for (int n : {2, 4, 8}) {
      const Selector sel = makeSelector(f, n);
      for (size_t bytes : {size_t(1), size_t(4096), size_t(1) << 20, size_t(1) << 30})
        if (how[a].empty() && sel.choose(rows[a].collective, bytes, true, true).algo == rows[a].id)
          how[a] = "YALI_ALGO=" + std::string(rows[a].name) + " n=" + std::to_string(n) + " bytes=" + std::to_string(bytes);
    }
    CHECK_MSG(!how[a].empty(), "%s is unreachable, even forced", rows[a].name);
    forcedOnly += (forcedOnly.empty() ? "" : ", ") + std::string(rows[a].name);
  }
  if (!forcedOnly.empty()) std::printf("    reached only with YALI_ALGO: %s\n", forcedOnly.c_str());
  for (int a = 0; a < count; ++a) {
    const AlgorithmDesc& r = rows[a];
    // The copy-engine rows are off by default (the caller weighs SMs against speed).
    // So are the rooted two-shot rows and the pull exchange until they have run on several GPUs
    // (their threshold is 0).
    const bool required = r.family == Family::kCopyEngine           ? false
                          : isRootedTwoshot(r)                     ? false
                          : r.family == Family::kExchangePull      ? false
                          : r.collective == Collective::kAllReduce ? r.bound != Bound::kFallback
                                                                   : true;  // LL, staged and direct alike
    if (isRootedTwoshot(r) || r.family == Family::kExchangePull)
      CHECK_MSG(!byDefault[a], "the default table chooses %s (%s)", r.name, how[a].c_str());
    if (required) CHECK_MSG(byDefault[a], "the default table never chooses %s", r.name);
  }
}

// Selector::mayChoose, on which the call path skips looking buffers up: the copy-engine rows are
// never chosen by default, are when YALI_ALGO names them or their threshold is set; fallbacks
// always may be. (selector_fuzz_every_choice_fits checks that no choice contradicts it.)
TEST(selector_may_choose) {
  const Algo ce = Algo::kAllGatherCopyEngine;
  Settings s = defaultSettings();
  CHECK(!makeSelector(s, 4).mayChoose(ce));
  CHECK(makeSelector(s, 4).mayChoose(Algo::kAllGatherStaged));
  CHECK(makeSelector(forced("allgather_ce"), 4).mayChoose(ce));
  s.thresholds[static_cast<int>(ce)] = kThresholdAlways;
  CHECK(makeSelector(s, 4).mayChoose(ce));
  s.thresholds[static_cast<int>(ce)] = 4096;
  CHECK(makeSelector(s, 4).mayChoose(ce));
  s.thresholds[static_cast<int>(ce)] = kThresholdDisabled;
  CHECK(!makeSelector(s, 4).mayChoose(ce));
}

// Registered inputs: the copy-engine rows only where the copy engines may run (copyEngines: not in
// a capture, the driver's memory operations present), the pull row wherever the inputs are
// registered (graphs included); neither on unregistered inputs, forced or not.
TEST(selector_registered_inputs_copy_engines_and_pull) {
  const size_t bytes = size_t(1) << 20;
  const Selector ce = makeSelector(forced("allgather_ce"), 4);
  CHECK(ce.choose(Collective::kAllGather, bytes, false, true, true).algo == Algo::kAllGatherCopyEngine);
  CHECK(ce.choose(Collective::kAllGather, bytes, false, true, false).algo != Algo::kAllGatherCopyEngine);
  CHECK(ce.choose(Collective::kAllGather, bytes, false, false, true).algo != Algo::kAllGatherCopyEngine);
  const Selector pull = makeSelector(forced("reducescatter_pull"), 4);
  CHECK(pull.choose(Collective::kReduceScatter, bytes, false, true, false).algo == Algo::kReduceScatterPull);
  CHECK(pull.choose(Collective::kReduceScatter, bytes, false, true, true).algo == Algo::kReduceScatterPull);
  CHECK(pull.choose(Collective::kReduceScatter, bytes, true, false, true).algo != Algo::kReduceScatterPull);
  // By default neither is chosen, registered or not.
  const Selector byDefault = makeSelector(defaultSettings(), 4);
  CHECK(byDefault.choose(Collective::kReduceScatter, bytes, true, true, true).algo != Algo::kReduceScatterPull);
  CHECK(byDefault.choose(Collective::kAllGather, bytes, true, true, true).algo != Algo::kAllGatherCopyEngine);
}

// reduce_pull, Reduce's row of the pull exchange (the kernel and its rules are reducescatter_pull's):
// forced, it is chosen for a Reduce on registered inputs, at any size and world size, in a graph
// too (copyEngines false), with the pull geometry (blocks within the cap, no slots, one team);
// never on unregistered inputs (a registered output does not make up for it), and never for
// another collective. By default (reduce_pull_min=0) it is not chosen, registered or not; its
// threshold takes it from its value up (on registered inputs only).
TEST(selector_reduce_pull) {
  for (int n : {2, 4, 8}) {
    const Settings f = forced("reduce_pull");
    const Selector pull = makeSelector(f, n);
    CHECK(pull.mayChoose(Algo::kReducePull));
    for (size_t bytes : {size_t(1), size_t(4093), size_t(1) << 20, size_t(1) << 30}) {
      for (bool copyEngines : {false, true}) {
        for (bool recvRegistered : {false, true}) {
          const AlgoChoice ch = pull.choose(Collective::kReduce, bytes, recvRegistered, true, copyEngines);
          CHECK_MSG(ch.algo == Algo::kReducePull, "n=%d bytes=%zu: %s", n, bytes, algoName(ch.algo));
          CHECK_MSG(ch.ctas >= 1 && ch.ctas <= kMaxCtas && ch.slotBytes == 0 && ch.teams == 1,
                    "n=%d bytes=%zu: %d blocks, %zu-byte slots, %d teams", n, bytes, ch.ctas, ch.slotBytes, ch.teams);
          std::string why;
          CHECK_MSG(choiceFits(ch, bytes, limitsFor(f, n), &why), "%s", why.c_str());
          CHECK(pull.choose(Collective::kReduce, bytes, recvRegistered, false, copyEngines).algo != Algo::kReducePull);
        }
      }
      CHECK(algorithm(pull.choose(Collective::kReduceScatter, bytes, false, true).algo).collective ==
            Collective::kReduceScatter);
      CHECK(pull.choose(Collective::kReduceScatter, bytes, false, true).algo != Algo::kReduceScatterPull);
    }
  }
  const Selector byDefault = makeSelector(defaultSettings(), 4);
  CHECK(!byDefault.mayChoose(Algo::kReducePull));
  for (size_t bytes : {size_t(1), size_t(1) << 20, size_t(1) << 30})
    for (bool registered : {false, true})
      CHECK(byDefault.choose(Collective::kReduce, bytes, registered, registered, true).algo != Algo::kReducePull);
  Settings s = defaultSettings();
  s.thresholds[static_cast<int>(Algo::kReducePull)] = int64_t(1) << 20;
  const Selector from1M = makeSelector(s, 4);
  CHECK(from1M.mayChoose(Algo::kReducePull));
  CHECK(from1M.choose(Collective::kReduce, size_t(1) << 20, false, true).algo == Algo::kReducePull);
  CHECK(from1M.choose(Collective::kReduce, size_t(1) << 30, false, true).algo == Algo::kReducePull);
  CHECK(from1M.choose(Collective::kReduce, (size_t(1) << 20) - 16, false, true).algo != Algo::kReducePull);
  CHECK(from1M.choose(Collective::kReduce, size_t(1) << 30, false, false).algo != Algo::kReducePull);
}

// broadcast_twoshot and reduce_twoshot (the rooted collectives on two-shot's pipeline) have not run
// on a GPU: the default table never chooses them, at any size or world size; YALI_ALGO or their
// threshold does, with two-shot's geometry (it fits the staging, as choiceFits checks), and their
// threshold takes them from its value up (registered Broadcast outputs keep broadcast_direct, the
// row before them).
TEST(selector_rooted_twoshot_only_when_asked) {
  const Settings s = defaultSettings();
  for (Algo a : {Algo::kBroadcastTwoshot, Algo::kReduceTwoshot}) {
    const AlgorithmDesc& row = algorithm(a);
    CHECK(row.family == Family::kTwoshot && row.bound == Bound::kFrom && !row.needsRegisteredRecv);
    for (int n : {2, 3, 4, 8}) {
      const Selector byDefault = makeSelector(s, n);
      CHECK_MSG(!byDefault.mayChoose(a), "%s may be chosen by default at n=%d", row.name, n);
      CHECK_EQ(byDefault.entry().thresholds[idx(a)], int64_t(0));
      const Selector forcedSel = makeSelector(forced(row.name), n);
      CHECK(forcedSel.mayChoose(a));
      Settings from = defaultSettings();
      from.thresholds[idx(a)] = 1 << 20;
      const Selector fromSel = makeSelector(from, n);
      for (size_t bytes : {size_t(1), size_t(4096), size_t(1) << 20, size_t(3) << 20 | 7, size_t(1) << 30}) {
        CHECK(byDefault.choose(row.collective, bytes, false).algo != a);
        CHECK(byDefault.choose(row.collective, bytes, true).algo != a);
        const AlgoChoice f = forcedSel.choose(row.collective, bytes, false);
        CHECK_MSG(f.algo == a, "YALI_ALGO=%s n=%d %zu bytes: %s", row.name, n, bytes, algoName(f.algo));
        std::string why;
        CHECK_MSG(choiceFits(f, bytes, forcedSel.limits(), &why), "%s", why.c_str());
        // The same geometry as twoshot_push for the same message.
        const AlgoChoice push = makeSelector(forced("twoshot_push"), n).choose(Collective::kAllReduce, bytes, false);
        CHECK(f.ctas == push.ctas && f.threads == push.threads && f.slotBytes == push.slotBytes && f.teams == push.teams);
        const Algo t = fromSel.choose(row.collective, bytes, false).algo;
        CHECK_MSG((t == a) == (bytes >= (size_t(1) << 20)), "%s from 1 MB, n=%d %zu bytes: %s", row.name, n, bytes,
                  algoName(t));
      }
      if (row.collective == Collective::kBroadcast)
        CHECK(fromSel.choose(row.collective, size_t(1) << 30, true).algo == Algo::kBroadcastDirect);
    }
  }
}

// ---- Window regions and wait phases (registry.h: Region, FamilyNeeds; core/window_layout.h) ----

namespace {

// computeLayout as it was before the layout followed the registry (every region, for every comm),
// frozen here: the layout with every region must stay this one byte for byte.
WindowLayout layoutBeforeRegions(int nranks, const Settings& s) {
  auto alignUp = [](size_t v) { return (v + 255) / 256 * 256; };
  WindowLayout L{};
  size_t off = alignUp(sizeof(WindowHeader));
  L.ceFlags = off;
  off += alignUp(sizeof(uint32_t) * 2 * kMaxRanks);
  L.pushFlags = off;
  off += alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks);
  L.resultFlags = off;
  off += alignUp(sizeof(uint64_t) * kMaxPipelines * kMaxRanks);
  L.directFlags = off;
  off += alignUp(sizeof(uint64_t) * 3 * kMaxCtas * kMaxRanks);
  L.arriveFlags = off;
  off += alignUp(sizeof(uint64_t) * kMaxRanks);
  L.ll = off;
  L.llSlotBytes = 2 * static_cast<size_t>(s.llBufferBytes);
  off += 2 * static_cast<size_t>(nranks) * L.llSlotBytes;
  L.counts = off;
  off += 2 * static_cast<size_t>(kMaxRanks) * kMaxLocalExperts * 16;
  L.stampedBytes = off - L.pushFlags;
  L.staging = off;
  L.stagingBytes = static_cast<size_t>(s.stagingBytes);
  off += 2 * static_cast<size_t>(nranks) * L.stagingBytes;
  L.result = off;
  off += 2 * L.stagingBytes;
  L.gather = off;
  off += 2 * static_cast<size_t>(nranks) * L.stagingBytes;
  L.copyIn = off;
  L.copyInBytes = static_cast<size_t>(s.pullBufferBytes);
  off += 2 * L.copyInBytes;
  // Point-to-point (laid out while YALI_P2P_CHANNELS > 0, which no algorithm row decides).
  L.p2pChannels = static_cast<size_t>(p2pRingsPerPair(s.p2pChannels, nranks));
  L.p2pSlotBytes = L.p2pChannels > 0 ? static_cast<size_t>(s.p2pSlotBytes) : 0;
  L.p2pSlotStride = L.p2pChannels > 0 ? alignUp(L.p2pSlotBytes + 16) : 0;
  L.p2pLLBytes = L.p2pChannels > 0 ? static_cast<size_t>(p2pLLBytesFor(s.p2pLLBytes, static_cast<int>(L.p2pChannels))) : 0;
  L.p2pFlags = off;
  if (L.p2pChannels > 0) off += alignUp(sizeof(P2PSlotFlag) * kMaxRanks * kMaxP2PChannels * kP2PSlots);
  L.p2pCredits = off;
  if (L.p2pChannels > 0) off += alignUp(sizeof(uint64_t) * kMaxRanks * kMaxP2PChannels * kP2PSlots);
  L.p2pLL = off;
  off += alignUp(static_cast<size_t>(nranks) * L.p2pChannels * kP2PSlots * kP2PLLSlotBytes);
  L.p2pRing = off;
  off += static_cast<size_t>(nranks) * L.p2pChannels * kP2PSlots * L.p2pSlotStride;
  L.local = off;
  off += alignUp(sizeof(LocalState));
  L.total = off;
  return L;
}

bool sameLayout(const WindowLayout& a, const WindowLayout& b) {
  static_assert(sizeof(WindowLayout) % sizeof(size_t) == 0, "WindowLayout: size_t fields only");
  return memcmp(&a, &b, sizeof(WindowLayout)) == 0;
}

// Settings whose every row of `family` has its threshold at 0 (never).
Settings withFamilyOff(Family family, std::vector<std::pair<std::string, std::string>> env = {}) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].family == family && rows[i].bound != Bound::kFallback) env.push_back({thresholdSettingName(rows[i]), "0"});
  return settingsWith(env);
}

bool isLLFamily(Family f) { return f == Family::kOneshotLL || f == Family::kExchangeLL; }

}  // namespace

// Each row's regions and phases are its family's plus additions its family allows; what the
// kernels were read to touch (spot checks of the rows that differ within a family); every region a
// row touches is one of the window's; every named wait phase is one some row can report, and no
// row reports an unnamed one.
TEST(registry_regions_and_phases) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  uint32_t phasesOfRows = 0;
  for (int i = 0; i < count; ++i) {
    const AlgorithmDesc& r = rows[i];
    const FamilyNeeds& f = familyNeeds(r.family);
    CHECK_MSG((r.extraRegions & ~f.rowRegions) == 0, "%s adds regions its family does not allow: %s", r.name,
              regionNames(r.extraRegions & ~f.rowRegions).c_str());
    CHECK_MSG((r.extraPhases & ~f.rowPhases) == 0, "%s adds phases its family does not allow", r.name);
    const uint32_t regions = algoRegions(r.id);
    CHECK_MSG((regions & ~kAllRegions) == 0 && (regions & kAlwaysRegions) == kAlwaysRegions, "%s: regions %s",
              r.name, regionNames(regions).c_str());
    CHECK_MSG((regions & ~kAlwaysRegions) != 0, "%s touches no region of its own", r.name);
    CHECK_MSG(algoPhases(r.id) != 0, "%s reports no phase", r.name);
    for (int p = 0; p < 32; ++p)
      if (algoPhases(r.id) & phaseBit(p))
        CHECK_MSG(std::string(waitPhaseName(p)) != "unknown wait", "%s reports phase %d, which has no name", r.name, p);
    phasesOfRows |= algoPhases(r.id);
    // The families with row additions: the rest share their family's exactly.
    if (f.rowRegions == 0) CHECK(r.extraRegions == 0);
    if (r.family != Family::kCopyEngine)
      CHECK_MSG((algoPhases(r.id) & phaseBit(kPhaseAdmission)) && (algoPhases(r.id) & phaseBit(kPhaseRebaseClear)),
                "%s: a kernel row can report admission and the rebase", r.name);
  }
  for (int p = 0; p < 32; ++p)
    if (std::string(waitPhaseName(p)) != "unknown wait")
      CHECK_MSG(phasesOfRows & phaseBit(p), "wait phase %d (%s) is reported by no row", p, waitPhaseName(p));
  // The two-shot variants differ by their all-gather (allreduce/twoshot.cuh: Gather).
  CHECK(algoRegions(Algo::kTwoshot) & kRegionResult);
  CHECK(!(algoRegions(Algo::kTwoshot) & (kRegionGather | kRegionDirectFlags)));
  CHECK(algoRegions(Algo::kTwoshotPush) & kRegionGather);
  CHECK(!(algoRegions(Algo::kTwoshotPush) & kRegionResult));
  CHECK(algoRegions(Algo::kTwoshotDirect) & kRegionDirectFlags);
  CHECK(!(algoRegions(Algo::kTwoshotDirect) & (kRegionGather | kRegionResult)));
  CHECK(algoPhases(Algo::kTwoshotDirect) & phaseBit(kPhaseTwoshotEnter));
  CHECK(algoRegions(Algo::kBroadcastTwoshot) & kRegionGather);
  CHECK(algoRegions(Algo::kReduceTwoshot) & kRegionGather);
  // alltoallv alone has count packets; it reports its count checks, not the staged covenant.
  for (int i = 0; i < count; ++i)
    CHECK_MSG(((algoRegions(rows[i].id) & kRegionCounts) != 0) == (rows[i].id == Algo::kAlltoAllvStaged), "%s",
              rows[i].name);
  CHECK(algoPhases(Algo::kAlltoAllvStaged) & phaseBit(kPhaseCountsVerdict));
  CHECK(!(algoPhases(Algo::kAlltoAllvStaged) & phaseBit(kPhaseExchangeArrive)));
  CHECK(algoPhases(Algo::kAllGatherStaged) & phaseBit(kPhaseExchangeArrive));
  CHECK(algoRegions(Algo::kOneshotPull) == (kAlwaysRegions | kRegionCopyIn | kRegionPushFlags));
  CHECK(algoRegions(Algo::kAllGatherCopyEngine) == (kAlwaysRegions | kRegionCeFlags));
  CHECK(regionNames(kRegionStaging | kRegionResult) == "staging, result");
}

// With every region the layout is the one every comm had before it followed the registry, byte for
// byte, for every world size and a range of buffer settings; default comms of 2 to 7 ranks choose
// among algorithms that need every region, so their layout is unchanged too.
TEST(window_layout_with_every_region_unchanged) {
  const std::vector<std::vector<std::pair<std::string, std::string>>> envs = {
      {},
      {{"YALI_LL_BUFFER_BYTES", "4096"}, {"YALI_STAGING_BYTES", "65536"}, {"YALI_PULL_BUFFER_BYTES", "0"}},
      {{"YALI_LL_BUFFER_BYTES", "1073741824"}, {"YALI_STAGING_BYTES", "4294967296"}, {"YALI_PULL_BUFFER_BYTES", "4294967296"}},
  };
  for (const auto& env : envs) {
    const Settings s = settingsWith(env);
    for (int n = 1; n <= kMaxRanks; ++n)
      CHECK_MSG(sameLayout(computeLayout(n, s, kAllRegions), layoutBeforeRegions(n, s)), "n=%d", n);
  }
  const Settings s = defaultSettings();
  for (int n = 2; n < 8; ++n) {
    CHECK_MSG(laidOutRegions(windowRegionsFor(s, n)) == kAllRegions, "n=%d: without %s", n,
              regionNames(kAllRegions & ~laidOutRegions(windowRegionsFor(s, n))).c_str());
    CHECK_MSG(sameLayout(computeLayout(n, s, windowRegionsFor(s, n)), layoutBeforeRegions(n, s)), "n=%d", n);
  }
}

// Point-to-point's rings per pair (p2p.h: p2pRingsPerPair): the setting, but never more than keep a
// launch that talks to every peer both ways within kMaxCtas blocks (every lane of a launch must be
// resident at once), and at least one; 0 stays 0 (no rings). The defaults give what yali.h and
// env.cc say: 32 at 2 ranks, 16 at 3, 10 at 4, 4 at 8. And the chunk a call is cut into (p2pChunkBytes):
// a multiple of 4 KB at least 4 KB, at most a slot, spreading a call over every ring and team (a
// call above the LL route's bound; the LL route's chunks: the next test).
TEST(p2p_rings_per_pair_and_chunks) {
  CHECK_EQ(p2pRingsPerPair(32, 2), 32);
  CHECK_EQ(p2pRingsPerPair(32, 3), 16);
  CHECK_EQ(p2pRingsPerPair(32, 4), 10);
  CHECK_EQ(p2pRingsPerPair(32, 8), 4);
  CHECK_EQ(p2pRingsPerPair(16, 2), 16);
  CHECK_EQ(p2pRingsPerPair(0, 4), 0);
  for (int n = 2; n <= kMaxRanks; ++n)
    for (int setting = 1; setting <= kMaxP2PChannels; ++setting) {
      const int rings = p2pRingsPerPair(setting, n);
      CHECK_MSG(rings >= 1 && rings <= setting && 2 * (n - 1) * rings <= kMaxCtas, "n=%d setting=%d: %d", n, setting,
                rings);
      CHECK(2 * (n - 1) * rings + 16 <= kMaxP2PLanes);
    }
  const Settings s = defaultSettings();
  CHECK_EQ(s.p2pChannels, 32);
  CHECK_EQ(s.p2pSlotBytes, 128 << 10);
  for (int n = 2; n <= kMaxRanks; ++n)
    CHECK_EQ(computeLayout(n, s, kAllRegions).p2pChannels, static_cast<size_t>(p2pRingsPerPair(32, n)));
  const uint64_t slot = 128 << 10;
  for (uint64_t bytes : {uint64_t{1}, uint64_t{4096}, uint64_t{4097}, uint64_t{65536}, uint64_t{1} << 20,
                         (uint64_t{1} << 20) + 3, uint64_t{1} << 30}) {
    for (int rings : {1, 4, 10, 16}) {
      const uint64_t chunk = p2pChunkBytes(bytes, rings, slot, 0);
      CHECK_MSG(chunk >= kP2PMinChunk && chunk <= slot && chunk % 4096 == 0, "bytes=%llu rings=%d: %llu",
                (unsigned long long)bytes, rings, (unsigned long long)chunk);
      // Every ring and team gets a chunk where the call is large enough for it; a team gets a
      // second where one chunk each would exceed kP2PPipelineChunk; no call needs more chunks than
      // that unless its chunks are whole slots, the smallest, or the pipeline's.
      const uint64_t chunks = (bytes + chunk - 1) / chunk;
      const uint64_t parts = static_cast<uint64_t>(rings) * kP2PTeams;
      CHECK(chunk == slot || chunk == kP2PMinChunk || chunk == kP2PPipelineChunk ||
            chunks <= (chunk < kP2PPipelineChunk ? parts : 2 * parts));
      CHECK(chunk <= kP2PPipelineChunk || chunks > parts);
    }
  }
  CHECK_EQ(p2pChunkBytes(1 << 20, 16, slot, 0), uint64_t{32768});  // 1 MB: 32 chunks, one per ring and team
  // 32 rings (2 ranks): 4 MB one 64 KB chunk per team; 5 and 8 MB two (64 KB: the receiver copies
  // the first out while the second arrives); 16 MB two of 128 KB; 1 GB whole slots.
  CHECK_EQ(p2pChunkBytes(4 << 20, 32, slot, 0), uint64_t{65536});
  CHECK_EQ(p2pChunkBytes(5 << 20, 32, slot, 0), uint64_t{65536});
  CHECK_EQ(p2pChunkBytes(8 << 20, 32, slot, 0), uint64_t{65536});
  CHECK_EQ(p2pChunkBytes(12 << 20, 32, slot, 0), uint64_t{98304});
  CHECK_EQ(p2pChunkBytes(16 << 20, 32, slot, 0), slot);
  CHECK_EQ(p2pChunkBytes(uint64_t{1} << 30, 16, slot, 0), slot);
  CHECK_EQ(p2pChunkBytes(uint64_t{1} << 30, 16, slot, p2pLLBytesFor(s.p2pLLBytes, 16)), slot);
}

// Point-to-point's LL route (p2p.h): calls of at most YALI_P2P_LL_BYTES (the layout's p2pLLBytes),
// every one of them, in LL-sized chunks; larger ones never; 0 turns the route off. An LL slot holds
// the header and a chunk's packets; the packets' flag is never 0 (the value of a cleared packet),
// whatever the slot's number. The receiver leaves the packets it read and clears a place's LL slot
// once every kP2PLLCleanPeriod slots (p2pLLFlag): every place is cleared exactly once per period,
// at slots P apart, so a packet left in it is at most P slots older than the slot read, and no
// slot within P + 4 of another shares its flag (checked around the flag's own wrap and the
// counter's).
TEST(p2p_small_calls_travel_as_ll_packets) {
  const uint64_t slot = 128 << 10;
  CHECK(kP2PLLSlotBytes >= 16 + 2 * kP2PLLChunkBytes && kP2PLLSlotBytes % 16 == 0);
  CHECK(kP2PLLChunkBytes >= kP2PMinChunk && kP2PLLChunkBytes <= slot);
  const Settings s = defaultSettings();
  // The default (-1): rings x teams x two LL chunks, two chunks per team: 512 KB at 2 ranks, 64 KB at 8.
  CHECK_EQ(s.p2pLLBytes, -1);
  CHECK_EQ(computeLayout(2, s, kAllRegions).p2pLLBytes, 512u << 10);
  CHECK_EQ(computeLayout(4, s, kAllRegions).p2pLLBytes, 160u << 10);
  CHECK_EQ(computeLayout(8, s, kAllRegions).p2pLLBytes, 64u << 10);
  for (int n = 2; n <= kMaxRanks; ++n) {
    const WindowLayout L = computeLayout(n, s, kAllRegions);
    CHECK_EQ(L.p2pLLBytes, L.p2pChannels * kP2PTeams * kP2PLLChunksPerTeam * kP2PLLChunkBytes);
    CHECK_EQ(p2pLLBytesFor(12345, static_cast<int>(L.p2pChannels)), 12345);
    CHECK_EQ(p2pLLBytesFor(0, static_cast<int>(L.p2pChannels)), 0);
  }
  for (uint64_t ll : {uint64_t{0}, uint64_t{4096}, uint64_t{64} << 10, uint64_t{1} << 20}) {
    for (int rings : {1, 4, 10, 16}) {
      for (uint64_t bytes : {uint64_t{1}, uint64_t{4095}, uint64_t{4097}, uint64_t{8192}, uint64_t{64} << 10,
                             (uint64_t{64} << 10) + 1, uint64_t{1} << 20, (uint64_t{1} << 20) + 1}) {
        const uint64_t chunk = p2pChunkBytes(bytes, rings, slot, ll);
        CHECK_EQ(p2pTravelsAsLL(bytes, ll), bytes <= ll);
        if (bytes <= ll) CHECK_EQ(chunk, kP2PLLChunkBytes);
        else CHECK_EQ(chunk, p2pChunkBytes(bytes, rings, slot, 0));
      }
    }
  }
  for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{0x7ffffffe}, uint64_t{0x7fffffff}, uint64_t{0xffffffff},
                       uint64_t{1} << 32, (uint64_t{1} << 32) - 1, ~uint64_t{0}}) {
    CHECK_MSG(p2pLLFlag(seq) != 0, "seq=%llu", (unsigned long long)seq);
  }
  CHECK(p2pLLFlag(0) != p2pLLFlag(1));
  const uint64_t P = kP2PLLCleanPeriod;
  for (uint64_t k = 0; k < static_cast<uint64_t>(kP2PSlots); ++k) CHECK(p2pClearsLLSlot(k));  // a new comm's first slots
  for (uint64_t base : {uint64_t{0}, P, 5 * P, uint64_t{0x7fffffff} * 3, ~uint64_t{0} - 3 * P}) {
    // Clears in [base, base + 2P): one per place per period, P apart.
    std::vector<uint64_t> last(kP2PSlots, ~uint64_t{0});
    for (uint64_t seq = base; seq < base + 2 * P;) {
      if (seq % P >= kP2PSlots) {  // no clear before the next period (checked below at its edges)
        seq += P - seq % P;
        continue;
      }
      CHECK(p2pClearsLLSlot(seq));
      if (seq > base) CHECK(!p2pClearsLLSlot(seq - 1) || seq % P != 0);
      uint64_t& l = last[seq % kP2PSlots];
      CHECK_MSG(l == ~uint64_t{0} || seq - l == P, "seq=%llu last=%llu", (unsigned long long)seq, (unsigned long long)l);
      l = seq;
      ++seq;
    }
    // Slots within P + 4 of each other never share a flag: spot checks at every distance class.
    for (uint64_t d : {uint64_t{1}, uint64_t{4}, uint64_t{kP2PSlots} * 1000, P - 1, P, P + 4}) {
      CHECK_MSG(p2pLLFlag(base + d) != p2pLLFlag(base), "base=%llu d=%llu", (unsigned long long)base,
                (unsigned long long)d);
    }
  }
  CHECK(P + kP2PSlots < 0x7fffffffu);  // the flag repeats only after 2^31 - 1 slots
  CHECK(!p2pClearsLLSlot(kP2PSlots) && !p2pClearsLLSlot(P - 1) && p2pClearsLLSlot(P) && p2pClearsLLSlot(P + 3));
}

// A comm whose settings exclude every algorithm of a region gets that region at 0 bytes (its offset
// the next region's), and no other change but the offsets after it; the regions it keeps stay
// 256-byte aligned and in order. YALI_ALGO brings a region back.
TEST(window_layout_leaves_out_unchoosable_regions) {
  const int n = 4;
  const Settings all = defaultSettings();
  const WindowLayout before = layoutBeforeRegions(n, all);
  // No LL algorithm: no LL area (and no LL capacity, so that no LL choice fits it either).
  std::vector<std::pair<std::string, std::string>> llOff;
  {
    int count = 0;
    const AlgorithmDesc* rows = algorithms(&count);
    for (int i = 0; i < count; ++i)
      if (isLLFamily(rows[i].family)) llOff.push_back({thresholdSettingName(rows[i]), "0"});
  }
  const Settings noLL = settingsWith(llOff);
  const uint32_t noLLRegions = windowRegionsFor(noLL, n);
  CHECK(!(noLLRegions & kRegionLL));
  CHECK_MSG(laidOutRegions(noLLRegions) == (kAllRegions & ~kRegionLL), "%s",
            regionNames(laidOutRegions(noLLRegions)).c_str());
  const WindowLayout L = computeLayout(n, noLL, noLLRegions);
  CHECK(L.llSlotBytes == 0 && L.ll == L.counts && L.ll == before.ll);
  CHECK(L.total == before.total - 2 * n * 2 * static_cast<size_t>(all.llBufferBytes));
  CHECK(L.staging == before.staging - 2 * n * 2 * static_cast<size_t>(all.llBufferBytes));
  CHECK(L.stampedBytes == L.counts + 2 * kMaxRanks * kMaxLocalExperts * 16 - L.pushFlags);
  const size_t offsets[] = {L.ceFlags, L.pushFlags, L.resultFlags, L.directFlags, L.arriveFlags, L.ll,
                            L.counts,  L.staging,   L.result,      L.gather,      L.copyIn,      L.local, L.total};
  for (size_t i = 0; i < std::size(offsets); ++i) {
    CHECK(offsets[i] % 256 == 0);
    if (i > 0) CHECK(offsets[i] >= offsets[i - 1]);
  }
  // Forcing one LL row brings the area back.
  std::vector<std::pair<std::string, std::string>> env = llOff;
  env.push_back({"YALI_ALGO", "allgather_ll"});
  CHECK(windowRegionsFor(settingsWith(env), n) & kRegionLL);
  // No oneshot_pull (its threshold 0, or the table's 0 at 8 ranks): no copy-in area; the rest as
  // before, LocalState right after the gather area.
  const std::pair<Settings, int> noPulls[] = {{settingsWith({{"YALI_ONESHOT_PULL_MAX_BYTES", "0"}}), n}, {all, 8}};
  for (const auto& [s, ranks] : noPulls) {
    const uint32_t regions = windowRegionsFor(s, ranks);
    CHECK_MSG(!(regions & kRegionCopyIn), "n=%d", ranks);
    const WindowLayout P = computeLayout(ranks, s, regions);
    const WindowLayout old = layoutBeforeRegions(ranks, s);
    CHECK(P.copyInBytes == 0 && P.copyIn == old.copyIn && P.p2pFlags == old.copyIn);
    CHECK(P.local == old.local - 2 * static_cast<size_t>(s.pullBufferBytes));
    CHECK(P.total == old.total - 2 * static_cast<size_t>(s.pullBufferBytes));
  }
  // No two-shot push, twoshot_direct or rooted two-shot (their thresholds 0): no gather area; the
  // direct exchanges keep directFlags.
  const Settings noPush = withFamilyOff(Family::kTwoshot);
  CHECK(!(windowRegionsFor(noPush, n) & kRegionGather));
  CHECK(windowRegionsFor(noPush, n) & kRegionResult);  // twoshot, the fallback, keeps its own
  CHECK(windowRegionsFor(noPush, n) & kRegionDirectFlags);
  CHECK(computeLayout(n, noPush, windowRegionsFor(noPush, n)).total ==
        before.total - 2 * n * static_cast<size_t>(all.stagingBytes));
}

// choosableAlgos holds every algorithm that Selector::mayChoose allows, on every architecture (a
// tuning file's line for another sm included), and every choice the selector makes for a comm
// finds its regions laid out; the launch guard refuses a row whose region is missing, naming both.
TEST(window_regions_cover_every_choice) {
  const std::string path = writeTempFile(
      "sm=8 nranks=8 ll_max=65536 ll_threads=512 ll_ctas=32 twoshot_threads=512 twoshot_ctas=64 "
      "twoshot_min_slot=8192 twoshot_max_slot=131072 oneshot_pull_max=1048576 allgather_ce_min=4096\n");
  std::vector<Settings> settings = {defaultSettings(), settingsWithTuningFile(path),
                                    settingsWith({{"YALI_ALGO", "alltoall_ce,oneshot_pull"}}),
                                    withFamilyOff(Family::kExchangeDirect), withFamilyOff(Family::kExchangeLL)};
  unlink(path.c_str());
  CHECK(!(choosableAlgos(settings[0], 8) & algoBit(static_cast<int>(Algo::kOneshotPull))));
  CHECK(choosableAlgos(settings[1], 8) & algoBit(static_cast<int>(Algo::kOneshotPull)));  // sm=8's line
  CHECK(choosableAlgos(settings[1], 8) & algoBit(static_cast<int>(Algo::kAllGatherCopyEngine)));
  CHECK(!(choosableAlgos(settings[1], 4) & algoBit(static_cast<int>(Algo::kAllGatherCopyEngine))));
  for (const Settings& s : settings) {
    for (int n = 2; n <= kMaxRanks; ++n) {
      const uint64_t algos = choosableAlgos(s, n);
      const uint32_t laidOut = laidOutRegions(windowRegionsFor(s, n));
      for (int sm : {8, 9, 10}) {
        SelectorLimits limits = limitsFor(s, n);
        limits.smMajor = sm;
        const WindowLayout L = computeLayout(n, s, windowRegionsFor(s, n));
        limits.llPayloadBytes = static_cast<int64_t>(L.llSlotBytes / 2);
        limits.pullBufferBytes = static_cast<int64_t>(L.copyInBytes);
        Selector sel;
        std::string err;
        REQUIRE(sel.init(s, limits, &err));
        for (int a = 0; a < kNumAlgos; ++a)
          if (sel.mayChoose(static_cast<Algo>(a)))
            CHECK_MSG(algos & algoBit(a), "n=%d sm=%d: %s may be chosen but is not choosable", n, sm,
                      algoName(static_cast<Algo>(a)));
        for (int c = 0; c < kNumCollectives; ++c)
          for (size_t bytes : {size_t(0), size_t(1), size_t(4096), size_t(1) << 20, size_t(1) << 26, SIZE_MAX})
            for (int reg = 0; reg < 4; ++reg) {
              const AlgoChoice choice = sel.choose(static_cast<Collective>(c), bytes, reg & 1, reg & 2);
              CHECK_MSG(regionsLaidOut(choice.algo, laidOut, &err), "n=%d sm=%d: %s", n, sm, err.c_str());
            }
      }
    }
  }
  // The guard: every region of every row is needed.
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i) {
    CHECK(regionsLaidOut(rows[i].id, kAllRegions, nullptr));
    for (uint32_t bit = 1; bit & kAllRegions; bit <<= 1) {
      if (!(algoRegions(rows[i].id) & bit)) continue;
      std::string why;
      CHECK_MSG(!regionsLaidOut(rows[i].id, kAllRegions & ~bit, &why), "%s without %s", rows[i].name,
                regionNames(bit).c_str());
      CHECK_MSG(why.find(rows[i].name) != std::string::npos && why.find(regionNames(bit)) != std::string::npos, "%s",
                why.c_str());
    }
  }
  std::string why;
  CHECK(!regionsLaidOut(Algo::kOneshotLL, laidOutRegions(windowRegionsFor(withFamilyOff(Family::kOneshotLL), 2)) & ~kRegionLL, &why));
  CHECK_MSG(why.find("oneshot_ll") != std::string::npos && why.find("ll") != std::string::npos, "%s", why.c_str());
}
