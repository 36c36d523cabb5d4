// Fatal errors of yali-perf: one message on stderr, then cleanup hooks (tell peer processes, abort
// communicators, remove rendezvous files), then exit(1). Host-only.
#ifndef YALI_PERF_PERF_ERROR_H_
#define YALI_PERF_PERF_ERROR_H_

#include <functional>
#include <string>

namespace yali_perf {

// Prepended to every fatal message, e.g. "yali-perf: rank 3: ".
void SetErrorPrefix(const std::string& prefix);

// Runs before a fatal exit, most recently added first, each at most once. The argument is the
// message being reported.
void AddFatalHook(std::function<void(const std::string& message)> hook);

[[noreturn]] void Fatal(const std::string& message);

}  // namespace yali_perf

#endif  // YALI_PERF_PERF_ERROR_H_
