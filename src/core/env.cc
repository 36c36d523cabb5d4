#include "core/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstring>
#include <iterator>
#include <vector>

#include "collectives/common/device_state.h"
#include "core/hash.h"

namespace yali {
namespace {

// Epoch 0 is never used: the window starts zeroed, and LL packets or flags of value 0 must never
// match a launch. The largest start is the last 32-bit value, so that a test's first launches cross
// the wrap of a 32-bit counter.
constexpr int64_t kMaxTestEpochStart = INT64_C(4294967295);

// An integer setting: one row each. `field` is where loadSettings puts the value; `agreed`: the
// value enters settingsDigest (ranks must agree on it); `round256`: a buffer size, rounded up to a
// 256-byte multiple (the window's areas start 256-byte aligned).
struct IntSetting {
  const char* name;
  int64_t defaultValue;
  int64_t min;
  int64_t max;
  int64_t Settings::*field;
  bool agreed;
  bool round256;
  const char* meaning;
};

// The one table of settings (with YALI_ALGO, YALI_TUNING_FILE and YALI_DEBUG below, and one
// threshold per bounded algorithm from the registry). README.md's table is generated from it
// (settingsMarkdownTable) and checked by a host test.
const IntSetting kIntSettings[] = {
    {"YALI_TIMEOUT_MS", kDefaultTimeoutMs, 1, kMaxTimeoutMs, &Settings::timeoutMs, false, false,
     "Bound on every device-side wait for a peer and on communicator set-up, in milliseconds. A "
     "peer that does not arrive in time turns into yaliTimeout instead of a hang."},
    {"YALI_MAX_CTAS", 0, 0, kMaxCtas, &Settings::maxCtas, true, false,
     "Thread blocks per GPU: caps the LL algorithms and replaces every other cap (0: the tuning "
     "table's values: up to 64 blocks below 64 MB, at most 32 from 64 MB up, each running two "
     "two-shot pipelines of 256 threads (one at 8 ranks), so that large collectives leave SMs for overlapped compute; "
     "a set value means one pipeline per block; 64 with YALI_STAGING_BYTES=8388608 gives the fastest "
     "large AllReduce when nothing overlaps)."},
    {"YALI_LL_BUFFER_BYTES", 1 << 20, 4096, INT64_C(1) << 30, &Settings::llBufferBytes, true, true,
     "LL payload capacity per sender and parity: the largest message of one-shot LL AllReduce and "
     "the largest piece of the `*_ll` exchanges (the buffer holds twice that in packets, times 2 "
     "parities times nranks; none when no LL algorithm may be chosen)."},
    {"YALI_STAGING_BYTES", 4 << 20, INT64_C(64) << 10, INT64_C(1) << 32, &Settings::stagingBytes, true, true,
     "Staging per sender and parity, for two-shot and the `*_staged` exchanges; also caps (pipelines x "
     "slot bytes): where it holds fewer minimum-size slots than the table's blocks, fewer blocks run."},
    // 4 MB: oneshot_pull pays off up to a few MB at n = 2 (its tuning entry), and 2 x 4 MB of window
    // per rank is small next to the staging.
    {"YALI_PULL_BUFFER_BYTES", 4 << 20, 0, INT64_C(1) << 32, &Settings::pullBufferBytes, true, true,
     "oneshot_pull copy-in capacity per parity, the largest message it can take (the window "
     "holds twice that, when oneshot_pull may be chosen: not at 8 ranks by default)."},
    // Rings of 4 x 128 KB: 32 per pair at 2 ranks (16 MB per peer in the receiver's window), 16 at
    // 3, 10 at 4, 4 at 8 (collectives/p2p/p2p.h: p2pRingsPerPair): 16-32 MB of window per rank, and
    // each ring place's 8 KB LL slot (small calls) 1-2 MB more. 32 rings at 2 ranks against 16:
    // 1.05-1.2x from 1 MB to 1 GB (PERF.md, Session 41).
    {"YALI_P2P_CHANNELS", 32, 0, kMaxP2PChannels, &Settings::p2pChannels, true, false,
     "Point-to-point (yaliSend, yaliRecv; libyali-nccl's ncclSend and ncclRecv inside a node): the rings "
     "per ordered pair of ranks (at most 64 / (2 x (nranks - 1)), so that a launch that talks to every "
     "peer both ways stays within 64 blocks), each of 4 slots of YALI_P2P_SLOT_BYTES in the receiver's "
     "window, and so the blocks that carry one pair's transfer each way. 0: no rings, and the calls are "
     "refused."},
    {"YALI_P2P_SLOT_BYTES", 128 << 10, 4096, 16 << 20, &Settings::p2pSlotBytes, true, true,
     "Bytes per point-to-point ring slot: the largest chunk a block moves per handshake (a call's "
     "chunks spread over every ring, 4 KB at least). Larger slots move large transfers faster, for "
     "more memory (PERF.md, Session 39)."},
    {"YALI_P2P_LL_BYTES", -1, -1, 16 << 20, &Settings::p2pLLBytes, true, false,
     "Largest point-to-point call that travels as LL packets (8 payload bytes per 16-byte store, "
     "polled by the receiver, cut into 4 KB chunks over the rings: no handshake per chunk, half the "
     "link's bandwidth); larger calls go through the ring slots. -1: the calls that give each of a "
     "ring's two block teams at most two chunks (rings x 16 KB: 512 KB at 2 ranks, 160 KB at 4, 64 KB "
     "at 8; a team takes its LL chunks one after another); 0: never."},
    {"YALI_PDL", 1, 0, 1, &Settings::programmaticLaunch, false, false,
     "1: launch kernels with programmatic dependent launch on Hopper and newer, so back-to-back "
     "collectives overlap their launch gaps (stream order is kept); 0: plain launches."},
    {"YALI_GRAPH_MIXING", 1, 0, 1, &Settings::graphMixing, false, false,
     "1: once a communicator has captured a call in a CUDA graph, its graph replays and eager calls "
     "run in the order the host issued them, whatever streams they are on (each call waits for the "
     "previous one: an event per eager call, and event nodes in the graphs), as NCCL's graph mixing "
     "support orders them; 0: the program orders them (needed where a capture allows no event "
     "nodes, e.g. conditional bodies or device-launched graphs)."},
    {"YALI_ALLOW_SHARED_GPU", 0, 0, 1, &Settings::allowSharedGpu, true, false,
     "1: several ranks may share one GPU, for testing the algorithms where GPUs are few (the "
     "answers are checked the same way; the speed means nothing). Their blocks are capped so that "
     "every rank's kernel fits on the GPU at once. Ranks of one process (yaliCommInitAll with a "
     "device listed more than once), each on its own stream, run together; separate processes "
     "take turns on the GPU unless MPS runs, which is slower. 0: a GPU named twice is an error."},
    {"YALI_TEST_EPOCH_START", 1, 1, kMaxTestEpochStart, &Settings::testEpochStart, true, false,
     "Testing only: the first launch number (epoch) of a new communicator, so that tests cross the "
     "counter's wrap at 2^32 - 1 without four billion calls. Must match on every rank."},
    // Per rank: a test fails one rank's call and checks what the others see.
    {"YALI_TEST_COPY_ENGINE_FAIL", 0, 0, INT64_C(1) << 40, &Settings::testCopyEngineFail, false, false,
     "Testing only: on this rank, the copy-engine (`*_ce`) call of this number (from 1, per "
     "communicator) fails half-way, after its first handshake and its copies are queued, as a failing "
     "CUDA call would, and its end is not recorded either: the call returns yaliUnhandledCudaError and "
     "the communicator fails (0: never)."},
    {"YALI_TEST_NO_GROUP_JOIN", 0, 0, 1, &Settings::testNoGroupJoin, false, false,
     "Testing only: 1: the outermost yaliGroupEnd does not join the streams of a communicator whose "
     "calls in the group use several (its calls still run in call order), so that a test can show "
     "what the join, which NCCL's groups have too, prevents."},
};

const char* const kAlgoMeaning =
    "Force algorithms, comma-separated, at most one per collective (auto: the selector decides "
    "everywhere): names from the algorithm table (`yaliAlgoInfo` reports what runs). A forced `*_ll` "
    "or `oneshot_*` algorithm whose buffer is too small for a message gets its collective's fallback "
    "(`twoshot`, `*_staged`) instead; a forced algorithm for registered outputs (`twoshot_direct`, "
    "`*_direct`) on an output that is not registered gets the automatic choice among the rest.";
const char* const kTuningFileMeaning =
    "A tuning table written by `yali-perf --tune` (format: `src/tuning/selector.h`), used instead of "
    "the built-in one. Read once "
    "when a communicator is created; every rank must see the same content (a file that cannot be "
    "read is an error).";
const char* const kDebugMeaning = "1: log set-up decisions and errors to stderr.";

// The threshold of bounded algorithm `a`: text for its row.
std::string thresholdMeaning(const AlgorithmDesc& a) {
  const std::string size = a.collective == Collective::kAllReduce ? "message" : "piece (the bytes one rank sends to one receiver)";
  std::string s = a.bound == Bound::kUpTo ? "Largest " + size + " for " : "Smallest " + size + " for ";
  s += "`" + std::string(a.name) + "` (" + collectiveName(a.collective) + ") (0 never, -1 every size";
  s += a.bound == Bound::kUpTo ? " that fits its buffer" : "";
  s += ", -2 the tuning table's value, >0 bytes).";
  if (a.needsRegisteredRecv) s += " Only for outputs registered on every rank (yaliCommRegister).";
  return s;
}

// settingDocs' rows, built once: the table above, YALI_ALGO, the thresholds, YALI_TUNING_FILE,
// YALI_DEBUG. `texts` owns the strings the rows point to; it is complete before any row is made.
struct DocTable {
  struct Text {
    std::string name, defaultValue, meaning;
    bool agreed;
  };
  std::vector<Text> texts;
  std::vector<SettingDoc> rows;
};
const DocTable& docTable() {
  static const DocTable* table = [] {
    auto* t = new DocTable();
    auto add = [&](std::string name, std::string def, std::string meaning, bool agreed) {
      t->texts.push_back({std::move(name), std::move(def), std::move(meaning), agreed});
    };
    add("YALI_TIMEOUT_MS", std::to_string(kIntSettings[0].defaultValue), kIntSettings[0].meaning, false);
    add("YALI_ALGO", "auto", kAlgoMeaning, true);
    int count = 0;
    const AlgorithmDesc* rows = algorithms(&count);
    for (int i = 0; i < count; ++i)
      if (rows[i].bound != Bound::kFallback) add(thresholdSettingName(rows[i]), "-2", thresholdMeaning(rows[i]), true);
    for (size_t i = 1; i < std::size(kIntSettings); ++i)
      add(kIntSettings[i].name, std::to_string(kIntSettings[i].defaultValue), kIntSettings[i].meaning, kIntSettings[i].agreed);
    add("YALI_TUNING_FILE", "", kTuningFileMeaning, true);
    add("YALI_DEBUG", "0", kDebugMeaning, false);
    for (const DocTable::Text& x : t->texts)
      t->rows.push_back({x.name.c_str(), x.defaultValue.c_str(), x.meaning.c_str(), x.agreed});
    return t;
  }();
  return *table;
}

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
  for (const IntSetting& row : kIntSettings) {
    if (!parseIntSetting(row.name, getenvOrNull(row.name), row.defaultValue, row.min, row.max, &(s->*row.field), error))
      return false;
    if (row.round256) s->*row.field = (s->*row.field + 255) / 256 * 256;
  }
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  for (int i = 0; i < count; ++i) {
    s->thresholds[i] = kThresholdTable;
    if (rows[i].bound == Bound::kFallback) continue;
    const std::string name = thresholdSettingName(rows[i]);
    if (!parseThresholdSetting(name.c_str(), getenvOrNull(name.c_str()), &s->thresholds[i], error)) return false;
  }
  // YALI_ALGO: "auto" (or unset), or algorithm names separated by commas (spaces around a name are
  // ignored), at most one per collective.
  const char* algo = getenvOrNull("YALI_ALGO");
  s->algo = algo == nullptr ? "" : algo;
  for (int& f : s->forcedAlgo) f = -1;
  auto trimmed = [](const std::string& t) {
    const size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
    return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
  };
  if (trimmed(s->algo) == "auto") s->algo.clear();
  size_t start = 0;
  while (!s->algo.empty() && start <= s->algo.size()) {
    size_t end = s->algo.find(',', start);
    if (end == std::string::npos) end = s->algo.size();
    const std::string name = trimmed(s->algo.substr(start, end - start));
    start = end + 1;
    Algo named;
    if (name.empty() || !algoFromName(name, &named)) {
      *error = "YALI_ALGO='" + s->algo + "': " + (name.empty() ? std::string("an empty name") : "'" + name + "'") +
               " is not an algorithm (auto alone, or names from: " + algoNameList() + ")";
      return false;
    }
    int& slot = s->forcedAlgo[static_cast<int>(algorithm(named).collective)];
    if (slot >= 0) {
      *error = "YALI_ALGO='" + s->algo + "' names two algorithms of " + collectiveName(algorithm(named).collective) +
               ": " + algoName(static_cast<Algo>(slot)) + " and " + name;
      return false;
    }
    slot = static_cast<int>(named);
  }
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
  // Every agreed value as text with a separator; the tuning text goes last, after its length, so
  // that no two different settings make the same key.
  std::string key;
  for (int f : s.forcedAlgo) key += std::to_string(f) + ",";
  for (int64_t t : s.thresholds) key += "|" + std::to_string(t);
  for (const IntSetting& row : kIntSettings)
    if (row.agreed) key += "|" + std::string(row.name) + "=" + std::to_string(s.*row.field);
  key += "|" + std::to_string(s.tuningText.size()) + "|" + s.tuningText;
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
  const DocTable& t = docTable();
  *count = static_cast<int>(t.rows.size());
  return t.rows.data();
}

std::string settingsMarkdownTable() {
  std::string out = "| Variable | Default | Meaning |\n| --- | --- | --- |\n";
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  for (int i = 0; i < count; ++i)
    out += std::string("| `") + docs[i].name + "` | " + (docs[i].defaultValue[0] ? std::string("`") + docs[i].defaultValue + "`" : "(unset)") +
           " | " + docs[i].meaning + " |\n";
  return out;
}

}  // namespace yali
