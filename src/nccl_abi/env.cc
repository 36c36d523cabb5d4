#include "nccl_abi/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace yali::nccl_abi {

namespace {

Settings readSettings() {
  Settings s;
  if (const char* v = getenv("YALI_NCCL_LIBRARY")) s.library = v;
  const char* debug = getenv("YALI_NCCL_DEBUG");
  s.debug = debug != nullptr && debug[0] != '\0' && strcmp(debug, "0") != 0;
  s.disabled = parseDisableList(getenv("YALI_NCCL_DISABLE"), &s.unknownDisabled);
  s.registerYali = parseRegisterSetting(getenv("YALI_NCCL_REGISTER"));
  // Read as NCCL reads an integer setting (NCCL_PARAM: strtoll, base 0; unset or unparsable keeps
  // the default 1). NCCL 2.29's per-comm config field for it is not read.
  const char* mixing = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  char* end = nullptr;
  const long long value = mixing != nullptr && mixing[0] != '\0' ? strtoll(mixing, &end, 0) : 1;
  s.graphMixing = end == mixing || value != 0;
  // As libyali reads it (vocabulary.h: its default, 1 to kMaxTimeoutMs; out of range or unparsable
  // keeps the default here).
  if (const char* t = getenv("YALI_TIMEOUT_MS"); t != nullptr && t[0] != '\0') {
    char* tend = nullptr;
    const long long ms = strtoll(t, &tend, 0);
    if (tend != t && *tend == '\0' && ms >= 1 && ms <= kMaxTimeoutMs) s.timeoutMs = ms;
  }
  if (const char* d = getenv("YALI_NCCL_TEST_SETUP_DELAY"); d != nullptr && d[0] != '\0') {
    int rank = -1;
    char round[16] = {};
    long long ms = 0;
    if (sscanf(d, "%d:%15[a-z]:%lld", &rank, round, &ms) == 3 && rank >= 0 && ms > 0) {
      s.testDelayRank = rank;
      s.testDelayRound = round;
      s.testDelayMs = ms;
    }
  }
  const char* noJoin = getenv("YALI_NCCL_TEST_NO_STREAM_JOIN");
  s.testNoStreamJoin = noJoin != nullptr && strcmp(noJoin, "1") == 0;
  const char* callOrder = getenv("YALI_NCCL_TEST_CALL_ORDER");
  s.testCallOrder = callOrder != nullptr && strcmp(callOrder, "1") == 0;
  // libyali reads its settings when a communicator is made, after this (the first call of ours).
  if (!s.graphMixing) setenv("YALI_GRAPH_MIXING", "0", /*overwrite=*/0);
  return s;
}

}  // namespace

const Settings& settings() {
  static const Settings s = readSettings();
  return s;
}

}  // namespace yali::nccl_abi
