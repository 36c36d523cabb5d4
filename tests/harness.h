// A tiny test harness for the host tests (no framework dependency: GoogleTest is not installed on the
// GPU machines). Tests register themselves with TEST(name); CHECK* record a failure and go on;
// REQUIRE* record a failure and leave the test. runAllTests() runs them in file order (optionally
// only those whose name contains argv[1]) and ends with the line "N passed, N failed".
#ifndef YALI_TESTS_HARNESS_H_
#define YALI_TESTS_HARNESS_H_

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace yali_test {

struct TestCase {
  const char* name;
  void (*fn)();
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

// Failures recorded by the test that is running now.
inline int& currentFailures() {
  static int n = 0;
  return n;
}

struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};

// The name of the test that is running now (for a watchdog's message).
inline const char*& currentTestName() {
  static const char* name = "";
  return name;
}

// Called before each test with its name (for example, to re-arm a watchdog alarm); may be null.
inline void (*&beforeEachTest())(const char*) {
  static void (*hook)(const char*) = nullptr;
  return hook;
}

// Thrown by REQUIRE* to leave the running test.
struct RequireFailed {};

inline void reportFailure(const char* file, int line, const std::string& what) {
  ++currentFailures();
  std::printf("    %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stdout);
}

inline std::string quoted(const char* s) {
  if (s == nullptr) return "(null)";
  return std::string("\"") + s + "\"";
}

inline int runAllTests(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0, failed = 0;
  for (const TestCase& t : registry()) {
    if (filter != nullptr && std::strstr(t.name, filter) == nullptr) continue;
    currentFailures() = 0;
    currentTestName() = t.name;
    if (beforeEachTest() != nullptr) beforeEachTest()(t.name);
    try {
      t.fn();
    } catch (const RequireFailed&) {
    }
    if (currentFailures() == 0) {
      ++passed;
      std::printf("PASS  %s\n", t.name);
    } else {
      ++failed;
      std::printf("FAIL  %s (%d failed checks)\n", t.name, currentFailures());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace yali_test

#define YT_CAT2(a, b) a##b
#define YT_CAT(a, b) YT_CAT2(a, b)

#define TEST(name)                                                                  \
  static void name();                                                               \
  static ::yali_test::Registrar YT_CAT(registrar_, name)(#name, &name);             \
  static void name()

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) ::yali_test::reportFailure(__FILE__, __LINE__, "CHECK(" #cond ")");  \
  } while (0)

// Like CHECK, with a printf-style explanation.
#define CHECK_MSG(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      char yt_buf_[1024];                                                           \
      std::snprintf(yt_buf_, sizeof yt_buf_, __VA_ARGS__);                          \
      ::yali_test::reportFailure(__FILE__, __LINE__,                                \
                                 std::string("CHECK(" #cond "): ") + yt_buf_);       \
    }                                                                               \
  } while (0)

#define CHECK_EQ(a, b)                                                              \
  do {                                                                              \
    long long yt_a_ = (long long)(a), yt_b_ = (long long)(b);                       \
    if (yt_a_ != yt_b_) {                                                           \
      ::yali_test::reportFailure(__FILE__, __LINE__,                                \
                                 "CHECK_EQ(" #a ", " #b "): " + std::to_string(yt_a_) + \
                                     " != " + std::to_string(yt_b_));               \
    }                                                                               \
  } while (0)

#define REQUIRE(cond)                                                               \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ::yali_test::reportFailure(__FILE__, __LINE__, "REQUIRE(" #cond ")");          \
      throw ::yali_test::RequireFailed();                                           \
    }                                                                               \
  } while (0)

#endif  // YALI_TESTS_HARNESS_H_
