#include "perf_error.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace yali_perf {
namespace {

std::string& ErrorPrefix() {
  static std::string prefix = "yali-perf: ";
  return prefix;
}

std::vector<std::function<void(const std::string&)>>& FatalHooks() {
  static std::vector<std::function<void(const std::string&)>> hooks;
  return hooks;
}

std::atomic<bool> g_in_fatal{false};

}  // namespace

void SetErrorPrefix(const std::string& prefix) { ErrorPrefix() = prefix; }

void AddFatalHook(std::function<void(const std::string& message)> hook) {
  FatalHooks().push_back(std::move(hook));
}

void Fatal(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s%s\n", ErrorPrefix().c_str(), message.c_str());
  std::fflush(stderr);
  // A hook that fails again (say, an abort that hits the same CUDA error) must not recurse.
  if (!g_in_fatal.exchange(true)) {
    auto& hooks = FatalHooks();
    for (auto it = hooks.rbegin(); it != hooks.rend(); ++it) (*it)(message);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // _Exit, not exit: static destructors and the CUDA runtime's teardown could block behind a
  // kernel that waits for a peer that is gone.
  std::_Exit(1);
}

}  // namespace yali_perf
