#include "core/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstring>

#include "collectives/common/device_state.h"
#include "core/hash.h"
#include "tuning/selector.h"

namespace yali {
namespace {

constexpr int64_t kDefaultTimeoutMs = 120000;
constexpr int64_t kDefaultLLBufferBytes = 1 << 20;
constexpr int64_t kDefaultStagingBytes = 4 << 20;
// 4 MB: oneshot_pull pays off up to a few MB at n = 2 (its selector entry), and 2 x 4 MB of window
// per rank is small next to two-shot's staging.
constexpr int64_t kDefaultPullBufferBytes = 4 << 20;
// Epoch 0 is never used: the window starts zeroed, and LL packets or flags of value 0 must never
// match a launch. The largest start is the last 32-bit value, so that a test's first launches cross
// the wrap of a 32-bit counter.
constexpr int64_t kDefaultTestEpochStart = 1;
constexpr int64_t kMaxTestEpochStart = INT64_C(4294967295);

// The one list of settings. README.md's table is checked against it by a host test.
const SettingDoc kDocs[] = {
    {"YALI_TIMEOUT_MS", "120000",
     "Bound on every device-side wait for a peer and on communicator set-up, in milliseconds. A "
     "peer that does not arrive in time turns into yaliTimeout instead of a hang."},
    {"YALI_ALGO", "auto",
     "Force one AllReduce algorithm: oneshot_ll, oneshot_pull, twoshot, twoshot_push, direct or "
     "twoshot_direct (auto: the selector decides). A one-shot algorithm forced on a message larger "
     "than its buffer gets twoshot instead. direct needs both "
     "buffers registered (yaliCommRegister), twoshot_direct the output; calls on other buffers get "
     "the automatic choice among the rest."},
    {"YALI_ONESHOT_LL_MAX_BYTES", "-2",
     "Largest message for the one-shot LL algorithm (0 disabled, -1 all sizes that fit its "
     "buffer, -2 the tuning table's value for this GPU and world size, >0 bytes)."},
    {"YALI_ONESHOT_PULL_MAX_BYTES", "-2",
     "Largest message for oneshot_pull (copy-in, one flag exchange, NVLink reads), used above the "
     "LL range (0 disabled, -1 all sizes that fit its buffer, -2 the tuning table's value, >0 "
     "bytes)."},
    {"YALI_TWOSHOT_PUSH_MIN_BYTES", "-2",
     "Smallest two-shot message for the all-writes variant twoshot_push (0 never, -1 every "
     "two-shot size, -2 the tuning table's value, >0 bytes)."},
    {"YALI_DIRECT_MIN_BYTES", "-2",
     "Smallest message for direct, the zero-copy algorithm for buffers registered with "
     "yaliCommRegister on every rank (0 never, -1 every size, -2 the tuning table's value, >0 "
     "bytes). Unregistered buffers never use it."},
    {"YALI_TWOSHOT_DIRECT_MIN_BYTES", "-2",
     "Smallest message for twoshot_direct, two-shot whose owners store the reduced shards straight "
     "into the peers' outputs when the output is registered on every rank (0 never, -1 every size, "
     "-2 the tuning table's value, >0 bytes); direct takes precedence when both buffers are "
     "registered and its threshold is met."},
    {"YALI_MAX_CTAS", "0",
     "Thread blocks per GPU: caps one-shot LL and replaces the two-shot caps, including the "
     "32-block cap from 64 MB up (0: the tuning table's values)."},
    {"YALI_LL_BUFFER_BYTES", "1048576",
     "One-shot LL payload capacity per sender and parity (the buffer holds twice that in "
     "packets, times 2 parities times nranks)."},
    {"YALI_STAGING_BYTES", "4194304",
     "Two-shot staging per sender and parity; also caps (pipelines x slot bytes): where it holds "
     "fewer minimum-size slots than the table's blocks, two-shot runs fewer blocks."},
    {"YALI_PULL_BUFFER_BYTES", "4194304",
     "oneshot_pull copy-in capacity per parity, the largest message it can take (the window "
     "holds twice that)."},
    {"YALI_TUNING_FILE", "",
     "A tuning table written by `yali-perf --tune`, used instead of the built-in one. Read once "
     "when a communicator is created; every rank must see the same content (a file that cannot be "
     "read is an error)."},
    {"YALI_PDL", "1",
     "1: launch kernels with programmatic dependent launch on Hopper and newer, so back-to-back "
     "collectives overlap their launch gaps (stream order is kept); 0: plain launches."},
    {"YALI_ALLOW_SHARED_GPU", "0",
     "1: several ranks may share one GPU, for testing the algorithms where GPUs are few (the "
     "answers are checked the same way; the speed means nothing). Their blocks are capped so that "
     "every rank's kernel fits on the GPU at once. Ranks of one process (yaliCommInitAll with a "
     "device listed more than once), each on its own stream, run together; separate processes "
     "take turns on the GPU unless MPS runs, which is slower. 0: a GPU named twice is an error."},
    {"YALI_TEST_EPOCH_START", "1",
     "Testing only: the first launch number (epoch) of a new communicator, so that tests cross the "
     "counter's wrap at 2^32 - 1 without four billion calls. Must match on every rank."},
    {"YALI_DEBUG", "0", "1: log set-up decisions and errors to stderr."},
};

const char* getenvOrNull(const char* name) {
  const char* v = getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

// The whole file at `path` into *text; false with the system's reason in *why when it cannot be
// opened or read (a directory opens but does not read).
bool readWholeFile(const std::string& path, std::string* text, std::string* why) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *why = strerror(errno);
    return false;
  }
  text->clear();
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), f)) > 0) text->append(buf, got);
  const bool failed = ferror(f) != 0;
  if (failed) *why = strerror(errno);
  fclose(f);
  return !failed;
}

}  // namespace

bool parseIntSetting(const char* name, const char* text, int64_t defaultValue, int64_t minValue,
                     int64_t maxValue, int64_t* out, std::string* error) {
  if (text == nullptr) {
    *out = defaultValue;
    return true;
  }
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    *error = std::string(name) + "='" + text + "' is not an integer";
    return false;
  }
  if (v < minValue || v > maxValue) {
    *error = std::string(name) + "=" + text + " is out of range [" + std::to_string(minValue) +
             ", " + std::to_string(maxValue) + "]";
    return false;
  }
  *out = v;
  return true;
}

bool parseThresholdSetting(const char* name, const char* text, int64_t* out, std::string* error) {
  return parseIntSetting(name, text, kThresholdTable, kThresholdTable, INT64_MAX, out, error);
}

bool loadSettings(Settings* s, std::string* error) {
  if (!parseIntSetting("YALI_TIMEOUT_MS", getenvOrNull("YALI_TIMEOUT_MS"), kDefaultTimeoutMs, 1,
                       INT64_C(86400000), &s->timeoutMs, error))
    return false;
  const char* algo = getenvOrNull("YALI_ALGO");
  s->algo = (algo == nullptr || strcmp(algo, "auto") == 0) ? "" : algo;
  Algo named;
  if (!s->algo.empty() && !algoFromName(s->algo, &named)) {
    *error = "YALI_ALGO='" + s->algo + "' is not one of auto, " + algoNameList();
    return false;
  }
  if (!parseThresholdSetting("YALI_ONESHOT_LL_MAX_BYTES", getenvOrNull("YALI_ONESHOT_LL_MAX_BYTES"),
                             &s->oneshotLLMaxBytes, error))
    return false;
  if (!parseThresholdSetting("YALI_ONESHOT_PULL_MAX_BYTES", getenvOrNull("YALI_ONESHOT_PULL_MAX_BYTES"),
                             &s->oneshotPullMaxBytes, error))
    return false;
  if (!parseThresholdSetting("YALI_TWOSHOT_PUSH_MIN_BYTES",
                             getenvOrNull("YALI_TWOSHOT_PUSH_MIN_BYTES"), &s->twoshotPushMinBytes, error))
    return false;
  if (!parseThresholdSetting("YALI_DIRECT_MIN_BYTES", getenvOrNull("YALI_DIRECT_MIN_BYTES"),
                             &s->directMinBytes, error))
    return false;
  if (!parseThresholdSetting("YALI_TWOSHOT_DIRECT_MIN_BYTES",
                             getenvOrNull("YALI_TWOSHOT_DIRECT_MIN_BYTES"), &s->twoshotDirectMinBytes, error))
    return false;
  if (!parseIntSetting("YALI_MAX_CTAS", getenvOrNull("YALI_MAX_CTAS"), 0, 0, kMaxCtas, &s->maxCtas,
                       error))
    return false;
  if (!parseIntSetting("YALI_LL_BUFFER_BYTES", getenvOrNull("YALI_LL_BUFFER_BYTES"),
                       kDefaultLLBufferBytes, 4096, INT64_C(1) << 30, &s->llBufferBytes, error))
    return false;
  if (!parseIntSetting("YALI_STAGING_BYTES", getenvOrNull("YALI_STAGING_BYTES"),
                       kDefaultStagingBytes, INT64_C(64) << 10, INT64_C(1) << 32, &s->stagingBytes,
                       error))
    return false;
  if (!parseIntSetting("YALI_PULL_BUFFER_BYTES", getenvOrNull("YALI_PULL_BUFFER_BYTES"),
                       kDefaultPullBufferBytes, 0, INT64_C(1) << 32, &s->pullBufferBytes, error))
    return false;
  // Sizes are used as 256-byte-aligned offsets.
  s->llBufferBytes = (s->llBufferBytes + 255) / 256 * 256;
  s->stagingBytes = (s->stagingBytes + 255) / 256 * 256;
  s->pullBufferBytes = (s->pullBufferBytes + 255) / 256 * 256;
  int64_t pdl = 1;
  if (!parseIntSetting("YALI_PDL", getenvOrNull("YALI_PDL"), 1, 0, 1, &pdl, error)) return false;
  s->programmaticLaunch = pdl == 1;
  int64_t shared = 0;
  if (!parseIntSetting("YALI_ALLOW_SHARED_GPU", getenvOrNull("YALI_ALLOW_SHARED_GPU"), 0, 0, 1, &shared,
                       error))
    return false;
  s->allowSharedGpu = shared == 1;
  int64_t epochStart = kDefaultTestEpochStart;
  if (!parseIntSetting("YALI_TEST_EPOCH_START", getenvOrNull("YALI_TEST_EPOCH_START"),
                       kDefaultTestEpochStart, 1, kMaxTestEpochStart, &epochStart, error))
    return false;
  s->testEpochStart = static_cast<uint64_t>(epochStart);
  // Read once, here: the selector parses this text and the digest covers it, so a rank cannot
  // choose from a file that differs from what it told its peers.
  const char* tuning = getenvOrNull("YALI_TUNING_FILE");
  s->tuningFile = tuning ? tuning : "";
  s->tuningText.clear();
  std::string why;
  if (!s->tuningFile.empty() && !readWholeFile(s->tuningFile, &s->tuningText, &why)) {
    *error = "YALI_TUNING_FILE='" + s->tuningFile + "' cannot be read: " + why;
    return false;
  }
  return true;
}

uint64_t settingsDigest(const Settings& s) {
  // Every field as text with a separator; the tuning text goes last, after its length, so that no
  // two different settings make the same key.
  std::string key = s.algo;
  for (int64_t v : {s.oneshotLLMaxBytes, s.oneshotPullMaxBytes, s.twoshotPushMinBytes, s.directMinBytes,
                    s.twoshotDirectMinBytes, s.maxCtas, s.llBufferBytes, s.stagingBytes, s.pullBufferBytes,
                    static_cast<int64_t>(s.allowSharedGpu), static_cast<int64_t>(s.testEpochStart),
                    static_cast<int64_t>(s.tuningText.size())})
    key += "|" + std::to_string(v);
  key += "|" + s.tuningText;
  return fnv1a(key.data(), key.size());
}

bool debugLoggingEnabled() {
  static const bool enabled = [] {
    const char* v = getenv("YALI_DEBUG");
    return v != nullptr && v[0] != '\0' && strcmp(v, "0") != 0;
  }();
  return enabled;
}

const SettingDoc* settingDocs(int* count) {
  *count = static_cast<int>(sizeof(kDocs) / sizeof(kDocs[0]));
  return kDocs;
}

}  // namespace yali
