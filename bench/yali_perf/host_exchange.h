// A tiny host-side exchange among the processes of one job on one machine, through files in a
// directory, so that yali-perf needs no MPI: allgather of a byte blob, broadcast, barrier.
//
// Layout of the directory <base>/yali-perf-<uid>-<job id>/ (all names written atomically: a temp
// file renamed into place, so a name that exists is complete):
//   session                  written by rank 0: a random nonce naming this run
//   <nonce>.join.<rank>      written by rank > 0 once it has read the session: its pid
//   <nonce>.ready            written by rank 0 once every rank joined: all pids, in rank order
//   <nonce>.d<seq>.<rank>    rank's blob for exchange number <seq> (1, 2, ...)
//   <nonce>.abort.<rank>     rank failed; the text says why (peers stop waiting and report it)
//   <nonce>.bye.<rank>       rank > 0 has finished its last exchange (rank 0 may remove the dir)
// Rank 0 empties the directory when it starts, so files left by a crashed run with the same job id
// are ignored: a rank that read a stale session follows the new nonce when it appears, and accepts
// a `ready` only if it lists its own pid.
//
// Every wait is bounded by Options::timeout_s and fails with a message naming the missing ranks.
// Host-only (no CUDA); unit-tested by forking processes.
#ifndef YALI_PERF_HOST_EXCHANGE_H_
#define YALI_PERF_HOST_EXCHANGE_H_

#include <chrono>
#include <string>
#include <vector>

namespace yali_perf {

class HostExchange {
 public:
  struct Options {
    std::string base_dir = "/tmp";
    std::string job_id;
    int rank = 0;
    int nranks = 1;
    double timeout_s = 120.0;
  };

  HostExchange() = default;
  HostExchange(const HostExchange&) = delete;
  HostExchange& operator=(const HostExchange&) = delete;
  // Removes this rank's own files if Close() was not reached (a failure path).
  ~HostExchange();

  // Creates or joins the directory and meets every rank (the handshake above).
  bool Open(const Options& options, std::string* error);

  // all->at(r) = rank r's `mine`. Every rank must call the same sequence of exchanges.
  bool AllGather(const std::string& mine, std::vector<std::string>* all, std::string* error);
  // *blob = root's *blob on every rank.
  bool Broadcast(int root, std::string* blob, std::string* error);
  bool Barrier(std::string* error);

  // Failure path: tells the peers that this rank failed, so that their waits end with `reason`
  // instead of a timeout, and removes this rank's other files. The exchange is unusable after.
  void PostAbort(const std::string& reason);
  // True when some peer posted an abort; *message names it and says why. Costs nranks stat()s.
  bool PeerAborted(std::string* message) const;

  // Orderly end: a last barrier, then rank 0 waits for every rank's `bye` and removes the directory.
  bool Close(std::string* error);

  const std::string& directory() const { return dir_; }
  int rank() const { return options_.rank; }
  int nranks() const { return options_.nranks; }
  bool is_open() const { return open_; }

 private:
  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }
  std::string DataName(long seq, int rank) const;
  bool WriteAtomic(const std::string& name, const std::string& content, std::string* error) const;
  bool ReadWhole(const std::string& name, std::string* content) const;
  bool Exists(const std::string& name) const;
  void RemoveQuietly(const std::string& name) const;
  void RemoveAllEntries() const;
  void RemoveOwnFiles() const;
  // Waits until every name in `names` exists; `what` and `ranks` describe them for the error.
  bool WaitForAll(const std::vector<std::string>& names, const std::vector<int>& ranks,
                  const std::string& what, std::string* error) const;
  bool JoinAsRankZero(std::string* error);
  bool JoinAsPeer(std::string* error);

  Options options_;
  std::string dir_;
  std::string nonce_;
  long seq_ = 0;
  bool open_ = false;
  bool closed_ = false;
};

}  // namespace yali_perf

#endif  // YALI_PERF_HOST_EXCHANGE_H_
