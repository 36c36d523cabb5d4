// Bootstrap: how ranks of one communicator find each other on one machine before any GPU memory
// is shared, and how they agree on tear-down.
//
// The unique id carries a random 128-bit token (and a checksum, so that bytes "from nowhere" are
// refused). Rank 0 listens on the abstract Unix socket "\0yali-<token>"; every other rank
// connects to it (retrying until YALI_TIMEOUT_MS) and keeps the connection for the comm's life.
// All exchanges go through rank 0: each rank sends its bytes, rank 0 answers with everyone's.
// Abstract sockets need no file and vanish with the process; they are visible to every process of
// the machine's network namespace, which is what mpirun/torchrun on one node give.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "yali/yali.h"

namespace yali {

struct UniqueIdFields {
  uint64_t token[2];
};

// Fills a fresh id (reads /dev/urandom; touches no GPU).
bool makeUniqueId(yaliUniqueId* id, std::string* error);
// Checks magic, version and checksum; false for bytes that no yaliGetUniqueId produced.
bool decodeUniqueId(const yaliUniqueId& id, UniqueIdFields* fields);

class Bootstrap {
 public:
  // Blocks until all nranks ranks are connected (bounded by timeoutMs).
  static yaliResult_t connect(const UniqueIdFields& id, int rank, int nranks, int64_t timeoutMs,
                              Bootstrap** out, std::string* error);
  ~Bootstrap();

  // `data` holds nranks * bytesPerRank bytes; this rank's part is at rank * bytesPerRank. On return
  // every part is filled on every rank.
  yaliResult_t allGather(void* data, size_t bytesPerRank, std::string* error);
  yaliResult_t barrier(std::string* error);

 private:
  Bootstrap(int rank, int nranks, int64_t timeoutMs);
  int rank_;
  int nranks_;
  int64_t timeoutMs_;
  int listenFd_ = -1;
  std::vector<int> peerFds_;  // rank 0: one per rank (own slot -1); others: [0] = link to rank 0
};

}  // namespace yali
