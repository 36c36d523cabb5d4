#include "core/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/env.h"
#include "core/hash.h"
#include "core/sha256.h"

namespace yali {

using namespace bootstrap_wire;

namespace {

// Unique id layout (128 bytes, all fields little-endian as written by this machine):
//   [0, 8)    magic "YALIUID\0"
//   [8, 12)   format version (2)
//   [12, 16)  reserved, zero
//   [16, 32)  token: 128 random bits; names the rendezvous socket (public)
//   [32, 64)  secret: 256 random bits; keys the handshake's HMACs (never sent anywhere)
//   [64, 72)  checksum: FNV-1a over bytes [0, 64), so that bytes "from nowhere" are refused
//   [72, 128) zero
// Version 1 (no secret) is refused: its ranks could not authenticate each other.
constexpr char kIdMagic[8] = {'Y', 'A', 'L', 'I', 'U', 'I', 'D', '\0'};
constexpr uint32_t kIdVersion = 2;
constexpr size_t kIdVersionOffset = 8;
constexpr size_t kIdTokenOffset = 16;
constexpr size_t kIdSecretOffset = 32;
constexpr size_t kIdChecksumOffset = 64;
static_assert(kIdChecksumOffset + sizeof(uint64_t) <= YALI_UNIQUE_ID_BYTES, "unique id overflows");

// The longest any wait goes without looking at the cancel flag: yaliCommAbort from another
// thread ends a blocked call within about this long.
constexpr int kPollSliceMs = 100;
// Rank 0 gives each connection this long (at most YALI_TIMEOUT_MS) to authenticate: a genuine
// rank needs two round trips on one machine, under a millisecond; anything slower is dropped.
constexpr int64_t kHandshakeLimitMs = 5000;
// Rank 0 holds at most this many connections in their handshake, dropping the oldest beyond it,
// so that a local process opening connections cannot exhaust rank 0's file descriptors. Genuine
// ranks authenticate at once, so only a flood of this many connections within a handshake's
// round trip could push one out.
constexpr size_t kMaxPendingHandshakes = 64;
// An abort message longer than this is not read (it is text for a human, not data).
constexpr uint64_t kMaxAbortTextBytes = 4096;
// Pause between attempts to reach rank 0 before it listens.
constexpr int kConnectRetryMs = 2;

// The two HMAC labels have equal length, so neither is a prefix of the other's transcript.
constexpr char kLabelRank0ToPeer[] = "yali bootstrap v2 rank0->peer";
constexpr char kLabelPeerToRank0[] = "yali bootstrap v2 peer->rank0";
static_assert(sizeof(kLabelRank0ToPeer) == sizeof(kLabelPeerToRank0), "labels of equal length");

constexpr char kCancelledText[] =
    "cancelled while waiting for peers (the communicator is being aborted)";

int64_t nowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string errnoText(const char* what) { return std::string(what) + ": " + strerror(errno); }

// logInfo lives in error.cc, which this host-only object library must not depend on
// (src/CMakeLists.txt); this prints the same way under the same switch (YALI_DEBUG).
__attribute__((format(printf, 1, 2))) void debugLog(const char* fmt, ...) {
  if (!debugLoggingEnabled()) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "YALI INFO bootstrap: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

bool readRandom(void* buf, size_t n, std::string* error) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = errnoText("opening /dev/urandom");
    return false;
  }
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      *error = errnoText("reading /dev/urandom");
      close(fd);
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  close(fd);
  return true;
}

std::string rankName(int rank) { return "rank " + std::to_string(rank); }

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

enum class Io { kDone, kWouldBlock, kClosed, kFailed };

// File descriptors in one message: one per rank at most.
constexpr int kMaxFdsPerMessage = 8;

// Moves bytes [*done, n) of buf without blocking, advancing *done. Every socket here is
// non-blocking: waits happen only in poll(), where deadlines and the cancel flag are seen.
Io moveSome(int fd, void* buf, size_t n, size_t* done, bool sending) {
  char* p = static_cast<char*>(buf);
  while (*done < n) {
    ssize_t k = sending ? send(fd, p + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p + *done, n - *done, MSG_DONTWAIT);
    if (k > 0) {
      *done += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kWouldBlock;
    if (errno == EPIPE || errno == ECONNRESET) return Io::kClosed;
    return Io::kFailed;
  }
  return Io::kDone;
}

enum class Wait { kDone, kClosed, kTimedOut, kCancelled, kFailed };

// moveSome for the first bytes of a message that carries file descriptors (SCM_RIGHTS): the
// descriptors travel with the first chunk sent, and arrive with the first chunk received. A Unix
// stream socket never splits a 16-byte header, so the first call sends or reads it whole; later
// bytes go through moveSome.
Io sendWithFds(int fd, const void* buf, size_t n, size_t* done, const int* fds, int count) {
  iovec iov{const_cast<void*>(buf), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * count);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  for (;;) {
    ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      *done += static_cast<size_t>(k);
      return *done == n ? Io::kDone : moveSome(fd, const_cast<void*>(buf), n, done, true);
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::kWouldBlock;
    return k == 0 || errno == EPIPE || errno == ECONNRESET ? Io::kClosed : Io::kFailed;
  }
}

Io receiveWithFds(int fd, void* buf, size_t n, size_t* done, int* fds, int capacity, int* count) {
  iovec iov{buf, n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  for (;;) {
    ssize_t k = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (k > 0) {
      *done += static_cast<size_t>(k);
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const int got = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        const int* in = reinterpret_cast<const int*>(CMSG_DATA(c));
        for (int i = 0; i < got; ++i) {
          if (*count < capacity) fds[(*count)++] = in[i];
          else close(in[i]);  // more than announced: not ours to keep
        }
      }
      return *done == n ? Io::kDone : moveSome(fd, buf, n, done, false);
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::kWouldBlock;
    return k == 0 || errno == ECONNRESET ? Io::kClosed : Io::kFailed;
  }
}

bool isSet(const std::atomic<bool>* flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

// Moves exactly n bytes on one socket before `deadline`.
Wait moveAll(int fd, void* buf, size_t n, bool sending, int64_t deadline,
             const std::atomic<bool>* cancel) {
  size_t done = 0;
  while (true) {
    Io io = moveSome(fd, buf, n, &done, sending);
    if (io == Io::kDone) return Wait::kDone;
    if (io == Io::kClosed) return Wait::kClosed;
    if (io == Io::kFailed) return Wait::kFailed;
    if (isSet(cancel)) return Wait::kCancelled;
    int64_t left = deadline - nowMs();
    if (left <= 0) return Wait::kTimedOut;
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
  }
}

bool peerCredentials(int fd, ucred* cred) {
  socklen_t len = sizeof(*cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 && len == sizeof(*cred);
}

// Best effort: one non-blocking send, so that breaking never waits on a peer. An abort's seq field
// carries the breaker's result code (abortCode: what the receivers report).
void sendAbort(int fd, const std::string& text, yaliResult_t code) {
  FrameHeader header{kAbortMagic, static_cast<uint32_t>(code), std::min<uint64_t>(text.size(), kMaxAbortTextBytes)};
  iovec parts[2] = {{&header, sizeof(header)},
                    {const_cast<char*>(text.data()), static_cast<size_t>(header.length)}};
  msghdr msg{};
  msg.msg_iov = parts;
  msg.msg_iovlen = 2;
  (void)sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The text of an abort whose header has been read. The sender wrote it in one piece just before
// closing, so it is waiting in the socket; the short bound only guards against a half-sent one.
std::string readAbortText(int fd, const FrameHeader& header, const std::atomic<bool>* cancel) {
  if (header.length > kMaxAbortTextBytes) return "(its reason was too long to read)";
  std::string text(header.length, '\0');
  if (moveAll(fd, &text[0], text.size(), false, nowMs() + 10 * kPollSliceMs, cancel) != Wait::kDone)
    return "(its reason was cut off)";
  return text;
}

// What a rank reports when a peer broke with `code` (an abort's seq): yaliTimeout when the peer
// timed out (a rank that never arrived: every survivor reports the same code, as yali.h says),
// yaliRemoteError for everything else the peer hit.
yaliResult_t abortCode(const FrameHeader& header) {
  return header.seq == static_cast<uint32_t>(yaliTimeout) ? yaliTimeout : yaliRemoteError;
}

// Why a peer's connection ended: the reason it sent before leaving (an abort), if any, and the
// code to report (abortCode; yaliRemoteError without an abort).
std::string departureReason(int fd, int peer, const std::atomic<bool>* cancel, yaliResult_t* code) {
  FrameHeader header;
  *code = yaliRemoteError;
  if (moveAll(fd, &header, sizeof(header), false, nowMs() + kPollSliceMs, cancel) == Wait::kDone &&
      header.magic == kAbortMagic) {
    *code = abortCode(header);
    return readAbortText(fd, header, cancel);
  }
  return rankName(peer) + " closed its connection (it exited, failed or was aborted)";
}

// Rank 0's view of one connection that has not authenticated yet.
struct PendingHandshake {
  enum class Stage { kReadHello, kSendChallenge, kReadProof };
  int fd = -1;
  int64_t deadline = 0;
  int32_t kernelPid = 0;  // SO_PEERCRED
  uint32_t kernelUid = 0;
  Stage stage = Stage::kReadHello;
  size_t done = 0;  // bytes of the current stage's message moved so far
  Hello hello{};
  Challenge challenge{};
  Proof proof{};
};

enum class HandshakeState { kInProgress, kRefused, kAuthenticated };

// Advances one handshake as far as its socket allows without blocking. On kRefused, *why says
// what the peer did wrong (for YALI_DEBUG).
HandshakeState advanceHandshake(PendingHandshake& h, const UniqueIdFields& id, int nranks,
                                std::string* why) {
  using Stage = PendingHandshake::Stage;
  auto refuseIo = [&](Io io, const char* stage) {
    if (io == Io::kWouldBlock) return HandshakeState::kInProgress;
    *why = std::string(io == Io::kClosed ? "closed the connection" : "failed") + " while " + stage;
    return HandshakeState::kRefused;
  };
  while (true) {
    switch (h.stage) {
      case Stage::kReadHello: {
        Io io = moveSome(h.fd, &h.hello, sizeof(h.hello), &h.done, false);
        if (io != Io::kDone) return refuseIo(io, "sending its Hello");
        if (h.hello.magic != kHelloMagic || h.hello.version != kProtocolVersion) {
          char text[128];
          snprintf(text, sizeof(text),
                   "sent no YALI bootstrap v%u Hello (magic 0x%08x, version %u)", kProtocolVersion,
                   h.hello.magic, h.hello.version);
          *why = text;
          return HandshakeState::kRefused;
        }
        if (h.hello.pid != h.kernelPid) {
          *why = "claims pid " + std::to_string(h.hello.pid) + " but the kernel reports pid " +
                 std::to_string(h.kernelPid);
          return HandshakeState::kRefused;
        }
        h.challenge.magic = kChallengeMagic;
        h.challenge.nranks = nranks;
        h.challenge.pid = getpid();
        std::string error;
        if (!readRandom(h.challenge.nonce, sizeof(h.challenge.nonce), &error)) {
          *why = "no nonce for it: " + error;
          return HandshakeState::kRefused;
        }
        handshakeMac(id.secret, Direction::kRank0ToPeer, h.hello, h.challenge, h.challenge.mac);
        h.stage = Stage::kSendChallenge;
        h.done = 0;
        break;
      }
      case Stage::kSendChallenge: {
        Io io = moveSome(h.fd, &h.challenge, sizeof(h.challenge), &h.done, true);
        if (io != Io::kDone) return refuseIo(io, "rank 0 sent its Challenge");
        h.stage = Stage::kReadProof;
        h.done = 0;
        break;
      }
      case Stage::kReadProof: {
        Io io = moveSome(h.fd, &h.proof, sizeof(h.proof), &h.done, false);
        if (io != Io::kDone) return refuseIo(io, "sending its Proof");
        uint8_t expected[kSha256Bytes];
        handshakeMac(id.secret, Direction::kPeerToRank0, h.hello, h.challenge, expected);
        if (h.proof.magic != kProofMagic ||
            !constantTimeEqual(h.proof.mac, expected, sizeof(expected))) {
          *why = "sent a wrong proof (it does not hold this uniqueId's secret)";
          return HandshakeState::kRefused;
        }
        return HandshakeState::kAuthenticated;
      }
    }
  }
}

void refuseHandshake(PendingHandshake& h, const std::string& why) {
  debugLog("rank 0 refused a connection from pid %d (uid %u): %s", h.kernelPid, h.kernelUid,
           why.c_str());
  close(h.fd);
  h.fd = -1;
}

}  // namespace

namespace bootstrap_wire {

void handshakeMac(const uint8_t secret[kSecretBytes], Direction direction, const Hello& hello,
                  const Challenge& challenge, uint8_t mac[32]) {
  HmacSha256 h(secret, kSecretBytes);
  const char* label = direction == Direction::kRank0ToPeer ? kLabelRank0ToPeer : kLabelPeerToRank0;
  h.update(label, sizeof(kLabelRank0ToPeer));
  h.update(&hello, sizeof(hello));
  h.update(&challenge, offsetof(Challenge, mac));
  h.finish(mac);
}

socklen_t rendezvousAddress(const UniqueIdFields& id, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // Abstract namespace: sun_path[0] == '\0'.
  int len = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "yali-%016llx%016llx",
                     static_cast<unsigned long long>(id.token[0]),
                     static_cast<unsigned long long>(id.token[1]));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

}  // namespace bootstrap_wire

bool makeUniqueId(yaliUniqueId* id, std::string* error) {
  memset(id, 0, sizeof(*id));
  unsigned char* b = reinterpret_cast<unsigned char*>(id->internal);
  memcpy(b, kIdMagic, sizeof(kIdMagic));
  memcpy(b + kIdVersionOffset, &kIdVersion, sizeof(kIdVersion));
  if (!readRandom(b + kIdTokenOffset, kIdChecksumOffset - kIdTokenOffset, error)) return false;
  uint64_t sum = fnv1a(b, kIdChecksumOffset);
  memcpy(b + kIdChecksumOffset, &sum, sizeof(sum));
  return true;
}

bool decodeUniqueId(const yaliUniqueId& id, UniqueIdFields* fields) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(id.internal);
  if (memcmp(b, kIdMagic, sizeof(kIdMagic)) != 0) return false;
  uint32_t version;
  memcpy(&version, b + kIdVersionOffset, sizeof(version));
  if (version != kIdVersion) return false;
  uint64_t sum;
  memcpy(&sum, b + kIdChecksumOffset, sizeof(sum));
  if (sum != fnv1a(b, kIdChecksumOffset)) return false;
  memcpy(fields->token, b + kIdTokenOffset, sizeof(fields->token));
  memcpy(fields->secret, b + kIdSecretOffset, sizeof(fields->secret));
  return true;
}

// One connection's part of an exchange: at most one framed message out and one in.
struct Bootstrap::Transfer {
  int peer;  // the rank at the other end (an index into peerFds_)
  const void* out = nullptr;
  size_t outBytes = 0;
  bool sends = false;
  void* in = nullptr;
  size_t inBytes = 0;
  bool receives = false;
  const int* outFds = nullptr;  // descriptors sent with the header (SCM_RIGHTS)
  int outFdCount = 0;
  int* inFds = nullptr;         // where descriptors that arrive with the header go
  int inFdCapacity = 0;
  int inFdCount = 0;
  FrameHeader outHeader{};
  FrameHeader inHeader{};
  size_t outDone = 0;  // header and payload bytes sent so far
  size_t inDone = 0;   // header and payload bytes received so far

  bool sendPending() const { return sends && outDone < sizeof(FrameHeader) + outBytes; }
  bool receivePending() const { return receives && inDone < sizeof(FrameHeader) + inBytes; }
};

Bootstrap::Bootstrap(int rank, int nranks, int64_t timeoutMs, const std::atomic<bool>* cancel)
    : rank_(rank),
      nranks_(nranks),
      timeoutMs_(timeoutMs),
      cancel_(cancel),
      peerFds_(nranks, -1),
      sendSeq_(nranks, 0),
      recvSeq_(nranks, 0),
      pids_(nranks, 0) {}

Bootstrap::~Bootstrap() {
  for (int fd : peerFds_)
    if (fd >= 0) close(fd);
  if (listenFd_ >= 0) close(listenFd_);
}

bool Bootstrap::cancelled() const { return isSet(cancel_); }

yaliResult_t Bootstrap::breakWith(yaliResult_t code, const std::string& message, std::string* error,
                                  int alsoTell) {
  if (!broken_) {
    broken_ = true;
    brokenCode_ = code;
    brokenMessage_ = message;
    const std::string text = rankName(rank_) + " failed: " + message;
    for (int& fd : peerFds_) {
      if (fd < 0) continue;
      sendAbort(fd, text, code);
      close(fd);
      fd = -1;
    }
    if (alsoTell >= 0) sendAbort(alsoTell, text, code);
    if (listenFd_ >= 0) close(listenFd_);
    listenFd_ = -1;
  }
  *error = brokenMessage_;
  return brokenCode_;
}

yaliResult_t Bootstrap::connect(const UniqueIdFields& id, int rank, int nranks, int64_t timeoutMs,
                                const std::atomic<bool>* cancel, Bootstrap** out,
                                std::string* error) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    *error = "rank " + std::to_string(rank) + " is outside 0.." + std::to_string(nranks - 1);
    return yaliInvalidArgument;
  }
  Bootstrap* b = new Bootstrap(rank, nranks, timeoutMs, cancel);
  const int64_t deadline = nowMs() + timeoutMs;
  yaliResult_t r =
      rank == 0 ? b->listenAndAdmit(id, deadline, error) : b->joinRank0(id, deadline, error);
  if (r != yaliSuccess) {
    delete b;
    return r;
  }
  *out = b;
  return yaliSuccess;
}

bool Bootstrap::admitPeer(int fd, const Hello& hello, int32_t pid, std::string* error) {
  // The peer proved it holds the secret, so what it says is a genuine rank's (mistaken) claim.
  if (hello.nranks != nranks_) {
    *error = rankName(hello.rank) + " (pid " + std::to_string(pid) +
             ") passed nranks=" + std::to_string(hello.nranks) +
             " but rank 0 passed nranks=" + std::to_string(nranks_);
    return false;
  }
  if (hello.rank <= 0 || hello.rank >= nranks_) {
    *error = "a process (pid " + std::to_string(pid) + ") joined as rank " +
             std::to_string(hello.rank) + ", outside 1.." + std::to_string(nranks_ - 1);
    return false;
  }
  if (peerFds_[hello.rank] >= 0) {
    *error = "two processes joined as rank " + std::to_string(hello.rank) +
             " of one communicator (pids " + std::to_string(pids_[hello.rank]) + " and " +
             std::to_string(pid) + ")";
    return false;
  }
  peerFds_[hello.rank] = fd;
  pids_[hello.rank] = pid;
  return true;
}

yaliResult_t Bootstrap::listenAndAdmit(const UniqueIdFields& id, int64_t deadline,
                                       std::string* error) {
  pids_[0] = getpid();
  sockaddr_un addr;
  socklen_t addrLen = rendezvousAddress(id, &addr);
  listenFd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listenFd_ < 0) return breakWith(yaliSystemError, errnoText("socket"), error);
  if (bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), addrLen) != 0) {
    if (errno == EADDRINUSE)
      return breakWith(yaliInvalidUsage,
                       "uniqueId is already in use by another communicator's rank 0 (each "
                       "communicator needs a fresh yaliGetUniqueId)",
                       error);
    return breakWith(yaliSystemError, errnoText("bind"), error);
  }
  if (listen(listenFd_, SOMAXCONN) != 0)
    return breakWith(yaliSystemError, errnoText("listen"), error);

  // Oldest first. Every return path closes what is still here (admitted fds moved out as -1).
  std::vector<PendingHandshake> pending;
  struct ClosePending {
    std::vector<PendingHandshake>& list;
    ~ClosePending() {
      for (PendingHandshake& h : list)
        if (h.fd >= 0) close(h.fd);
    }
  } closePending{pending};
  auto forgetClosed = [&] {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const PendingHandshake& h) { return h.fd < 0; }),
                  pending.end());
  };
  auto dropOldest = [&](const std::string& why) {
    refuseHandshake(pending.front(), why);
    pending.erase(pending.begin());
  };
  const int64_t handshakeLimitMs = std::min(timeoutMs_, kHandshakeLimitMs);
  const uid_t myUid = geteuid();
  std::vector<pollfd> fds;
  std::vector<int> watched;  // admitted ranks, in fds after the handshakes

  for (int admitted = 0; admitted < nranks_ - 1;) {
    if (cancelled()) return breakWith(yaliInvalidUsage, kCancelledText, error);
    int64_t now = nowMs();
    if (now >= deadline) {
      std::vector<int> missing;
      for (int r = 1; r < nranks_; ++r)
        if (peerFds_[r] < 0) missing.push_back(r);
      return breakWith(yaliTimeout,
                       "timed out after " + std::to_string(timeoutMs_) + " ms waiting for " +
                           std::to_string(missing.size()) + " rank(s) to join (missing: " +
                           rankList(missing) + ") (YALI_TIMEOUT_MS)",
                       error);
    }
    int64_t wait = std::min<int64_t>(deadline - now, kPollSliceMs);
    fds.clear();
    fds.push_back({listenFd_, POLLIN, 0});
    for (PendingHandshake& h : pending) {
      if (h.deadline <= now) {
        refuseHandshake(h,
                        "did not authenticate within " + std::to_string(handshakeLimitMs) + " ms");
        continue;
      }
      wait = std::min(wait, h.deadline - now);
      bool writing = h.stage == PendingHandshake::Stage::kSendChallenge;
      fds.push_back({h.fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
    }
    forgetClosed();
    // Admitted ranks send nothing until connect ends, so anything readable is a departure.
    watched.clear();
    for (int r = 1; r < nranks_; ++r) {
      if (peerFds_[r] < 0) continue;
      watched.push_back(r);
      fds.push_back({peerFds_[r], POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(wait)) < 0 && errno != EINTR)
      return breakWith(yaliSystemError, errnoText("poll"), error);

    for (size_t i = 0; i < pending.size(); ++i) {
      PendingHandshake& h = pending[i];
      if (fds[1 + i].revents == 0) continue;
      std::string why;
      HandshakeState state = advanceHandshake(h, id, nranks_, &why);
      if (state == HandshakeState::kRefused) refuseHandshake(h, why);
      if (state != HandshakeState::kAuthenticated) continue;
      std::string claimError;
      if (!admitPeer(h.fd, h.hello, h.kernelPid, &claimError))
        return breakWith(yaliInvalidUsage, claimError, error, h.fd);
      debugLog("rank 0 admitted rank %d (pid %d)", h.hello.rank, h.kernelPid);
      h.fd = -1;  // now peerFds_[rank]'s
      ++admitted;
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      if (fds[1 + pending.size() + i].revents == 0) continue;
      const int r = watched[i];
      yaliResult_t code = yaliRemoteError;
      const std::string why = departureReason(peerFds_[r], r, cancel_, &code);
      return breakWith(code, why, error);
    }
    forgetClosed();

    if (fds[0].revents != 0) {
      // At most a pending list's worth per round: connections arriving as fast as they are taken
      // (any local user can connect to the socket) must not keep this loop from the deadline,
      // cancellation and the handshakes in progress, all of which the next round attends to.
      for (size_t taken = 0; taken < kMaxPendingHandshakes; ++taken) {
        int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EMFILE || errno == ENFILE) {
            // Out of descriptors: make room by dropping the oldest stranger, or wait a slice
            // rather than spin on a listening socket that stays readable.
            debugLog("rank 0: accept failed: %s", strerror(errno));
            if (pending.empty()) {
              poll(nullptr, 0, kPollSliceMs);
            } else {
              dropOldest("rank 0 ran out of file descriptors; dropped the oldest");
            }
          }
          break;
        }
        PendingHandshake h;
        h.fd = fd;
        h.deadline = nowMs() + handshakeLimitMs;
        ucred cred;
        if (!peerCredentials(fd, &cred)) {
          refuseHandshake(h, errnoText("SO_PEERCRED"));
          continue;
        }
        h.kernelPid = cred.pid;
        h.kernelUid = cred.uid;
        if (cred.uid != myUid) {
          refuseHandshake(
              h, "it runs as another user (rank 0 runs as uid " + std::to_string(myUid) + ")");
          continue;
        }
        pending.push_back(h);
        if (pending.size() > kMaxPendingHandshakes)
          dropOldest("more than " + std::to_string(kMaxPendingHandshakes) +
                     " connections were authenticating; dropped the oldest");
      }
    }
  }
  // Everyone is in: the socket name is free for reuse, and strays get no more attention.
  close(listenFd_);
  listenFd_ = -1;
  for (PendingHandshake& h : pending) refuseHandshake(h, "every rank had joined");

  std::vector<Transfer> transfers;
  for (int r = 1; r < nranks_; ++r) {
    Transfer t;
    t.peer = r;
    t.sends = true;
    t.out = pids_.data();
    t.outBytes = pids_.size() * sizeof(int32_t);
    transfers.push_back(t);
  }
  return exchange(transfers, deadline, error);
}

yaliResult_t Bootstrap::joinRank0(const UniqueIdFields& id, int64_t deadline, std::string* error) {
  sockaddr_un addr;
  socklen_t addrLen = rendezvousAddress(id, &addr);
  const std::string timedOut = "timed out after " + std::to_string(timeoutMs_) + " ms ";
  auto waitFailure = [&](Wait w, const char* what) {
    if (w == Wait::kCancelled) return breakWith(yaliInvalidUsage, kCancelledText, error);
    if (w == Wait::kTimedOut)
      return breakWith(yaliTimeout, timedOut + what + " (YALI_TIMEOUT_MS)", error);
    if (w == Wait::kClosed)
      return breakWith(yaliRemoteError,
                       std::string("rank 0 closed the connection (") + what +
                           "): it refused this rank, failed or was aborted (YALI_DEBUG=1 on rank 0 "
                           "says why)",
                       error);
    return breakWith(yaliSystemError, errnoText(what), error);
  };

  // Retries until rank 0 listens, and also when rank 0 drops the connection before answering the
  // Hello: it may have been one of too many connections in their handshake (see
  // kMaxPendingHandshakes) through no fault of ours.
  bool droppedByRank0 = false;
  while (true) {
    if (cancelled()) return breakWith(yaliInvalidUsage, kCancelledText, error);
    if (nowMs() >= deadline)
      return breakWith(
          yaliTimeout,
          timedOut + (droppedByRank0
                          ? "trying to join: rank 0 closed every connection before answering "
                            "(YALI_DEBUG=1 on rank 0 says why; ranks must run as one user and "
                            "see each other's pids) (YALI_TIMEOUT_MS)"
                          : "waiting for rank 0 of this uniqueId to start (YALI_TIMEOUT_MS)"),
          error);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return breakWith(yaliSystemError, errnoText("socket"), error);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), addrLen) != 0) {
      // Nobody listens yet (ECONNREFUSED), or rank 0's backlog is full (EAGAIN).
      close(fd);
      poll(nullptr, 0, kConnectRetryMs);
      continue;
    }
    ucred cred;
    if (!peerCredentials(fd, &cred)) {
      close(fd);
      return breakWith(yaliSystemError, errnoText("SO_PEERCRED"), error);
    }
    if (cred.uid != geteuid()) {
      close(fd);
      return breakWith(yaliSystemError,
                       "the socket of this uniqueId is held by pid " + std::to_string(cred.pid) +
                           " of uid " + std::to_string(cred.uid) + ", not by this user (uid " +
                           std::to_string(geteuid()) +
                           "): it is not rank 0 of this job; refusing to join",
                       error);
    }

    Hello hello{};
    hello.magic = kHelloMagic;
    hello.version = kProtocolVersion;
    hello.rank = rank_;
    hello.nranks = nranks_;
    hello.pid = getpid();
    std::string randomError;
    if (!readRandom(hello.nonce, sizeof(hello.nonce), &randomError)) {
      close(fd);
      return breakWith(yaliSystemError, randomError, error);
    }
    Challenge challenge;
    Wait w = moveAll(fd, &hello, sizeof(hello), true, deadline, cancel_);
    if (w == Wait::kDone) w = moveAll(fd, &challenge, sizeof(challenge), false, deadline, cancel_);
    if (w == Wait::kClosed) {
      debugLog("rank %d: rank 0 dropped the connection before answering; connecting again", rank_);
      close(fd);
      droppedByRank0 = true;
      poll(nullptr, 0, kConnectRetryMs);
      continue;
    }
    if (w != Wait::kDone) {
      close(fd);
      return waitFailure(w, "waiting for rank 0 to answer this rank's Hello");
    }
    // Rank 0 proves itself before this rank says anything that depends on the secret.
    const std::string holder =
        "the process holding this uniqueId's socket (pid " + std::to_string(cred.pid) + ")";
    uint8_t expected[kSha256Bytes];
    handshakeMac(id.secret, Direction::kRank0ToPeer, hello, challenge, expected);
    std::string impostor;
    if (challenge.magic != kChallengeMagic)
      impostor =
          holder + " does not speak YALI's bootstrap protocol v" + std::to_string(kProtocolVersion);
    else if (challenge.pid != cred.pid)
      impostor = holder + " claims pid " + std::to_string(challenge.pid);
    else if (!constantTimeEqual(challenge.mac, expected, sizeof(expected)))
      impostor = holder + " could not prove that it holds the uniqueId's secret";
    if (!impostor.empty()) {
      close(fd);
      return breakWith(yaliSystemError,
                       impostor + ": it is not rank 0 of this job; refusing to join", error);
    }
    Proof proof{};
    proof.magic = kProofMagic;
    handshakeMac(id.secret, Direction::kPeerToRank0, hello, challenge, proof.mac);
    peerFds_[0] = fd;
    pids_[0] = cred.pid;
    w = moveAll(fd, &proof, sizeof(proof), true, deadline, cancel_);
    if (w != Wait::kDone) return waitFailure(w, "sending this rank's proof to rank 0");
    // Sent the proof first, so that rank 0 hears the same disagreement from an authenticated rank.
    if (challenge.nranks != nranks_)
      return breakWith(yaliInvalidUsage,
                       "rank 0 passed nranks=" + std::to_string(challenge.nranks) + " but " +
                           rankName(rank_) + " passed nranks=" + std::to_string(nranks_),
                       error);
    break;
  }

  // Rank 0 sends the verified pids once every rank has authenticated.
  std::vector<int32_t> pids(nranks_);
  std::vector<Transfer> transfers(1);
  transfers[0].peer = 0;
  transfers[0].receives = true;
  transfers[0].in = pids.data();
  transfers[0].inBytes = pids.size() * sizeof(int32_t);
  yaliResult_t r = exchange(transfers, deadline, error);
  if (r != yaliSuccess) return r;
  if (pids[0] != pids_[0] || pids[rank_] != getpid())
    return breakWith(yaliInternalError,
                     "rank 0's list of pids names pid " + std::to_string(pids[0]) +
                         " for rank 0 and pid " + std::to_string(pids[rank_]) + " for " +
                         rankName(rank_) + ", but they are " + std::to_string(pids_[0]) + " and " +
                         std::to_string(getpid()),
                     error);
  pids_ = pids;
  return yaliSuccess;
}

yaliResult_t Bootstrap::exchange(std::vector<Transfer>& transfers, int64_t deadline,
                                 std::string* error) {
  // A broken Bootstrap's sockets are closed: every later call ends here with the first error.
  if (broken_) return breakWith(brokenCode_, brokenMessage_, error);
  for (Transfer& t : transfers)
    if (t.sends) t.outHeader = {kFrameMagic, sendSeq_[t.peer]++, t.outBytes};

  // Sends header then payload; returns kDone once both are out.
  auto sendStep = [&](Transfer& t) {
    const int fd = peerFds_[t.peer];
    if (t.outDone < sizeof(FrameHeader)) {
      Io io = t.outDone == 0 && t.outFdCount > 0
                  ? sendWithFds(fd, &t.outHeader, sizeof(FrameHeader), &t.outDone, t.outFds, t.outFdCount)
                  : moveSome(fd, &t.outHeader, sizeof(FrameHeader), &t.outDone, true);
      if (io != Io::kDone) return io;
    }
    size_t payloadDone = t.outDone - sizeof(FrameHeader);
    Io io = moveSome(fd, const_cast<void*>(t.out), t.outBytes, &payloadDone, true);
    t.outDone = sizeof(FrameHeader) + payloadDone;
    return io;
  };
  // Receives and checks the header, then the payload. A mismatch sets *mismatch.
  auto receiveStep = [&](Transfer& t, yaliResult_t* mismatchCode, std::string* mismatch) {
    const int fd = peerFds_[t.peer];
    if (t.inDone < sizeof(FrameHeader)) {
      Io io = t.inDone == 0 && t.inFds != nullptr
                  ? receiveWithFds(fd, &t.inHeader, sizeof(FrameHeader), &t.inDone, t.inFds,
                                   t.inFdCapacity, &t.inFdCount)
                  : moveSome(fd, &t.inHeader, sizeof(FrameHeader), &t.inDone, false);
      if (io != Io::kDone) return io;
      const FrameHeader& h = t.inHeader;
      char text[256];
      *mismatchCode = yaliInternalError;  // genuine peers that make the same calls never differ
      if (h.magic == kAbortMagic) {
        *mismatchCode = abortCode(h);
        *mismatch = readAbortText(fd, h, cancel_);
      } else if (h.magic != kFrameMagic) {
        snprintf(text, sizeof(text),
                 "%s sent bytes that are not a bootstrap message (magic 0x%08x where 0x%08x was "
                 "expected)",
                 rankName(t.peer).c_str(), h.magic, kFrameMagic);
        *mismatch = text;
      } else if (h.seq != recvSeq_[t.peer]) {
        snprintf(text, sizeof(text), "%s sent message #%u where message #%u was expected",
                 rankName(t.peer).c_str(), h.seq, recvSeq_[t.peer]);
        *mismatch = text;
      } else if (h.length != t.inBytes) {
        *mismatchCode = yaliInvalidUsage;
        snprintf(text, sizeof(text),
                 "%s sent a message of %llu bytes where %zu bytes were expected (the ranks made "
                 "different bootstrap exchanges: different calls, or different sizes)",
                 rankName(t.peer).c_str(), static_cast<unsigned long long>(h.length), t.inBytes);
        *mismatch = text;
      }
      if (!mismatch->empty()) return Io::kFailed;
      ++recvSeq_[t.peer];
    }
    size_t payloadDone = t.inDone - sizeof(FrameHeader);
    Io io = moveSome(fd, t.in, t.inBytes, &payloadDone, false);
    t.inDone = sizeof(FrameHeader) + payloadDone;
    return io;
  };

  std::vector<pollfd> fds;
  std::vector<Transfer*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    for (Transfer& t : transfers) {
      short events = (t.sendPending() ? POLLOUT : 0) | (t.receivePending() ? POLLIN : 0);
      if (events == 0) continue;
      fds.push_back({peerFds_[t.peer], events, 0});
      polled.push_back(&t);
    }
    if (fds.empty()) return yaliSuccess;
    if (cancelled()) return breakWith(yaliInvalidUsage, kCancelledText, error);
    int64_t left = deadline - nowMs();
    if (left <= 0) {
      std::vector<int> late;
      for (Transfer* t : polled) late.push_back(t->peer);
      return breakWith(yaliTimeout,
                       "timed out after " + std::to_string(timeoutMs_) +
                           " ms waiting for rank(s) " + rankList(late) +
                           " in a bootstrap exchange (YALI_TIMEOUT_MS): they failed, "
                           "or did not make the same call",
                       error);
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, kPollSliceMs))) < 0 &&
        errno != EINTR)
      return breakWith(yaliSystemError, errnoText("poll"), error);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Transfer& t = *polled[i];
      yaliResult_t mismatchCode = yaliSuccess;
      std::string mismatch;
      Io io = Io::kDone;
      if (t.sendPending()) io = sendStep(t);
      if (io != Io::kClosed && io != Io::kFailed && t.receivePending())
        io = receiveStep(t, &mismatchCode, &mismatch);
      if (!mismatch.empty()) return breakWith(mismatchCode, mismatch, error);
      // A peer that broke left its reason in our receive queue, unless we were reading a message.
      if (io == Io::kClosed) {
        yaliResult_t code = yaliRemoteError;
        const std::string why = t.inDone == 0 ? departureReason(peerFds_[t.peer], t.peer, cancel_, &code)
                                              : rankName(t.peer) +
                                                    " closed its connection (it exited, failed or was aborted)";
        return breakWith(code, why, error);
      }
      if (io == Io::kFailed)
        return breakWith(yaliSystemError, errnoText("bootstrap socket"), error);
    }
  }
}

yaliResult_t Bootstrap::allGather(void* data, size_t bytesPerRank, std::string* error) {
  char* d = static_cast<char*>(data);
  const int64_t deadline = nowMs() + timeoutMs_;
  std::vector<Transfer> transfers;
  if (rank_ == 0) {
    for (int r = 1; r < nranks_; ++r) {
      Transfer t;
      t.peer = r;
      t.receives = true;
      t.in = d + r * bytesPerRank;
      t.inBytes = bytesPerRank;
      transfers.push_back(t);
    }
    yaliResult_t result = exchange(transfers, deadline, error);
    if (result != yaliSuccess) return result;
    transfers.clear();
    for (int r = 1; r < nranks_; ++r) {
      Transfer t;
      t.peer = r;
      t.sends = true;
      t.out = d;
      t.outBytes = bytesPerRank * nranks_;
      transfers.push_back(t);
    }
  } else {
    // Rank 0 answers only after it has everyone's part, so this rank's part is out before the
    // answer overwrites `data` (with the same bytes in this rank's place).
    Transfer t;
    t.peer = 0;
    t.sends = true;
    t.out = d + rank_ * bytesPerRank;
    t.outBytes = bytesPerRank;
    t.receives = true;
    t.in = d;
    t.inBytes = bytesPerRank * nranks_;
    transfers.push_back(t);
  }
  return exchange(transfers, deadline, error);
}

yaliResult_t Bootstrap::barrier(std::string* error) {
  std::vector<char> bytes(nranks_, 1);
  return allGather(bytes.data(), 1, error);
}

yaliResult_t Bootstrap::allGatherFds(int mine, std::vector<int>* all, std::string* error) {
  all->assign(nranks_, -1);
  const int64_t deadline = nowMs() + timeoutMs_;
  // Each message's payload is its descriptor count, so that a receiver notices one that did not
  // arrive (the kernel drops SCM_RIGHTS it cannot deliver).
  auto closeAll = [&] {
    for (int r = 0; r < nranks_; ++r) {
      if (r != rank_ && (*all)[r] >= 0) close((*all)[r]);
      (*all)[r] = -1;
    }
  };
  auto lost = [&](int peer, int want, int got) {
    closeAll();
    return breakWith(yaliSystemError,
                     rankName(peer) + " sent " + std::to_string(want) + " file descriptor(s), " +
                         std::to_string(got) + " arrived",
                     error);
  };
  std::vector<Transfer> transfers;
  if (rank_ == 0) {
    std::vector<int32_t> announced(nranks_, 0);
    for (int r = 1; r < nranks_; ++r) {
      Transfer t;
      t.peer = r;
      t.receives = true;
      t.in = &announced[r];
      t.inBytes = sizeof(int32_t);
      t.inFds = &(*all)[r];
      t.inFdCapacity = 1;
      transfers.push_back(t);
    }
    yaliResult_t result = exchange(transfers, deadline, error);
    if (result != yaliSuccess) return closeAll(), result;
    for (const Transfer& t : transfers)
      if (t.inFdCount != 1 || announced[t.peer] != 1) return lost(t.peer, announced[t.peer], t.inFdCount);
    // To every rank, every other rank's descriptor, in rank order.
    (*all)[0] = mine;
    std::vector<std::vector<int>> outFds(nranks_);
    std::vector<int32_t> counts(nranks_, nranks_ - 1);
    transfers.clear();
    for (int r = 1; r < nranks_; ++r) {
      for (int q = 0; q < nranks_; ++q)
        if (q != r) outFds[r].push_back((*all)[q]);
      Transfer t;
      t.peer = r;
      t.sends = true;
      t.out = &counts[r];
      t.outBytes = sizeof(int32_t);
      t.outFds = outFds[r].data();
      t.outFdCount = static_cast<int>(outFds[r].size());
      transfers.push_back(t);
    }
    result = exchange(transfers, deadline, error);
    (*all)[0] = -1;  // ours stays the caller's
    if (result != yaliSuccess) closeAll();
    return result;
  }
  const int32_t one = 1;
  int32_t count = 0;
  std::vector<int> others(nranks_ - 1, -1);
  Transfer t;
  t.peer = 0;
  t.sends = true;
  t.out = &one;
  t.outBytes = sizeof(int32_t);
  t.outFds = &mine;
  t.outFdCount = 1;
  t.receives = true;
  t.in = &count;
  t.inBytes = sizeof(int32_t);
  t.inFds = others.data();
  t.inFdCapacity = nranks_ - 1;
  transfers.push_back(t);
  yaliResult_t result = exchange(transfers, deadline, error);
  for (int q = 0, i = 0; q < nranks_; ++q)
    if (q != rank_) (*all)[q] = others[i++];
  if (result != yaliSuccess) return closeAll(), result;
  if (transfers[0].inFdCount != nranks_ - 1 || count != nranks_ - 1)
    return lost(0, count, transfers[0].inFdCount);
  return yaliSuccess;
}

}  // namespace yali
