// printf-style formatting into a std::string, shared by the table, JSON and tuner writers.
#pragma once

#include <string>

namespace yali_perf {

// Any length: the text is measured first, never cut.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace yali_perf
