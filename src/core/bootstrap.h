// Bootstrap: how ranks of one communicator find each other on one machine before any GPU memory
// is shared, and how they agree on tear-down.
//
// Rendezvous. Rank 0 listens on the abstract Unix socket "\0yali-<token>"; every other rank
// connects to it (retrying until YALI_TIMEOUT_MS) and keeps the connection for the comm's life.
// All exchanges go through rank 0: each rank sends its bytes, rank 0 answers with everyone's.
// Abstract sockets need no file and vanish with the process; they are visible to every process of
// the machine's network namespace, which is what mpirun/torchrun on one node give.
//
// Trust model: what the unique id protects, and how.
//  - The token only names the socket. It is not a secret: /proc/net/unix shows the name to every
//    user of the machine, and anyone may connect to an abstract socket.
//  - The secret (256 random bits in the id, never sent over the socket, never part of the name)
//    authenticates ranks: on every connection both ends prove that they hold it by an HMAC-SHA256
//    over fresh nonces of both sides (challenge-response, one label per direction). Only holders
//    of the unique id, that is the processes the user handed it to, can join or act as rank 0.
//  - SO_PEERCRED restricts the job to one user: each end refuses a peer whose uid differs from its
//    own effective uid, even one that knows the secret. It also gives the peer's real pid, which
//    must equal the pid the peer claims; pids() hands out only such verified pids. (So all ranks
//    must run as one user and in one pid namespace.)
//  Rank 0 believes nothing a peer says (rank, nranks) before the peer has proven itself; an
//  unauthenticated connection (other user, wrong or missing proof, garbage, a pid lie, silence) is
//  closed and ignored, while rank 0 keeps waiting for the genuine ranks. Rank 0 serves all
//  handshakes at once, each with its own short deadline, and holds a bounded number of them, so a
//  hostile local process can neither stall nor exhaust it. Processes of one user can usually read
//  each other's memory anyway (ptrace), so within one user the secret guards against strays (a rank
//  of another job, a port scanner, a stale process) rather than a determined attacker; other users
//  are kept out twice, by the secret and by SO_PEERCRED.
//
// Failure. Every message after the handshake is framed (magic, per-connection sequence number,
// length), and the receiver checks all three, so that bytes of a late or confused peer are never
// taken for another message. After the first error on any connection the Bootstrap is broken: it
// tells its peers why (best effort), closes every socket, and every later call fails at once with
// that first error.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <string>
#include <vector>

#include "yali/yali.h"

namespace yali {

constexpr size_t kSecretBytes = 32;

struct UniqueIdFields {
  uint64_t token[2];             // names the rendezvous socket; public
  uint8_t secret[kSecretBytes];  // proves membership in the job; never leaves the unique id
};

// Fills a fresh id (reads /dev/urandom; touches no GPU).
bool makeUniqueId(yaliUniqueId* id, std::string* error);
// Checks magic, version (2) and checksum; false for bytes that no yaliGetUniqueId of this version
// produced.
bool decodeUniqueId(const yaliUniqueId& id, UniqueIdFields* fields);

// The wire format. Public so that the tests that play hostile peers and impostors build their
// messages from these definitions instead of copies. All fields in this machine's byte order: both
// ends run on one machine.
namespace bootstrap_wire {

constexpr uint32_t kProtocolVersion = 2;
constexpr size_t kNonceBytes = 32;
constexpr uint32_t kHelloMagic = 0x48534c59;      // "YLSH" read as little-endian bytes
constexpr uint32_t kChallengeMagic = 0x43534c59;  // "YLSC"
constexpr uint32_t kProofMagic = 0x50534c59;      // "YLSP"
constexpr uint32_t kFrameMagic = 0x4d534c59;      // "YLSM": a message of an exchange
constexpr uint32_t kAbortMagic = 0x41534c59;      // "YLSA": "I broke, here is why" (text payload)

// Handshake, in order. A connecting rank sends Hello, rank 0 answers Challenge (proving itself),
// the rank answers Proof; rank 0 admits it only after checking the proof.
struct Hello {
  uint32_t magic;    // kHelloMagic
  uint32_t version;  // kProtocolVersion
  int32_t rank;
  int32_t nranks;
  int32_t pid;  // must equal the pid SO_PEERCRED reports for the connection
  uint8_t nonce[kNonceBytes];
};
struct Challenge {
  uint32_t magic;  // kChallengeMagic
  int32_t nranks;  // rank 0's
  int32_t pid;     // rank 0's; the connecting rank checks it against SO_PEERCRED
  uint8_t nonce[kNonceBytes];
  uint8_t mac[32];  // handshakeMac(kRank0ToPeer, ...)
};
struct Proof {
  uint32_t magic;   // kProofMagic
  uint8_t mac[32];  // handshakeMac(kPeerToRank0, ...)
};
static_assert(sizeof(Hello) == 52 && sizeof(Challenge) == 76 && sizeof(Proof) == 36,
              "handshake messages must have no padding (the MACs cover their bytes)");

// After the handshake: every message starts with this header; an abort's payload is text.
struct FrameHeader {
  uint32_t magic;   // kFrameMagic or kAbortMagic
  uint32_t seq;     // per connection and direction: 0, 1, 2, ...
  uint64_t length;  // payload bytes that follow
};
static_assert(sizeof(FrameHeader) == 16, "frame header must have no padding");

enum class Direction { kRank0ToPeer, kPeerToRank0 };

// HMAC-SHA256 keyed by the secret over a label for `direction`, the whole Hello and the Challenge
// without its mac: both nonces, the rank, both nranks and both claimed pids. The labels differ so
// that neither side's answer can be reflected back as the other's.
void handshakeMac(const uint8_t secret[kSecretBytes], Direction direction, const Hello& hello,
                  const Challenge& challenge, uint8_t mac[32]);

// The abstract socket address that rank 0 of this id listens on.
socklen_t rendezvousAddress(const UniqueIdFields& id, sockaddr_un* addr);

}  // namespace bootstrap_wire

class Bootstrap {
 public:
  // Blocks until all nranks ranks are connected and authenticated (bounded by timeoutMs), then
  // hands every rank the verified pids. `cancel` may be null; otherwise it must outlive the
  // Bootstrap, and once it reads true, this call and every later allGather/barrier give up within
  // about 100 ms with yaliInvalidUsage (the way another thread's yaliCommAbort ends a blocked
  // call). Results: yaliTimeout when ranks are missing at the deadline; yaliInvalidUsage for
  // genuine ranks that disagree (nranks, two processes for one rank) or a reused unique id;
  // yaliRemoteError when a peer failed or left; yaliSystemError when a system call failed or rank
  // 0's socket is held by a process that is not a rank of this job (another user, or no proof of
  // the secret); yaliInvalidArgument when rank is outside 0..nranks-1.
  static yaliResult_t connect(const UniqueIdFields& id, int rank, int nranks, int64_t timeoutMs,
                              const std::atomic<bool>* cancel, Bootstrap** out, std::string* error);
  ~Bootstrap();

  // `data` holds nranks * bytesPerRank bytes; this rank's part is at rank * bytesPerRank. On return
  // every part is filled on every rank. Every rank must pass the same bytesPerRank: a rank that
  // does not breaks the Bootstrap on every rank (yaliInvalidUsage on the rank that sees it,
  // yaliRemoteError on the others). Bounded by the timeoutMs given to connect (yaliTimeout).
  yaliResult_t allGather(void* data, size_t bytesPerRank, std::string* error);
  yaliResult_t barrier(std::string* error);
  // Every rank contributes one open file descriptor (`mine`, which stays the caller's); on return
  // (*all)[r] is a descriptor of this process for rank r's (a copy passed over the socket with
  // SCM_RIGHTS, which the caller must close), and (*all)[rank] is -1. How ranks share the handles
  // of their CUDA memory (comm.cc: cuMem POSIX file descriptors).
  yaliResult_t allGatherFds(int mine, std::vector<int>* all, std::string* error);

  // pids()[r] is rank r's process id as the kernel reported it (SO_PEERCRED), not as rank r said.
  // Ranks of one process (yaliCommInitAll) share a pid.
  const std::vector<int32_t>& pids() const { return pids_; }

 private:
  struct Transfer;
  Bootstrap(int rank, int nranks, int64_t timeoutMs, const std::atomic<bool>* cancel);
  yaliResult_t listenAndAdmit(const UniqueIdFields& id, int64_t deadline, std::string* error);
  yaliResult_t joinRank0(const UniqueIdFields& id, int64_t deadline, std::string* error);
  // Rank 0: takes an authenticated peer as rank hello.rank, or says why its claims fail the job.
  bool admitPeer(int fd, const bootstrap_wire::Hello& hello, int32_t pid, std::string* error);
  yaliResult_t exchange(std::vector<Transfer>& transfers, int64_t deadline, std::string* error);
  bool cancelled() const;
  // Marks the Bootstrap broken (first call only), tells every connected peer and `alsoTell` why,
  // closes every socket; returns the first error's code and message.
  yaliResult_t breakWith(yaliResult_t code, const std::string& message, std::string* error,
                         int alsoTell = -1);

  int rank_;
  int nranks_;
  int64_t timeoutMs_;
  const std::atomic<bool>* cancel_;
  int listenFd_ = -1;
  std::vector<int> peerFds_;  // rank 0: one per rank (own slot -1); others: [0] = link to rank 0
  std::vector<uint32_t> sendSeq_;  // per peer: sequence number of the next framed message sent
  std::vector<uint32_t> recvSeq_;  // per peer: sequence number the next received message must carry
  std::vector<int32_t> pids_;
  bool broken_ = false;
  yaliResult_t brokenCode_ = yaliSuccess;
  std::string brokenMessage_;
};

}  // namespace yali
