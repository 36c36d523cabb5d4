// The calling host thread, by a number never given to another thread of the process. Not
// std::thread::id: glibc gives a new thread the id of one joined before it, and that thread's
// cudaStreamPerThread is a new stream (the launch order of enqueue.cc and libyali-nccl's scratch
// order tell cudaStreamPerThread apart by thread). Each library that includes this counts its own.
#pragma once

#include <stdint.h>

#include <atomic>

namespace yali {

inline uint64_t threadToken() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t token = next.fetch_add(1);
  return token;
}

}  // namespace yali
