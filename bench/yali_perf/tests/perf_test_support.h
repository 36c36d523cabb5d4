// What the yali-perf host tests share: counted checks that print each failure with its line, and
// parsing a command line given as words.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "perf_args.h"

namespace yali_perf_test {

inline int g_passed = 0;
inline int g_failed = 0;

inline void Expect(bool condition, const std::string& what, int line) {
  if (condition) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL (line %d): %s\n", line, what.c_str());
  }
}

// The last line of a test program: the counts, and its exit status.
inline int Summary() {
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

inline bool Parse(const std::vector<std::string>& words, yali_perf::PerfArgs* args, std::string* error) {
  std::vector<const char*> argv = {"yali-perf"};
  for (const std::string& word : words) argv.push_back(word.c_str());
  return yali_perf::ParsePerfArgs(static_cast<int>(argv.size()), argv.data(), args, error);
}

inline bool ParseOk(const std::vector<std::string>& words, yali_perf::PerfArgs* args) {
  std::string error;
  const bool ok = Parse(words, args, &error);
  if (!ok) std::printf("  unexpected parse error: %s\n", error.c_str());
  return ok;
}

}  // namespace yali_perf_test

#define EXPECT(condition) ::yali_perf_test::Expect((condition), #condition, __LINE__)
