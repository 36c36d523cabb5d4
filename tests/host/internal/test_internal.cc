// Internal host logic: settings parsing and their digest, the selector (AllReduce's algorithms and
// the fuzz of every collective's choices), its tuning table, tuning files and the README's settings
// table. Needs no GPU. The registry and the exchanges' selection: test_registry.cc and
// test_exchange.cc.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "internal_support.h"

using namespace yali;
using namespace yali_internal_test;

namespace {

constexpr int kLL = static_cast<int>(Algo::kOneshotLL);
constexpr int kPull = static_cast<int>(Algo::kOneshotPull);
constexpr int kPush = static_cast<int>(Algo::kTwoshotPush);
constexpr int kTD = static_cast<int>(Algo::kTwoshotDirect);

// The optional keys of a tuning line, with `e`'s values: everything formatTuningEntry leaves out.
std::string optionalKeys(const TuningEntry& e) {
  std::string line = " frugal_min=" + std::to_string(e.frugalMinBytes) + " frugal_ctas=" +
                     std::to_string(e.frugalMaxCtas) + " frugal_teams=" + std::to_string(e.frugalTeams);
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i)
    if (rows[i].tuningKey != nullptr && i != kLL)
      line += std::string(" ") + rows[i].tuningKey + "=" + std::to_string(e.thresholds[i]);
  return line;
}

// Every field of two entries, as text (for equality with a readable difference).
std::string describe(const TuningEntry& e) { return formatTuningEntry(e) + optionalKeys(e); }

std::vector<TuningEntry> parseOrFail(const std::string& text) {
  std::vector<TuningEntry> parsed;
  std::string err;
  CHECK_MSG(parseTuningText(text, &parsed, &err), "'%s': %s", text.c_str(), err.c_str());
  return parsed;
}

// parseTuningText must refuse `text` with a message containing each of `needles`.
void checkTuningRefused(const std::string& text, std::initializer_list<std::string> needles) {
  std::vector<TuningEntry> parsed;
  std::string err;
  CHECK_MSG(!parseTuningText(text, &parsed, &err), "'%s' was accepted", text.c_str());
  for (const std::string& n : needles)
    CHECK_MSG(err.find(n) != std::string::npos, "'%s': the message '%s' lacks '%s'", text.c_str(), err.c_str(),
              n.c_str());
}

}  // namespace

// ---- Settings ---------------------------------------------------------------------------------------

TEST(int_setting_parses_and_rejects) {
  int64_t v = 0;
  std::string err;
  CHECK(parseIntSetting("X", nullptr, 7, 0, 10, &v, &err));
  CHECK_EQ(v, 7);
  CHECK(parseIntSetting("X", "9", 7, 0, 10, &v, &err));
  CHECK_EQ(v, 9);
  CHECK(!parseIntSetting("X", "11", 7, 0, 10, &v, &err));
  CHECK(err.find("X=11") != std::string::npos);
  CHECK(!parseIntSetting("X", "12abc", 7, 0, 100, &v, &err));
  CHECK(err.find("not an integer") != std::string::npos);
  CHECK(!parseIntSetting("X", "", 7, 0, 100, &v, &err) || v == 7);
}

TEST(threshold_setting_values) {
  int64_t v = 0;
  std::string err;
  CHECK(parseThresholdSetting("T", nullptr, &v, &err));
  CHECK_EQ(v, kThresholdTable);
  CHECK(parseThresholdSetting("T", "-1", &v, &err));
  CHECK_EQ(v, kThresholdAlways);
  CHECK(parseThresholdSetting("T", "0", &v, &err));
  CHECK_EQ(v, kThresholdDisabled);
  CHECK(parseThresholdSetting("T", "65536", &v, &err));
  CHECK_EQ(v, 65536);
  CHECK(!parseThresholdSetting("T", "-3", &v, &err));
}

TEST(load_settings_reports_variable) {
  defaultSettings();
  checkSettingRejected("YALI_TIMEOUT_MS", "soon");
  checkSettingRejected("YALI_ALGO", "threeshot");
  Settings s;
  std::string err;
  CHECK(loadSettings(&s, &err));
  CHECK_EQ(s.timeoutMs, 120000);
  for (int c = 0; c < kNumCollectives; ++c) CHECK_EQ(s.forcedAlgo[c], -1);
  for (int a = 0; a < kNumAlgos; ++a) CHECK_EQ(s.thresholds[a], kThresholdTable);
}

// Every bounded row's YALI_<NAME>_{MAX,MIN}_BYTES (generated from the registry) takes the four
// forms of a threshold into its own slot only, and refuses what is not one of them.
TEST(threshold_settings_generated_from_registry) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    const std::string name = thresholdSettingName(rows[i]);
    if (rows[i].bound == Bound::kFallback) {
      CHECK_MSG(name.empty(), "the fallback %s has a threshold setting %s", rows[i].name, name.c_str());
      continue;
    }
    CHECK_MSG(names.insert(name).second, "%s is generated twice", name.c_str());
    std::string expected = "YALI_";
    for (const char* c = rows[i].name; *c; ++c) expected += static_cast<char>(toupper(static_cast<unsigned char>(*c)));
    expected += rows[i].bound == Bound::kUpTo ? "_MAX_BYTES" : "_MIN_BYTES";
    CHECK_MSG(name == expected, "%s: %s, expected %s", rows[i].name, name.c_str(), expected.c_str());
    const std::pair<const char*, int64_t> good[] = {{"-2", kThresholdTable}, {"-1", kThresholdAlways},
                                                    {"0", kThresholdDisabled}, {"1", 1},
                                                    {"65536", 65536}, {"9223372036854775807", INT64_MAX},
                                                    {"", kThresholdTable}};  // empty: unset
    for (const auto& g : good) {
      const Settings s = settingsWith({{name, g.first}});
      CHECK_MSG(s.thresholds[i] == g.second, "%s=%s gave %lld", name.c_str(), g.first,
                static_cast<long long>(s.thresholds[i]));
      for (int j = 0; j < count; ++j)
        if (j != i) CHECK_MSG(s.thresholds[j] == kThresholdTable, "%s=%s changed %s's threshold", name.c_str(), g.first, rows[j].name);
    }
    for (const char* bad : {"-3", "-9223372036854775808", "x", "1.5", "64K", "9223372036854775808", " ", "0x10", "1 "}) {
      const std::string err = checkSettingRejected(name.c_str(), bad);
      CHECK_MSG(err.find(bad) != std::string::npos, "%s=%s: the message does not quote the value: %s", name.c_str(),
                bad, err.c_str());
    }
  }
  // The names users already set keep working.
  for (const char* kept : {"YALI_ONESHOT_LL_MAX_BYTES", "YALI_ONESHOT_PULL_MAX_BYTES", "YALI_TWOSHOT_PUSH_MIN_BYTES",
                           "YALI_TWOSHOT_DIRECT_MIN_BYTES"})
    CHECK_MSG(names.count(kept) == 1, "%s is gone", kept);
}

// YALI_ALGO: at most one name per collective, in any order; two names of one collective, or a name
// that is no algorithm, are errors that say which.
TEST(algo_setting_per_collective) {
  Settings s = forced("twoshot,allgather_ll");
  CHECK(s.algo == "twoshot,allgather_ll");
  for (int c = 0; c < kNumCollectives; ++c) {
    const int expected = c == idx(Collective::kAllReduce)   ? idx(Algo::kTwoshot)
                         : c == idx(Collective::kAllGather) ? idx(Algo::kAllGatherLL)
                                                            : -1;
    CHECK_MSG(s.forcedAlgo[c] == expected, "%s: %d", collectiveName(collectiveAt(c)), s.forcedAlgo[c]);
  }
  CHECK(settingsDigest(s) == settingsDigest(forced("allgather_ll,twoshot")));  // order does not matter
  // Every name alone forces its own collective only.
  for (int a = 0; a < kNumAlgos; ++a) {
    const AlgorithmDesc& row = algorithm(static_cast<Algo>(a));
    const Settings one = forced(row.name);
    for (int c = 0; c < kNumCollectives; ++c)
      CHECK_EQ(one.forcedAlgo[c], c == idx(row.collective) ? a : -1);
  }
  // One per collective, the last row of each first: all eight at once.
  std::string all;
  for (int c = kNumCollectives - 1; c >= 0; --c) all += (all.empty() ? "" : ",") + std::string(fallbackOf(collectiveAt(c)).name);
  const Settings eight = forced(all);
  for (int c = 0; c < kNumCollectives; ++c) CHECK_EQ(eight.forcedAlgo[c], idx(fallbackOf(collectiveAt(c)).id));
  // auto is no algorithm at all.
  const Settings autoAll = forced("auto");
  CHECK(autoAll.algo.empty());
  for (int c = 0; c < kNumCollectives; ++c) CHECK_EQ(autoAll.forcedAlgo[c], -1);
  CHECK_EQ(settingsDigest(autoAll), settingsDigest(defaultSettings()));
  // Two of one collective: the message names the collective and both algorithms (beyond quoting
  // the whole value back).
  struct Twice {
    const char* value;
    const char* first;
    const char* second;
    const char* collective;
  };
  for (const Twice& t : {Twice{"twoshot,oneshot_ll", "twoshot", "oneshot_ll", "allreduce"},
                         Twice{"allgather_ll,broadcast_ll,allgather_staged", "allgather_ll", "allgather_staged", "allgather"},
                         Twice{"alltoall_direct,alltoall_direct", "alltoall_direct", "alltoall_direct", "alltoall"}}) {
    const std::string err = checkSettingRejected("YALI_ALGO", t.value);
    const std::string quoted = std::string("'") + t.value + "'";
    const size_t after = err.find(quoted);
    const std::string rest = after == std::string::npos ? err : err.substr(after + quoted.size());
    CHECK_MSG(rest.find(t.collective) != std::string::npos, "YALI_ALGO=%s: %s", t.value, err.c_str());
    CHECK_MSG(rest.find(t.first) != std::string::npos && rest.find(t.second) != std::string::npos,
              "YALI_ALGO=%s: the message does not name %s and %s: %s", t.value, t.first, t.second, err.c_str());
  }
  // Unknown names: the message names it and lists the algorithms.
  for (const char* value : {"threeshot", "twoshot,threeshot", "allgather", "copy_engine"}) {
    const std::string err = checkSettingRejected("YALI_ALGO", value);
    const std::string bad = std::string(value).substr(std::string(value).find(',') + 1);
    CHECK_MSG(err.find("'" + bad + "' is not an algorithm") != std::string::npos, "%s: %s", value, err.c_str());
    CHECK_MSG(err.find(algoNameList()) != std::string::npos, "%s: %s", value, err.c_str());
  }
}

TEST(test_epoch_start_setting) {
  CHECK_EQ(defaultSettings().testEpochStart, 1);
  for (const char* good : {"1", "4294967295", "4294967000"}) {
    const Settings s = settingsWith({{"YALI_TEST_EPOCH_START", good}});
    CHECK_EQ(s.testEpochStart, strtoull(good, nullptr, 10));
  }
  for (const char* bad : {"0", "-1", "4294967296", "lots"}) checkSettingRejected("YALI_TEST_EPOCH_START", bad);
}

TEST(test_copy_engine_fail_setting) {
  CHECK_EQ(defaultSettings().testCopyEngineFail, 0);
  CHECK_EQ(settingsWith({{"YALI_TEST_COPY_ENGINE_FAIL", "3"}}).testCopyEngineFail, 3);
  for (const char* bad : {"-1", "1099511627777", "x"}) checkSettingRejected("YALI_TEST_COPY_ENGINE_FAIL", bad);
}

// Ranks compare the digest at set-up: every setting that steers the choice, the layout or the
// epochs changes it (every row of settingDocs marked agreed, each threshold and each forced
// algorithm on its own); per-rank settings (timeout, PDL, debug) and the tuning file's path do not.
TEST(settings_digest_covers_what_ranks_share) {
  const Settings base = defaultSettings();
  const uint64_t digest = settingsDigest(base);
  CHECK_EQ(settingsDigest(base), digest);
  const std::string tuning = writeTempFile(formatTuningEntry(builtinTuning(9, 2)) + "\n");
  // A value other than the default for every setting that is not a threshold (those get 12345).
  const std::map<std::string, std::string> other = {
      {"YALI_TIMEOUT_MS", "5"},           {"YALI_ALGO", "twoshot"},          {"YALI_MAX_CTAS", "8"},
      {"YALI_LL_BUFFER_BYTES", "65536"},  {"YALI_STAGING_BYTES", "65536"},   {"YALI_PULL_BUFFER_BYTES", "0"},
      {"YALI_PDL", "0"},                  {"YALI_ALLOW_SHARED_GPU", "1"},    {"YALI_TEST_EPOCH_START", "4294967295"},
      {"YALI_TUNING_FILE", tuning},       {"YALI_DEBUG", "1"},               {"YALI_TEST_COPY_ENGINE_FAIL", "2"},
      {"YALI_GRAPH_MIXING", "0"},         {"YALI_TEST_NO_GROUP_JOIN", "1"},  {"YALI_P2P_CHANNELS", "2"},
      {"YALI_P2P_SLOT_BYTES", "4096"},    {"YALI_P2P_LL_BYTES", "0"},
  };
  const std::set<std::string> perRank = {"YALI_TIMEOUT_MS", "YALI_PDL", "YALI_DEBUG", "YALI_TEST_COPY_ENGINE_FAIL",
                                         "YALI_GRAPH_MIXING", "YALI_TEST_NO_GROUP_JOIN"};
  std::set<std::string> thresholdNames;
  int rowCount = 0;
  const AlgorithmDesc* rows = algorithms(&rowCount);
  for (int i = 0; i < rowCount; ++i)
    if (rows[i].bound != Bound::kFallback) thresholdNames.insert(thresholdSettingName(rows[i]));
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  for (int i = 0; i < count; ++i) {
    const std::string name = docs[i].name;
    const bool agreed = perRank.count(name) == 0;
    CHECK_MSG(docs[i].agreed == agreed, "settingDocs marks %s %s", docs[i].name, docs[i].agreed ? "agreed" : "per rank");
    std::string value;
    if (thresholdNames.count(name)) {
      value = "12345";
    } else if (other.count(name)) {
      value = other.at(name);
    } else {
      CHECK_MSG(false, "no test value for the new setting %s: add one to this test", docs[i].name);
      continue;
    }
    const Settings s = settingsWith({{name, value}});
    CHECK_MSG((settingsDigest(s) != digest) == agreed, "%s=%s %s the digest", docs[i].name, value.c_str(),
              agreed ? "does not change" : "changes");
  }
  unlink(tuning.c_str());
  // Each threshold and each forced algorithm on its own: no two give the same digest.
  std::set<uint64_t> digests = {digest};
  for (const std::string& name : thresholdNames)
    for (const char* v : {"-1", "0", "1", "12345"})
      CHECK_MSG(digests.insert(settingsDigest(settingsWith({{name, v}}))).second, "%s=%s: a digest seen before", name.c_str(), v);
  for (int a = 0; a < kNumAlgos; ++a)
    CHECK_MSG(digests.insert(settingsDigest(forced(algoName(static_cast<Algo>(a))))).second,
              "YALI_ALGO=%s: a digest seen before", algoName(static_cast<Algo>(a)));
  // The fields the environment cannot reach alone.
  struct Change {
    const char* what;
    void (*apply)(Settings&);
  };
  const Change ignored[] = {
      {"timeoutMs", [](Settings& s) { s.timeoutMs = 5; }},
      {"programmaticLaunch", [](Settings& s) { s.programmaticLaunch = !s.programmaticLaunch; }},
      {"tuningFile", [](Settings& s) { s.tuningFile = "/elsewhere/yali-tuning.txt"; }},
      {"algo (the text; forcedAlgo is what counts)", [](Settings& s) { s.algo = "auto"; }},
  };
  for (const Change& c : ignored) {
    Settings s = base;
    c.apply(s);
    CHECK_MSG(settingsDigest(s) == digest, "the digest covers %s", c.what);
  }
  const Change covered[] = {
      {"forcedAlgo", [](Settings& s) { s.forcedAlgo[idx(Collective::kAlltoAll)] = idx(Algo::kAlltoAllLL); }},
      {"a fallback's threshold slot", [](Settings& s) { s.thresholds[idx(Algo::kTwoshot)] = 1; }},
      {"tuningText", [](Settings& s) { s.tuningText = "# another table\n"; }},
  };
  for (const Change& c : covered) {
    Settings s = base;
    c.apply(s);
    CHECK_MSG(settingsDigest(s) != digest, "the digest ignores %s", c.what);
  }
}

// The digest follows the tuning file's content: two paths to the same table agree, one path whose
// file changed does not. A file that cannot be read is a settings error.
TEST(settings_digest_reads_the_tuning_file) {
  const std::string line = formatTuningEntry(builtinTuning(9, 2)) + "\n";
  const std::string a = writeTempFile(line);
  const std::string b = writeTempFile(line);
  const Settings fromA = settingsWithTuningFile(a);
  const Settings fromB = settingsWithTuningFile(b);
  CHECK(fromA.tuningFile != fromB.tuningFile);
  CHECK(fromA.tuningText == line);
  CHECK_EQ(settingsDigest(fromA), settingsDigest(fromB));
  std::ofstream(b) << formatTuningEntry(builtinTuning(9, 4)) << "\n";
  CHECK(settingsDigest(settingsWithTuningFile(b)) != settingsDigest(fromA));
  CHECK(settingsDigest(fromA) != settingsDigest(defaultSettings()));
  unlink(a.c_str());
  unlink(b.c_str());
  for (const std::string& unreadable : {a, std::string("/tmp")}) {  // gone, and a directory
    const std::string err = checkSettingRejected("YALI_TUNING_FILE", unreadable.c_str());
    CHECK_MSG(err.find(unreadable) != std::string::npos, "%s", err.c_str());
  }
}

// ---- AllReduce's selection ------------------------------------------------------------------------

TEST(selector_default_crossover) {
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const size_t llMax = static_cast<size_t>(builtinTuning(9, n).thresholds[kLL]);
    CHECK(chooseAR(sel, 4096).algo == Algo::kOneshotLL);
    CHECK(chooseAR(sel, llMax).algo == Algo::kOneshotLL);
    CHECK(chooseAR(sel, llMax + 1).algo != Algo::kOneshotLL);
    CHECK(chooseAR(sel, size_t(1) << 30).algo != Algo::kOneshotLL);
  }
}

TEST(selector_push_variant_threshold) {
  Settings s = defaultSettings();
  const int64_t pushMin = builtinTuning(9, 4).thresholds[kPush];
  Selector table = makeSelector(s, 4);
  CHECK(chooseAR(table, size_t(1) << 30).algo == (pushMin > 0 ? Algo::kTwoshotPush : Algo::kTwoshot));
  s.thresholds[kPush] = int64_t(8) << 20;
  Selector explicitT = makeSelector(s, 4);
  CHECK(chooseAR(explicitT, size_t(8) << 20).algo == Algo::kTwoshotPush);
  CHECK(chooseAR(explicitT, (size_t(8) << 20) - 16).algo == Algo::kTwoshot);
  s.thresholds[kPush] = kThresholdDisabled;
  CHECK(chooseAR(makeSelector(s, 4), size_t(1) << 30).algo == Algo::kTwoshot);
  s.thresholds[kPush] = kThresholdAlways;
  CHECK(chooseAR(makeSelector(s, 4), size_t(1) << 20).algo == Algo::kTwoshotPush);
  CHECK(chooseAR(makeSelector(forced("twoshot_push"), 4), 8).algo == Algo::kTwoshotPush);
}

TEST(selector_pull_variant_threshold) {
  // oneshot_pull sits between LL and two-shot, within its copy-in buffer.
  Settings s = defaultSettings();
  const int64_t llMax = builtinTuning(9, 2).thresholds[kLL];
  s.thresholds[kPull] = int64_t(2) << 20;
  Selector sel = makeSelector(s, 2);
  CHECK(chooseAR(sel, static_cast<size_t>(llMax)).algo == Algo::kOneshotLL);
  CHECK(chooseAR(sel, static_cast<size_t>(llMax) + 16).algo == Algo::kOneshotPull);
  CHECK(chooseAR(sel, size_t(2) << 20).algo == Algo::kOneshotPull);
  CHECK(chooseAR(sel, (size_t(2) << 20) + 16).algo != Algo::kOneshotPull);
  // Geometry: every block's run is a 16-byte multiple and the runs cover the message.
  for (size_t bytes : {size_t(600) << 10, (size_t(1) << 20) + 48, size_t(2) << 20}) {
    const AlgoChoice c = chooseAR(sel, bytes);
    CHECK(c.slotBytes % 16 == 0);
    CHECK(c.ctas >= 1 && c.ctas <= kMaxCtas);
    CHECK(static_cast<size_t>(c.ctas) * c.slotBytes >= bytes);
  }
  // The built-in table: pull above LL at n = 2 up to 4 MB; at n = 4 only up to 512 KB.
  Settings d = defaultSettings();
  CHECK(chooseAR(makeSelector(d, 2), size_t(1) << 20).algo == Algo::kOneshotPull);
  CHECK(chooseAR(makeSelector(d, 2), size_t(8) << 20).algo == Algo::kTwoshotPush);
  CHECK(chooseAR(makeSelector(d, 4), size_t(512) << 10).algo == Algo::kOneshotPull);
  CHECK(chooseAR(makeSelector(d, 4), size_t(1) << 20).algo == Algo::kTwoshotPush);
  // -1: every size that fits the buffer, and no further.
  s.thresholds[kPull] = kThresholdAlways;
  Selector always = makeSelector(s, 2);
  CHECK(chooseAR(always, static_cast<size_t>(s.pullBufferBytes)).algo == Algo::kOneshotPull);
  CHECK(chooseAR(always, static_cast<size_t>(s.pullBufferBytes) + 16).algo != Algo::kOneshotPull);
  s.thresholds[kPull] = kThresholdDisabled;
  CHECK(chooseAR(makeSelector(s, 2), size_t(1) << 20).algo != Algo::kOneshotPull);
  // Forced, it falls back to two-shot past its buffer.
  const Settings f = forced("oneshot_pull");
  CHECK(chooseAR(makeSelector(f, 4), 8).algo == Algo::kOneshotPull);
  CHECK(chooseAR(makeSelector(f, 4), size_t(1) << 30).algo == Algo::kTwoshot);
  CHECK(std::string(algoName(Algo::kOneshotPull)) == "oneshot_pull");
  checkSettingRejected("YALI_ONESHOT_PULL_MAX_BYTES", "-3");
}

TEST(selector_threshold_env_semantics) {
  Settings s = defaultSettings();
  s.thresholds[kLL] = kThresholdDisabled;
  CHECK(chooseAR(makeSelector(s, 2), 16).algo != Algo::kOneshotLL);
  s.thresholds[kLL] = kThresholdAlways;
  Selector always = makeSelector(s, 2);
  CHECK(chooseAR(always, static_cast<size_t>(s.llBufferBytes)).algo == Algo::kOneshotLL);
  // Past the LL buffer, "always" still has to fall back.
  CHECK(chooseAR(always, static_cast<size_t>(s.llBufferBytes) + 8).algo != Algo::kOneshotLL);
  s.thresholds[kLL] = 1000;
  Selector explicitT = makeSelector(s, 2);
  CHECK(chooseAR(explicitT, 1000).algo == Algo::kOneshotLL);
  CHECK(chooseAR(explicitT, 1001).algo != Algo::kOneshotLL);
  // The same through the environment variable.
  const Selector fromEnv = makeSelector(settingsWith({{"YALI_ONESHOT_LL_MAX_BYTES", "1000"}}), 2);
  CHECK(chooseAR(fromEnv, 1000).algo == Algo::kOneshotLL);
  CHECK(chooseAR(fromEnv, 1001).algo != Algo::kOneshotLL);
  CHECK(chooseAR(makeSelector(forced("twoshot"), 4), 8).algo == Algo::kTwoshot);
}

TEST(selector_twoshot_geometry_fits_staging) {
  Settings s = forced("twoshot");
  for (int n : {2, 3, 4, 5, 8}) {
    Selector sel = makeSelector(s, n);
    for (size_t bytes : {size_t(2), size_t(4096), size_t(1) << 20, size_t(64) << 20, size_t(1) << 30,
                         size_t(3) << 30}) {
      AlgoChoice c = chooseAR(sel, bytes);
      CHECK(c.algo == Algo::kTwoshot);
      CHECK(c.ctas >= 1 && c.ctas <= kMaxCtas);
      CHECK(c.slotBytes % 256 == 0 && c.slotBytes > 0);
      CHECK(c.teams >= 1 && c.teams <= kMaxTeamsPerBlock && c.threads % (32 * c.teams) == 0);
      CHECK_MSG(static_cast<int64_t>(c.slotBytes) * c.ctas * c.teams <= s.stagingBytes, "n=%d bytes=%zu", n, bytes);
      if (bytes >= (size_t(64) << 20)) CHECK(c.ctas <= 32);  // the large-message CTA budget
    }
  }
}

// Staging that holds fewer minimum slots than the table's pipelines: teams go first, then blocks;
// slots never shrink below the minimum unless one slot does not fit. (The reproduced bug: at
// YALI_STAGING_BYTES=65536, 16M fp32 elements at 2 ranks ran 64 pipelines of 8 KB slots in 64 KB
// of staging and came out 65 % wrong.)
TEST(selector_small_staging_takes_fewer_blocks) {
  for (const char* staging : {"65536", "100000"}) {
    const Settings s = settingsWith({{"YALI_STAGING_BYTES", staging}});
    const size_t minSlot = static_cast<size_t>(builtinTuning(9, 2).twoshotMinSlotBytes);
    const size_t fit = static_cast<size_t>(s.stagingBytes) / minSlot;  // 8 and 12
    Selector sel = makeSelector(s, 2);
    for (size_t bytes : {size_t(64) << 20, size_t(16) << 20, size_t(1) << 30}) {
      const AlgoChoice c = chooseAR(sel, bytes);
      std::string why;
      CHECK_MSG(choiceFits(c, bytes, sel.limits(), &why), "%s", why.c_str());
      CHECK_EQ(c.teams, 1);
      CHECK_EQ(c.ctas, fit);
      CHECK_EQ(c.slotBytes, minSlot);
    }
  }
  // A minimum slot larger than all of staging: one pipeline takes all of it.
  Settings s = defaultSettings();
  s.stagingBytes = 64 << 10;
  TuningEntry big = builtinTuning(9, 4);
  big.twoshotMinSlotBytes = 100000;  // not a 256-multiple either
  big.twoshotMaxSlotBytes = 200000;
  s.tuningText = formatTuningEntry(big);
  const AlgoChoice one = chooseAR(makeSelector(s, 4), size_t(1) << 30);
  CHECK_EQ(one.ctas, 1);
  CHECK_EQ(one.teams, 1);
  CHECK_EQ(one.slotBytes, size_t(64) << 10);
  // Odd slot bounds in a tuning file become 256-byte multiples.
  s = forced("twoshot");
  big.twoshotMinSlotBytes = 300;
  big.twoshotMaxSlotBytes = 1000;
  s.tuningText = formatTuningEntry(big);
  for (size_t bytes : {size_t(4096), size_t(1) << 20, size_t(1) << 30}) {
    const AlgoChoice c = chooseAR(makeSelector(s, 4), bytes);
    CHECK_MSG(c.slotBytes % 256 == 0 && c.slotBytes >= 512 && c.slotBytes <= 768, "%zu", c.slotBytes);
  }
}

// Each algorithm's threads are clamped to its own launch limit (SelectorLimits::maxThreads), in
// whole warps; limits the kernels cannot run with are refused.
TEST(selector_clamps_threads_to_launchable) {
  Settings s = forced("twoshot");
  Selector sel;
  std::string err;
  SelectorLimits limits = limitsFor(s, 4);
  limits.maxThreads[idx(Algo::kTwoshot)] = 256;
  REQUIRE(sel.init(s, limits, &err));
  CHECK(chooseAR(sel, size_t(1) << 30).threads <= 256);
  // A limit that is not whole warps is rounded down to them.
  limits.maxThreads[idx(Algo::kTwoshot)] = 200;
  REQUIRE(sel.init(s, limits, &err));
  CHECK_EQ(chooseAR(sel, size_t(1) << 30).threads, 192);
  // Every algorithm, forced (4 KB fits every buffer; registered for the *_direct ones): its own
  // limit applies, nobody else's.
  for (int a = 0; a < kNumAlgos; ++a) {
    const AlgorithmDesc& row = algorithm(static_cast<Algo>(a));
    const Settings f = forced(row.name);
    SelectorLimits own = limitsFor(f, 4);
    own.maxThreads[a] = 200;
    REQUIRE(sel.init(f, own, &err));
    AlgoChoice c = sel.choose(row.collective, 4096, true, true);
    CHECK_MSG(c.algo == row.id, "forced %s gave %s", row.name, algoName(c.algo));
    if (row.family == Family::kCopyEngine) {  // no kernel: no blocks, no threads
      CHECK_MSG(c.ctas == 0 && c.threads == 0, "%s: %d blocks of %d threads", row.name, c.ctas, c.threads);
      continue;
    }
    CHECK_MSG(c.threads == 192, "%s: %d threads under a limit of 200", row.name, c.threads);
    for (int b = 0; b < kNumAlgos; ++b) own.maxThreads[b] = b == a ? 1024 : 32;
    REQUIRE(sel.init(f, own, &err));
    c = sel.choose(row.collective, 4096, true, true);
    CHECK_MSG(c.threads == 512, "%s: %d threads when only the other algorithms are limited", row.name, c.threads);
  }
  // Limits the kernels cannot run with are refused.
  for (int a = 0; a < kNumAlgos; ++a) {
    limits = limitsFor(s, 4);
    limits.maxThreads[a] = 16;
    CHECK_MSG(!sel.init(s, limits, &err), "a %s limit of 16 threads was accepted", algoName(static_cast<Algo>(a)));
  }
  limits = limitsFor(s, 4);
  limits.stagingBytes = 128;
  CHECK(!sel.init(s, limits, &err));
  for (int n : {0, kMaxRanks + 1}) {
    limits = limitsFor(s, n);
    CHECK(!sel.init(s, limits, &err));
  }
}

TEST(selector_max_ctas_cap) {
  const Settings s = settingsWith({{"YALI_MAX_CTAS", "4"}});
  CHECK_EQ(s.maxCtas, 4);
  Selector sel = makeSelector(s, 4);
  CHECK(chooseAR(sel, size_t(1) << 30).ctas <= 4);
  CHECK(chooseAR(sel, 256 << 10).ctas <= 4);
  for (int c = 0; c < kNumCollectives; ++c)
    for (size_t bytes : {size_t(16), size_t(256) << 10, size_t(16) << 20, size_t(1) << 30})
      for (bool registered : {false, true})
        CHECK_MSG(sel.choose(collectiveAt(c), bytes, registered).ctas <= 4, "%s %zu bytes",
                  collectiveName(collectiveAt(c)), bytes);
}

TEST(selector_limit_blocks_only_lowers) {
  // Ranks sharing a GPU: every algorithm's blocks at or under the cap; a cap above the table's
  // values changes nothing.
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const Selector before = sel;
    sel.limitBlocks(1000);
    for (int c = 0; c < kNumCollectives; ++c)
      for (size_t bytes = 4 << 10; bytes <= (size_t(1) << 30); bytes *= 4)
        for (bool registered : {false, true})
          CHECK_EQ(sel.choose(collectiveAt(c), bytes, registered).ctas,
                   before.choose(collectiveAt(c), bytes, registered).ctas);
    sel.limitBlocks(8);
    for (int c = 0; c < kNumCollectives; ++c) {
      for (size_t bytes = 4 << 10; bytes <= (size_t(1) << 30); bytes *= 4) {
        for (bool registered : {false, true}) {
          const AlgoChoice ch = sel.choose(collectiveAt(c), bytes, registered);
          CHECK_MSG(ch.ctas >= 1 && ch.ctas <= 8, "n=%d %s bytes=%zu: %d blocks", n, collectiveName(collectiveAt(c)),
                    bytes, ch.ctas);
        }
      }
    }
    sel.limitBlocks(0);  // never below 1
    CHECK_EQ(chooseAR(sel, size_t(1) << 30).ctas, 1);
  }
  checkSettingRejected("YALI_ALLOW_SHARED_GPU", "2");
  CHECK(settingsWith({{"YALI_ALLOW_SHARED_GPU", "1"}}).allowSharedGpu);
  CHECK(!defaultSettings().allowSharedGpu);
}

TEST(selector_frugal_blocks_for_large_messages) {
  // The budget: at most 32 blocks from 64 MB up by default; more below it.
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const TuningEntry& e = sel.entry();
    CHECK(e.frugalMinBytes == (int64_t(64) << 20));
    CHECK(chooseAR(sel, size_t(64) << 20).ctas <= 32);
    CHECK(chooseAR(sel, size_t(1) << 30).ctas <= 32);
    CHECK(chooseAR(sel, size_t(16) << 20).ctas == e.twoshotMaxCtas);
    CHECK(e.twoshotMaxCtas > 32);
    // Every block's slot still fits the staging area.
    for (size_t bytes : {size_t(4) << 20, size_t(16) << 20, size_t(1) << 30}) {
      const AlgoChoice c = chooseAR(sel, bytes);
      CHECK(static_cast<size_t>(c.ctas) * c.teams * c.slotBytes <= static_cast<size_t>(s.stagingBytes));
    }
  }
  // YALI_MAX_CTAS replaces both two-shot caps, with one pipeline per block.
  s.maxCtas = 64;
  CHECK(chooseAR(makeSelector(s, 2), size_t(1) << 30).ctas == 64);
  CHECK(chooseAR(makeSelector(s, 2), size_t(1) << 30).teams == 1);
}

TEST(selector_teams_in_frugal_range) {
  // Two teams per block from frugal_min up at n = 2 and 4 (measured), one below it and at n = 8.
  Settings s = defaultSettings();
  for (int n : {2, 4}) {
    Selector sel = makeSelector(s, n);
    const AlgoChoice big = chooseAR(sel, size_t(1) << 30);
    CHECK_EQ(big.teams, 2);
    CHECK_EQ(big.ctas, 32);
    CHECK_EQ(big.slotBytes, size_t(64) << 10);  // 64 pipelines in 4 MB of staging
    CHECK_EQ(chooseAR(sel, size_t(64) << 20).teams, 2);
    CHECK_EQ(chooseAR(sel, (size_t(64) << 20) - 256).teams, 1);
  }
  CHECK_EQ(chooseAR(makeSelector(s, 8), size_t(1) << 30).teams, 1);
  // A tuning line may set it.
  std::vector<TuningEntry> parsed;
  std::string err;
  REQUIRE(parseTuningText(formatTuningEntry(builtinTuning(9, 2)) + " frugal_min=1 frugal_ctas=3 frugal_teams=2",
                          &parsed, &err));
  CHECK_EQ(parsed[0].frugalTeams, 2);
  CHECK(!parseTuningText(formatTuningEntry(builtinTuning(9, 2)) + " frugal_teams=3", &parsed, &err));
  // The GPU suite's teams tuning (tests/gpu/teams_tuning.txt) parses and gives every size teams.
  std::ifstream f(YALI_TEAMS_TUNING_PATH);
  REQUIRE(f.good());
  std::stringstream text;
  text << f.rdbuf();
  parsed.clear();
  REQUIRE(parseTuningText(text.str(), &parsed, &err));
  CHECK_EQ(parsed.size(), size_t(4));
  for (const TuningEntry& t : parsed) CHECK(t.frugalTeams == 2 && t.frugalMinBytes == 1);
  // Under it (n = 2: 3 blocks, 256-byte minimum slots), teams need 6 min-size slots: 3 KB.
  s = settingsWith({{"YALI_TUNING_FILE", YALI_TEAMS_TUNING_PATH}, {"YALI_ALGO", "twoshot_push"}});
  Selector small = makeSelector(s, 2);
  CHECK_EQ(chooseAR(small, 3072).teams, 2);
  CHECK_EQ(chooseAR(small, 3072).ctas, 3);
  CHECK_EQ(chooseAR(small, 3072 - 256).teams, 1);
  // The staged exchanges never run teams, even there.
  for (int c = 1; c < kNumCollectives; ++c)
    CHECK_EQ(small.choose(collectiveAt(c), size_t(1) << 30, false).teams, 1);
}

// twoshot_direct needs the output registered, from YALI_TWOSHOT_DIRECT_MIN_BYTES (or the table's
// twoshot_direct_min) up, with two-shot's geometry (the frugal caps included); forced on an output
// that is not registered, the call gets the automatic choice.
TEST(selector_twoshot_direct_for_registered_outputs) {
  Settings s = defaultSettings();
  for (int n : {2, 4}) {
    const Selector sel = makeSelector(s, n);
    const size_t min = static_cast<size_t>(builtinTuning(9, n).thresholds[kTD]);
    CHECK(min > 0);
    const AlgoChoice td = chooseAR(sel, size_t(1) << 30, true);
    const AlgoChoice push = chooseAR(sel, size_t(1) << 30, false);
    CHECK(td.algo == Algo::kTwoshotDirect);
    CHECK(push.algo == Algo::kTwoshotPush);
    CHECK_EQ(td.ctas, push.ctas);
    CHECK_EQ(td.teams, push.teams);
    CHECK_EQ(td.slotBytes, push.slotBytes);
    CHECK_EQ(td.ctas, builtinTuning(9, n).frugalMaxCtas);
    CHECK_EQ(chooseAR(sel, min, true).ctas, builtinTuning(9, n).twoshotMaxCtas);
    CHECK(chooseAR(sel, min, true).algo == Algo::kTwoshotDirect);
    CHECK(chooseAR(sel, min - 16, true).algo != Algo::kTwoshotDirect);
    CHECK(chooseAR(sel, min, false).algo != Algo::kTwoshotDirect);
    CHECK(chooseAR(sel, SIZE_MAX, true).algo == Algo::kTwoshotDirect);
  }
  CHECK_EQ(builtinTuning(9, 8).thresholds[kTD], 0);  // not measured at n = 8: off
  CHECK(chooseAR(makeSelector(s, 8), size_t(1) << 30, true).algo != Algo::kTwoshotDirect);
  s.thresholds[kTD] = kThresholdAlways;
  CHECK(chooseAR(makeSelector(s, 2), 16, true).algo == Algo::kTwoshotDirect);  // before LL
  CHECK(chooseAR(makeSelector(s, 2), 16, false).algo == Algo::kOneshotLL);
  s.thresholds[kTD] = kThresholdDisabled;
  CHECK(chooseAR(makeSelector(s, 2), size_t(1) << 30, true).algo == Algo::kTwoshotPush);
  s.maxCtas = 8;
  s.thresholds[kTD] = kThresholdTable;
  CHECK_EQ(chooseAR(makeSelector(s, 2), size_t(1) << 30, true).ctas, 8);
  const Settings f = forced("twoshot_direct");
  CHECK(chooseAR(makeSelector(f, 2), 16, true).algo == Algo::kTwoshotDirect);
  CHECK(chooseAR(makeSelector(f, 2), 16, false).algo == Algo::kOneshotLL);
  CHECK(chooseAR(makeSelector(f, 2), size_t(1) << 30, false).algo == Algo::kTwoshotPush);
  CHECK(chooseAR(makeSelector(forced("twoshot"), 2), size_t(1) << 30, true).algo == Algo::kTwoshot);
}

// The AllReduce `direct` algorithm was removed (never ahead of the staged ones): YALI_ALGO=direct
// and a tuning file's direct_min are refused, each with a message that says so, and nothing
// documents YALI_DIRECT_MIN_BYTES any more.
TEST(removed_direct_algorithm_is_refused) {
  Algo a;
  CHECK(!algoFromName("direct", &a));
  const std::string err = checkSettingRejected("YALI_ALGO", "direct");
  CHECK_MSG(err.find("'direct' is not an algorithm") != std::string::npos, "%s", err.c_str());
  CHECK_MSG(err.find("twoshot_direct") != std::string::npos, "the message lists no algorithm: %s", err.c_str());
  checkTuningRefused(formatTuningEntry(builtinTuning(9, 2)) + " direct_min=1048576",
                     {"line 1", "'direct_min'", "direct algorithm was removed", "delete the key"});
  checkTuningRefused(formatTuningEntry(builtinTuning(9, 2)) + " direct_min=0", {"direct algorithm was removed"});
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  for (int i = 0; i < count; ++i) CHECK(std::string(docs[i].name) != "YALI_DIRECT_MIN_BYTES");
  // A stale variable in the environment steers nothing.
  CHECK_EQ(settingsDigest(settingsWith({{"YALI_DIRECT_MIN_BYTES", "1"}})), settingsDigest(defaultSettings()));
}

TEST(algo_names_round_trip) {
  for (int i = 0; i < kNumAlgos; ++i) {
    Algo a;
    CHECK(algoFromName(algoName(static_cast<Algo>(i)), &a));
    CHECK_EQ(static_cast<int>(a), i);
    CHECK(algoNameList().find(algoName(a)) != std::string::npos);
  }
  Algo a;
  CHECK(!algoFromName("threeshot", &a));
  CHECK(!algoFromName("copy_engine", &a));  // removed
  CHECK(!algoFromName("", &a));
  CHECK(!algoFromName("auto", &a));
  checkSettingRejected("YALI_ALGO", "copy_engine");
  checkSettingRejected("YALI_TWOSHOT_PUSH_MIN_BYTES", "-3");
  checkSettingRejected("YALI_TWOSHOT_DIRECT_MIN_BYTES", "x");
}

// ---- Tuning files and the built-in table ------------------------------------------------------------

TEST(tuning_file_round_trip_and_errors) {
  TuningEntry e = builtinTuning(9, 4);
  e.thresholds[kLL] = 12345;
  std::vector<TuningEntry> parsed;
  std::string err;
  CHECK(parseTuningText("# comment\n" + formatTuningEntry(e) + "\n\n", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].thresholds[kLL], 12345);
  CHECK_EQ(parsed[0].nranks, 4);
  parsed.clear();
  checkTuningRefused("sm=9 nranks=4", {"line 1", "expected the 9 keys", "found 2"});
  checkTuningRefused("sm=9 nranks=4 bogus=1", {"unknown key 'bogus'"});
  checkTuningRefused(formatTuningEntry(e) + " extra", {"'extra' is not key=value"});
  checkTuningRefused(formatTuningEntry(e) + " ll_ctas=x", {"'ll_ctas=x' has no integer value"});
  checkTuningRefused("# fine\n" + formatTuningEntry(e) + " ll_threads=100", {"line 2"});
  // The optional keys: a nine-key line (what `yali-perf --tune` writes) takes the built-in values.
  parsed.clear();
  CHECK(parseTuningText("sm=9 nranks=4 ll_max=1 ll_threads=512 ll_ctas=8 twoshot_threads=512 "
                        "twoshot_ctas=8 twoshot_min_slot=4096 twoshot_max_slot=65536", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].thresholds[kPush], builtinTuning(9, 4).thresholds[kPush]);
  CHECK_EQ(parsed[0].frugalMinBytes, builtinTuning(9, 4).frugalMinBytes);
  CHECK_EQ(parsed[0].frugalMaxCtas, builtinTuning(9, 4).frugalMaxCtas);
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " frugal_min=1048576 frugal_ctas=16", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].frugalMinBytes, 1048576);
  CHECK_EQ(parsed[0].frugalMaxCtas, 16);
  checkTuningRefused(formatTuningEntry(e) + " frugal_ctas=65", {"'frugal_ctas=65' is out of range"});
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " oneshot_pull_max=2097152", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].thresholds[kPull], 2097152);
  checkTuningRefused(formatTuningEntry(e) + " oneshot_pull_max=-1", {"'oneshot_pull_max=-1' is out of range"});
  // The keys of removed algorithms are refused, with the reason.
  for (const char* key : {" ce_min=33554432", " ce_ctas=16", " ce_min=0"})
    checkTuningRefused(formatTuningEntry(e) + key, {"copy_engine was removed", "delete the key"});
  checkTuningRefused(formatTuningEntry(e) + " direct_min=0", {"'direct_min'", "direct algorithm was removed"});
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " twoshot_direct_min=1048576", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].thresholds[kTD], 1048576);

  const std::string path = writeTempFile(formatTuningEntry(e) + "\n");
  Settings s = settingsWithTuningFile(path);
  Selector sel = makeSelector(s, 4);
  CHECK_EQ(sel.entry().thresholds[kLL], 12345);
  CHECK(chooseAR(sel, 12345).algo == Algo::kOneshotLL);
  CHECK(chooseAR(sel, 12346).algo != Algo::kOneshotLL);
  unlink(path.c_str());
  // A bad table is the selector's error, naming the variable and the file.
  s.tuningText = formatTuningEntry(e) + " ce_min=1\n";
  std::string initErr;
  CHECK(!sel.init(s, limitsFor(s, 4), &initErr));
  CHECK_MSG(initErr.find("YALI_TUNING_FILE='" + path + "'") != std::string::npos, "%s", initErr.c_str());
  // A line for another world size or architecture leaves the built-in entry in place.
  TuningEntry other = builtinTuning(9, 2);
  other.thresholds[kLL] = 777;
  s.tuningText = formatTuningEntry(other) + "\n";
  REQUIRE(sel.init(s, limitsFor(s, 4), &initErr));
  CHECK_EQ(sel.entry().thresholds[kLL], builtinTuning(9, 4).thresholds[kLL]);
  other.smMajor = 10;
  other.nranks = 4;
  s.tuningText = formatTuningEntry(other) + "\n";
  REQUIRE(sel.init(s, limitsFor(s, 4), &initErr));
  CHECK_EQ(sel.entry().thresholds[kLL], builtinTuning(9, 4).thresholds[kLL]);
}

// Every bounded row's tuning key (registry.h: tuningKey) is a tuning-file key: it sets that row's
// threshold and nothing else; one left out takes the built-in value; negative values, a fallback's
// made-up key and any key given twice are refused.
TEST(tuning_keys_from_registry) {
  const TuningEntry base = builtinTuning(9, 4);
  const std::string line = formatTuningEntry(base);
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].bound == Bound::kFallback) {
      CHECK(rows[i].tuningKey == nullptr);
      for (const char* suffix : {"_max", "_min"})
        checkTuningRefused(line + " " + rows[i].name + suffix + "=1", {"unknown key"});
      continue;
    }
    REQUIRE(rows[i].tuningKey != nullptr);
    const std::string key = rows[i].tuningKey;
    if (i == kLL) {  // the mandatory one, already in the line
      checkTuningRefused(line + " ll_max=1", {"'ll_max' appears twice"});
      continue;
    }
    for (int64_t v : {int64_t(0), int64_t(777), INT64_MAX}) {
      const std::vector<TuningEntry> parsed = parseOrFail(line + " " + key + "=" + std::to_string(v));
      REQUIRE(parsed.size() == 1);
      for (int j = 0; j < count; ++j)
        CHECK_MSG(parsed[0].thresholds[j] == (j == i ? v : base.thresholds[j]), "%s=%lld: %s's threshold is %lld",
                  key.c_str(), static_cast<long long>(v), rows[j].name, static_cast<long long>(parsed[0].thresholds[j]));
    }
    checkTuningRefused(line + " " + key + "=-1", {"'" + key + "=-1' is out of range"});
    checkTuningRefused(line + " " + key + "=1 " + key + "=2", {"'" + key + "' appears twice"});
  }
  for (const char* key : {"sm", "nranks", "ll_threads", "twoshot_max_slot"})
    checkTuningRefused(line + " " + key + "=" + (std::string(key) == "sm" ? "9" : "4096"), {"'" + std::string(key) + "' appears twice"});
  checkTuningRefused(line + " frugal_min=1 frugal_min=1", {"'frugal_min' appears twice"});
  // A line giving only the mandatory keys takes every optional one from the built-in table, at
  // every world size.
  for (int n = 2; n <= kMaxRanks; ++n) {
    const TuningEntry builtin = builtinTuning(9, n);
    const std::vector<TuningEntry> parsed = parseOrFail(formatTuningEntry(builtin));
    REQUIRE(parsed.size() == 1);
    CHECK_MSG(describe(parsed[0]) == describe(builtin), "n=%d: '%s' against '%s'", n, describe(parsed[0]).c_str(),
              describe(builtin).c_str());
  }
  // A new exchange key in a tuning file steers that collective alone.
  const std::string path = writeTempFile(formatTuningEntry(builtinTuning(9, 2)) + " allgather_ll_max=4096\n");
  const Selector sel = makeSelector(settingsWithTuningFile(path), 2);
  unlink(path.c_str());
  CHECK_EQ(sel.entry().thresholds[idx(Algo::kAllGatherLL)], 4096);
  CHECK(sel.choose(Collective::kAllGather, 4096, false).algo == Algo::kAllGatherLL);
  CHECK(sel.choose(Collective::kAllGather, 4097, false).algo == Algo::kAllGatherStaged);
  const int64_t bcastMax = builtinTuning(9, 2).thresholds[idx(Algo::kBroadcastLL)];
  CHECK(bcastMax > 4097);
  CHECK(sel.choose(Collective::kBroadcast, 4097, false).algo == Algo::kBroadcastLL);
}

// The built-in table (text in the tuning-file format, parsed once) gives every key at every world
// size: builtinTuning(9, n) for n = 2..8 round-trips through parseTuningText with every key
// written out, takes the line of the largest table size at or under n, and every bounded row has a
// threshold (the exchanges' all set, but those off by default).
TEST(builtin_tuning_table_is_consistent) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  std::map<int, TuningEntry> byN;
  for (int n = 2; n <= kMaxRanks; ++n) {
    const TuningEntry e = builtinTuning(9, n);
    byN[n] = e;
    CHECK_EQ(e.smMajor, 9);
    CHECK_EQ(e.nranks, n);
    const std::string full = describe(e);
    const std::vector<TuningEntry> parsed = parseOrFail(full);
    REQUIRE(parsed.size() == 1);
    CHECK_MSG(describe(parsed[0]) == full, "n=%d: '%s' parses as '%s'", n, full.c_str(), describe(parsed[0]).c_str());
    CHECK(e.llThreads % 32 == 0 && e.twoshotThreads % 32 == 0);
    CHECK(e.twoshotMinSlotBytes <= e.twoshotMaxSlotBytes);
    CHECK(e.frugalMaxCtas <= e.twoshotMaxCtas);
    for (int i = 0; i < count; ++i) {
      if (rows[i].bound == Bound::kFallback) {
        CHECK_MSG(e.thresholds[i] == 0, "n=%d: the fallback %s has a threshold", n, rows[i].name);
      } else if (rows[i].family == Family::kCopyEngine || rows[i].family == Family::kExchangePull ||
                 (rows[i].family == Family::kTwoshot && rows[i].collective != Collective::kAllReduce)) {
        // Off by default: the copy-engine rows (the caller weighs SMs against speed), the rooted
        // two-shot rows and the pull exchange (not measured on several GPUs yet).
        CHECK_MSG(e.thresholds[i] == 0, "n=%d: %s is on by default", n, rows[i].name);
      } else if (rows[i].collective != Collective::kAllReduce) {
        CHECK_MSG(e.thresholds[i] > 0, "n=%d: %s's threshold is %lld", n, rows[i].name,
                  static_cast<long long>(e.thresholds[i]));
      }
    }
    // Other architectures take Hopper's figures.
    TuningEntry other = builtinTuning(10, n);
    CHECK_EQ(other.smMajor, 10);
    other.smMajor = 9;
    CHECK(describe(other) == full);
  }
  // Four lines (2, 3, 4 and 8 ranks), each world size taking the nearest one below it: a line that
  // did not parse would show as two equal neighbours. One-shot LL's crossover falls with n. The
  // 3-rank line is the 2-rank one but for the exchanges' LL thresholds (measured at 2 only).
  auto sameLine = [&](int a, int b) {
    TuningEntry x = byN[a];
    x.nranks = b;
    return describe(x) == describe(byN[b]);
  };
  CHECK(!sameLine(2, 3));
  TuningEntry three = byN[3];
  for (int i = 0; i < count; ++i)
    if (rows[i].family == Family::kExchangeLL) three.thresholds[i] = byN[2].thresholds[i];
  three.nranks = 2;
  CHECK(describe(three) == describe(byN[2]));
  for (int n : {5, 6, 7}) CHECK_MSG(sameLine(4, n), "n=%d", n);
  CHECK(!sameLine(2, 4));
  CHECK(!sameLine(4, 8));
  CHECK(byN[2].thresholds[kLL] > byN[4].thresholds[kLL]);
  CHECK(byN[4].thresholds[kLL] > byN[8].thresholds[kLL]);
  CHECK(describe(builtinTuning(9, 1)).find("nranks=1 ") != std::string::npos);  // below the table: its first line
}

// ---- README ------------------------------------------------------------------------------------------

// README.md holds algorithmsMarkdownTable()'s text verbatim (generated from the registry's rows:
// paste it when a row changes).
TEST(readme_algorithm_table_is_generated) {
  std::ifstream f(YALI_README_PATH);
  REQUIRE(f.good());
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string table = algorithmsMarkdownTable();
  if (buf.str().find(table) == std::string::npos) {
    std::printf("    README.md does not contain algorithmsMarkdownTable()'s text; replace its algorithm table "
                "with:\n%s", table.c_str());
    CHECK_MSG(false, "README.md's algorithm table is not the generated one (printed above)");
  }
}

// README.md holds settingsMarkdownTable()'s text verbatim (generated from settingDocs: paste it when
// a setting changes), and names no YALI_* variable that env.cc does not declare.
TEST(readme_environment_table_is_generated) {
  std::ifstream f(YALI_README_PATH);
  REQUIRE(f.good());
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string readme = buf.str();
  const std::string table = settingsMarkdownTable();
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  // The table itself: a header, a rule and one three-cell row per setting, none broken by a '|' or
  // a newline inside a cell.
  std::istringstream lines(table);
  std::string line;
  int rowsSeen = 0;
  while (std::getline(lines, line)) {
    CHECK_MSG(std::count(line.begin(), line.end(), '|') == 4, "a table row with other than 3 cells: %s", line.c_str());
    ++rowsSeen;
  }
  CHECK_EQ(rowsSeen, count + 2);
  std::set<std::string> declared;
  for (int i = 0; i < count; ++i) {
    CHECK_MSG(declared.insert(docs[i].name).second, "settingDocs lists %s twice", docs[i].name);
    CHECK_MSG(table.find(std::string("| `") + docs[i].name + "` |") != std::string::npos, "%s", docs[i].name);
  }
  if (readme.find(table) == std::string::npos) {
    std::printf("    README.md does not contain settingsMarkdownTable()'s text; replace its environment table "
                "with these %d lines:\n%s", count + 2, table.c_str());
    CHECK_MSG(false, "README.md's environment table is not the generated one (printed above)");
  }
  std::regex var("`(YALI_[A-Z0-9_]+)`");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), var); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (name == "YALI_LIBRARY" || name.rfind("YALI_PERF_", 0) == 0 || name == "YALI_REQUIRE_LIB") continue;  // tools' variables
    if (name.rfind("YALI_NCCL_", 0) == 0 || name == "YALI_NODE_ID") continue;  // libyali-nccl's (docs/NCCL_ABI.md)
    CHECK_MSG(declared.count(name) == 1, "README.md names %s, which env.cc does not declare", name.c_str());
  }
}

// ---- Every choice fits -------------------------------------------------------------------------------

namespace {

// Random values for the selector fuzz test below, from a fixed seed.
struct FuzzRandom {
  std::mt19937_64 rng{20261123};
  uint64_t below(uint64_t n) { return rng() % n; }
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  bool oneIn(int n) { return below(static_cast<uint64_t>(n)) == 0; }
  // Log-uniform in [0, 2^maxLog2): small and large sizes alike.
  uint64_t bytesBelow(int maxLog2) {
    const int bits = static_cast<int>(below(static_cast<uint64_t>(maxLog2) + 1));
    return bits == 0 ? 0 : rng() >> (64 - bits);
  }
  // Every form a threshold setting takes: -2, -1, 0 and bytes (up to the largest it accepts).
  int64_t threshold() {
    switch (below(6)) {
      case 0: return kThresholdTable;
      case 1: return kThresholdAlways;
      case 2: return kThresholdDisabled;
      case 3: return INT64_MAX;
      default: return std::max<int64_t>(1, static_cast<int64_t>(bytesBelow(40)));
    }
  }
  int threads() { return static_cast<int>(32 * between(2, 32)); }  // what parseTuningText accepts
};

// A tuning line that parseTuningText accepts, with each optional key (every bounded row's
// threshold included) present or not.
std::string randomTuningLine(FuzzRandom& r, int nranks) {
  TuningEntry e = builtinTuning(9, nranks);
  e.thresholds[kLL] = r.oneIn(8) ? INT64_MAX : static_cast<int64_t>(r.bytesBelow(40));
  e.llThreads = r.threads();
  e.llMaxCtas = static_cast<int>(r.between(1, kMaxCtas));
  e.twoshotThreads = r.threads();
  e.twoshotMaxCtas = static_cast<int>(r.between(1, kMaxCtas));
  // Any slot bounds the parser takes, not only 256-byte multiples, up to ones no staging holds.
  e.twoshotMinSlotBytes = r.oneIn(16) ? INT64_MAX / 2 : r.between(256, 1 << 20);
  e.twoshotMaxSlotBytes =
      r.oneIn(8) ? INT64_MAX : e.twoshotMinSlotBytes + static_cast<int64_t>(r.bytesBelow(22));
  std::string line = formatTuningEntry(e);
  auto maybe = [&](const char* key, int64_t value) {
    if (r.oneIn(2)) line += std::string(" ") + key + "=" + std::to_string(value);
  };
  maybe("frugal_min", r.oneIn(4) ? 1 : static_cast<int64_t>(r.bytesBelow(40)));
  maybe("frugal_ctas", r.between(1, kMaxCtas));
  maybe("frugal_teams", r.between(1, kMaxTeamsPerBlock));
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i) {
    if (rows[i].tuningKey == nullptr || i == kLL) continue;
    // Bounds from above near the buffers' sizes as often as anywhere.
    const int64_t v = r.oneIn(8) ? INT64_MAX
                                 : static_cast<int64_t>(r.bytesBelow(rows[i].bound == Bound::kUpTo && r.oneIn(2) ? 26 : 40));
    maybe(rows[i].tuningKey, v);
  }
  return line;
}

// Sizes at and around every boundary the selector compares with (thresholds, buffers, the frugal
// size as a message and as nranks pieces), plus the extremes.
std::vector<size_t> edgeSizes(const Settings& s, const TuningEntry& e, int nranks) {
  std::set<size_t> sizes = {0, 1, 16, size_t(INT64_MAX), size_t(INT64_MAX) + 1, SIZE_MAX - 1, SIZE_MAX};
  std::vector<int64_t> bounds = {s.llBufferBytes, s.stagingBytes, s.pullBufferBytes, e.frugalMinBytes,
                                 e.frugalMinBytes / nranks, e.twoshotMinSlotBytes, e.twoshotMaxSlotBytes};
  for (int i = 0; i < kNumAlgos; ++i) {
    bounds.push_back(s.thresholds[i]);
    bounds.push_back(e.thresholds[i]);
  }
  for (int64_t t : bounds) {
    if (t <= 0) continue;
    for (int64_t d : {-1, 0, 1}) sizes.insert(static_cast<size_t>(t) + static_cast<size_t>(d));
  }
  return std::vector<size_t>(sizes.begin(), sizes.end());
}

}  // namespace

// Every choice of every collective fits the window and the kernels (choiceFits), takes an
// algorithm of that collective, and takes a *_direct one only for a registered output, for random
// settings as loadSettings parses them (YALI_ALGO with any subset of the collectives forced, in any
// order, or auto; every generated threshold variable in every form; YALI_MAX_CTAS 0..64; buffer
// sizes from their minimums, staging 64 KB..16 MB and not only powers of two), random tuning lines
// that parseTuningText accepts (every exchange key included), per-algorithm launch limits, block caps
// of ranks that share a GPU, world sizes 2..8, registered outputs or not, and sizes from 0 to 2^40
// plus every boundary +-1 and 2^63 - 1, 2^63, SIZE_MAX (AllReduce: the message; the exchanges: one
// piece). On the selector before choiceFits existed it failed in 47 % of its choices, the first in
// its first combination: 2^63 bytes compared as negative and took oneshot_ll. With the built-in
// table, iteration 9 was the bug report's overflow: 2 ranks, YALI_STAGING_BYTES=100000,
// YALI_MAX_CTAS=31, 26907391 bytes: twoshot_push with 31 pipelines of 8192-byte slots in 100096
// bytes of staging. Tuning files added slots of any size (twoshot_min_slot=933: 933-byte slots)
// and minimum slots larger than all of staging.
TEST(selector_fuzz_every_choice_fits) {
  FuzzRandom r;
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  std::vector<std::string> thresholdVars;
  for (int i = 0; i < count; ++i)
    if (rows[i].bound != Bound::kFallback) thresholdVars.push_back(thresholdSettingName(rows[i]));
  const int kLimitThreads[] = {1024, 1024, 512, 512, 1000, 256, 96, 64, 32};
  int reported = 0;
  size_t choices = 0;
  std::vector<size_t> byAlgo(kNumAlgos, 0);
  for (int iteration = 0; iteration < 10000; ++iteration) {
    std::vector<std::pair<std::string, std::string>> env;
    const uint64_t algoForm = r.below(8);  // 0: unset, 1: auto, else some collectives forced
    if (algoForm == 1) env.push_back({"YALI_ALGO", "auto"});
    if (algoForm >= 2) {
      std::vector<std::string> names;
      for (int c = 0; c < kNumCollectives; ++c) {
        if (r.oneIn(2)) continue;
        const std::vector<const AlgorithmDesc*> own = rowsOf(collectiveAt(c));
        names.push_back(own[r.below(own.size())]->name);
      }
      std::shuffle(names.begin(), names.end(), r.rng);
      std::string value;
      for (const std::string& n : names) value += (value.empty() ? "" : ",") + n;
      if (!value.empty()) env.push_back({"YALI_ALGO", value});
    }
    for (const std::string& var : thresholdVars)
      if (!r.oneIn(4)) env.push_back({var, std::to_string(r.threshold())});
    env.push_back({"YALI_MAX_CTAS", std::to_string(r.between(0, kMaxCtas))});
    const int64_t stagingChoices[] = {65536, 100000, 4 << 20, 16 << 20, r.between(65536, 16 << 20)};
    env.push_back({"YALI_STAGING_BYTES", std::to_string(stagingChoices[r.below(5)])});
    env.push_back({"YALI_LL_BUFFER_BYTES", std::to_string(r.oneIn(3) ? 4096 : r.between(4096, 16 << 20))});
    env.push_back({"YALI_PULL_BUFFER_BYTES", std::to_string(r.oneIn(4) ? 0 : r.between(0, 64 << 20))});
    Settings s;
    std::string err;
    if (!loadWithEnv(env, &s, &err)) {
      CHECK_MSG(false, "iteration %d: loadSettings refused valid settings: %s", iteration, err.c_str());
      continue;
    }
    const int nranks = static_cast<int>(r.between(2, kMaxRanks));
    // Usually a line for this world size; sometimes one for another (the built-in entry applies).
    if (!r.oneIn(4)) s.tuningText = randomTuningLine(r, r.oneIn(8) ? 2 + (nranks - 1) % 7 : nranks);
    SelectorLimits limits = limitsFor(s, nranks);
    for (int& t : limits.maxThreads) t = kLimitThreads[r.below(9)];
    Selector sel;
    if (!sel.init(s, limits, &err)) {
      CHECK_MSG(false, "init refused valid settings: %s", err.c_str());
      continue;
    }
    if (r.oneIn(3)) sel.limitBlocks(static_cast<int>(r.between(1, 40)));  // ranks sharing a GPU
    std::vector<size_t> sizes = edgeSizes(s, sel.entry(), nranks);
    for (int i = 0; i < 24; ++i) sizes.push_back(r.bytesBelow(40));
    for (size_t bytes : sizes) {
      for (int c = 0; c < kNumCollectives; ++c) {
        for (int regs = 0; regs < 4; ++regs) {
          const bool registered = regs & 1, inputRegistered = regs & 2;
          const AlgoChoice ch = sel.choose(collectiveAt(c), bytes, registered, inputRegistered);
          ++choices;
          std::string why;
          bool ok = choiceFits(ch, bytes, limits, &why);
          if (ok && algorithm(ch.algo).collective != collectiveAt(c)) {
            ok = false;
            why = std::string(algoName(ch.algo)) + " is no algorithm of " + collectiveName(collectiveAt(c));
          } else if (ok && algorithm(ch.algo).needsRegisteredRecv && !registered) {
            ok = false;
            why = std::string(algoName(ch.algo)) + " on an output that is not registered";
          } else if (ok && algorithm(ch.algo).needsRegisteredSend && !inputRegistered) {
            ok = false;
            why = std::string(algoName(ch.algo)) + " on an input that is not registered";
          } else if (ok && !sel.mayChoose(ch.algo)) {  // the call path skips lookups on its word
            ok = false;
            why = std::string(algoName(ch.algo)) + " chosen where mayChoose says never";
          }
          if (ok) {
            ++byAlgo[idx(ch.algo)];
            continue;
          }
          if (++reported <= 5) {
            std::string settings;
            for (const auto& kv : env) settings += kv.first + "=" + kv.second + " ";
            CHECK_MSG(false, "iteration %d, nranks=%d, %s %zu bytes, registered=%d, %s| tuning '%s': %s", iteration,
                      nranks, collectiveName(collectiveAt(c)), bytes, registered, settings.c_str(),
                      s.tuningText.c_str(), why.c_str());
          }
        }
      }
    }
  }
  CHECK_MSG(reported == 0, "%d of %zu choices do not fit", reported, choices);
  std::printf("    %zu choices\n", choices);
  // The fuzz reaches every algorithm (else it tests less than it says).
  for (int a = 0; a < kNumAlgos; ++a)
    CHECK_MSG(byAlgo[a] > 0, "the fuzz never chose %s", algoName(static_cast<Algo>(a)));
}

// Sizes of 2^63 bytes and more are larger than every buffer: never a one-shot or an LL exchange,
// whatever the thresholds say, even with the largest buffers a limit can describe.
TEST(selector_huge_messages_never_take_a_buffered_algorithm) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int c = 0; c < kNumCollectives; ++c) {
    std::vector<std::string> algos = {""};
    for (const AlgorithmDesc* row : rowsOf(collectiveAt(c))) algos.push_back(row->name);
    for (const std::string& algo : algos) {
      for (int64_t threshold : {kThresholdAlways, kThresholdTable, INT64_MAX}) {
        Settings s = algo.empty() ? defaultSettings() : forced(algo);
        for (int i = 0; i < count; ++i)
          if (rows[i].bound == Bound::kUpTo) s.thresholds[i] = threshold;
        SelectorLimits limits = limitsFor(s, 2);
        limits.llPayloadBytes = INT64_MAX;
        limits.pullBufferBytes = INT64_MAX;
        Selector sel;
        std::string err;
        REQUIRE(sel.init(s, limits, &err));
        for (size_t bytes : {size_t(INT64_MAX) + 1, size_t(INT64_MAX) + 2, SIZE_MAX - 1, SIZE_MAX}) {
          for (bool registered : {false, true}) {
            const AlgoChoice ch = sel.choose(collectiveAt(c), bytes, registered);
            const Family f = algorithm(ch.algo).family;
            CHECK_MSG(f != Family::kOneshotLL && f != Family::kOneshotPull && f != Family::kExchangeLL,
                      "ALGO=%s bytes=%zu: %s", algo.c_str(), bytes, algoName(ch.algo));
            std::string why;
            CHECK_MSG(choiceFits(ch, bytes, limits, &why), "%s", why.c_str());
          }
        }
        // One byte less fits the largest buffer: the comparison is exact, not merely safe.
        if (algo.empty() && threshold != kThresholdTable) {
          const AlgorithmDesc* firstUpTo = nullptr;
          for (const AlgorithmDesc* row : rowsOf(collectiveAt(c)))
            if (firstUpTo == nullptr && row->bound == Bound::kUpTo) firstUpTo = row;
          if (firstUpTo != nullptr)  // AlltoAllv has none
            CHECK_MSG(sel.choose(collectiveAt(c), size_t(INT64_MAX), false).algo == firstUpTo->id, "%s",
                      collectiveName(collectiveAt(c)));
        }
      }
    }
  }
}

// What choiceFits refuses, one invariant at a time.
TEST(choice_fits_names_each_violation) {
  const Settings s = defaultSettings();
  const SelectorLimits limits = limitsFor(s, 2);
  const size_t staging = static_cast<size_t>(s.stagingBytes);
  const size_t llBuffer = static_cast<size_t>(s.llBufferBytes);
  std::string why;
  const AlgoChoice goods[] = {
      {Algo::kTwoshotPush, 32, 512, staging / 64, 2},
      {Algo::kAllGatherStaged, 64, 512, staging / 64, 1},
      {Algo::kAlltoAllDirect, 64, 512, 0, 1},
      {Algo::kBroadcastLL, 32, 512, 0, 1},
      {Algo::kOneshotLL, 32, 1024, 0, 1},
  };
  for (const AlgoChoice& g : goods) {
    const size_t bytes = algorithm(g.algo).family == Family::kExchangeLL || g.algo == Algo::kOneshotLL ? llBuffer : size_t(1) << 30;
    CHECK_MSG(choiceFits(g, bytes, limits, &why), "%s", why.c_str());
  }
  struct Bad {
    const char* what;
    AlgoChoice choice;
    size_t bytes;
  };
  const Bad bad[] = {
      {"staging overflow", {Algo::kTwoshot, 32, 512, staging / 32, 2}, size_t(1) << 30},
      {"slot not 256-aligned", {Algo::kTwoshotDirect, 1, 512, 1000, 1}, size_t(1) << 20},
      {"zero slot", {Algo::kTwoshot, 1, 512, 0, 1}, size_t(1) << 20},
      {"no blocks", {Algo::kTwoshot, 0, 512, 8192, 1}, size_t(1) << 20},
      {"too many blocks", {Algo::kAllGatherDirect, kMaxCtas + 1, 512, 0, 1}, size_t(1) << 20},
      {"threads not warps", {Algo::kTwoshot, 1, 500, 8192, 1}, size_t(1) << 20},
      {"threads above the launch limit", {Algo::kTwoshot, 1, 1024, 8192, 1}, size_t(1) << 20},
      {"direct exchange above the launch limit", {Algo::kScatterDirect, 1, 1024, 0, 1}, size_t(1) << 20},
      {"teams of one warp", {Algo::kTwoshot, 1, 96, 8192, 2}, size_t(1) << 20},
      {"three teams", {Algo::kTwoshot, 1, 384, 8192, 3}, size_t(1) << 20},
      {"teams outside two-shot", {Algo::kOneshotPull, 1, 512, 4096, 2}, 4096},
      {"teams in a staged exchange", {Algo::kReduceScatterStaged, 1, 512, 8192, 2}, size_t(1) << 20},
      {"LL past its buffer", {Algo::kOneshotLL, 1, 512, 0, 1}, llBuffer + 1},
      {"exchange LL past its buffer", {Algo::kGatherLL, 1, 512, 0, 1}, llBuffer + 1},
      {"staged exchange overflow", {Algo::kAlltoAllStaged, 64, 512, staging / 32, 1}, size_t(1) << 30},
      {"staged exchange slot unaligned", {Algo::kReduceStaged, 1, 512, 8200, 1}, size_t(1) << 20},
      {"staged exchange zero slot", {Algo::kBroadcastStaged, 1, 512, 0, 1}, size_t(1) << 20},
      {"pull past its buffer", {Algo::kOneshotPull, 64, 512, 1 << 20, 1}, static_cast<size_t>(s.pullBufferBytes) + 16},
      {"pull runs short", {Algo::kOneshotPull, 4, 512, 1024, 1}, 4097},
      {"pull runs unaligned", {Algo::kOneshotPull, 4, 512, 1032, 1}, 4096},
      {"unknown algorithm", {static_cast<Algo>(kNumAlgos), 1, 512, 0, 1}, 16},
      {"negative algorithm", {static_cast<Algo>(-1), 1, 512, 0, 1}, 16},
  };
  for (const Bad& b : bad) {
    why.clear();
    CHECK_MSG(!choiceFits(b.choice, b.bytes, limits, &why), "%s was accepted", b.what);
    CHECK_MSG(!why.empty(), "%s: no reason given", b.what);
  }
  CHECK(!choiceFits(bad[0].choice, bad[0].bytes, limits, nullptr));  // why is optional
}

int main(int argc, char** argv) { return yali_test::runAllTests(argc, argv); }
