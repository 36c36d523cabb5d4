#include "host_exchange.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace yali_perf {
namespace {

using Clock = std::chrono::steady_clock;

// Polls quickly at first (an exchange between ranks that are already in step completes in
// microseconds), then backs off to 1 ms so that a long wait does not burn a shared CPU core.
class PollBackoff {
 public:
  void Pause() {
    ++polls_;
    if (polls_ < 200) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (sleep_us_ < 1000) sleep_us_ *= 2;
  }

 private:
  int polls_ = 0;
  int sleep_us_ = 10;
};

// Job ids come from the environment; keep only characters that are safe in a file name.
std::string SanitizeForFileName(const std::string& text) {
  std::string safe;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    safe.push_back(ok ? c : '_');
  }
  if (safe.empty() || safe[0] == '.') safe.insert(0, "j");
  return safe.substr(0, 128);
}

std::string NewNonce() {
  std::random_device device;
  unsigned long long value = (static_cast<unsigned long long>(device()) << 32) ^ device();
  value ^= static_cast<unsigned long long>(Clock::now().time_since_epoch().count());
  value ^= static_cast<unsigned long long>(getpid()) << 17;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", value);
  return text;
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return text + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    text += (i ? "," : "") + std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

HostExchange::~HostExchange() {
  if (open_ && !closed_) RemoveOwnFiles();
}

void HostExchange::RemoveOwnFiles() const {
  // A failure path: take back this rank's data files so that /tmp does not fill up over many runs.
  // An abort file stays, so that peers still waiting learn why; the next run's rank 0 removes it.
  RemoveQuietly(DataName(seq_, options_.rank));
  RemoveQuietly(DataName(seq_ - 1, options_.rank));
  RemoveQuietly(nonce_ + ".join." + std::to_string(options_.rank));
}

std::string HostExchange::DataName(long seq, int rank) const {
  return nonce_ + ".d" + std::to_string(seq) + "." + std::to_string(rank);
}

bool HostExchange::WriteAtomic(const std::string& name, const std::string& content,
                               std::string* error) const {
  std::string temp = PathOf(".tmp." + name + "." + std::to_string(getpid()));
  int fd = ::open(temp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create " + temp + ": " + std::strerror(errno);
    return false;
  }
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = "cannot write " + temp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      return false;
    }
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(temp.c_str(), PathOf(name).c_str()) != 0) {
    *error = "cannot rename " + temp + " to " + PathOf(name) + ": " + std::strerror(errno);
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

bool HostExchange::ReadWhole(const std::string& name, std::string* content) const {
  std::ifstream file(PathOf(name), std::ios::binary);
  if (!file) return false;
  std::ostringstream buffer;
  buffer << file.rdbuf();
  *content = buffer.str();
  return true;
}

bool HostExchange::Exists(const std::string& name) const {
  struct stat info;
  return ::stat(PathOf(name).c_str(), &info) == 0;
}

void HostExchange::RemoveQuietly(const std::string& name) const { ::unlink(PathOf(name).c_str()); }

void HostExchange::RemoveAllEntries() const {
  DIR* directory = ::opendir(dir_.c_str());
  if (directory == nullptr) return;
  while (struct dirent* entry = ::readdir(directory)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    RemoveQuietly(name);
  }
  ::closedir(directory);
}

bool HostExchange::WaitForAll(const std::vector<std::string>& names, const std::vector<int>& ranks,
                              const std::string& what, std::string* error) const {
  const auto deadline = Clock::now() + std::chrono::duration<double>(options_.timeout_s);
  auto next_abort_check = Clock::now();
  std::vector<bool> present(names.size(), false);
  PollBackoff backoff;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!present[i]) present[i] = Exists(names[i]);
      all = all && present[i];
    }
    if (all) return true;
    auto now = Clock::now();
    if (now >= next_abort_check) {
      std::string message;
      if (PeerAborted(&message)) {
        *error = "while waiting for " + what + ": " + message;
        return false;
      }
      next_abort_check = now + std::chrono::milliseconds(100);
    }
    if (now >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < names.size(); ++i)
        if (!present[i]) missing.push_back(ranks[i]);
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.0f", options_.timeout_s);
      *error = "rank " + std::to_string(options_.rank) + " timed out after " + seconds +
               " s waiting for " + what + " from rank(s) " + JoinRanks(missing) + " (directory " +
               dir_ + "; did every rank start, with the same job id?)";
      return false;
    }
    backoff.Pause();
  }
}

bool HostExchange::Open(const Options& options, std::string* error) {
  options_ = options;
  if (options_.nranks < 1 || options_.rank < 0 || options_.rank >= options_.nranks) {
    *error = "bad rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.nranks);
    return false;
  }
  dir_ = options_.base_dir + "/yali-perf-" + std::to_string(getuid()) + "-" +
         SanitizeForFileName(options_.job_id);
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create rendezvous directory " + dir_ + ": " + std::strerror(errno) +
             " (set YALI_PERF_RENDEZVOUS_DIR to a writable directory)";
    return false;
  }
  struct stat info;
  if (::lstat(dir_.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != getuid()) {
    *error = "rendezvous path " + dir_ + " is not a directory owned by this user";
    return false;
  }
  bool joined = options_.rank == 0 ? JoinAsRankZero(error) : JoinAsPeer(error);
  if (!joined) return false;
  open_ = true;
  return true;
}

bool HostExchange::JoinAsRankZero(std::string* error) {
  RemoveAllEntries();  // files of an earlier run that died with the same job id
  nonce_ = NewNonce();
  if (!WriteAtomic("session", nonce_, error)) return false;
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (int r = 1; r < options_.nranks; ++r) {
    names.push_back(nonce_ + ".join." + std::to_string(r));
    ranks.push_back(r);
  }
  if (!WaitForAll(names, ranks, "the first contact", error)) return false;
  std::string pids = std::to_string(getpid());
  for (const std::string& name : names) {
    std::string pid;
    if (!ReadWhole(name, &pid)) {
      *error = "cannot read " + PathOf(name);
      return false;
    }
    pids += " " + pid;
  }
  return WriteAtomic(nonce_ + ".ready", pids, error);
}

bool HostExchange::JoinAsPeer(std::string* error) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(options_.timeout_s);
  const std::string my_pid = std::to_string(getpid());
  std::string current;
  PollBackoff backoff;
  for (;;) {
    std::string session;
    if (ReadWhole("session", &session) && !session.empty() && session != current) {
      // A new nonce: either the first one we see, or rank 0 replaced a stale one.
      // The write can lose a race with rank 0 emptying the directory of a stale run; then try
      // again on the next poll.
      std::string write_error;
      if (WriteAtomic(session + ".join." + std::to_string(options_.rank), my_pid, &write_error)) {
        current = session;
        nonce_ = current;
      }
    }
    std::string ready;
    if (!current.empty() && ReadWhole(current + ".ready", &ready)) {
      std::istringstream stream(ready);
      std::vector<std::string> pids;
      for (std::string pid; stream >> pid;) pids.push_back(pid);
      if (static_cast<int>(pids.size()) == options_.nranks && pids[options_.rank] == my_pid)
        return true;  // else a stale `ready`; keep waiting for rank 0's new session
    }
    if (Clock::now() >= deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.0f", options_.timeout_s);
      *error = "rank " + std::to_string(options_.rank) + " timed out after " + seconds +
               " s waiting for rank 0 to open the session in " + dir_ +
               " (is rank 0 running, with the same job id and YALI_PERF_RENDEZVOUS_DIR?)";
      return false;
    }
    backoff.Pause();
  }
}

bool HostExchange::AllGather(const std::string& mine, std::vector<std::string>* all,
                             std::string* error) {
  if (!open_ || closed_) {
    *error = "host exchange used while not open";
    return false;
  }
  ++seq_;
  if (!WriteAtomic(DataName(seq_, options_.rank), mine, error)) return false;
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (int r = 0; r < options_.nranks; ++r) {
    names.push_back(DataName(seq_, r));
    ranks.push_back(r);
  }
  if (!WaitForAll(names, ranks, "exchange #" + std::to_string(seq_), error)) return false;
  all->assign(options_.nranks, std::string());
  for (int r = 0; r < options_.nranks; ++r) {
    if (r == options_.rank) {
      (*all)[r] = mine;
    } else if (!ReadWhole(names[r], &(*all)[r])) {
      *error = "cannot read " + PathOf(names[r]);
      return false;
    }
  }
  // Every rank has now written exchange seq_, so every rank has finished reading seq_ - 1: our
  // file from that exchange is no longer needed by anyone.
  RemoveQuietly(DataName(seq_ - 1, options_.rank));
  return true;
}

bool HostExchange::Broadcast(int root, std::string* blob, std::string* error) {
  std::vector<std::string> all;
  std::string mine = options_.rank == root ? *blob : std::string();
  if (!AllGather(mine, &all, error)) return false;
  *blob = all[root];
  return true;
}

bool HostExchange::Barrier(std::string* error) {
  std::vector<std::string> all;
  return AllGather(std::string(), &all, error);
}

void HostExchange::PostAbort(const std::string& reason) {
  if (!open_ || closed_ || nonce_.empty()) return;
  std::string ignored;
  WriteAtomic(nonce_ + ".abort." + std::to_string(options_.rank), reason, &ignored);
  RemoveOwnFiles();
  closed_ = true;
}

bool HostExchange::PeerAborted(std::string* message) const {
  if (nonce_.empty()) return false;
  for (int r = 0; r < options_.nranks; ++r) {
    if (r == options_.rank) continue;
    std::string reason;
    if (ReadWhole(nonce_ + ".abort." + std::to_string(r), &reason)) {
      *message = "rank " + std::to_string(r) + " failed: " + reason;
      return true;
    }
  }
  return false;
}

bool HostExchange::Close(std::string* error) {
  if (!open_ || closed_) return true;
  if (!Barrier(error)) return false;
  closed_ = true;
  if (options_.rank != 0) {
    // Our file of the last barrier may still be unread by a slower peer: rank 0 removes it, after
    // every rank's `bye` says that it has finished reading.
    RemoveQuietly(nonce_ + ".join." + std::to_string(options_.rank));
    return WriteAtomic(nonce_ + ".bye." + std::to_string(options_.rank), "", error);
  }
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (int r = 1; r < options_.nranks; ++r) {
    names.push_back(nonce_ + ".bye." + std::to_string(r));
    ranks.push_back(r);
  }
  bool ok = WaitForAll(names, ranks, "the last goodbye", error);
  RemoveAllEntries();
  ::rmdir(dir_.c_str());
  return ok;
}

}  // namespace yali_perf
