// Internal host logic: settings parsing, the selector and its tuning table, tuning files, unique
// ids and the socket bootstrap. Needs no GPU.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "collectives/common/device_state.h"
#include "core/bootstrap.h"
#include "core/env.h"
#include "harness.h"
#include "tuning/selector.h"

using namespace yali;

namespace {

Settings defaultSettings() {
  // Start from a clean environment so that the host's YALI_* variables cannot leak in.
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  for (int i = 0; i < count; ++i) unsetenv(docs[i].name);
  Settings s;
  std::string err;
  loadSettings(&s, &err);
  return s;
}

// loadSettings must refuse `name`=`value` with a message that names the variable; `name` is unset
// again afterwards.
void checkSettingRejected(const char* name, const char* value) {
  setenv(name, value, 1);
  Settings s;
  std::string err;
  CHECK_MSG(!loadSettings(&s, &err), "%s=%s", name, value);
  CHECK_MSG(err.find(name) != std::string::npos, "%s=%s: %s", name, value, err.c_str());
  unsetenv(name);
}

Selector makeSelector(const Settings& s, int nranks) {
  Selector sel;
  std::string err;
  SelectorLimits limits{9, nranks, s.llBufferBytes, s.stagingBytes, s.pullBufferBytes, s.ceChunkBytes,
                        1024, 512, 512};
  sel.init(s, limits, &err);
  return sel;
}

}  // namespace

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
}

TEST(selector_default_crossover) {
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const int64_t llMax = builtinTuning(9, n).oneshotLLMaxBytes;
    CHECK(sel.choose(4096, false, false).algo == Algo::kOneshotLL);
    CHECK(sel.choose(static_cast<size_t>(llMax), false, false).algo == Algo::kOneshotLL);
    CHECK(sel.choose(static_cast<size_t>(llMax) + 1, false, false).algo != Algo::kOneshotLL);
    CHECK(sel.choose(size_t(1) << 30, false, false).algo != Algo::kOneshotLL);
  }
}

TEST(selector_push_variant_threshold) {
  Settings s = defaultSettings();
  s.ceMinBytes = kThresholdDisabled;  // two-shot for every large size
  const int64_t pushMin = builtinTuning(9, 4).twoshotPushMinBytes;
  Selector table = makeSelector(s, 4);
  CHECK(table.choose(size_t(1) << 30, false, false).algo == (pushMin > 0 ? Algo::kTwoshotPush : Algo::kTwoshot));
  s.twoshotPushMinBytes = size_t(8) << 20;
  Selector explicitT = makeSelector(s, 4);
  CHECK(explicitT.choose(size_t(8) << 20, false, false).algo == Algo::kTwoshotPush);
  CHECK(explicitT.choose((size_t(8) << 20) - 16, false, false).algo == Algo::kTwoshot);
  s.twoshotPushMinBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 4).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshot);
  s.twoshotPushMinBytes = kThresholdAlways;
  CHECK(makeSelector(s, 4).choose(size_t(1) << 20, false, false).algo == Algo::kTwoshotPush);
  s.twoshotPushMinBytes = kThresholdTable;
  s.algo = "twoshot_push";
  CHECK(makeSelector(s, 4).choose(8, false, false).algo == Algo::kTwoshotPush);
}

TEST(selector_pull_variant_threshold) {
  // oneshot_pull sits between LL and two-shot, within its copy-in buffer.
  Settings s = defaultSettings();
  const int64_t llMax = builtinTuning(9, 2).oneshotLLMaxBytes;
  s.oneshotPullMaxBytes = size_t(2) << 20;
  Selector sel = makeSelector(s, 2);
  CHECK(sel.choose(static_cast<size_t>(llMax), false, false).algo == Algo::kOneshotLL);
  CHECK(sel.choose(static_cast<size_t>(llMax) + 16, false, false).algo == Algo::kOneshotPull);
  CHECK(sel.choose(size_t(2) << 20, false, false).algo == Algo::kOneshotPull);
  CHECK(sel.choose((size_t(2) << 20) + 16, false, false).algo != Algo::kOneshotPull);
  // Geometry: every block's run is a 16-byte multiple and the runs cover the message.
  for (size_t bytes : {size_t(600) << 10, (size_t(1) << 20) + 48, size_t(2) << 20}) {
    const AlgoChoice c = sel.choose(bytes, false, false);
    CHECK(c.slotBytes % 16 == 0);
    CHECK(c.ctas >= 1 && c.ctas <= kMaxCtas);
    CHECK(static_cast<size_t>(c.ctas) * c.slotBytes >= bytes);
  }
  // The built-in table: pull above LL at n = 2 up to 4 MB; at n = 4 only up to 512 KB.
  Settings d = defaultSettings();
  CHECK(makeSelector(d, 2).choose(size_t(1) << 20, false, false).algo == Algo::kOneshotPull);
  CHECK(makeSelector(d, 2).choose(size_t(8) << 20, false, false).algo == Algo::kTwoshotPush);
  CHECK(makeSelector(d, 4).choose(size_t(512) << 10, false, false).algo == Algo::kOneshotPull);
  CHECK(makeSelector(d, 4).choose(size_t(1) << 20, false, false).algo == Algo::kTwoshotPush);
  // -1: every size that fits the buffer, and no further.
  s.oneshotPullMaxBytes = kThresholdAlways;
  Selector always = makeSelector(s, 2);
  CHECK(always.choose(static_cast<size_t>(s.pullBufferBytes), false, false).algo == Algo::kOneshotPull);
  CHECK(always.choose(static_cast<size_t>(s.pullBufferBytes) + 16, false, false).algo != Algo::kOneshotPull);
  s.oneshotPullMaxBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 20, false, false).algo != Algo::kOneshotPull);
  // Forced, it falls back to two-shot past its buffer.
  s.oneshotPullMaxBytes = kThresholdTable;
  s.algo = "oneshot_pull";
  CHECK(makeSelector(s, 4).choose(8, false, false).algo == Algo::kOneshotPull);
  CHECK(makeSelector(s, 4).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshot);
  CHECK(std::string(algoName(Algo::kOneshotPull)) == "oneshot_pull");
  checkSettingRejected("YALI_ONESHOT_PULL_MAX_BYTES", "-3");
}

TEST(selector_copy_engine_threshold_and_chunks) {
  Settings s = defaultSettings();
  CHECK(s.ceChunkBytes == 0);  // off by default: no staging
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  s.ceChunkBytes = int64_t(4) << 20;
  for (int n : {2, 4, 8}) CHECK(builtinTuning(9, n).ceMinBytes == 0);  // measured slower: off
  for (int n : {2, 4}) {
    const int64_t ceMin = int64_t(64) << 20;
    s.ceMinBytes = ceMin;
    Selector sel = makeSelector(s, n);
    CHECK(sel.choose(static_cast<size_t>(ceMin), false, false).algo == Algo::kCopyEngine);
    CHECK(sel.choose(size_t(1) << 30, false, false).algo == Algo::kCopyEngine);
    CHECK(sel.choose(static_cast<size_t>(ceMin) - 16, false, false).algo == Algo::kTwoshotPush);
    for (size_t bytes : {size_t(16), static_cast<size_t>(ceMin), size_t(1) << 30, size_t(3) << 30}) {
      s.algo = "copy_engine";
      const AlgoChoice c = makeSelector(s, n).choose(bytes, false, false);
      s.algo = "";
      CHECK(c.algo == Algo::kCopyEngine);
      CHECK(c.slotBytes % 256 == 0 && c.slotBytes >= (64 << 10));
      CHECK(static_cast<int64_t>(c.slotBytes) <= s.ceChunkBytes);
      CHECK(c.ctas >= 1 && c.ctas <= 32);  // the large-message block budget
      // At least 8 rounds where the chunk is not at its cap, so that the stages overlap.
      const size_t rounds = (bytes + n * c.slotBytes - 1) / (n * c.slotBytes);
      if (static_cast<int64_t>(c.slotBytes) < s.ceChunkBytes && c.slotBytes > (64 << 10)) CHECK(rounds >= 8);
    }
  }
  s.ceMinBytes = kThresholdTable;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  CHECK(makeSelector(s, 8).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  s.ceMinBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  s.ceMinBytes = kThresholdAlways;  // every size above the one-shot ranges
  CHECK(makeSelector(s, 2).choose(4096, false, false).algo == Algo::kOneshotLL);
  CHECK(makeSelector(s, 2).choose(size_t(8) << 20, false, false).algo == Algo::kCopyEngine);
  s.ceMinBytes = size_t(32) << 20;
  CHECK(makeSelector(s, 4).choose(size_t(32) << 20, false, false).algo == Algo::kCopyEngine);
  CHECK(makeSelector(s, 4).choose((size_t(32) << 20) - 16, false, false).algo == Algo::kTwoshotPush);
  // No staging, no copy engine: not even when forced.
  s.ceMinBytes = kThresholdTable;
  s.ceChunkBytes = 0;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  s.algo = "copy_engine";
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  CHECK(std::string(algoName(Algo::kCopyEngine)) == "copy_engine");
  // Ranks that share a process turn it off (comm.cc), forced or not.
  s.ceChunkBytes = int64_t(4) << 20;
  s.ceMinBytes = kThresholdAlways;
  Selector shared = makeSelector(s, 2);
  CHECK(shared.choose(size_t(1) << 30, false, false).algo == Algo::kCopyEngine);
  shared.disableCopyEngine();
  CHECK(shared.choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  // YALI_MAX_CTAS sets the reduce kernel's blocks.
  s = defaultSettings();
  s.ceChunkBytes = int64_t(4) << 20;
  s.algo = "copy_engine";
  s.maxCtas = 8;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).ctas == 8);
  // Settings errors name the variable.
  checkSettingRejected("YALI_CE_CHUNK_BYTES", "1000");
  Settings bad;
  std::string err;
  setenv("YALI_CE_CHUNK_BYTES", "0", 1);
  CHECK(loadSettings(&bad, &err));
  CHECK(bad.ceChunkBytes == 0);
  unsetenv("YALI_CE_CHUNK_BYTES");
  checkSettingRejected("YALI_CE_MIN_BYTES", "-5");
  setenv("YALI_ALGO", "copy_engine", 1);
  CHECK(loadSettings(&bad, &err));
  CHECK(bad.algo == "copy_engine");
  unsetenv("YALI_ALGO");
}

TEST(selector_threshold_env_semantics) {
  Settings s = defaultSettings();
  s.oneshotLLMaxBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(16, false, false).algo != Algo::kOneshotLL);
  s.oneshotLLMaxBytes = kThresholdAlways;
  Selector always = makeSelector(s, 2);
  CHECK(always.choose(static_cast<size_t>(s.llBufferBytes), false, false).algo == Algo::kOneshotLL);
  // Past the LL buffer, "always" still has to fall back.
  CHECK(always.choose(static_cast<size_t>(s.llBufferBytes) + 8, false, false).algo != Algo::kOneshotLL);
  s.oneshotLLMaxBytes = 1000;
  Selector explicitT = makeSelector(s, 2);
  CHECK(explicitT.choose(1000, false, false).algo == Algo::kOneshotLL);
  CHECK(explicitT.choose(1001, false, false).algo != Algo::kOneshotLL);
  s.oneshotLLMaxBytes = kThresholdTable;
  s.algo = "twoshot";
  CHECK(makeSelector(s, 4).choose(8, false, false).algo == Algo::kTwoshot);
}

TEST(selector_twoshot_geometry_fits_staging) {
  Settings s = defaultSettings();
  s.algo = "twoshot";
  for (int n : {2, 3, 4, 5, 8}) {
    Selector sel = makeSelector(s, n);
    for (size_t bytes : {size_t(2), size_t(4096), size_t(1) << 20, size_t(64) << 20, size_t(1) << 30,
                         size_t(3) << 30}) {
      AlgoChoice c = sel.choose(bytes, false, false);
      CHECK(c.ctas >= 1 && c.ctas <= kMaxCtas);
      CHECK(c.slotBytes % 256 == 0 && c.slotBytes > 0);
      CHECK(c.teams >= 1 && c.teams <= kMaxTeamsPerBlock && c.threads % (32 * c.teams) == 0);
      CHECK_MSG(static_cast<int64_t>(c.slotBytes) * c.ctas * c.teams <= s.stagingBytes, "n=%d bytes=%zu", n, bytes);
      if (bytes >= (size_t(64) << 20)) CHECK(c.ctas <= 32);  // the large-message CTA budget
    }
  }
}

TEST(selector_clamps_threads_to_launchable) {
  Settings s = defaultSettings();
  s.algo = "twoshot";
  Selector sel;
  std::string err;
  SelectorLimits limits{9, 4, s.llBufferBytes, s.stagingBytes, s.pullBufferBytes, s.ceChunkBytes, 1024,
                        256, 256};
  REQUIRE(sel.init(s, limits, &err));
  CHECK(sel.choose(size_t(1) << 30, false, false).threads <= 256);
}

TEST(selector_max_ctas_cap) {
  Settings s = defaultSettings();
  s.maxCtas = 4;
  Selector sel = makeSelector(s, 4);
  CHECK(sel.choose(size_t(1) << 30, false, false).ctas <= 4);
  CHECK(sel.choose(256 << 10, false, false).ctas <= 4);
}

TEST(selector_limit_blocks_only_lowers) {
  // Ranks sharing a GPU: every algorithm's blocks at or under the cap; a cap above the table's
  // values changes nothing.
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const Selector before = sel;
    sel.limitBlocks(1000);
    for (size_t bytes = 4 << 10; bytes <= (size_t(1) << 30); bytes *= 4)
      CHECK_EQ(sel.choose(bytes, false, false).ctas, before.choose(bytes, false, false).ctas);
    sel.limitBlocks(8);
    for (size_t bytes = 4 << 10; bytes <= (size_t(1) << 30); bytes *= 4) {
      for (bool registered : {false, true}) {
        const AlgoChoice c = sel.choose(bytes, registered, registered);
        CHECK_MSG(c.ctas >= 1 && c.ctas <= 8, "n=%d bytes=%zu: %d blocks", n, bytes, c.ctas);
      }
    }
  }
  checkSettingRejected("YALI_ALLOW_SHARED_GPU", "2");
  setenv("YALI_ALLOW_SHARED_GPU", "1", 1);
  Settings shared;
  std::string err;
  CHECK(loadSettings(&shared, &err) && shared.allowSharedGpu);
  unsetenv("YALI_ALLOW_SHARED_GPU");
  CHECK(!defaultSettings().allowSharedGpu);
}

TEST(selector_frugal_blocks_for_large_messages) {
  // The budget: at most 32 blocks from 64 MB up by default; more below it.
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    Selector sel = makeSelector(s, n);
    const TuningEntry& e = sel.entry();
    CHECK(e.frugalMinBytes == (int64_t(64) << 20));
    CHECK(sel.choose(size_t(64) << 20, false, false).ctas <= 32);
    CHECK(sel.choose(size_t(1) << 30, false, false).ctas <= 32);
    CHECK(sel.choose(size_t(16) << 20, false, false).ctas == e.twoshotMaxCtas);
    CHECK(e.twoshotMaxCtas > 32);
    // Every block's slot still fits the staging area.
    for (size_t bytes : {size_t(4) << 20, size_t(16) << 20, size_t(1) << 30}) {
      const AlgoChoice c = sel.choose(bytes, false, false);
      if (c.algo == Algo::kCopyEngine) continue;  // its own staging (the selector test above)
      CHECK(static_cast<size_t>(c.ctas) * c.teams * c.slotBytes <= static_cast<size_t>(s.stagingBytes));
    }
  }
  // YALI_MAX_CTAS replaces both two-shot caps, with one pipeline per block.
  s.maxCtas = 64;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).ctas == 64);
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, false, false).teams == 1);
}

TEST(selector_teams_in_frugal_range) {
  // Two teams per block from frugal_min up at n = 2 and 4 (measured), one below it and at n = 8.
  Settings s = defaultSettings();
  for (int n : {2, 4}) {
    Selector sel = makeSelector(s, n);
    const AlgoChoice big = sel.choose(size_t(1) << 30, false, false);
    CHECK_EQ(big.teams, 2);
    CHECK_EQ(big.ctas, 32);
    CHECK_EQ(big.slotBytes, size_t(64) << 10);  // 64 pipelines in 4 MB of staging
    CHECK_EQ(sel.choose(size_t(64) << 20, false, false).teams, 2);
    CHECK_EQ(sel.choose((size_t(64) << 20) - 256, false, false).teams, 1);
  }
  CHECK_EQ(makeSelector(s, 8).choose(size_t(1) << 30, false, false).teams, 1);
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
  s.tuningFile = YALI_TEAMS_TUNING_PATH;
  s.algo = "twoshot_push";
  Selector small = makeSelector(s, 2);
  CHECK_EQ(small.choose(3072, false, false).teams, 2);
  CHECK_EQ(small.choose(3072, false, false).ctas, 3);
  CHECK_EQ(small.choose(3072 - 256, false, false).teams, 1);
}

// direct runs only on registered buffers, from YALI_DIRECT_MIN_BYTES (or the table's direct_min,
// off by default: measured slower) up, with the two-shot block caps; YALI_ALGO=direct leaves
// unregistered calls to the automatic choice.
TEST(selector_direct_only_for_registered_buffers) {
  Settings s = defaultSettings();
  for (int n : {2, 4, 8}) {
    CHECK_EQ(builtinTuning(9, n).directMinBytes, 0);
    CHECK(makeSelector(s, n).choose(size_t(1) << 30, true, true).algo != Algo::kDirect);
  }
  s.directMinBytes = 1 << 20;
  for (int n : {2, 4}) {
    const Selector sel = makeSelector(s, n);
    CHECK(sel.choose(1 << 20, true, true).algo == Algo::kDirect);
    CHECK(sel.choose((1 << 20) - 16, true, true).algo != Algo::kDirect);
    CHECK(sel.choose(1 << 20, false, false).algo != Algo::kDirect);
    CHECK(sel.choose(1 << 20, false, true).algo != Algo::kDirect);
    CHECK(sel.choose(size_t(1) << 30, false, false).algo != Algo::kDirect);
    const AlgoChoice big = sel.choose(size_t(1) << 30, true, true);
    CHECK(big.algo == Algo::kDirect);
    CHECK_EQ(big.ctas, builtinTuning(9, n).frugalMaxCtas);
    CHECK_EQ(sel.choose(16 << 20, true, true).ctas, builtinTuning(9, n).twoshotMaxCtas);
  }
  s.directMinBytes = kThresholdAlways;
  CHECK(makeSelector(s, 2).choose(16, true, true).algo == Algo::kDirect);
  CHECK_EQ(makeSelector(s, 2).choose(16, true, true).ctas, 1);
  s.directMinBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, true, true).algo != Algo::kDirect);
  s.directMinBytes = kThresholdTable;
  s.maxCtas = 8;
  CHECK_EQ(makeSelector(s, 2).choose(size_t(1) << 30, true, true).ctas, 8);
  s.maxCtas = 0;
  s.algo = "direct";
  const Selector forced = makeSelector(s, 2);
  CHECK(forced.choose(16, true, true).algo == Algo::kDirect);
  CHECK(forced.choose(16, false, false).algo == Algo::kOneshotLL);
  CHECK(forced.choose(size_t(1) << 30, false, false).algo == Algo::kTwoshotPush);
  s.algo = "twoshot";
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, true, true).algo == Algo::kTwoshot);
}

// twoshot_direct needs only the output registered, from YALI_TWOSHOT_DIRECT_MIN_BYTES (or the
// table's twoshot_direct_min) up, with two-shot's geometry; direct wins when both are registered.
TEST(selector_twoshot_direct_for_registered_outputs) {
  Settings s = defaultSettings();
  for (int n : {2, 4}) {
    const Selector sel = makeSelector(s, n);
    const size_t min = static_cast<size_t>(builtinTuning(9, n).twoshotDirectMinBytes);
    CHECK(min > 0);
    const AlgoChoice td = sel.choose(size_t(1) << 30, false, true);
    const AlgoChoice push = sel.choose(size_t(1) << 30, false, false);
    CHECK(td.algo == Algo::kTwoshotDirect);
    CHECK(push.algo == Algo::kTwoshotPush);
    CHECK_EQ(td.ctas, push.ctas);
    CHECK_EQ(td.teams, push.teams);
    CHECK_EQ(td.slotBytes, push.slotBytes);
    CHECK(sel.choose(min, false, true).algo == Algo::kTwoshotDirect);
    CHECK(sel.choose(min - 16, false, true).algo != Algo::kTwoshotDirect);
    CHECK(sel.choose(size_t(1) << 30, true, false).algo == Algo::kTwoshotPush);  // input only
    CHECK(sel.choose(size_t(1) << 30, true, true).algo == Algo::kTwoshotDirect);   // direct is off
  }
  s.directMinBytes = kThresholdAlways;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, true, true).algo == Algo::kDirect);  // precedence
  s.directMinBytes = kThresholdTable;
  CHECK(makeSelector(s, 8).choose(size_t(1) << 30, false, true).algo != Algo::kTwoshotDirect);
  s.twoshotDirectMinBytes = kThresholdAlways;
  CHECK(makeSelector(s, 2).choose(16, false, true).algo == Algo::kTwoshotDirect);
  s.directMinBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(16, true, true).algo == Algo::kTwoshotDirect);
  s.twoshotDirectMinBytes = kThresholdDisabled;
  CHECK(makeSelector(s, 2).choose(size_t(1) << 30, true, true).algo == Algo::kTwoshotPush);
  s = defaultSettings();
  s.algo = "twoshot_direct";
  CHECK(makeSelector(s, 2).choose(16, true, true).algo == Algo::kTwoshotDirect);
  CHECK(makeSelector(s, 2).choose(16, false, false).algo == Algo::kOneshotLL);
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
  setenv("YALI_ALGO", "direct", 1);
  Settings s;
  std::string err;
  CHECK(loadSettings(&s, &err));
  CHECK(s.algo == "direct");
  unsetenv("YALI_ALGO");
  checkSettingRejected("YALI_DIRECT_MIN_BYTES", "-3");
  checkSettingRejected("YALI_TWOSHOT_DIRECT_MIN_BYTES", "x");
}

TEST(tuning_file_round_trip_and_errors) {
  TuningEntry e = builtinTuning(9, 4);
  e.oneshotLLMaxBytes = 12345;
  std::vector<TuningEntry> parsed;
  std::string err;
  CHECK(parseTuningText("# comment\n" + formatTuningEntry(e) + "\n\n", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].oneshotLLMaxBytes, 12345);
  CHECK_EQ(parsed[0].nranks, 4);
  parsed.clear();
  CHECK(!parseTuningText("sm=9 nranks=4", &parsed, &err));
  CHECK(err.find("expected 9 keys") != std::string::npos);
  CHECK(!parseTuningText("sm=9 nranks=4 bogus=1", &parsed, &err));
  CHECK(!parseTuningText(formatTuningEntry(e) + " extra", &parsed, &err));
  // The push crossover is optional: a nine-key line (what `yali-perf --tune` writes) takes the
  // built-in value.
  parsed.clear();
  CHECK(parseTuningText("sm=9 nranks=4 ll_max=1 ll_threads=512 ll_ctas=8 twoshot_threads=512 "
                        "twoshot_ctas=8 twoshot_min_slot=4096 twoshot_max_slot=65536", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].twoshotPushMinBytes, builtinTuning(9, 4).twoshotPushMinBytes);
  CHECK_EQ(parsed[0].frugalMinBytes, builtinTuning(9, 4).frugalMinBytes);
  CHECK_EQ(parsed[0].frugalMaxCtas, builtinTuning(9, 4).frugalMaxCtas);
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " frugal_min=1048576 frugal_ctas=16", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].frugalMinBytes, 1048576);
  CHECK_EQ(parsed[0].frugalMaxCtas, 16);
  CHECK(!parseTuningText(formatTuningEntry(e) + " frugal_ctas=65", &parsed, &err));
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " oneshot_pull_max=2097152", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].oneshotPullMaxBytes, 2097152);
  CHECK(!parseTuningText(formatTuningEntry(e) + " oneshot_pull_max=-1", &parsed, &err));
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " ce_min=33554432 ce_ctas=16", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].ceMinBytes, 33554432);
  CHECK_EQ(parsed[0].ceCtas, 16);
  CHECK(!parseTuningText(formatTuningEntry(e) + " ce_ctas=0", &parsed, &err));
  CHECK(!parseTuningText(formatTuningEntry(e) + " ce_min=-2", &parsed, &err));
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e), &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].oneshotPullMaxBytes, builtinTuning(9, 4).oneshotPullMaxBytes);
  CHECK_EQ(parsed[0].ceMinBytes, builtinTuning(9, 4).ceMinBytes);
  CHECK_EQ(parsed[0].ceCtas, builtinTuning(9, 4).ceCtas);
  CHECK_EQ(parsed[0].directMinBytes, builtinTuning(9, 4).directMinBytes);
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " direct_min=0", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].directMinBytes, 0);
  CHECK(!parseTuningText(formatTuningEntry(e) + " direct_min=-1", &parsed, &err));
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e) + " twoshot_direct_min=1048576", &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].twoshotDirectMinBytes, 1048576);

  char path[] = "/tmp/yali-tuning-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << formatTuningEntry(e) << "\n";
  Settings s = defaultSettings();
  s.tuningFile = path;
  Selector sel = makeSelector(s, 4);
  CHECK_EQ(sel.entry().oneshotLLMaxBytes, 12345);
  CHECK(sel.choose(12345, false, false).algo == Algo::kOneshotLL);
  CHECK(sel.choose(12346, false, false).algo != Algo::kOneshotLL);
  unlink(path);
}

TEST(unique_id_checks) {
  yaliUniqueId a, b;
  std::string err;
  REQUIRE(makeUniqueId(&a, &err));
  REQUIRE(makeUniqueId(&b, &err));
  UniqueIdFields fa, fb;
  CHECK(decodeUniqueId(a, &fa));
  CHECK(decodeUniqueId(b, &fb));
  CHECK(fa.token[0] != fb.token[0] || fa.token[1] != fb.token[1]);
  yaliUniqueId zero{};
  CHECK(!decodeUniqueId(zero, &fa));
  a.internal[20] ^= 1;  // one flipped bit in the token breaks the checksum
  CHECK(!decodeUniqueId(a, &fa));
}

TEST(bootstrap_allgather_across_processes) {
  yaliUniqueId id;
  std::string err;
  REQUIRE(makeUniqueId(&id, &err));
  UniqueIdFields f;
  REQUIRE(decodeUniqueId(id, &f));
  const int n = 4;
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      Bootstrap* b = nullptr;
      std::string e;
      if (Bootstrap::connect(f, r, n, 10000, &b, &e) != yaliSuccess) _exit(2);
      int values[n] = {};
      values[r] = 100 + r;
      if (b->allGather(values, sizeof(int), &e) != yaliSuccess) _exit(3);
      for (int i = 0; i < n; ++i)
        if (values[i] != 100 + i) _exit(4);
      if (b->barrier(&e) != yaliSuccess) _exit(5);
      delete b;
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit status %d", WEXITSTATUS(status));
  }
}

TEST(bootstrap_times_out_without_rank0) {
  yaliUniqueId id;
  std::string err;
  REQUIRE(makeUniqueId(&id, &err));
  UniqueIdFields f;
  REQUIRE(decodeUniqueId(id, &f));
  Bootstrap* b = nullptr;
  CHECK_EQ(Bootstrap::connect(f, 1, 2, 200, &b, &err), yaliTimeout);
  CHECK(err.find("YALI_TIMEOUT_MS") != std::string::npos);
}

// README.md's environment table and the settings declared in env.cc must agree both ways.
TEST(readme_documents_every_setting) {
  std::ifstream f(YALI_README_PATH);
  REQUIRE(f.good());
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string readme = buf.str();
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  std::set<std::string> declared;
  for (int i = 0; i < count; ++i) {
    declared.insert(docs[i].name);
    CHECK_MSG(readme.find(std::string("`") + docs[i].name + "`") != std::string::npos,
              "README.md does not document %s", docs[i].name);
  }
  std::regex var("`(YALI_[A-Z_]+)`");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), var); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (name == "YALI_LIBRARY" || name.rfind("YALI_PERF_", 0) == 0 || name == "YALI_REQUIRE_LIB") continue;  // tools' variables
    CHECK_MSG(declared.count(name) == 1, "README.md names %s, which env.cc does not declare", name.c_str());
  }
}

int main(int argc, char** argv) { return yali_test::runAllTests(argc, argv); }
