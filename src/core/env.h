// Environment settings: each declared once in env.cc (name, default, meaning), read when a
// communicator is created and copied into it, so a comm never sees a setting change mid-life.
#pragma once

#include <stdint.h>

#include <string>

#include "collectives/registry.h"
#include "vocabulary.h"

namespace yali {

// Threshold settings share one convention (from the tuning design):
//   0  the algorithm is disabled
//  -1  the algorithm is used for all sizes it can handle
//  -2  the per-architecture default from the tuning table (the default)
//  >0  an explicit byte threshold
constexpr int64_t kThresholdDisabled = 0;
constexpr int64_t kThresholdAlways = -1;
constexpr int64_t kThresholdTable = -2;

// Every setting's value for one communicator. The declaration of each (its variable, default,
// range, help text and whether ranks must agree on it) is one row of env.cc's table; the
// thresholds are one row per bounded algorithm of the registry (collectives/registry.h).
struct Settings {
  int64_t timeoutMs;          // YALI_TIMEOUT_MS
  std::string algo;           // YALI_ALGO as given: "" (auto) or algorithm names, comma-separated
  int forcedAlgo[kNumCollectives];  // YALI_ALGO by collective: an Algo value, or -1 (auto)
  int64_t thresholds[kNumAlgos];    // YALI_<ALGO>_{MAX,MIN}_BYTES by Algo (-2 for the fallbacks)
  int64_t maxCtas;            // YALI_MAX_CTAS: 0 = table, else 1..kMaxCtas
  int64_t llBufferBytes;      // YALI_LL_BUFFER_BYTES: LL payload per (parity, sender)
  int64_t stagingBytes;       // YALI_STAGING_BYTES: staging per (parity, sender)
  int64_t pullBufferBytes;    // YALI_PULL_BUFFER_BYTES: oneshot_pull copy-in per parity
  int64_t p2pChannels;        // YALI_P2P_CHANNELS: rings per ordered pair (0: no point-to-point)
  int64_t p2pSlotBytes;       // YALI_P2P_SLOT_BYTES: bytes per ring slot
  int64_t p2pLLBytes;         // YALI_P2P_LL_BYTES: largest call that travels as LL packets (0: none, -1: p2p.h's rule)
  std::string tuningFile;     // YALI_TUNING_FILE: the path, for messages
  std::string tuningText;     // that file's content, read once by loadSettings: the selector parses
                              // it and the digest covers it, so that every rank compares what
                              // steers its choice, not a path that may name different files
  int64_t testEpochStart;     // YALI_TEST_EPOCH_START: a new communicator's first launch epoch
  int64_t testCopyEngineFail; // YALI_TEST_COPY_ENGINE_FAIL: which *_ce call fails half-way (0: none)
  int64_t testNoGroupJoin;    // YALI_TEST_NO_GROUP_JOIN (0 or 1): yaliGroupEnd leaves a group's streams unjoined
  int64_t programmaticLaunch; // YALI_PDL (0 or 1)
  int64_t graphMixing;        // YALI_GRAPH_MIXING (0 or 1): order a comm's calls across contexts
  int64_t allowSharedGpu;     // YALI_ALLOW_SHARED_GPU (0 or 1): ranks may share a GPU (testing)
};

// Reads every YALI_* variable, and the file YALI_TUNING_FILE names. On a malformed or out-of-range
// value, or a tuning file that cannot be read, returns false and writes a message naming the
// variable and the value into *error.
bool loadSettings(Settings* out, std::string* error);

// FNV-1a (core/hash.h) of every setting that ranks must agree on (the rows marked so in env.cc:
// what steers the algorithm choice or the window layout, i.e. YALI_ALGO, every threshold,
// YALI_MAX_CTAS, every buffer size, YALI_ALLOW_SHARED_GPU, the tuning file's content, and
// YALI_TEST_EPOCH_START, the epochs in the flags ranks exchange). Ranks compare it at set-up: a
// difference would make them run different algorithms, geometries or epochs in the same call. Not
// covered: the timeout, YALI_PDL, YALI_DEBUG, YALI_TEST_COPY_ENGINE_FAIL and YALI_TEST_NO_GROUP_JOIN, which each rank may
// set for itself.
uint64_t settingsDigest(const Settings& s);

// The parser behind loadSettings, exposed for host tests. `text` null means unset.
bool parseIntSetting(const char* name, const char* text, int64_t defaultValue, int64_t minValue,
                     int64_t maxValue, int64_t* out, std::string* error);
bool parseThresholdSetting(const char* name, const char* text, int64_t* out, std::string* error);

bool debugLoggingEnabled();

// One line per setting (name, default, meaning, whether ranks must agree), the thresholds included,
// for the README check and --help texts.
struct SettingDoc {
  const char* name;
  const char* defaultValue;
  const char* meaning;
  bool agreed;  // enters settingsDigest
};
const SettingDoc* settingDocs(int* count);
// The README's environment table, generated from settingDocs (a host test compares it with
// README.md).
std::string settingsMarkdownTable();

}  // namespace yali
