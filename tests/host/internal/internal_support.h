// Helpers shared by the internal host tests (test_internal.cc, test_registry.cc): settings loaded
// from a clean environment, selector limits as a comm would fill them, temporary tuning files and
// the registry's rows by collective.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "collectives/registry.h"
#include "core/env.h"
#include "harness.h"
#include "tuning/selector.h"

namespace yali_internal_test {

using namespace yali;

inline int idx(Algo a) { return static_cast<int>(a); }
inline int idx(Collective c) { return static_cast<int>(c); }

// Every variable loadSettings reads (settingDocs' names), unset, so that the host's YALI_* cannot
// leak into a test.
inline void clearYaliEnvironment() {
  int count = 0;
  const SettingDoc* docs = settingDocs(&count);
  for (int i = 0; i < count; ++i) unsetenv(docs[i].name);
}

inline Settings defaultSettings() {
  clearYaliEnvironment();
  Settings s;
  std::string err;
  REQUIRE(loadSettings(&s, &err));
  return s;
}

// loadSettings with `env` set (on top of a clean environment), which is unset again afterwards.
inline bool loadWithEnv(const std::vector<std::pair<std::string, std::string>>& env, Settings* s, std::string* err) {
  clearYaliEnvironment();
  for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
  const bool ok = loadSettings(s, err);
  for (const auto& kv : env) unsetenv(kv.first.c_str());
  return ok;
}

inline Settings settingsWith(const std::vector<std::pair<std::string, std::string>>& env) {
  Settings s;
  std::string err;
  const bool ok = loadWithEnv(env, &s, &err);
  CHECK_MSG(ok, "%s", err.c_str());
  if (!ok) throw ::yali_test::RequireFailed();
  return s;
}

// loadSettings must refuse `name`=`value` with a message that names the variable; `name` is unset
// again afterwards. Returns the message.
inline std::string checkSettingRejected(const char* name, const char* value) {
  Settings s;
  std::string err;
  CHECK_MSG(!loadWithEnv({{name, value}}, &s, &err), "%s=%s was accepted", name, value);
  CHECK_MSG(err.find(name) != std::string::npos, "%s=%s: %s", name, value, err.c_str());
  return err;
}

// What a comm of `nranks` on Hopper gets from `s`'s buffer sizes (comm.cc: the window layout), with
// the kernels' launch bounds as thread limits (1024 for oneshot_ll, 512 for the others).
inline SelectorLimits limitsFor(const Settings& s, int nranks) {
  SelectorLimits l{};
  l.smMajor = 9;
  l.nranks = nranks;
  l.llPayloadBytes = s.llBufferBytes;
  l.stagingBytes = s.stagingBytes;
  l.pullBufferBytes = s.pullBufferBytes;
  for (int a = 0; a < kNumAlgos; ++a)
    l.maxThreads[a] = algorithm(static_cast<Algo>(a)).family == Family::kOneshotLL ? 1024 : 512;
  return l;
}

inline Selector makeSelector(const Settings& s, int nranks) {
  Selector sel;
  std::string err;
  CHECK_MSG(sel.init(s, limitsFor(s, nranks), &err), "%s", err.c_str());
  return sel;
}

// AllReduce's choice (the common case of the selector tests).
inline AlgoChoice chooseAR(const Selector& sel, size_t bytes, bool recvRegistered = false) {
  return sel.choose(Collective::kAllReduce, bytes, recvRegistered);
}

// Settings with YALI_ALGO=`names` (and nothing else set).
inline Settings forced(const std::string& names) { return settingsWith({{"YALI_ALGO", names}}); }

// loadSettings with YALI_TUNING_FILE=path (and nothing else set), as a comm would read it.
inline Settings settingsWithTuningFile(const std::string& path) { return settingsWith({{"YALI_TUNING_FILE", path}}); }

// A new temporary file holding `text`; the caller unlinks it.
inline std::string writeTempFile(const std::string& text) {
  char path[] = "/tmp/yali-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

// The rows of `c`, in the registry's (the selector's) order.
inline std::vector<const AlgorithmDesc*> rowsOf(Collective c) {
  int count = 0;
  const AlgorithmDesc* rows = algorithms(&count);
  std::vector<const AlgorithmDesc*> out;
  for (int i = 0; i < count; ++i)
    if (rows[i].collective == c) out.push_back(&rows[i]);
  return out;
}

// `c`'s row of `family`, or null.
inline const AlgorithmDesc* rowOf(Collective c, Family family) {
  for (const AlgorithmDesc* r : rowsOf(c))
    if (r->family == family) return r;
  return nullptr;
}

inline const AlgorithmDesc& fallbackOf(Collective c) {
  const AlgorithmDesc* found = nullptr;
  for (const AlgorithmDesc* r : rowsOf(c))
    if (r->bound == Bound::kFallback) found = r;
  REQUIRE(found != nullptr);
  return *found;
}

inline Collective collectiveAt(int i) { return static_cast<Collective>(i); }

}  // namespace yali_internal_test
