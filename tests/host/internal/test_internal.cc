// Internal host logic: settings parsing and their digest, the selector and its tuning table,
// tuning files. Needs no GPU.
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "collectives/common/device_state.h"
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

// What a comm of `nranks` on Hopper gets from `s`'s buffer sizes (comm.cc: the window layout).
SelectorLimits limitsFor(const Settings& s, int nranks) {
  return SelectorLimits{9, nranks, s.llBufferBytes, s.stagingBytes, s.pullBufferBytes, 1024, 512};
}

Selector makeSelector(const Settings& s, int nranks) {
  Selector sel;
  std::string err;
  CHECK_MSG(sel.init(s, limitsFor(s, nranks), &err), "%s", err.c_str());
  return sel;
}

// loadSettings with YALI_TUNING_FILE=path (and nothing else set), as a comm would read it.
Settings settingsWithTuningFile(const std::string& path) {
  defaultSettings();
  setenv("YALI_TUNING_FILE", path.c_str(), 1);
  Settings s;
  std::string err;
  CHECK_MSG(loadSettings(&s, &err), "%s", err.c_str());
  unsetenv("YALI_TUNING_FILE");
  return s;
}

// A new temporary file holding `text`; the caller unlinks it.
std::string writeTempFile(const std::string& text) {
  char path[] = "/tmp/yali-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
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

// Staging that holds fewer minimum slots than the table's pipelines: teams go first, then blocks;
// slots never shrink below the minimum unless one slot does not fit. (The reproduced bug: at
// YALI_STAGING_BYTES=65536, 16M fp32 elements at 2 ranks ran 64 pipelines of 8 KB slots in 64 KB
// of staging and came out 65 % wrong.)
TEST(selector_small_staging_takes_fewer_blocks) {
  defaultSettings();
  for (const char* staging : {"65536", "100000"}) {
    setenv("YALI_STAGING_BYTES", staging, 1);
    Settings s;
    std::string err;
    REQUIRE(loadSettings(&s, &err));
    unsetenv("YALI_STAGING_BYTES");
    const size_t minSlot = static_cast<size_t>(builtinTuning(9, 2).twoshotMinSlotBytes);
    const size_t fit = static_cast<size_t>(s.stagingBytes) / minSlot;  // 8 and 12
    Selector sel = makeSelector(s, 2);
    for (size_t bytes : {size_t(64) << 20, size_t(16) << 20, size_t(1) << 30}) {
      const AlgoChoice c = sel.choose(bytes, false, false);
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
  const AlgoChoice one = makeSelector(s, 4).choose(size_t(1) << 30, false, false);
  CHECK_EQ(one.ctas, 1);
  CHECK_EQ(one.teams, 1);
  CHECK_EQ(one.slotBytes, size_t(64) << 10);
  // Odd slot bounds in a tuning file become 256-byte multiples.
  s = defaultSettings();
  s.algo = "twoshot";
  big.twoshotMinSlotBytes = 300;
  big.twoshotMaxSlotBytes = 1000;
  s.tuningText = formatTuningEntry(big);
  for (size_t bytes : {size_t(4096), size_t(1) << 20, size_t(1) << 30}) {
    const AlgoChoice c = makeSelector(s, 4).choose(bytes, false, false);
    CHECK_MSG(c.slotBytes % 256 == 0 && c.slotBytes >= 512 && c.slotBytes <= 768, "%zu", c.slotBytes);
  }
}

TEST(selector_clamps_threads_to_launchable) {
  Settings s = defaultSettings();
  s.algo = "twoshot";
  Selector sel;
  std::string err;
  SelectorLimits limits = limitsFor(s, 4);
  limits.maxTwoshotThreads = 256;
  REQUIRE(sel.init(s, limits, &err));
  CHECK(sel.choose(size_t(1) << 30, false, false).threads <= 256);
  // A limit that is not whole warps is rounded down to them.
  limits.maxTwoshotThreads = 200;
  REQUIRE(sel.init(s, limits, &err));
  CHECK_EQ(sel.choose(size_t(1) << 30, false, false).threads, 192);
  // Limits the kernels cannot run with are refused.
  limits.maxTwoshotThreads = 16;
  CHECK(!sel.init(s, limits, &err));
  limits = limitsFor(s, 4);
  limits.stagingBytes = 128;
  CHECK(!sel.init(s, limits, &err));
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
  s = settingsWithTuningFile(YALI_TEAMS_TUNING_PATH);
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
  CHECK(!algoFromName("copy_engine", &a));  // removed
  checkSettingRejected("YALI_ALGO", "copy_engine");
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
  // copy_engine's keys are refused, with the reason.
  for (const char* key : {" ce_min=33554432", " ce_ctas=16", " ce_min=0"}) {
    parsed.clear();
    CHECK(!parseTuningText(formatTuningEntry(e) + key, &parsed, &err));
    CHECK_MSG(err.find("copy_engine was removed") != std::string::npos, "%s: %s", key, err.c_str());
  }
  parsed.clear();
  CHECK(parseTuningText(formatTuningEntry(e), &parsed, &err));
  REQUIRE(parsed.size() == 1);
  CHECK_EQ(parsed[0].oneshotPullMaxBytes, builtinTuning(9, 4).oneshotPullMaxBytes);
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

  const std::string path = writeTempFile(formatTuningEntry(e) + "\n");
  Settings s = settingsWithTuningFile(path);
  Selector sel = makeSelector(s, 4);
  CHECK_EQ(sel.entry().oneshotLLMaxBytes, 12345);
  CHECK(sel.choose(12345, false, false).algo == Algo::kOneshotLL);
  CHECK(sel.choose(12346, false, false).algo != Algo::kOneshotLL);
  unlink(path.c_str());
  // A bad table is the selector's error, naming the variable and the file.
  s.tuningText = formatTuningEntry(e) + " ce_min=1\n";
  std::string initErr;
  CHECK(!sel.init(s, limitsFor(s, 4), &initErr));
  CHECK_MSG(initErr.find("YALI_TUNING_FILE='" + path + "'") != std::string::npos, "%s", initErr.c_str());
}

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

// A tuning line that parseTuningText accepts, with each optional key present or not.
std::string randomTuningLine(FuzzRandom& r, int nranks) {
  TuningEntry e = builtinTuning(9, nranks);
  e.oneshotLLMaxBytes = r.oneIn(8) ? INT64_MAX : static_cast<int64_t>(r.bytesBelow(40));
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
  maybe("twoshot_push_min", static_cast<int64_t>(r.bytesBelow(40)));
  maybe("frugal_min", r.oneIn(4) ? 1 : static_cast<int64_t>(r.bytesBelow(40)));
  maybe("frugal_ctas", r.between(1, kMaxCtas));
  maybe("oneshot_pull_max", r.oneIn(8) ? INT64_MAX : static_cast<int64_t>(r.bytesBelow(34)));
  maybe("frugal_teams", r.between(1, kMaxTeamsPerBlock));
  maybe("direct_min", static_cast<int64_t>(r.bytesBelow(40)));
  maybe("twoshot_direct_min", static_cast<int64_t>(r.bytesBelow(40)));
  return line;
}

// Message sizes at and around every boundary the selector compares with, plus the extremes.
std::vector<size_t> edgeSizes(const Settings& s, const TuningEntry& e) {
  std::vector<size_t> sizes = {0, 1, 16, size_t(INT64_MAX), size_t(INT64_MAX) + 1, SIZE_MAX - 1, SIZE_MAX};
  for (int64_t t : {s.oneshotLLMaxBytes, s.oneshotPullMaxBytes, s.twoshotPushMinBytes, s.directMinBytes,
                    s.twoshotDirectMinBytes, s.llBufferBytes, s.stagingBytes, s.pullBufferBytes,
                    e.oneshotLLMaxBytes, e.oneshotPullMaxBytes, e.twoshotPushMinBytes, e.directMinBytes,
                    e.twoshotDirectMinBytes, e.frugalMinBytes}) {
    if (t <= 0) continue;
    for (int64_t d : {-1, 0, 1}) sizes.push_back(static_cast<size_t>(t) + static_cast<size_t>(d));
  }
  return sizes;
}

}  // namespace

// Every choice fits the window and the kernels (choiceFits), for random settings as loadSettings
// parses them (every YALI_ALGO value and auto, every threshold form, YALI_MAX_CTAS 0..64, buffer
// sizes from their minimums, staging 64 KB..16 MB and not only powers of two), random tuning lines
// that parseTuningText accepts, launch limits, block caps of ranks that share a GPU, world sizes
// 2..8, registered buffers or not, and sizes from 0 to 2^40 plus every boundary +-1 and 2^63 - 1,
// 2^63, SIZE_MAX. On the selector before choiceFits existed it failed in 47 % of its choices, the
// first in its first combination: 2^63 bytes compared as negative and took oneshot_ll. With the
// built-in table, iteration 9 was the bug report's overflow: 2 ranks, YALI_STAGING_BYTES=100000,
// YALI_MAX_CTAS=31, 26907391 bytes: twoshot_push with 31 pipelines of 8192-byte slots in 100096
// bytes of staging. Tuning files added slots of any size (twoshot_min_slot=933: 933-byte slots)
// and minimum slots larger than all of staging.
TEST(selector_fuzz_every_choice_fits) {
  FuzzRandom r;
  const char* const kThresholdVars[] = {"YALI_ONESHOT_LL_MAX_BYTES", "YALI_ONESHOT_PULL_MAX_BYTES",
                                        "YALI_TWOSHOT_PUSH_MIN_BYTES", "YALI_DIRECT_MIN_BYTES",
                                        "YALI_TWOSHOT_DIRECT_MIN_BYTES"};
  const int kLimitThreads[] = {1024, 1024, 512, 512, 1000, 256, 96, 64, 32};
  int reported = 0;
  size_t choices = 0;
  for (int iteration = 0; iteration < 10000; ++iteration) {
    defaultSettings();
    std::vector<std::pair<std::string, std::string>> env;
    const int algo = static_cast<int>(r.below(kNumAlgos + 2));  // kNumAlgos: auto; + 1: unset
    if (algo < kNumAlgos) env.push_back({"YALI_ALGO", algoName(static_cast<Algo>(algo))});
    if (algo == kNumAlgos) env.push_back({"YALI_ALGO", "auto"});
    for (const char* var : kThresholdVars) env.push_back({var, std::to_string(r.threshold())});
    env.push_back({"YALI_MAX_CTAS", std::to_string(r.between(0, kMaxCtas))});
    const int64_t stagingChoices[] = {65536, 100000, 4 << 20, 16 << 20, r.between(65536, 16 << 20)};
    env.push_back({"YALI_STAGING_BYTES", std::to_string(stagingChoices[r.below(5)])});
    env.push_back({"YALI_LL_BUFFER_BYTES", std::to_string(r.oneIn(3) ? 4096 : r.between(4096, 16 << 20))});
    env.push_back({"YALI_PULL_BUFFER_BYTES", std::to_string(r.oneIn(4) ? 0 : r.between(0, 64 << 20))});
    for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    Settings s;
    std::string err;
    const bool loaded = loadSettings(&s, &err);
    for (const auto& kv : env) unsetenv(kv.first.c_str());
    REQUIRE(loaded);
    const int nranks = static_cast<int>(r.between(2, kMaxRanks));
    // Usually a line for this world size; sometimes one for another (the built-in entry applies).
    if (!r.oneIn(4)) s.tuningText = randomTuningLine(r, r.oneIn(8) ? 2 + (nranks - 1) % 7 : nranks);
    SelectorLimits limits = limitsFor(s, nranks);
    limits.maxLLThreads = kLimitThreads[r.below(9)];
    limits.maxTwoshotThreads = kLimitThreads[r.below(9)];
    Selector sel;
    if (!sel.init(s, limits, &err)) {
      CHECK_MSG(false, "init refused valid settings: %s", err.c_str());
      continue;
    }
    if (r.oneIn(3)) sel.limitBlocks(static_cast<int>(r.between(1, 40)));  // ranks sharing a GPU
    std::vector<size_t> sizes = edgeSizes(s, sel.entry());
    for (int i = 0; i < 24; ++i) sizes.push_back(r.bytesBelow(40));
    for (size_t bytes : sizes) {
      for (int registered = 0; registered < 4; ++registered) {
        const AlgoChoice c = sel.choose(bytes, registered & 1, registered & 2);
        ++choices;
        std::string why;
        if (choiceFits(c, bytes, limits, &why)) continue;
        if (++reported <= 5) {
          std::string settings;
          for (const auto& kv : env) settings += kv.first + "=" + kv.second + " ";
          CHECK_MSG(false, "iteration %d, nranks=%d, limits %d/%d threads, %s| tuning '%s': %s", iteration,
                    nranks, limits.maxLLThreads, limits.maxTwoshotThreads, settings.c_str(), s.tuningText.c_str(),
                    why.c_str());
        }
      }
    }
  }
  CHECK_MSG(reported == 0, "%d of %zu choices do not fit", reported, choices);
}

// Sizes of 2^63 bytes and more are larger than every buffer: never a one-shot, whatever the
// thresholds say, even with the largest buffers a limit can describe.
TEST(selector_huge_messages_never_take_a_one_shot) {
  Settings s = defaultSettings();
  SelectorLimits limits = limitsFor(s, 2);
  limits.llPayloadBytes = INT64_MAX;
  limits.pullBufferBytes = INT64_MAX;
  for (const char* algo : {"", "oneshot_ll", "oneshot_pull", "twoshot_push"}) {
    for (int64_t threshold : {kThresholdAlways, kThresholdTable, INT64_MAX}) {
      s.algo = algo;
      s.oneshotLLMaxBytes = threshold;
      s.oneshotPullMaxBytes = threshold;
      Selector sel;
      std::string err;
      REQUIRE(sel.init(s, limits, &err));
      for (size_t bytes : {size_t(INT64_MAX) + 1, size_t(INT64_MAX) + 2, SIZE_MAX - 1, SIZE_MAX}) {
        for (int registered = 0; registered < 4; ++registered) {
          const AlgoChoice c = sel.choose(bytes, registered & 1, registered & 2);
          CHECK_MSG(c.algo != Algo::kOneshotLL && c.algo != Algo::kOneshotPull, "ALGO=%s bytes=%zu: %s", algo,
                    bytes, algoName(c.algo));
          std::string why;
          CHECK_MSG(choiceFits(c, bytes, limits, &why), "%s", why.c_str());
        }
      }
      // One byte less fits the largest buffer: the comparison is exact, not merely safe.
      if (std::string(algo).empty() && threshold != kThresholdTable)
        CHECK(sel.choose(size_t(INT64_MAX), false, false).algo == Algo::kOneshotLL);
    }
  }
}

// What choiceFits refuses, one invariant at a time.
TEST(choice_fits_names_each_violation) {
  const Settings s = defaultSettings();
  const SelectorLimits limits = limitsFor(s, 2);
  const size_t staging = static_cast<size_t>(s.stagingBytes);
  std::string why;
  const AlgoChoice good{Algo::kTwoshotPush, 32, 512, staging / 64, 2};
  CHECK_MSG(choiceFits(good, size_t(1) << 30, limits, &why), "%s", why.c_str());
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
      {"too many blocks", {Algo::kDirect, kMaxCtas + 1, 512, 0, 1}, size_t(1) << 20},
      {"threads not warps", {Algo::kTwoshot, 1, 500, 8192, 1}, size_t(1) << 20},
      {"threads above the launch limit", {Algo::kTwoshot, 1, 1024, 8192, 1}, size_t(1) << 20},
      {"teams of one warp", {Algo::kTwoshot, 1, 96, 8192, 2}, size_t(1) << 20},
      {"three teams", {Algo::kTwoshot, 1, 384, 8192, 3}, size_t(1) << 20},
      {"teams outside two-shot", {Algo::kOneshotPull, 1, 512, 4096, 2}, 4096},
      {"LL past its buffer", {Algo::kOneshotLL, 1, 512, 0, 1}, static_cast<size_t>(s.llBufferBytes) + 1},
      {"pull past its buffer", {Algo::kOneshotPull, 64, 512, 1 << 20, 1}, static_cast<size_t>(s.pullBufferBytes) + 16},
      {"pull runs short", {Algo::kOneshotPull, 4, 512, 1024, 1}, 4097},
      {"pull runs unaligned", {Algo::kOneshotPull, 4, 512, 1032, 1}, 4096},
      {"unknown algorithm", {static_cast<Algo>(kNumAlgos), 1, 512, 0, 1}, 16},
  };
  for (const Bad& b : bad) {
    why.clear();
    CHECK_MSG(!choiceFits(b.choice, b.bytes, limits, &why), "%s was accepted", b.what);
    CHECK_MSG(!why.empty(), "%s: no reason given", b.what);
  }
  CHECK(!choiceFits(bad[0].choice, bad[0].bytes, limits, nullptr));  // why is optional
}

// Ranks compare the digest at set-up: every setting that steers the choice, the layout or the
// epochs changes it; per-rank settings (timeout, PDL) and the tuning file's path do not.
TEST(settings_digest_covers_what_ranks_share) {
  const Settings base = defaultSettings();
  const uint64_t digest = settingsDigest(base);
  CHECK_EQ(settingsDigest(base), digest);
  struct Change {
    const char* what;
    void (*apply)(Settings&);
  };
  const Change covered[] = {
      {"algo", [](Settings& s) { s.algo = "twoshot"; }},
      {"oneshotLLMaxBytes", [](Settings& s) { s.oneshotLLMaxBytes = 12345; }},
      {"oneshotPullMaxBytes", [](Settings& s) { s.oneshotPullMaxBytes = 12345; }},
      {"twoshotPushMinBytes", [](Settings& s) { s.twoshotPushMinBytes = 12345; }},
      {"directMinBytes", [](Settings& s) { s.directMinBytes = 12345; }},
      {"twoshotDirectMinBytes", [](Settings& s) { s.twoshotDirectMinBytes = 12345; }},
      {"maxCtas", [](Settings& s) { s.maxCtas = 8; }},
      {"llBufferBytes", [](Settings& s) { s.llBufferBytes += 256; }},
      {"stagingBytes", [](Settings& s) { s.stagingBytes += 256; }},
      {"pullBufferBytes", [](Settings& s) { s.pullBufferBytes += 256; }},
      {"allowSharedGpu", [](Settings& s) { s.allowSharedGpu = !s.allowSharedGpu; }},
      {"tuningText", [](Settings& s) { s.tuningText = "# another table\n"; }},
      {"testEpochStart", [](Settings& s) { s.testEpochStart = 4294967295u; }},
  };
  for (const Change& c : covered) {
    Settings s = base;
    c.apply(s);
    CHECK_MSG(settingsDigest(s) != digest, "the digest ignores %s", c.what);
  }
  const Change ignored[] = {
      {"timeoutMs", [](Settings& s) { s.timeoutMs = 5; }},
      {"programmaticLaunch", [](Settings& s) { s.programmaticLaunch = !s.programmaticLaunch; }},
      {"tuningFile", [](Settings& s) { s.tuningFile = "/elsewhere/yali-tuning.txt"; }},
  };
  for (const Change& c : ignored) {
    Settings s = base;
    c.apply(s);
    CHECK_MSG(settingsDigest(s) == digest, "the digest covers %s", c.what);
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
    checkSettingRejected("YALI_TUNING_FILE", unreadable.c_str());
    setenv("YALI_TUNING_FILE", unreadable.c_str(), 1);
    Settings s;
    std::string err;
    CHECK(!loadSettings(&s, &err));
    CHECK_MSG(err.find(unreadable) != std::string::npos, "%s", err.c_str());
    unsetenv("YALI_TUNING_FILE");
  }
}

TEST(test_epoch_start_setting) {
  CHECK_EQ(defaultSettings().testEpochStart, 1);
  for (const char* good : {"1", "4294967295", "4294967000"}) {
    setenv("YALI_TEST_EPOCH_START", good, 1);
    Settings s;
    std::string err;
    CHECK_MSG(loadSettings(&s, &err), "%s", err.c_str());
    CHECK_EQ(s.testEpochStart, strtoull(good, nullptr, 10));
    unsetenv("YALI_TEST_EPOCH_START");
  }
  for (const char* bad : {"0", "-1", "4294967296", "lots"}) checkSettingRejected("YALI_TEST_EPOCH_START", bad);
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
