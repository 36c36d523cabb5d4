// Small helpers the case files share: elapsed time, and reading error messages.
#pragma once

#include <cctype>
#include <chrono>
#include <string>

namespace yt {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A C string that may be NULL (yaliGetLastError never returns NULL; a test must not crash if it did).
inline std::string str(const char* p) { return p ? p : "(null)"; }

inline std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// "rank R" as a whole number in `msg` ("rank 1", not "rank 10").
inline bool namesRank(const std::string& msg, int r) {
  const std::string key = "rank " + std::to_string(r);
  for (size_t pos = msg.find(key); pos != std::string::npos; pos = msg.find(key, pos + 1)) {
    const size_t end = pos + key.size();
    if (end == msg.size() || !std::isdigit((unsigned char)msg[end])) return true;
  }
  return false;
}

}  // namespace yt
