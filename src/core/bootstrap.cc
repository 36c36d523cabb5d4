#include "core/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "core/hash.h"

namespace yali {
namespace {

// Unique id layout (128 bytes, all fields little-endian as written by this machine):
//   [0, 8)    magic "YALIUID\0"
//   [8, 12)   format version (1)
//   [12, 16)  reserved, zero
//   [16, 32)  token: 128 random bits; names the rendezvous socket
//   [32, 40)  checksum: FNV-1a over bytes [0, 32)
//   [40, 128) zero
constexpr char kMagic[8] = {'Y', 'A', 'L', 'I', 'U', 'I', 'D', '\0'};
constexpr uint32_t kIdVersion = 1;

int64_t nowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

socklen_t socketAddress(const UniqueIdFields& id, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // Abstract namespace: sun_path[0] == '\0'.
  int len = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "yali-%016llx%016llx",
                     static_cast<unsigned long long>(id.token[0]),
                     static_cast<unsigned long long>(id.token[1]));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

std::string errnoText(const char* what) { return std::string(what) + ": " + strerror(errno); }

// Sends or receives exactly `n` bytes before `deadline`.
bool transfer(int fd, void* buf, size_t n, bool sending, int64_t deadline, std::string* error) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    int64_t left = deadline - nowMs();
    if (left <= 0) {
      *error = sending ? "timed out sending to a peer" : "timed out waiting for a peer";
      return false;
    }
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int pr = poll(&pfd, 1, static_cast<int>(left > 1000 ? 1000 : left));
    if (pr < 0 && errno != EINTR) {
      *error = errnoText("poll");
      return false;
    }
    if (pr <= 0) continue;
    ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0) {
      *error = "a peer closed its connection (it exited or aborted)";
      return false;
    }
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *error = errnoText(sending ? "send" : "recv");
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
};
constexpr uint32_t kHelloMagic = 0x59414c49;  // "YALI"

}  // namespace

bool makeUniqueId(yaliUniqueId* id, std::string* error) {
  memset(id, 0, sizeof(*id));
  unsigned char* b = reinterpret_cast<unsigned char*>(id->internal);
  memcpy(b, kMagic, 8);
  memcpy(b + 8, &kIdVersion, 4);
  FILE* f = fopen("/dev/urandom", "rb");
  if (f == nullptr || fread(b + 16, 1, 16, f) != 16) {
    if (f) fclose(f);
    *error = errnoText("reading /dev/urandom");
    return false;
  }
  fclose(f);
  uint64_t sum = fnv1a(b, 32);
  memcpy(b + 32, &sum, 8);
  return true;
}

bool decodeUniqueId(const yaliUniqueId& id, UniqueIdFields* fields) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(id.internal);
  if (memcmp(b, kMagic, 8) != 0) return false;
  uint32_t version;
  memcpy(&version, b + 8, 4);
  if (version != kIdVersion) return false;
  uint64_t sum;
  memcpy(&sum, b + 32, 8);
  if (sum != fnv1a(b, 32)) return false;
  memcpy(fields->token, b + 16, 16);
  return true;
}

Bootstrap::Bootstrap(int rank, int nranks, int64_t timeoutMs)
    : rank_(rank), nranks_(nranks), timeoutMs_(timeoutMs), peerFds_(nranks, -1) {}

Bootstrap::~Bootstrap() {
  for (int fd : peerFds_)
    if (fd >= 0) close(fd);
  if (listenFd_ >= 0) close(listenFd_);
}

yaliResult_t Bootstrap::connect(const UniqueIdFields& id, int rank, int nranks, int64_t timeoutMs,
                                Bootstrap** out, std::string* error) {
  Bootstrap* b = new Bootstrap(rank, nranks, timeoutMs);
  sockaddr_un addr;
  socklen_t addrLen = socketAddress(id, &addr);
  const int64_t deadline = nowMs() + timeoutMs;
  auto bail = [&](yaliResult_t code, const std::string& msg) {
    *error = msg;
    delete b;
    return code;
  };

  if (rank == 0) {
    b->listenFd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->listenFd_ < 0) return bail(yaliSystemError, errnoText("socket"));
    if (bind(b->listenFd_, reinterpret_cast<sockaddr*>(&addr), addrLen) != 0) {
      if (errno == EADDRINUSE)
        return bail(yaliInvalidUsage,
                    "uniqueId is already in use by another communicator's rank 0 (each "
                    "communicator needs a fresh yaliGetUniqueId)");
      return bail(yaliSystemError, errnoText("bind"));
    }
    if (listen(b->listenFd_, nranks) != 0) return bail(yaliSystemError, errnoText("listen"));
    for (int accepted = 1; accepted < nranks;) {
      int64_t left = deadline - nowMs();
      if (left <= 0)
        return bail(yaliTimeout, "timed out after " + std::to_string(timeoutMs) +
                                     " ms waiting for " + std::to_string(nranks - accepted) +
                                     " rank(s) to join (YALI_TIMEOUT_MS)");
      pollfd pfd{b->listenFd_, POLLIN, 0};
      int pr = poll(&pfd, 1, static_cast<int>(left > 1000 ? 1000 : left));
      if (pr <= 0) continue;
      int fd = accept4(b->listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Hello h;
      std::string err;
      if (!transfer(fd, &h, sizeof(h), false, deadline, &err) || h.magic != kHelloMagic) {
        close(fd);
        continue;  // not one of ours, or it went away: keep listening
      }
      if (h.nranks != nranks) {
        close(fd);
        return bail(yaliInvalidUsage, "rank " + std::to_string(h.rank) + " passed nranks=" +
                                          std::to_string(h.nranks) + " but rank 0 passed nranks=" +
                                          std::to_string(nranks));
      }
      if (h.rank <= 0 || h.rank >= nranks || b->peerFds_[h.rank] >= 0) {
        close(fd);
        return bail(yaliInvalidUsage,
                    "two processes joined as rank " + std::to_string(h.rank) + " of one communicator");
      }
      b->peerFds_[h.rank] = fd;
      ++accepted;
    }
    // The socket name is free for reuse once everyone is in.
    close(b->listenFd_);
    b->listenFd_ = -1;
  } else {
    int fd = -1;
    while (true) {
      fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return bail(yaliSystemError, errnoText("socket"));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), addrLen) == 0) break;
      close(fd);
      fd = -1;
      if (nowMs() > deadline)
        return bail(yaliTimeout, "timed out after " + std::to_string(timeoutMs) +
                                     " ms waiting for rank 0 of this uniqueId to start "
                                     "(YALI_TIMEOUT_MS)");
      usleep(2000);  // rank 0 has not bound the socket yet
    }
    b->peerFds_[0] = fd;
    Hello h{kHelloMagic, rank, nranks};
    std::string err;
    if (!transfer(fd, &h, sizeof(h), true, deadline, &err)) return bail(yaliRemoteError, err);
  }
  *out = b;
  return yaliSuccess;
}

yaliResult_t Bootstrap::allGather(void* data, size_t bytesPerRank, std::string* error) {
  char* d = static_cast<char*>(data);
  const int64_t deadline = nowMs() + timeoutMs_;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_; ++r)
      if (!transfer(peerFds_[r], d + r * bytesPerRank, bytesPerRank, false, deadline, error))
        return yaliRemoteError;
    for (int r = 1; r < nranks_; ++r)
      if (!transfer(peerFds_[r], d, bytesPerRank * nranks_, true, deadline, error))
        return yaliRemoteError;
  } else {
    if (!transfer(peerFds_[0], d + rank_ * bytesPerRank, bytesPerRank, true, deadline, error) ||
        !transfer(peerFds_[0], d, bytesPerRank * nranks_, false, deadline, error))
      return yaliRemoteError;
  }
  return yaliSuccess;
}

yaliResult_t Bootstrap::barrier(std::string* error) {
  std::vector<char> bytes(nranks_, 1);
  return allGather(bytes.data(), 1, error);
}

}  // namespace yali
