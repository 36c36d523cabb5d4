// GPU cases for point-to-point: yaliSend and yaliRecv (yali.h, "Point-to-point"). Same rules as
// cases.cc (suite.h): every process takes the same steps in the same order, and control flow
// depends only on values every process shares (sizes, types, offsets and patterns are drawn from
// the case's seed sequence, which is the same on every process).
//
// Names: every case here starts with "p2p_" (--filter p2p_).
//
// How a transfer is checked. An Exchange (below) is a set of transfers, each from rank s to rank d
// of some bytes, sent as one type and received as another (yali.h: the types may differ, the
// bytes must not), and a program of steps: a step is a group (yaliGroupStart/End around every
// local rank's calls of the step: in single mode the group spans every comm, yali.h's pattern for
// one thread and several GPUs) or ungrouped calls, each rank's calls in a given order. Every rank
// has one send slab and one recv slab, each alone in its allocation between guard regions
// (runs.h); each transfer has a piece of its sender's send slab and a piece of its receiver's recv
// slab, at offsets that are multiples of the call's element size only (odd ones for the 1-byte
// types), with gaps between the pieces. A send slab holds bytes that are a pure function of (seed,
// rank, byte) and never 0xFF, so every transfer's bytes differ from every other's; a recv slab is
// poisoned (0xFF) first. After the program every process builds its ranks' expected recv slabs on
// the host (the poison, and each transfer's bytes at its piece) and compares them byte for byte;
// the send slabs must be unchanged, the guards intact, the comms without an async error. A wrong
// piece is reported with its transfer, its place in the pair's sequence (the k-th send from s to d
// must land in the k-th receive on d from s) and, when it holds another transfer's bytes, which.
// The test checks its own programs before running them (every transfer sent once and received
// once, each ordered pair's sends and receives in the same order, a send to self and its receive
// in one group): a program that breaks yali.h's rules is a bug of the test, fatal.
//
// No program here needs a send to end before its receive has been posted: yali.h says an ungrouped
// call is a launch of its own that "ends only when the peer has received everything", which leaves
// open whether a send that fits in the pair's ring ends before the peer's receive runs. Every
// ungrouped pattern here is legal either way (rank a: send then receive; rank b: receive then
// send; or sends on one side only), and grouped launches on the two sides of a pair always cover
// consecutive messages of the pair in order, so the earliest undelivered message always has both of
// its launches running.
//
// Interpretations of yali.h these cases rely on (where the header leaves room):
//  - "after the group's collectives on that comm" is stream order on each rank: a send inside a
//    group reads the output of an AllReduce of the same group (p2p_mixed_collectives sends it),
//    whatever the order of the calls inside the group;
//  - a call refused with yaliInvalidUsage at yaliGroupEnd (p2p_self: a send to self without its
//    receive) closes the group, launches none of the comm's point-to-point calls of that group and
//    leaves the comm usable (a host-side refusal, not a device failure);
//  - buffers follow the collectives' common rules, element alignment included (p2p_args refuses
//    an fp32 buffer at byte offset 2);
//  - the YALI_MAX_P2P_OPS limit counts sends and receives together and refuses the call beyond
//    it (yaliInvalidUsage or yaliInvalidArgument at the call; a refusal of the whole group at
//    yaliGroupEnd is accepted too, with a note);
//  - a size mismatch names the pair: each rank's yaliGetLastError(comm) names the other rank
//    ("rank N" or "peer N");
//  - count 0 "matches nothing" also when only one side makes such a call (p2p_pairs and
//    p2p_ordering add count-0 calls on one side only; the counted calls must still match). A count-0
//    call to self outside a group is left out (count 0 is a no-op, a self call outside a group is
//    refused: the header does not say which wins).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "case_helpers.h"
#include "runs.h"
#include "suite.h"
#include "text_helpers.h"

namespace yt {

namespace {

constexpr size_t kMiB = (size_t)1 << 20;
// A pair's ring at most, on the comms the failure cases make with SmallRings (8 rings x 4 slots x
// 64 KiB; fewer rings at 8 ranks or where ranks share a GPU): a send larger than this waits for its
// receiver. (The default ring is larger: 32 x 4 x 128 KiB at 2 ranks.)
constexpr size_t kRingBytes = (size_t)8 * 4 * 65536;

// A size mismatch must end both ranks' calls well before YALI_TIMEOUT_MS (yali.h: checked on the
// device, it fails the comm on both ranks); YALI_TIMEOUT_MS is twice this for that case.
constexpr double kFailureMs = 5000;
constexpr int kFailureTimeoutMs = 10000;
// A lone wait ends by YALI_TIMEOUT_MS plus this (as the other timeout cases).
constexpr double kMarginMs = 5000;
// A stream still busy this long after its call: the case cannot go on (fatal).
constexpr double kGiveUpMs = 70000;

// The settings behind kRingBytes, set around the failure cases' comm creation.
struct SmallRings {
  EnvVar channels{"YALI_P2P_CHANNELS", "8"};
  EnvVar slot{"YALI_P2P_SLOT_BYTES", "65536"};
};

// "rank R" or "peer R" (R a whole number) in `msg`.
bool namesPeer(const std::string& msg, int r) {
  if (namesRank(msg, r)) return true;
  const std::string key = "peer " + std::to_string(r);
  for (size_t pos = msg.find(key); pos != std::string::npos; pos = msg.find(key, pos + 1)) {
    const size_t end = pos + key.size();
    if (end == msg.size() || !std::isdigit((unsigned char)msg[end])) return true;
  }
  return false;
}

void groupStart(Ctx& ctx, const std::string& what) {
  const yaliResult_t r = yaliGroupStart();
  if (r != yaliSuccess) {
    ctx.fail("%s: yaliGroupStart returned %d (%s): %s", what.c_str(), (int)r, yaliGetErrorString(r),
             str(yaliGetLastError(nullptr)).c_str());
  }
}

bool groupEnd(Ctx& ctx, const std::string& what) {
  const yaliResult_t r = yaliGroupEnd();
  if (r == yaliSuccess) return true;
  ctx.fail("%s: yaliGroupEnd returned %d (%s): %s", what.c_str(), (int)r, yaliGetErrorString(r),
           str(yaliGetLastError(nullptr)).c_str());
  return false;
}

// ---- Streams --------------------------------------------------------------------------------------

// Polls the main streams of the local ranks marked in `which` until each is idle; returns, per local
// rank, the milliseconds from t0 until it was seen idle (-1: not waited for). A stream that ends
// with a CUDA error (a YALI kernel must end cleanly, never trap), or is still busy `giveUpMs` after
// t0, is fatal.
std::vector<double> waitIdle(Ctx& ctx, const std::vector<bool>& which, Clock::time_point t0, double giveUpMs,
                             const std::string& what) {
  const size_t nl = ctx.local.size();
  std::vector<double> ms(nl, -1);
  watchdogStep("%s: waiting for the streams", what.c_str());
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < nl; ++i) {
      if (!which[i] || ms[i] >= 0) continue;
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      const cudaError_t e = cudaStreamQuery(ctx.local[i].stream);
      if (e == cudaSuccess) {
        ms[i] = msSince(t0);
        continue;
      }
      if (e != cudaErrorNotReady) {
        ctx.fatal("%s: rank %d's stream ended with %s: a failed point-to-point call must end its kernel cleanly "
                  "(no trap), leaving the CUDA context usable",
                  what.c_str(), ctx.local[i].rank, cudaGetErrorString(e));
      }
      if (msSince(t0) > giveUpMs) {
        ctx.fatal("%s: rank %d's stream is still busy after %.0f ms", what.c_str(), ctx.local[i].rank, msSince(t0));
      }
      all = false;
    }
    if (all) return ms;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// ---- Exchanges: transfers, their buffers and the program that moves them ------------------------

enum class OpKind { kSend, kRecv, kZeroSend, kZeroRecv };

// One call of a rank's program: the send or the receive of a transfer, or a call with count 0
// (NULL buffer) to or from `peer`, which moves nothing and matches nothing.
struct Op {
  OpKind kind = OpKind::kSend;
  size_t x = 0;   // the transfer (kSend, kRecv)
  int peer = -1;  // kZeroSend, kZeroRecv
};
Op sendOf(size_t x) { return Op{OpKind::kSend, x, -1}; }
Op recvOf(size_t x) { return Op{OpKind::kRecv, x, -1}; }
Op zeroSend(int peer) { return Op{OpKind::kZeroSend, 0, peer}; }
Op zeroRecv(int peer) { return Op{OpKind::kZeroRecv, 0, peer}; }

struct Step {
  bool grouped = false;
  bool barrierAfter = false;         // every process waits for every other after its calls
  std::vector<std::vector<Op>> ops;  // [rank], in call order
  std::string what;
};

struct Xfer {
  int src = 0, dst = 0;
  size_t bytes = 0;
  yaliDataType_t sdt = yaliUint8, rdt = yaliUint8;  // the types of the send and of the receive
  size_t sOff = 0, rOff = 0;                        // the pieces' offsets in the slabs
};

class Exchange {
 public:
  Exchange(Ctx& ctx, std::string name)
      : name(std::move(name)), ctx_(ctx), sendSlab_(ctx.nranks, 0), recvSlab_(ctx.nranks, 0) {}
  ~Exchange() {
    for (size_t i = 0; i < slabs_.size(); ++i) {
      CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
      CUDA_OK(ctx_, cudaStreamSynchronize(ctx_.local[i].stream));
      freeDev(ctx_, slabs_[i].send.alloc);
      freeDev(ctx_, slabs_[i].recv.alloc);
      CUDA_OK(ctx_, cudaEventDestroy(slabs_[i].copied));
      CUDA_OK(ctx_, cudaFreeHost(slabs_[i].pinned));
    }
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // A transfer of `bytes` (a multiple of both types' sizes) from src to dst. Its pieces go after the
  // slabs' last ones, each 0..maxGap bytes further, rounded up to its call's element size.
  size_t add(int src, int dst, size_t bytes, yaliDataType_t sdt, yaliDataType_t rdt, Rng& rng,
             size_t maxGap = 48) {
    const size_t se = dtypeSize(sdt), re = dtypeSize(rdt);
    if (!slabs_.empty() || se == 0 || re == 0 || bytes % se != 0 || bytes % re != 0 || src < 0 || dst < 0 ||
        src >= ctx_.nranks || dst >= ctx_.nranks) {
      ctx_.fatal("%s: transfer %d -> %d of %zu bytes as %s / %s: a bug in the test", name.c_str(), src, dst, bytes,
                 dtypeName(sdt), dtypeName(rdt));
    }
    Xfer x;
    x.src = src;
    x.dst = dst;
    x.bytes = bytes;
    x.sdt = sdt;
    x.rdt = rdt;
    x.sOff = roundUp(sendSlab_[src] + rng.below(maxGap + 1), se);
    x.rOff = roundUp(recvSlab_[dst] + rng.below(maxGap + 1), re);
    sendSlab_[src] = x.sOff + bytes;
    recvSlab_[dst] = x.rOff + bytes;
    xfers.push_back(x);
    return xfers.size() - 1;
  }

  Step newStep(bool grouped, const std::string& what) const {
    Step s;
    s.grouped = grouped;
    s.what = what;
    s.ops.assign(ctx_.nranks, std::vector<Op>());
    return s;
  }
  void addStep(Step s) { steps.push_back(std::move(s)); }

  // After the last add and addStep: checks the program, then makes the local ranks' slabs (each
  // slab starting 0..3 x leadUnit bytes into its region, with 0..maxTail bytes after its last
  // piece) and their pinned staging.
  void allocate(Rng& rng, Alloc kind = Alloc::Malloc, size_t leadUnit = 8, size_t maxTail = 16) {
    checkProgram();
    const int n = ctx_.nranks;
    std::vector<size_t> sLead(n), rLead(n);
    for (int r = 0; r < n; ++r) {
      sLead[r] = leadUnit * rng.below(4);
      rLead[r] = leadUnit * rng.below(4);
      sendSlab_[r] += rng.below(maxTail + 1);
      recvSlab_[r] += rng.below(maxTail + 1);
    }
    for (size_t i = 0; i < ctx_.local.size(); ++i) {
      const int k = ctx_.local[i].rank;
      Slabs s;
      s.send = makeRegion(ctx_, i, sendSlab_[k], sLead[k], kind);
      s.recv = makeRegion(ctx_, i, recvSlab_[k], rLead[k], kind);
      CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
      CUDA_OK(ctx_, cudaMallocHost(&s.pinned, std::max<size_t>(sendSlab_[k], 8)));
      CUDA_OK(ctx_, cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
      slabs_.push_back(s);
    }
  }

  // Every rank's send slab for `s`; then, on each local rank's stream, the guards, the send slab
  // (from pinned memory: the host does not wait for the stream, so this may be queued behind YALI
  // calls, e.g. between graph replays) and the poison over the recv slab. The previous prepare's
  // copy must have run (verify() waits for the streams).
  void prepare(uint64_t s) {
    seed = s;
    data.assign(ctx_.nranks, Bytes());
    for (int r = 0; r < ctx_.nranks; ++r) data[r] = sendBytes(seed, r, sendSlab_[r]);
    for (size_t i = 0; i < slabs_.size(); ++i) {
      const int k = ctx_.local[i].rank;
      const cudaStream_t st = ctx_.local[i].stream;
      Slabs& S = slabs_[i];
      CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
      if (cudaEventQuery(S.copied) != cudaSuccess) {
        ctx_.fatal("%s: prepare() while the previous copy of rank %d's send slab is still queued (a bug in the "
                   "test)", name.c_str(), k);
      }
      if (!data[k].empty()) std::memcpy(S.pinned, data[k].data(), data[k].size());
      fillGuard(ctx_, S.send.alloc, st);
      fillGuard(ctx_, S.recv.alloc, st);
      if (S.send.bytes) CUDA_OK(ctx_, cudaMemcpyAsync(S.send.p, S.pinned, S.send.bytes, cudaMemcpyHostToDevice, st));
      CUDA_OK(ctx_, cudaEventRecord(S.copied, st));
      if (S.recv.bytes) CUDA_OK(ctx_, cudaMemsetAsync(S.recv.p, kPoisonByte, S.recv.bytes, st));
    }
  }

  // One call of local rank i's program.
  yaliResult_t call(size_t i, yaliComm_t comm, const Op& op) const {
    const cudaStream_t st = ctx_.local[i].stream;
    switch (op.kind) {
      case OpKind::kSend: {
        const Xfer& x = xfers[op.x];
        return yaliSend(slabs_[i].send.p + x.sOff, x.bytes / dtypeSize(x.sdt), x.sdt, x.dst, comm, st);
      }
      case OpKind::kRecv: {
        const Xfer& x = xfers[op.x];
        return yaliRecv(slabs_[i].recv.p + x.rOff, x.bytes / dtypeSize(x.rdt), x.rdt, x.src, comm, st);
      }
      case OpKind::kZeroSend: return yaliSend(nullptr, 0, yaliFloat32, op.peer, comm, st);
      case OpKind::kZeroRecv: return yaliRecv(nullptr, 0, yaliBfloat16, op.peer, comm, st);
    }
    return yaliInternalError;
  }

  // Local rank i's calls of step `s`, without yaliGroupStart/End (for a caller that groups them
  // with other calls).
  bool issueLocal(size_t i, yaliComm_t comm, size_t s) const {
    const Step& step = steps[s];
    const int k = ctx_.local[i].rank;
    bool ok = true;
    for (const Op& op : step.ops[k]) {
      const char* callName = op.kind == OpKind::kSend || op.kind == OpKind::kZeroSend ? "yaliSend" : "yaliRecv";
      ok &= issued(ctx_, call(i, comm, op), callName, k, comm, label(step.what) + ": " + describe(op, k));
    }
    return ok;
  }

  // Step `s` on every local rank, in a group of its own if the step is grouped.
  bool issueStep(const std::vector<yaliComm_t>& comms, size_t s) const {
    const Step& step = steps[s];
    const std::string l = label(step.what);
    bool any = false;
    for (const LocalRank& lr : ctx_.local) any |= !step.ops[lr.rank].empty();
    bool ok = true;
    if (any) {
      watchdogStep("%s: issuing", l.c_str());
      if (step.grouped) groupStart(ctx_, l);
      for (size_t i = 0; i < comms.size(); ++i) ok &= issueLocal(i, comms[i], s);
      if (step.grouped) ok &= groupEnd(ctx_, l);
    }
    if (step.barrierAfter) ctx_.world->barrier();
    return ok;
  }

  // The whole program.
  bool run(const std::vector<yaliComm_t>& comms) const {
    bool ok = true;
    for (size_t s = 0; s < steps.size(); ++s) ok &= issueStep(comms, s);
    return ok;
  }

  // Every local rank: its recv slab byte for byte, its send slab unchanged, the guards, no async
  // error. Waits for the streams (every rank's calls must have been issued). Not collective.
  bool verify(const std::vector<yaliComm_t>& comms, const std::string& what = "") const {
    bool ok = true;
    const std::string l = label(what);
    for (size_t i = 0; i < slabs_.size(); ++i) {
      const int k = ctx_.local[i].rank;
      const Slabs& S = slabs_[i];
      watchdogStep("%s: waiting for rank %d's stream, then checking", l.c_str(), k);
      ok &= checkRecv(k, readRegion(ctx_, i, S.recv), comms[i], l);
      ok &= sameBytes(ctx_, k, readRegion(ctx_, i, S.send), data[k], l + " (send slab, which no call may write)");
      ok &= guardsIntact(ctx_, S.send, l + ": rank " + std::to_string(k) + "'s send slab");
      ok &= guardsIntact(ctx_, S.recv, l + ": rank " + std::to_string(k) + "'s recv slab");
      if (asyncOf(comms[i]) != yaliSuccess) {
        ctx_.fail("%s: rank %d: the comm reports an error: %s", l.c_str(), k, commErrors(comms[i]).c_str());
        ok = false;
      }
    }
    return ok;
  }

  std::string label(const std::string& what) const { return what.empty() ? name : name + ": " + what; }

  // "transfer #3 (rank 0 -> rank 1, number 2 of the pair, 1000 bytes, sent as fp32, received as uint8)".
  std::string describe(size_t xi) const {
    const Xfer& x = xfers[xi];
    char buf[240];
    std::snprintf(buf, sizeof buf, "transfer #%zu (rank %d -> rank %d, number %zu of the pair, %zu bytes, sent as %s, "
                  "received as %s)", xi, x.src, x.dst, ordinal_.empty() ? 0 : ordinal_[xi] + 1, x.bytes,
                  dtypeName(x.sdt), dtypeName(x.rdt));
    return buf;
  }

  std::string describe(const Op& op, int rank) const {
    switch (op.kind) {
      case OpKind::kSend: return "yaliSend of " + describe(op.x);
      case OpKind::kRecv: return "yaliRecv of " + describe(op.x);
      case OpKind::kZeroSend:
        return "yaliSend(NULL, count 0) from rank " + std::to_string(rank) + " to rank " + std::to_string(op.peer);
      case OpKind::kZeroRecv:
        return "yaliRecv(NULL, count 0) on rank " + std::to_string(rank) + " from rank " + std::to_string(op.peer);
    }
    return "?";
  }

  const std::string name;
  std::vector<Xfer> xfers;
  std::vector<Step> steps;
  uint64_t seed = 0;
  std::vector<Bytes> data;  // [rank]: its send slab

 private:
  struct Slabs {
    Region send, recv;
    void* pinned = nullptr;        // staging of the send slab
    cudaEvent_t copied = nullptr;  // after the last copy from `pinned`
  };

  // yali.h's rules, on the test's own program: every transfer sent once by its source and received
  // once by its destination, each ordered pair's sends and receives in the same order, a transfer
  // to self sent and received in one group, count-0 calls to valid peers other than the caller.
  void checkProgram() {
    const int n = ctx_.nranks;
    std::vector<int> sent(xfers.size(), 0), recvd(xfers.size(), 0);
    std::vector<size_t> sendStep(xfers.size(), 0), recvStep(xfers.size(), 0);
    std::vector<std::vector<size_t>> sendSeq((size_t)n * n), recvSeq((size_t)n * n);
    for (size_t s = 0; s < steps.size(); ++s) {
      for (int r = 0; r < n; ++r) {
        for (const Op& op : steps[s].ops[r]) {
          if (op.kind == OpKind::kZeroSend || op.kind == OpKind::kZeroRecv) {
            if (op.peer < 0 || op.peer >= n || op.peer == r) {
              ctx_.fatal("%s: a count-0 call to peer %d on rank %d (a bug in the test)", name.c_str(), op.peer, r);
            }
            continue;
          }
          if (op.x >= xfers.size()) {
            ctx_.fatal("%s: transfer #%zu does not exist (a bug in the test)", name.c_str(), op.x);
          }
          const Xfer& x = xfers[op.x];
          if (op.kind == OpKind::kSend) {
            if (x.src != r) {
              ctx_.fatal("%s: rank %d sends %s (a bug in the test)", name.c_str(), r, describe(op.x).c_str());
            }
            ++sent[op.x];
            sendStep[op.x] = s;
            sendSeq[(size_t)x.src * n + x.dst].push_back(op.x);
          } else {
            if (x.dst != r) {
              ctx_.fatal("%s: rank %d receives %s (a bug in the test)", name.c_str(), r, describe(op.x).c_str());
            }
            ++recvd[op.x];
            recvStep[op.x] = s;
            recvSeq[(size_t)x.src * n + x.dst].push_back(op.x);
          }
        }
      }
    }
    for (size_t x = 0; x < xfers.size(); ++x) {
      if (sent[x] != 1 || recvd[x] != 1) {
        ctx_.fatal("%s: %s is sent %d times and received %d times (a bug in the test)", name.c_str(),
                   describe(x).c_str(), sent[x], recvd[x]);
      }
      if (xfers[x].src == xfers[x].dst && (sendStep[x] != recvStep[x] || !steps[sendStep[x]].grouped)) {
        ctx_.fatal("%s: %s to self is not sent and received in one group (a bug in the test)", name.c_str(),
                   describe(x).c_str());
      }
    }
    ordinal_.assign(xfers.size(), 0);
    for (size_t p = 0; p < sendSeq.size(); ++p) {
      if (sendSeq[p] != recvSeq[p]) {
        ctx_.fatal("%s: rank %zu's sends to rank %zu and their receives are in different orders (a bug in the test)",
                   name.c_str(), p / n, p % n);
      }
      for (size_t j = 0; j < sendSeq[p].size(); ++j) ordinal_[sendSeq[p][j]] = j;
    }
  }

  Bytes expectedRecv(int d) const {
    Bytes want(recvSlab_[d], kPoisonByte);
    for (const Xfer& x : xfers) {
      if (x.dst == d && x.bytes) std::memcpy(&want[x.rOff], &data[x.src][x.sOff], x.bytes);
    }
    return want;
  }

  // Rank d's recv slab against the expected one; a failure names the wrong transfers (at most 4),
  // how many of their bytes are wrong, and whether one holds another transfer's bytes.
  bool checkRecv(int d, const Bytes& got, yaliComm_t comm, const std::string& l) const {
    const Bytes want = expectedRecv(d);
    if (got.size() != want.size()) {
      ctx_.fail("%s: rank %d: %zu bytes read, %zu expected (a bug in the test)", l.c_str(), d, got.size(), want.size());
      return false;
    }
    if (got == want) return true;
    std::vector<bool> inPiece(want.size(), false);
    std::string detail;
    int wrong = 0;
    for (size_t xi = 0; xi < xfers.size(); ++xi) {
      const Xfer& x = xfers[xi];
      if (x.dst != d || x.bytes == 0) continue;
      std::fill(inPiece.begin() + (long)x.rOff, inPiece.begin() + (long)(x.rOff + x.bytes), true);
      size_t bad = 0, poison = 0, first = 0;
      for (size_t b = 0; b < x.bytes; ++b) {
        const unsigned char g = got[x.rOff + b];
        if (g == want[x.rOff + b]) continue;
        if (bad++ == 0) first = b;
        poison += g == kPoisonByte;
      }
      if (bad == 0 || ++wrong > 4) continue;
      std::string other;
      for (size_t yi = 0; yi < xfers.size() && other.empty(); ++yi) {
        const Xfer& y = xfers[yi];
        if (yi != xi && y.bytes == x.bytes && std::memcmp(&got[x.rOff], &data[y.src][y.sOff], x.bytes) == 0) {
          other = "; it holds the bytes of " + describe(yi);
        }
      }
      char buf[200];
      std::snprintf(buf, sizeof buf, ": %zu of its bytes wrong (%zu of them 0xFF), first at byte %zu of the piece "
                    "(0x%02x, expected 0x%02x)", bad, poison, first, got[x.rOff + first], want[x.rOff + first]);
      detail += (detail.empty() ? "" : " | ") + describe(xi) + buf + other;
    }
    size_t stray = 0;
    for (size_t b = 0; b < want.size(); ++b) stray += !inPiece[b] && got[b] != kPoisonByte;
    ctx_.fail("%s: rank %d's recv slab: %d transfer(s) wrong%s%s; %zu byte(s) written outside every piece (where "
              "nothing was due); %s",
              l.c_str(), d, wrong, wrong ? ": " : "", detail.c_str(), stray, commErrors(comm).c_str());
    return false;
  }

  Ctx& ctx_;
  std::vector<size_t> sendSlab_, recvSlab_;  // [rank]: bytes
  std::vector<Slabs> slabs_;                 // per local rank
  std::vector<size_t> ordinal_;              // [transfer]: its place in its pair's sequence
};

// Log-uniform from 1 byte to maxBytes; a third of them rounded up to a multiple of 2, 4, 8 or 16
// (so that the wider types take their turn), the others any size, odd ones included.
size_t drawBytes(Rng& rng, size_t maxBytes) {
  size_t bits = 0;
  while (((size_t)2 << bits) <= maxBytes) ++bits;
  size_t b = 1 + rng.below((size_t)1 << (1 + rng.below(std::max<size_t>(bits, 1))));
  if (rng.chance(35)) b = roundUp(b, (size_t)2 << rng.below(4));
  return std::min(b, maxBytes);
}

// A type whose size divides `bytes` (1-byte types always do).
yaliDataType_t drawType(Rng& rng, size_t bytes) {
  std::vector<yaliDataType_t> fit;
  for (yaliDataType_t dt : kEveryDtype) {
    if (bytes % dtypeSize(dt) == 0) fit.push_back(dt);
  }
  return fit[rng.below(fit.size())];
}

// With `percent` chance per rank, a count-0 call (NULL buffer) to or from another rank at a random
// place of its calls in the step, on that side only: it must move nothing and match nothing.
void sprinkleZeros(Step& st, int n, Rng& rng, int percent) {
  for (int r = 0; r < n; ++r) {
    if (!rng.chance(percent)) continue;
    const int peer = (int)((r + 1 + rng.below(n - 1)) % n);
    const Op z = rng.chance(50) ? zeroSend(peer) : zeroRecv(peer);
    std::vector<Op>& ops = st.ops[r];
    ops.insert(ops.begin() + (long)rng.below(ops.size() + 1), z);
  }
}

// A send and a receive, in a random order.
void both(std::vector<Op>& ops, size_t send, size_t recv, Rng& rng) {
  if (rng.chance(50)) {
    ops.push_back(sendOf(send));
    ops.push_back(recvOf(recv));
  } else {
    ops.push_back(recvOf(recv));
    ops.push_back(sendOf(send));
  }
}

// A ring shift (rank r sends `bytes` to r + 1) in one group, prepared, run and checked: the comms
// work. Collective.
bool ringRoundTrip(Ctx& ctx, const std::vector<yaliComm_t>& comms, Rng& rng, const std::string& what,
                   size_t bytes = 65537) {
  const int n = ctx.nranks;
  Exchange ex(ctx, what);
  std::vector<size_t> x(n);
  for (int r = 0; r < n; ++r) x[r] = ex.add(r, (r + 1) % n, bytes, yaliUint8, yaliInt8, rng);
  Step st = ex.newStep(true, "a ring shift by 1");
  for (int r = 0; r < n; ++r) both(st.ops[r], x[r], x[(r + n - 1) % n], rng);
  ex.addStep(std::move(st));
  ex.allocate(rng);
  ex.prepare(ctx.nextSeed());
  bool ok = ex.run(comms);
  ok &= ex.verify(comms);
  return ok;
}

RunSpec int32Sum(size_t count) {
  RunSpec s;
  s.count = count;
  s.dt = yaliInt32;
  s.op = yaliSum;
  return s;
}

// ==== p2p_pairs ===================================================================================
//
// Ring shifts: in each round every rank sends to rank + s and receives from rank - s for every
// shift s = 1..n-1, each send and its receive in one group with the rank's other calls (even
// rounds: a group per shift; odd rounds: every shift in one group), and every third round also a
// random permutation (rank r to perm[r], to itself where perm[r] == r). Each transfer has its own
// random size (log-uniform, 1 byte to 4 MiB; --quick: 1 MiB; odd sizes included), send and receive
// types (any whose size divides it; they differ), and piece offsets (odd ones for 1-byte types);
// every third round one transfer of 9 MiB + 777 bytes (--quick: 3 MiB + 4097), which wraps the
// pair's 2 MiB ring several times. Count-0 calls with NULL buffers on one side only, here and
// there. Buffers from cudaMalloc, a cudaMallocAsync pool (round 2) and cuMem chunks (round 5).
// Then the same on comms with small rings (YALI_P2P_CHANNELS=2, YALI_P2P_SLOT_BYTES=4096: 32 KiB
// per pair), so that transfers of up to 512 KiB and one of 1 MiB + 3 wrap them many times.

void pairsRound(Ctx& ctx, const std::vector<yaliComm_t>& comms, Rng& rng, int round, size_t maxBytes,
                size_t bigBytes, Alloc kind, const std::string& label) {
  const int n = ctx.nranks;
  Exchange ex(ctx, label);
  // x[s][r]: rank r's transfer to rank (r + s) % n.
  std::vector<std::vector<size_t>> x(n, std::vector<size_t>(n, 0));
  const int bigShift = 1 + round % (n - 1), bigRank = round % n;
  for (int s = 1; s < n; ++s) {
    for (int r = 0; r < n; ++r) {
      const size_t bytes = bigBytes != 0 && s == bigShift && r == bigRank ? bigBytes : drawBytes(rng, maxBytes);
      const yaliDataType_t sdt = drawType(rng, bytes), rdt = drawType(rng, bytes);
      x[s][r] = ex.add(r, (r + s) % n, bytes, sdt, rdt, rng);
    }
  }
  if (round % 2 == 1) {
    Step st = ex.newStep(true, "shifts 1.." + std::to_string(n - 1) + " in one group");
    for (int r = 0; r < n; ++r) {
      for (int s = 1; s < n; ++s) both(st.ops[r], x[s][r], x[s][(r - s + n) % n], rng);
    }
    sprinkleZeros(st, n, rng, 30);
    ex.addStep(std::move(st));
  } else {
    for (int s = 1; s < n; ++s) {
      Step st = ex.newStep(true, "shift " + std::to_string(s));
      for (int r = 0; r < n; ++r) both(st.ops[r], x[s][r], x[s][(r - s + n) % n], rng);
      sprinkleZeros(st, n, rng, 15);
      ex.addStep(std::move(st));
    }
  }
  if (round % 3 == 2) {
    std::vector<int> perm(n), from(n);
    for (int r = 0; r < n; ++r) perm[r] = r;
    for (int r = n - 1; r > 0; --r) std::swap(perm[r], perm[rng.below(r + 1)]);
    for (int r = 0; r < n; ++r) from[perm[r]] = r;
    std::vector<size_t> y(n);
    for (int r = 0; r < n; ++r) {
      const size_t bytes = drawBytes(rng, maxBytes);
      const yaliDataType_t sdt = drawType(rng, bytes), rdt = drawType(rng, bytes);
      y[r] = ex.add(r, perm[r], bytes, sdt, rdt, rng);
    }
    Step st = ex.newStep(true, "a random permutation (to self where it keeps a rank)");
    for (int r = 0; r < n; ++r) both(st.ops[r], y[r], y[from[r]], rng);
    ex.addStep(std::move(st));
  }
  ex.allocate(rng, kind);
  ex.prepare(ctx.nextSeed());
  ex.run(comms);
  ex.verify(comms);
}

void casePairs(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  Rng rng(ctx.nextSeed());
  {
    std::vector<yaliComm_t> comms = ctx.createComms("p2p_pairs");
    const int rounds = ctx.quick() ? 3 : 8;
    const size_t maxBytes = ctx.quick() ? kMiB : 4 * kMiB;
    const size_t big = ctx.quick() ? 3 * kMiB + 4097 : 9 * kMiB + 777;
    static_assert(3 * kMiB > kRingBytes, "the large transfer must wrap the ring");
    for (int round = 0; round < rounds; ++round) {
      const Alloc kind = round == 1 ? Alloc::DefaultPool : round == 4 ? Alloc::CuMemChunks : Alloc::Malloc;
      pairsRound(ctx, comms, rng, round, maxBytes, round % 3 == 0 ? big : 0, kind,
                 "round " + std::to_string(round + 1) + " of " + std::to_string(rounds) + " (" + allocName(kind) + ")");
    }
    ctx.destroyComms(comms, "p2p_pairs");
  }
  {
    EnvVar channels("YALI_P2P_CHANNELS", "2");
    EnvVar slot("YALI_P2P_SLOT_BYTES", "4096");
    const std::string label = "small rings (YALI_P2P_CHANNELS=2, YALI_P2P_SLOT_BYTES=4096)";
    ctx.world->barrier();
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    const int rounds = ctx.quick() ? 2 : 4;
    for (int round = 0; round < rounds; ++round) {
      pairsRound(ctx, comms, rng, round, 512 * 1024, round % 2 == 0 ? kMiB + 3 : 0, Alloc::Malloc,
                 label + ", round " + std::to_string(round + 1) + " of " + std::to_string(rounds));
    }
    ctx.destroyComms(comms, label.c_str());
  }
}

// ==== p2p_alltoallv_grouped =======================================================================
//
// torch's all_to_all_single with splits, as ProcessGroupNCCL makes it: one group per rank, and in
// it, for every peer j in rank order (itself included), yaliSend of its split for j if that is not
// empty, then yaliRecv of j's split for it if that is not empty (zero counts are left out, as torch
// leaves them out). Both buffers packed in peer order (the splits' prefix sums), starting 0..3
// elements into their regions, with a tail that must stay poison. Count patterns: random with a
// quarter zeros, a rank that sends nothing, one that receives nothing, each rank to itself only,
// all to one rank, all zero; bf16, int8, fp32, fp64, fp16, uint8; up to 4093 elements per pair
// (--quick: 1031), one call up to 131071 (--quick: 16411). Twelve calls (--quick: six), issued back
// to back (one group each, no host synchronization), then all checked.

void caseAlltoallv(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_alltoallv_grouped");
  {
    const char* patterns[] = {"random counts", "one rank sends nothing", "one rank receives nothing",
                              "each rank to itself only", "all to one rank", "all counts 0"};
    const yaliDataType_t types[] = {yaliBfloat16, yaliInt8, yaliFloat32, yaliFloat64, yaliFloat16, yaliUint8};
    const int calls = ctx.quick() ? 6 : 12;
    std::vector<std::unique_ptr<Exchange>> ex;
    for (int k = 0; k < calls; ++k) {
      const int p = k % 6;
      const yaliDataType_t dt = types[(k + k / 6) % 6];
      const size_t es = dtypeSize(dt);
      const size_t maxCount = k == 2 ? (ctx.quick() ? 16411 : 131071) : (ctx.quick() ? 1031 : 4093);
      const int chosen = (int)rng.below(n);
      std::vector<std::vector<size_t>> cnt(n, std::vector<size_t>(n, 0));
      for (int s = 0; s < n; ++s) {
        for (int d = 0; d < n; ++d) {
          switch (p) {
            case 0:
            case 1:
            case 2: cnt[s][d] = rng.chance(25) ? 0 : 1 + rng.below(maxCount); break;
            case 3: cnt[s][d] = s == d ? 1 + rng.below(maxCount) : 0; break;
            case 4: cnt[s][d] = d == chosen ? 1 + rng.below(maxCount) : 0; break;
            default: break;
          }
          if ((p == 1 && s == chosen) || (p == 2 && d == chosen)) cnt[s][d] = 0;
        }
      }
      ex.emplace_back(new Exchange(ctx, "all_to_all_single " + std::to_string(k + 1) + " of " + std::to_string(calls) +
                                            " (" + patterns[p] + ", " + dtypeName(dt) + ")"));
      Exchange& e = *ex.back();
      // Added sender by sender, destinations in order: both slabs packed in peer order.
      std::vector<std::vector<size_t>> x(n, std::vector<size_t>(n, 0));
      for (int s = 0; s < n; ++s) {
        for (int d = 0; d < n; ++d) {
          if (cnt[s][d]) x[s][d] = e.add(s, d, cnt[s][d] * es, dt, dt, rng, /*maxGap=*/0);
        }
      }
      Step st = e.newStep(true, "one group per rank, zero splits left out");
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) {
          if (cnt[r][j]) st.ops[r].push_back(sendOf(x[r][j]));
          if (cnt[j][r]) st.ops[r].push_back(recvOf(x[j][r]));
        }
      }
      e.addStep(std::move(st));
      e.allocate(rng, Alloc::Malloc, /*leadUnit=*/es, /*maxTail=*/2 * es);
    }
    for (auto& e : ex) e->prepare(ctx.nextSeed());
    watchdogStep("p2p_alltoallv_grouped: %d calls without a host synchronization", calls);
    for (auto& e : ex) e->run(comms);
    for (auto& e : ex) e->verify(comms);
  }
  ctx.destroyComms(comms, "p2p_alltoallv_grouped");
}

// ==== p2p_ordering ================================================================================
//
// The k-th send of a pair lands in the k-th receive. Ranks 2p and 2p + 1 form pair p (an odd last
// rank makes no call at all). Each pair moves twelve messages one way, then twelve the other way:
// sizes 1000 (four of them, so that two swapped equal-sized messages show by their contents, not by
// a size failure), 70001, 3, 300000, 17, 64 (two), 4096 and one of 5 MiB + 4 (--quick: 2 MiB + 516,
// more than the ring), with send and receive types that differ. The sender and the receiver cut
// the twelve into different launches: the sender groups 1-3 (with a count-0 send to the receiver
// between 2 and 3), groups 4-5, sends 6 and 7 ungrouped (a count-0 send before 7), groups 8-10, 11
// ungrouped, 12 in a group; the receiver takes 1 ungrouped, groups 2-4, groups 5-9 (a count-0
// receive first), 10 ungrouped, groups 11-12; the other way round the cuts are swapped. Then, both
// ungrouped, the pattern that needs no buffering: rank 2p sends then receives, rank 2p + 1 receives
// then sends (50000 and 777 bytes, then two transfers of more than the ring), and three sends of
// less than the ring issued, and every process past a barrier, before their receives are issued.
// Twice (--quick: once) on the same comms: the pairs' sequences go on from one program to the next.

void caseOrdering(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks, pairs = n / 2;
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_ordering");
  {
    struct Msg {
      size_t bytes;
      yaliDataType_t sdt, rdt;
    };
    const size_t big = ctx.quick() ? 2 * kMiB + 516 : 5 * kMiB + 4;
    const std::vector<Msg> msgs = {
        {1000, yaliUint8, yaliUint8},      {70001, yaliInt8, yaliUint8},   {1000, yaliFloat32, yaliUint8},
        {3, yaliUint8, yaliInt8},          {1000, yaliBfloat16, yaliFloat32}, {300000, yaliFloat32, yaliFloat32},
        {17, yaliUint8, yaliUint8},        {big, yaliFloat32, yaliUint8},  {64, yaliFloat64, yaliUint8},
        {64, yaliUint8, yaliFloat16},      {4096, yaliInt32, yaliUint64},  {1000, yaliUint8, yaliBfloat16}};
    // Launches over consecutive messages, [first, last].
    struct Launch {
      int first, last;
      bool grouped;
    };
    const std::vector<Launch> cutA = {{0, 2, true},  {3, 4, true},  {5, 5, false}, {6, 6, false},
                                      {7, 9, true},  {10, 10, false}, {11, 11, true}};
    const std::vector<Launch> cutB = {{0, 0, false}, {1, 3, true}, {4, 8, true}, {9, 9, false}, {10, 11, true}};
    const int iterations = ctx.quick() ? 1 : 2;
    for (int it = 0; it < iterations; ++it) {
      Exchange ex(ctx, "program " + std::to_string(it + 1) + " of " + std::to_string(iterations));
      for (int dir = 0; dir < 2; ++dir) {
        // xs[p][m]: pair p's message m, from `from(p)` to `to(p)`.
        auto from = [&](int p) { return dir == 0 ? 2 * p : 2 * p + 1; };
        auto to = [&](int p) { return dir == 0 ? 2 * p + 1 : 2 * p; };
        std::vector<std::vector<size_t>> xs(pairs);
        for (int p = 0; p < pairs; ++p) {
          for (const Msg& m : msgs) xs[p].push_back(ex.add(from(p), to(p), m.bytes, m.sdt, m.rdt, rng));
        }
        const std::vector<Launch>& sendCut = dir == 0 ? cutA : cutB;
        const std::vector<Launch>& recvCut = dir == 0 ? cutB : cutA;
        const std::string way = dir == 0 ? "rank 2p -> 2p+1" : "rank 2p+1 -> 2p";
        // The sender's and the receiver's launches, interleaved on the host (in single mode one
        // thread issues both; the launches never wait on the host).
        for (size_t a = 0, b = 0; a < sendCut.size() || b < recvCut.size();) {
          if (a < sendCut.size()) {
            const Launch& L = sendCut[a];
            Step st = ex.newStep(L.grouped, way + ": the sender's launch " + std::to_string(a + 1) + " (messages " +
                                                 std::to_string(L.first + 1) + "-" + std::to_string(L.last + 1) + ")");
            for (int p = 0; p < pairs; ++p) {
              std::vector<Op>& ops = st.ops[from(p)];
              for (int m = L.first; m <= L.last; ++m) {
                if (m == 2 && a == 0 && dir == 0) ops.push_back(zeroSend(to(p)));
                if (m == 6 && !L.grouped) ops.push_back(zeroSend(to(p)));
                ops.push_back(sendOf(xs[p][m]));
              }
            }
            ex.addStep(std::move(st));
            ++a;
          }
          if (b < recvCut.size()) {
            const Launch& L = recvCut[b];
            Step st = ex.newStep(L.grouped, way + ": the receiver's launch " + std::to_string(b + 1) + " (messages " +
                                                 std::to_string(L.first + 1) + "-" + std::to_string(L.last + 1) + ")");
            for (int p = 0; p < pairs; ++p) {
              std::vector<Op>& ops = st.ops[to(p)];
              if (L.first == 4 && L.grouped) ops.push_back(zeroRecv(from(p)));
              for (int m = L.first; m <= L.last; ++m) ops.push_back(recvOf(xs[p][m]));
            }
            ex.addStep(std::move(st));
            ++b;
          }
        }
      }
      // Ungrouped both ways, in the order that needs no buffering.
      {
        const size_t bigA = ctx.quick() ? 2 * kMiB + 4100 : 3 * kMiB + 4;
        const size_t bigB = ctx.quick() ? 2 * kMiB + 1 : 4 * kMiB + 1;
        Step st = ex.newStep(false, "ungrouped: rank 2p sends then receives, rank 2p+1 receives then sends");
        for (int p = 0; p < pairs; ++p) {
          const int a = 2 * p, b = 2 * p + 1;
          const size_t x1 = ex.add(a, b, 50000, yaliUint8, yaliFloat16, rng);
          const size_t y1 = ex.add(b, a, 777, yaliInt8, yaliUint8, rng);
          const size_t x2 = ex.add(a, b, bigA, yaliFloat32, yaliFloat32, rng);
          const size_t y2 = ex.add(b, a, bigB, yaliUint8, yaliInt8, rng);
          st.ops[a] = {sendOf(x1), recvOf(y1), sendOf(x2), recvOf(y2)};
          st.ops[b] = {recvOf(x1), sendOf(y1), recvOf(x2), sendOf(y2)};
        }
        ex.addStep(std::move(st));
      }
      // Small sends before their receives are issued.
      {
        Step sends = ex.newStep(false, "ungrouped: three sends of less than the ring, then a barrier");
        Step recvs = ex.newStep(false, "ungrouped: their receives, issued after the barrier");
        sends.barrierAfter = true;
        for (int p = 0; p < pairs; ++p) {
          const int a = 2 * p, b = 2 * p + 1;
          for (size_t bytes : {(size_t)1000, (size_t)40000, (size_t)7}) {
            const size_t x = ex.add(a, b, bytes, yaliUint8, yaliUint8, rng);
            sends.ops[a].push_back(sendOf(x));
            recvs.ops[b].push_back(recvOf(x));
          }
        }
        ex.addStep(std::move(sends));
        ex.addStep(std::move(recvs));
      }
      ex.allocate(rng);
      ex.prepare(ctx.nextSeed());
      syncAll(ctx);
      ex.run(comms);
      ex.verify(comms);
    }
  }
  ctx.destroyComms(comms, "p2p_ordering");
}

// ==== p2p_mixed_collectives =======================================================================
//
// Point-to-point calls among collectives, where only some ranks make them (yali.h: the other ranks
// need not make any call, and the collectives are unaffected). Every allreduce is int32 sum,
// checked exactly (data.h), every transfer byte for byte:
//  1. a group of an allreduce (65537 elements; --quick: 4093), rank 0's yaliSend of that
//     allreduce's OUTPUT to rank 1 (the group's point-to-point calls run after its collectives on
//     the comm, so rank 1 must receive the reduced result), rank 1's yaliRecv of it as uint8, and a
//     second allreduce;
//  2. an allreduce, ungrouped;
//  3. ungrouped, ranks 0 and 1 only: rank 1 sends 3 MiB + 5 bytes (more than the ring) to rank 0,
//     then receives 5000 from it;
//  4. an allreduce (262147 elements; --quick: 16411);
//  5. a group whose point-to-point calls come first in call order: rank 0's yaliSend of the output of
//     the allreduce that follows in the group, rank 1's yaliRecv of it, the allreduce, and a grouped
//     exchange between ranks 0 and 1 (and from rank 2 to rank 3 where there are 4 ranks or more);
//  6. a last allreduce (1048573 elements).
// A collective whose launch count a point-to-point launch had moved on ranks 0 and 1 only would
// not meet its peers there.

void caseMixed(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  const size_t nl = ctx.local.size();
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_mixed_collectives");
  {
    const size_t c1 = ctx.quick() ? 4093 : 65537, c5 = 1031;
    Run ar1(ctx, int32Sum(c1)), ar2(ctx, int32Sum(257)), ar3(ctx, int32Sum(4093)),
        ar4(ctx, int32Sum(ctx.quick() ? 16411 : 262147)), ar5(ctx, int32Sum(c5));
    // Rank 1's copies of the outputs of ar1 and ar5 that rank 0 sends it.
    std::vector<Region> got1(nl), got5(nl);
    for (size_t i = 0; i < nl; ++i) {
      if (ctx.local[i].rank != 1) continue;
      got1[i] = makeRegion(ctx, i, c1 * 4, 12);
      got5[i] = makeRegion(ctx, i, c5 * 4, 4);
    }
    Exchange exB(ctx, "step 3 (ungrouped, ranks 0 and 1 only)");
    {
      const size_t big = exB.add(1, 0, 3 * kMiB + 5, yaliUint8, yaliInt8, rng);
      const size_t back = exB.add(0, 1, 5000, yaliFloat32, yaliBfloat16, rng);
      Step st = exB.newStep(false, "rank 1 sends then receives, rank 0 receives then sends");
      st.ops[1] = {sendOf(big), recvOf(back)};
      st.ops[0] = {recvOf(big), sendOf(back)};
      exB.addStep(std::move(st));
    }
    Exchange exC(ctx, "step 5 (grouped with an allreduce)");
    {
      const size_t a = drawBytes(rng, kMiB), b = drawBytes(rng, kMiB);
      const size_t x01 = exC.add(0, 1, a, drawType(rng, a), drawType(rng, a), rng);
      const size_t x10 = exC.add(1, 0, b, drawType(rng, b), drawType(rng, b), rng);
      Step st = exC.newStep(true, "ranks 0 and 1 both ways, rank 2 to rank 3");
      st.ops[0] = {sendOf(x01), recvOf(x10)};
      st.ops[1] = {recvOf(x01), sendOf(x10)};
      if (n >= 4) {
        const size_t x23 = exC.add(2, 3, 65536 * 5 + 3, yaliUint8, yaliUint8, rng);
        st.ops[2] = {sendOf(x23)};
        st.ops[3] = {recvOf(x23)};
      }
      exC.addStep(std::move(st));
    }
    exB.allocate(rng);
    exC.allocate(rng);
    for (Run* r : {&ar1, &ar2, &ar3, &ar4, &ar5}) r->prepare(ctx.nextSeed());
    exB.prepare(ctx.nextSeed());
    exC.prepare(ctx.nextSeed());
    for (size_t i = 0; i < nl; ++i) {
      if (ctx.local[i].rank != 1) continue;
      armRegion(ctx, i, got1[i], kPoisonByte);
      armRegion(ctx, i, got5[i], kPoisonByte);
    }
    syncAll(ctx);

    // 1.
    const std::string l1 = "step 1 (a group of an allreduce, rank 0 sending its output to rank 1, an allreduce)";
    watchdogStep("%s", l1.c_str());
    groupStart(ctx, l1);
    ar1.issue(comms);
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      if (k == 0) {
        issued(ctx, yaliSend(ar1.ranks[i].recv, c1, yaliInt32, 1, comms[i], ctx.local[i].stream), "yaliSend", k,
               comms[i], l1);
      } else if (k == 1) {
        issued(ctx, yaliRecv(got1[i].p, c1 * 4, yaliUint8, 0, comms[i], ctx.local[i].stream), "yaliRecv", k,
               comms[i], l1);
      }
    }
    ar2.issue(comms);
    groupEnd(ctx, l1);
    // 2 to 4.
    ar3.issue(comms);
    exB.run(comms);
    ar4.issue(comms);
    // 5.
    const std::string l5 = "step 5 (a group: rank 0 sending the output of the allreduce that follows, the "
                           "allreduce, an exchange)";
    watchdogStep("%s", l5.c_str());
    groupStart(ctx, l5);
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      if (k == 0) {
        issued(ctx, yaliSend(ar5.ranks[i].recv, c5, yaliInt32, 1, comms[i], ctx.local[i].stream), "yaliSend", k,
               comms[i], l5);
      } else if (k == 1) {
        issued(ctx, yaliRecv(got5[i].p, c5, yaliInt32, 0, comms[i], ctx.local[i].stream), "yaliRecv", k, comms[i],
               l5);
      }
    }
    ar5.issue(comms);
    for (size_t i = 0; i < nl; ++i) exC.issueLocal(i, comms[i], 0);
    groupEnd(ctx, l5);

    // Checks: the collectives in issue order (collective: every process), then rank 1's copies,
    // then the transfers.
    ar1.verify(comms, "step 1, the allreduce whose output rank 0 sends");
    ar2.verify(comms, "step 1, the second allreduce of the group");
    ar3.verify(comms, "step 2");
    ar4.verify(comms, "step 4, after the ungrouped transfers of ranks 0 and 1");
    ar5.verify(comms, "step 5, the allreduce after the point-to-point calls in call order");
    for (size_t i = 0; i < nl; ++i) {
      if (ctx.local[i].rank != 1) continue;
      uint64_t hash = 0;
      checkOutput(ctx, (int)i, comms[i], ctx.local[i].stream, got1[i].p, c1, yaliInt32, yaliSum, ar1.seed, nullptr,
                  "step 1: rank 1's yaliRecv of rank 0's allreduce output (the group's point-to-point calls run "
                  "after its collectives)",
                  &hash);
      checkOutput(ctx, (int)i, comms[i], ctx.local[i].stream, got5[i].p, c5, yaliInt32, yaliSum, ar5.seed, nullptr,
                  "step 5: rank 1's yaliRecv of the output of the allreduce called after it in the group", &hash);
      guardsIntact(ctx, got1[i], "step 1: around rank 1's receive buffer");
      guardsIntact(ctx, got5[i], "step 5: around rank 1's receive buffer");
    }
    exB.verify(comms);
    exC.verify(comms);
    allreduceAndVerify(ctx, comms, int32Sum(1048573), "step 6, the last allreduce");
    for (size_t i = 0; i < nl; ++i) {
      freeRegion(ctx, i, got1[i]);
      freeRegion(ctx, i, got5[i]);
    }
  }
  ctx.destroyComms(comms, "p2p_mixed_collectives");
}

// ==== p2p_graph ===================================================================================
//
// One CUDA graph per rank, captured once: a group of shifts by +1 and -1 (at 2 ranks both reach the
// other rank: two transfers each way in one launch) and a copy to self, rank 0's transfer to rank 1
// more than the ring (2 MiB + 12 bytes), then, ungrouped, rank 0 sending then receiving and rank 1
// receiving then sending. Replayed ten times (--quick: four): before each replay new send data
// reach every send slab by cudaMemcpyAsync on the stream (from pinned memory: the host does not
// wait) and the recv slabs are poisoned again, so each replay's outputs are its own. Between replays
// eager point-to-point calls on other buffers (a shift by -1 in a group, then an ungrouped pair the
// other way), every other time issued right behind the replay without a host synchronization. Once
// the graphs are destroyed, the eager calls again.

void caseGraph(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_graph");
  {
    Exchange ring(ctx, "captured");
    {
      std::vector<size_t> up(n), down(n), self(n);
      for (int r = 0; r < n; ++r) {
        const size_t a = r == 0 ? 2 * kMiB + 12 : drawBytes(rng, 512 * 1024);
        up[r] = ring.add(r, (r + 1) % n, a, drawType(rng, a), drawType(rng, a), rng);
        const size_t b = drawBytes(rng, 256 * 1024);
        down[r] = ring.add(r, (r + n - 1) % n, b, drawType(rng, b), drawType(rng, b), rng);
        const size_t c = drawBytes(rng, 256 * 1024);
        self[r] = ring.add(r, r, c, drawType(rng, c), drawType(rng, c), rng);
      }
      Step g = ring.newStep(true, "shifts +1 and -1 and a copy to self, in one group");
      for (int r = 0; r < n; ++r) {
        both(g.ops[r], up[r], up[(r + n - 1) % n], rng);
        both(g.ops[r], down[r], down[(r + 1) % n], rng);
        both(g.ops[r], self[r], self[r], rng);
      }
      ring.addStep(std::move(g));
      const size_t u1 = ring.add(0, 1, 4093, yaliUint8, yaliUint8, rng);
      const size_t u2 = ring.add(1, 0, 3 * 65536, yaliFloat32, yaliBfloat16, rng);
      Step u = ring.newStep(false, "ungrouped: rank 0 sends then receives, rank 1 receives then sends");
      u.ops[0] = {sendOf(u1), recvOf(u2)};
      u.ops[1] = {recvOf(u1), sendOf(u2)};
      ring.addStep(std::move(u));
    }
    ring.allocate(rng);
    Exchange eager(ctx, "eager, between replays");
    {
      std::vector<size_t> down(n);
      for (int r = 0; r < n; ++r) {
        const size_t a = drawBytes(rng, kMiB);
        down[r] = eager.add(r, (r + n - 1) % n, a, drawType(rng, a), drawType(rng, a), rng);
      }
      Step g = eager.newStep(true, "a shift by -1 in a group");
      for (int r = 0; r < n; ++r) both(g.ops[r], down[r], down[(r + 1) % n], rng);
      eager.addStep(std::move(g));
      const size_t v1 = eager.add(1, 0, 30001, yaliInt8, yaliUint8, rng);
      const size_t v2 = eager.add(0, 1, kRingBytes + 8, yaliFloat64, yaliUint8, rng);
      Step u = eager.newStep(false, "ungrouped: rank 1 sends then receives, rank 0 receives then sends");
      u.ops[1] = {sendOf(v1), recvOf(v2)};
      u.ops[0] = {recvOf(v1), sendOf(v2)};
      eager.addStep(std::move(u));
    }
    eager.allocate(rng);
    ring.prepare(ctx.nextSeed());
    syncAll(ctx);
    {
      ReplayableGraphs graphs(ctx);  // destroyed before the exchanges whose buffers it holds
      watchdogStep("p2p_graph: capturing");
      graphs.beginCapture();
      const bool ok = ring.run(comms);
      if (graphs.endCapture(ok)) {
        const int replays = ctx.quick() ? 4 : 10;
        for (int rep = 0; rep < replays; ++rep) {
          const std::string what = "replay " + std::to_string(rep + 1) + " of " + std::to_string(replays);
          ring.prepare(ctx.nextSeed());
          eager.prepare(ctx.nextSeed());
          watchdogStep("p2p_graph: %s", what.c_str());
          graphs.replay(0);
          const bool behind = rep % 2 == 0;
          if (behind) eager.run(comms);
          ring.verify(comms, what);
          if (!behind) eager.run(comms);
          eager.verify(comms, behind ? "issued right behind " + what : "after " + what);
        }
      }
      syncAll(ctx);
    }
    eager.prepare(ctx.nextSeed());
    eager.run(comms);
    eager.verify(comms, "after the graphs were destroyed");
  }
  ctx.destroyComms(comms, "p2p_graph");
}

// ==== p2p_self ====================================================================================
//
// Sends to self (yali.h: the send and its receive in one group, a local copy):
//  1. one group per rank of four copies to self (1 byte, 4093, 196614 as bf16 received as fp16,
//     2.5 MiB + 4 as fp32 received as uint8; --quick: 1 MiB + 4), some receives before their sends,
//     with a ring shift in the same group; then a group of three sends to self before their
//     three receives (the k-th send to self lands in the k-th receive);
//  2. outside a group, a yaliSend to self and a yaliRecv from self: yaliInvalidUsage at the call,
//     naming it; nothing queued: a group's copy to self of the same size right after gets its own
//     bytes, the refused receive's buffer stays poison, no async error, an allreduce is exact;
//  3. groups that yaliGroupEnd refuses (yaliInvalidUsage; the calls themselves succeed): a send to
//     self without its receive, a receive without its send, a send of 1000 bytes with a receive of
//     1200, two sends and one receive. Nothing may run (the receive buffers stay poison), the comm
//     stays usable (no async error; a refusal on the host fails nothing): after each, a group's
//     copy to self and a ring shift are exact; at the end an allreduce.

void caseSelf(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  const size_t nl = ctx.local.size();
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_self");
  {
    Exchange ex(ctx, "part 1 (copies to self in groups)");
    struct Msg {
      size_t bytes;
      yaliDataType_t sdt, rdt;
    };
    const std::vector<Msg> four = {{1, yaliUint8, yaliUint8},
                                   {4093, yaliInt8, yaliUint8},
                                   {3 * 65536 + 6, yaliBfloat16, yaliFloat16},
                                   {ctx.quick() ? kMiB + 4 : 5 * kMiB / 2 + 4, yaliFloat32, yaliUint8}};
    const std::vector<Msg> three = {
        {12, yaliFloat32, yaliInt32}, {4096, yaliUint64, yaliUint8}, {100003, yaliUint8, yaliInt8}};
    std::vector<std::vector<size_t>> s(n), t(n);
    std::vector<size_t> ring(n);
    for (int r = 0; r < n; ++r) {
      for (const Msg& m : four) s[r].push_back(ex.add(r, r, m.bytes, m.sdt, m.rdt, rng));
      ring[r] = ex.add(r, (r + 1) % n, 70001, yaliUint8, yaliInt8, rng);
      for (const Msg& m : three) t[r].push_back(ex.add(r, r, m.bytes, m.sdt, m.rdt, rng));
    }
    Step g1 = ex.newStep(true, "four copies to self and a ring shift, in one group");
    Step g2 = ex.newStep(true, "three sends to self, then their receives");
    for (int r = 0; r < n; ++r) {
      const size_t from = ring[(r + n - 1) % n];
      g1.ops[r] = {recvOf(s[r][0]), sendOf(s[r][0]), sendOf(s[r][1]), sendOf(ring[r]), sendOf(s[r][2]),
                   recvOf(s[r][1]), recvOf(from),    recvOf(s[r][2]), sendOf(s[r][3]), recvOf(s[r][3])};
      g2.ops[r] = {sendOf(t[r][0]), sendOf(t[r][1]), sendOf(t[r][2]),
                   recvOf(t[r][0]), recvOf(t[r][1]), recvOf(t[r][2])};
    }
    ex.addStep(std::move(g1));
    ex.addStep(std::move(g2));
    ex.allocate(rng);
    ex.prepare(ctx.nextSeed());
    ex.run(comms);
    ex.verify(comms);
  }

  // A group's copy to self of `bytes` and a ring shift: exact.
  auto selfRoundTrip = [&](const std::string& what, size_t bytes) {
    Exchange ex(ctx, what);
    std::vector<size_t> self(n), ring(n);
    for (int r = 0; r < n; ++r) {
      self[r] = ex.add(r, r, bytes, yaliUint8, yaliUint8, rng);
      ring[r] = ex.add(r, (r + 1) % n, 4099, yaliInt8, yaliUint8, rng);
    }
    Step g = ex.newStep(true, "a copy to self and a ring shift in one group");
    for (int r = 0; r < n; ++r) {
      both(g.ops[r], self[r], self[r], rng);
      both(g.ops[r], ring[r], ring[(r + n - 1) % n], rng);
    }
    ex.addStep(std::move(g));
    ex.allocate(rng);
    ex.prepare(ctx.nextSeed());
    ex.run(comms);
    ex.verify(comms);
  };

  {
    const std::string label = "part 2 (to self outside a group)";
    const size_t bytes = 4096;
    const uint64_t seed = ctx.nextSeed();
    std::vector<Region> A(nl), B(nl);
    std::vector<Bytes> data(nl);
    for (size_t i = 0; i < nl; ++i) {
      A[i] = makeRegion(ctx, i, bytes, 4);
      B[i] = makeRegion(ctx, i, bytes, 4);
      data[i] = sendBytes(seed, ctx.local[i].rank, bytes);
      loadRegion(ctx, i, A[i], data[i]);
      armRegion(ctx, i, B[i], kPoisonByte);
    }
    syncAll(ctx);
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      const std::string who = " (rank " + std::to_string(k) + ")";
      expectFailure(ctx, label + ": yaliSend to self outside a group" + who,
                    yaliSend(A[i].p, bytes, yaliUint8, k, comms[i], ctx.local[i].stream), yaliInvalidUsage, "yaliSend",
                    nullptr);
      expectFailure(ctx, label + ": yaliRecv from self outside a group" + who,
                    yaliRecv(B[i].p, bytes, yaliUint8, k, comms[i], ctx.local[i].stream), yaliInvalidUsage, "yaliRecv",
                    nullptr);
    }
    // Nothing queued: the same sizes to self in a group now get their own bytes.
    selfRoundTrip(label + ", then a group", bytes);
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      allPoison(ctx, i, B[i], label + ": the refused yaliRecv's buffer (nothing may be written)");
      sameBytes(ctx, k, readRegion(ctx, i, A[i]), data[i], label + ": the refused yaliSend's buffer");
      guardsIntact(ctx, A[i], label);
      guardsIntact(ctx, B[i], label);
      if (asyncOf(comms[i]) != yaliSuccess) {
        ctx.fail("%s: rank %d: the refused calls set the comm's async error: %s", label.c_str(), k,
                 commErrors(comms[i]).c_str());
      }
      freeRegion(ctx, i, A[i]);
      freeRegion(ctx, i, B[i]);
    }
    allreduceAndVerify(ctx, comms, int32Sum(65537), label + ", then an allreduce");
  }

  {
    struct Bad {
      const char* what;
      std::vector<size_t> sends, recvs;  // bytes of each call, all to / from self
    };
    const std::vector<Bad> bads = {{"a send to self without its receive", {1000}, {}},
                                   {"a receive from self without its send", {}, {1000}},
                                   {"a send of 1000 bytes to self, a receive of 1200", {1000}, {1200}},
                                   {"two sends to self, one receive", {600, 600}, {600}}};
    const uint64_t seed = ctx.nextSeed();
    std::vector<Region> S(nl), R(nl);
    std::vector<Bytes> data(nl);
    for (size_t i = 0; i < nl; ++i) {
      S[i] = makeRegion(ctx, i, 1200);
      R[i] = makeRegion(ctx, i, 1200);
      data[i] = sendBytes(seed, ctx.local[i].rank, 1200);
      loadRegion(ctx, i, S[i], data[i]);
    }
    for (const Bad& b : bads) {
      const std::string label = std::string("part 3 (") + b.what + ", in a group)";
      for (size_t i = 0; i < nl; ++i) armRegion(ctx, i, R[i], kPoisonByte);
      syncAll(ctx);
      watchdogStep("%s", label.c_str());
      groupStart(ctx, label);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        size_t at = 0;
        for (size_t bytes : b.sends) {
          issued(ctx, yaliSend(S[i].p + at, bytes, yaliUint8, k, comms[i], ctx.local[i].stream), "yaliSend", k,
                 comms[i], label + " (the call itself, inside the group)");
          at += bytes;
        }
        at = 0;
        for (size_t bytes : b.recvs) {
          issued(ctx, yaliRecv(R[i].p + at, bytes, yaliUint8, k, comms[i], ctx.local[i].stream), "yaliRecv", k,
                 comms[i], label + " (the call itself, inside the group)");
          at += bytes;
        }
      }
      const yaliResult_t ge = yaliGroupEnd();
      const std::string msg = str(yaliGetLastError(nullptr));
      if (ge != yaliInvalidUsage) {
        ctx.fail("%s: yaliGroupEnd returned %d (%s), expected yaliInvalidUsage: %s", label.c_str(), (int)ge,
                 yaliGetErrorString(ge), msg.c_str());
      } else if (msg.find("yaliGroupEnd") == std::string::npos && msg.find("yaliSend") == std::string::npos &&
                 msg.find("yaliRecv") == std::string::npos) {
        ctx.fail("%s: yaliGetLastError(NULL) after the refused yaliGroupEnd names no call: \"%s\"", label.c_str(),
                 msg.c_str());
      }
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        allPoison(ctx, i, R[i], label + ": the receive buffer (nothing of a refused group may run)");
        sameBytes(ctx, k, readRegion(ctx, i, S[i]), data[i], label + ": the send buffer");
        guardsIntact(ctx, S[i], label);
        guardsIntact(ctx, R[i], label);
        if (asyncOf(comms[i]) != yaliSuccess) {
          ctx.fail("%s: rank %d: a group refused on the host failed the comm: %s", label.c_str(), k,
                   commErrors(comms[i]).c_str());
        }
      }
      // The comm still works, and nothing of the refused group is left queued: a copy to self of
      // the refused calls' size gets its own bytes.
      selfRoundTrip(label + ", then a valid group", 1000);
    }
    for (size_t i = 0; i < nl; ++i) {
      freeRegion(ctx, i, S[i]);
      freeRegion(ctx, i, R[i]);
    }
    allreduceAndVerify(ctx, comms, int32Sum(4093), "part 3, then an allreduce");
  }
  ctx.destroyComms(comms, "p2p_self");
}

// ==== p2p_args ====================================================================================
//
// Argument errors on a real comm, the same bad call on every rank: peer -1, nranks, nranks + 7 and
// INT_MIN; NULL buffers with count > 0; datatypes 12, -1 and 255; counts whose byte size overflows;
// host (malloc) buffers; fp32 buffers at byte offset 2; buffers one byte / one element past the end
// of a 2 MiB cudaMalloc allocation; in single mode on several GPUs, another GPU's buffer; a NULL
// comm. Each must return yaliInvalidArgument with yaliGetLastError(NULL) and yaliGetLastError(comm)
// naming the call (yaliSend, yaliRecv) and the argument. Count 0 with NULL or real buffers,
// ungrouped and in a group: yaliSuccess. The same refusals inside a group, next to a valid ring
// shift: the refused calls queue nothing (the group's own transfers are exact). Afterwards every
// buffer untouched (outputs still poison, inputs intact, guards intact), no async error, the comm
// works. Then the comm destroyed: both calls yaliInvalidUsage naming the comm. Then the limits, on
// comms with YALI_TIMEOUT_MS=10000 (a library that accepted an extra call on one side only would
// leave the other side waiting): YALI_MAX_P2P_OPS calls on a comm in one group run exactly; the
// two calls beyond are refused (at the call, or the whole group at yaliGroupEnd, noted; accepting
// them all fails). Last, YALI_P2P_CHANNELS=0: both calls yaliInvalidUsage, collectives unaffected.

void caseArgs(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  const size_t nl = ctx.local.size();
  Rng rng(ctx.nextSeed());
  const size_t c = 1024;  // fp32 elements of S and R
  const size_t kTwoMiB = 2 * kMiB;
  const uint64_t seed = ctx.nextSeed();
  const char* SEND = "yaliSend";
  const char* RECV = "yaliRecv";
  std::vector<Region> S(nl), R(nl);
  std::vector<DevAlloc> Y(nl);
  std::vector<Bytes> data(nl);
  for (size_t i = 0; i < nl; ++i) {
    S[i] = makeRegion(ctx, i, c * 4);
    R[i] = makeRegion(ctx, i, c * 4);
    data[i] = sendBytes(seed, ctx.local[i].rank, c * 4);
    loadRegion(ctx, i, S[i], data[i]);
    armRegion(ctx, i, R[i], kPoisonByte);
    // Exactly 2 MiB of allocation: no size rounding can hide a byte past it.
    Y[i] = allocDev(ctx, ctx.local[i].dev, kTwoMiB, Alloc::Malloc, ctx.local[i].stream);
    CUDA_OK(ctx, cudaMemsetAsync(Y[i].p, kPoisonByte, kTwoMiB, ctx.local[i].stream));
  }
  syncAll(ctx);

  std::vector<yaliComm_t> comms = ctx.createComms("p2p_args");
  {
    std::vector<float> host(c);
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank, peer = (k + 1) % n;
      const yaliComm_t comm = comms[i];
      const cudaStream_t st = ctx.local[i].stream;
      const std::string who = " (rank " + std::to_string(k) + ")";
      auto refused = [&](const char* call, const std::string& what, yaliResult_t got,
                         const std::vector<std::string>& args, yaliComm_t withComm) {
        expectRefused(ctx, std::string(call) + " with " + what + who, got, call, args, withComm);
      };
      for (int bad : {-1, n, n + 7, INT_MIN}) {
        refused(SEND, "peer " + std::to_string(bad), yaliSend(S[i].p, c, yaliFloat32, bad, comm, st), {"peer"}, comm);
        refused(RECV, "peer " + std::to_string(bad), yaliRecv(R[i].p, c, yaliFloat32, bad, comm, st), {"peer"}, comm);
      }
      refused(SEND, "sendbuff NULL", yaliSend(nullptr, c, yaliFloat32, peer, comm, st), {"sendbuff"}, comm);
      refused(RECV, "recvbuff NULL", yaliRecv(nullptr, c, yaliFloat32, peer, comm, st), {"recvbuff"}, comm);
      for (int bad : {(int)yaliNumTypes, -1, 255}) {
        refused(SEND, "datatype " + std::to_string(bad), yaliSend(S[i].p, c, (yaliDataType_t)bad, peer, comm, st),
                {"datatype"}, comm);
        refused(RECV, "datatype " + std::to_string(bad), yaliRecv(R[i].p, c, (yaliDataType_t)bad, peer, comm, st),
                {"datatype"}, comm);
      }
      for (size_t bad : {SIZE_MAX / 2, SIZE_MAX / 4 + 1}) {
        refused(SEND, "count " + std::to_string(bad) + " fp32 (bytes overflow)",
                yaliSend(S[i].p, bad, yaliFloat32, peer, comm, st), {"count", "sendbuff"}, comm);
        refused(RECV, "count " + std::to_string(bad) + " fp32 (bytes overflow)",
                yaliRecv(R[i].p, bad, yaliFloat32, peer, comm, st), {"count", "recvbuff"}, comm);
      }
      refused(SEND, "a host (malloc) sendbuff", yaliSend(host.data(), c, yaliFloat32, peer, comm, st), {"sendbuff"},
              comm);
      refused(RECV, "a host (malloc) recvbuff", yaliRecv(host.data(), c, yaliFloat32, peer, comm, st), {"recvbuff"},
              comm);
      refused(SEND, "an fp32 sendbuff at byte offset 2", yaliSend(S[i].p + 2, c - 1, yaliFloat32, peer, comm, st),
              {"sendbuff"}, comm);
      refused(RECV, "an fp32 recvbuff at byte offset 2", yaliRecv(R[i].p + 2, c - 1, yaliFloat32, peer, comm, st),
              {"recvbuff"}, comm);
      refused(SEND, "sendbuff 4 KiB before the end of its 2 MiB allocation, 4097 bytes",
              yaliSend(Y[i].p + kTwoMiB - 4096, 4097, yaliUint8, peer, comm, st), {"sendbuff", "count"}, comm);
      refused(RECV, "recvbuff 4 KiB into its 2 MiB allocation, one fp32 element past its end",
              yaliRecv(Y[i].p + 4096, (kTwoMiB - 4096) / 4 + 1, yaliFloat32, peer, comm, st), {"recvbuff", "count"},
              comm);
      for (size_t j = 0; j < nl; ++j) {
        if (ctx.local[j].dev == ctx.local[i].dev) continue;  // single mode on several GPUs only
        refused(SEND, "a sendbuff on another GPU (" + std::to_string(ctx.local[j].dev) + ")",
                yaliSend(S[j].p, c, yaliFloat32, peer, comm, st), {"sendbuff"}, comm);
        refused(RECV, "a recvbuff on another GPU (" + std::to_string(ctx.local[j].dev) + ")",
                yaliRecv(R[j].p, c, yaliFloat32, peer, comm, st), {"recvbuff"}, comm);
        break;
      }
      refused(SEND, "comm NULL", yaliSend(S[i].p, c, yaliFloat32, peer, nullptr, st), {"comm"}, nullptr);
      refused(RECV, "comm NULL", yaliRecv(R[i].p, c, yaliFloat32, peer, nullptr, st), {"comm"}, nullptr);
      // Count 0: a no-op with NULL or real buffers, to every other rank.
      for (int p = 0; p < n; ++p) {
        if (p == k) continue;
        const std::string to = " (rank " + std::to_string(k) + ", peer " + std::to_string(p) + ")";
        issued(ctx, yaliSend(nullptr, 0, yaliFloat32, p, comm, st), SEND, k, comm, "yaliSend(NULL, count 0)" + to);
        issued(ctx, yaliRecv(nullptr, 0, yaliFloat32, p, comm, st), RECV, k, comm, "yaliRecv(NULL, count 0)" + to);
        issued(ctx, yaliSend(S[i].p, 0, yaliUint8, p, comm, st), SEND, k, comm, "yaliSend(sendbuff, count 0)" + to);
        issued(ctx, yaliRecv(R[i].p, 0, yaliUint8, p, comm, st), RECV, k, comm, "yaliRecv(recvbuff, count 0)" + to);
      }
    }

    // Inside a group, next to a valid ring shift.
    {
      Exchange ex(ctx, "a ring shift in the group of the refused calls");
      std::vector<size_t> x(n);
      for (int r = 0; r < n; ++r) x[r] = ex.add(r, (r + 1) % n, 8191, yaliUint8, yaliInt8, rng);
      Step g = ex.newStep(true, "ring shift");
      for (int r = 0; r < n; ++r) both(g.ops[r], x[r], x[(r + n - 1) % n], rng);
      ex.addStep(std::move(g));
      ex.allocate(rng);
      ex.prepare(ctx.nextSeed());
      syncAll(ctx);
      const std::string label = "inside a group";
      watchdogStep("p2p_args: %s", label.c_str());
      groupStart(ctx, label);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank, peer = (k + 1) % n;
        const yaliComm_t comm = comms[i];
        const cudaStream_t st = ctx.local[i].stream;
        const std::string who = " inside a group (rank " + std::to_string(k) + ")";
        expectRefused(ctx, std::string("yaliSend with peer nranks") + who,
                      yaliSend(S[i].p, c, yaliFloat32, n, comm, st), SEND, {"peer"}, comm);
        issued(ctx, yaliSend(nullptr, 0, yaliFloat32, peer, comm, st), SEND, k, comm, "yaliSend(NULL, count 0)" + who);
        ex.issueLocal(i, comm, 0);
        expectRefused(ctx, std::string("yaliRecv with recvbuff NULL") + who,
                      yaliRecv(nullptr, c, yaliFloat32, (k + n - 1) % n, comm, st), RECV, {"recvbuff"}, comm);
        expectRefused(ctx, std::string("yaliRecv with datatype 12") + who,
                      yaliRecv(R[i].p, c, (yaliDataType_t)yaliNumTypes, (k + n - 1) % n, comm, st), RECV,
                      {"datatype"}, comm);
        issued(ctx, yaliRecv(nullptr, 0, yaliFloat32, (k + n - 1) % n, comm, st), RECV, k, comm,
               "yaliRecv(NULL, count 0)" + who);
      }
      const yaliResult_t ge = yaliGroupEnd();
      if (ge != yaliSuccess && ge != yaliInvalidArgument) {
        ctx.fail("yaliGroupEnd of a group with refused point-to-point calls and a valid ring shift returned %d "
                 "(%s): %s",
                 (int)ge, yaliGetErrorString(ge), str(yaliGetLastError(nullptr)).c_str());
      }
      ex.verify(comms, "the accepted calls of a group with refused ones");
    }

    // Nothing touched, no async error.
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      const std::string what = "after the refused calls (rank " + std::to_string(k) + ")";
      watchdogStep("p2p_args: checking rank %d's buffers", k);
      allPoison(ctx, i, R[i], what + ": recvbuff of the refused calls");
      sameBytes(ctx, k, readRegion(ctx, i, S[i]), data[i], what + ": sendbuff of the refused calls");
      guardsIntact(ctx, S[i], what);
      guardsIntact(ctx, R[i], what);
      expectPoisoned(ctx, ctx.local[i].dev, Y[i].p, kTwoMiB, what + ": the 2 MiB allocation");
      if (asyncOf(comms[i]) != yaliSuccess) {
        ctx.fail("%s: the refused calls set the comm's async error: %s", what.c_str(), commErrors(comms[i]).c_str());
      }
    }
    ringRoundTrip(ctx, comms, rng, "after the refused calls");
    allreduceAndVerify(ctx, comms, int32Sum(4093), "after the refused point-to-point calls");
  }
  std::vector<yaliComm_t> dead = comms;
  ctx.destroyComms(comms, "p2p_args");
  for (size_t i = 0; i < nl; ++i) {
    const int k = ctx.local[i].rank, peer = (k + 1) % n;
    const std::string who = " (rank " + std::to_string(k) + ")";
    expectFailure(ctx, "yaliSend on a destroyed comm" + who,
                  yaliSend(S[i].p, c, yaliFloat32, peer, dead[i], ctx.local[i].stream), yaliInvalidUsage, "yaliSend",
                  "comm");
    expectFailure(ctx, "yaliRecv on a destroyed comm" + who,
                  yaliRecv(R[i].p, c, yaliFloat32, peer, dead[i], ctx.local[i].stream), yaliInvalidUsage, "yaliRecv",
                  "comm");
    allPoison(ctx, i, R[i], "recvbuff after a call on a destroyed comm");
  }

  // YALI_MAX_P2P_OPS, on comms whose waits are short (a library that accepted the extra calls on
  // one side only would leave the other waiting).
  {
    EnvVar env("YALI_TIMEOUT_MS", std::to_string(kFailureTimeoutMs));
    const std::string label = "YALI_MAX_P2P_OPS";
    ctx.world->barrier();
    std::vector<yaliComm_t> lc = ctx.createComms(label.c_str());
    const int half = YALI_MAX_P2P_OPS / 2;
    // YALI_MAX_P2P_OPS / 2 sends to rank + 1 and as many receives from rank - 1 per rank (at 2
    // ranks, both the other).
    auto atLimit = [&](Exchange& ex) {
      std::vector<std::vector<size_t>> x(n);
      for (int r = 0; r < n; ++r) {
        for (int m = 0; m < half; ++m) {
          const size_t bytes = 1 + rng.below(2048);
          const yaliDataType_t sdt = drawType(rng, bytes), rdt = drawType(rng, bytes);
          x[r].push_back(ex.add(r, (r + 1) % n, bytes, sdt, rdt, rng, 16));
        }
      }
      Step g = ex.newStep(true, std::to_string(YALI_MAX_P2P_OPS) + " calls per comm in one group");
      for (int r = 0; r < n; ++r) {
        for (int m = 0; m < half; ++m) both(g.ops[r], x[r][m], x[(r + n - 1) % n][m], rng);
      }
      ex.addStep(std::move(g));
      ex.allocate(rng);
      ex.prepare(ctx.nextSeed());
    };
    {
      Exchange ex(ctx, label + ": at the limit");
      atLimit(ex);
      ex.run(lc);
      ex.verify(lc);
    }
    {
      Exchange ex(ctx, label + ": two calls over the limit");
      atLimit(ex);
      std::vector<Region> E(nl), F(nl);
      std::vector<Bytes> extra(nl);
      const uint64_t extraSeed = ctx.nextSeed();
      for (size_t i = 0; i < nl; ++i) {
        E[i] = makeRegion(ctx, i, 16);
        F[i] = makeRegion(ctx, i, 16);
        extra[i] = sendBytes(extraSeed, ctx.local[i].rank, 16);
        loadRegion(ctx, i, E[i], extra[i]);
        armRegion(ctx, i, F[i], kPoisonByte);
      }
      syncAll(ctx);
      watchdogStep("%s: the group", ex.name.c_str());
      groupStart(ctx, ex.name);
      std::vector<yaliResult_t> rs(nl), rr(nl);
      std::vector<std::string> ms(nl), mr(nl);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        ex.issueLocal(i, lc[i], 0);
        rs[i] = yaliSend(E[i].p, 16, yaliUint8, (k + 1) % n, lc[i], ctx.local[i].stream);
        ms[i] = str(yaliGetLastError(nullptr));
        rr[i] = yaliRecv(F[i].p, 16, yaliUint8, (k + n - 1) % n, lc[i], ctx.local[i].stream);
        mr[i] = str(yaliGetLastError(nullptr));
      }
      const yaliResult_t ge = yaliGroupEnd();
      const std::string me = str(yaliGetLastError(nullptr));
      bool launched = true;  // the group's YALI_MAX_P2P_OPS calls ran: check them
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        const bool refusedAtCall = rs[i] != yaliSuccess && rr[i] != yaliSuccess;
        if (refusedAtCall) {
          for (int j = 0; j < 2; ++j) {
            const yaliResult_t r = j ? rr[i] : rs[i];
            const std::string& m = j ? mr[i] : ms[i];
            const char* call = j ? RECV : SEND;
            if (r != yaliInvalidUsage && r != yaliInvalidArgument) {
              ctx.fail("%s: rank %d: the %s over the limit returned %d (%s), expected yaliInvalidUsage (or "
                       "yaliInvalidArgument): %s",
                       ex.name.c_str(), k, call, (int)r, yaliGetErrorString(r), m.c_str());
            } else if (m.find(call) == std::string::npos) {
              ctx.fail("%s: rank %d: yaliGetLastError(NULL) after the refused %s does not name it: \"%s\"",
                       ex.name.c_str(), k, call, m.c_str());
            }
          }
          if (ge != yaliSuccess && ge != yaliInvalidUsage && ge != yaliInvalidArgument) {
            ctx.fail("%s: yaliGroupEnd returned %d (%s): %s", ex.name.c_str(), (int)ge, yaliGetErrorString(ge),
                     me.c_str());
          }
        } else if (rs[i] == yaliSuccess && rr[i] == yaliSuccess && ge != yaliSuccess) {
          ctx.note("%s: rank %d: the calls over the limit were accepted and yaliGroupEnd refused the group (%s): %s",
                   ex.name.c_str(), k, yaliGetErrorString(ge), me.c_str());
          launched = false;
        } else if (rs[i] == yaliSuccess && rr[i] == yaliSuccess) {
          ctx.fail("%s: rank %d: %d point-to-point calls on one comm in one group were all accepted "
                   "(YALI_MAX_P2P_OPS is %d)",
                   ex.name.c_str(), k, YALI_MAX_P2P_OPS + 2, YALI_MAX_P2P_OPS);
        } else {
          ctx.fail("%s: rank %d: of the two calls over the limit, the yaliSend returned %d (%s) and the yaliRecv "
                   "%d (%s): both must be refused",
                   ex.name.c_str(), k, (int)rs[i], yaliGetErrorString(rs[i]), (int)rr[i], yaliGetErrorString(rr[i]));
        }
      }
      if (ctx.allTrue(launched)) ex.verify(lc, "the group's calls up to the limit");
      for (size_t i = 0; i < nl; ++i) {
        if (rr[i] != yaliSuccess) {
          allPoison(ctx, i, F[i], label + ": the buffer of the refused yaliRecv over the limit");
        }
        guardsIntact(ctx, E[i], label);
        guardsIntact(ctx, F[i], label);
        freeRegion(ctx, i, E[i]);
        freeRegion(ctx, i, F[i]);
      }
      syncAll(ctx);
    }
    if (ctx.allTrue(std::all_of(lc.begin(), lc.end(), [](yaliComm_t cm) { return asyncOf(cm) == yaliSuccess; }))) {
      ringRoundTrip(ctx, lc, rng, label + ": the comms still work");
    } else {
      ctx.fail("%s: a comm reports an error after the calls over the limit", label.c_str());
    }
    abortAll(ctx, lc, label);
  }

  // YALI_P2P_CHANNELS=0: point-to-point refused, collectives unaffected.
  {
    EnvVar env("YALI_P2P_CHANNELS", "0");
    const std::string label = "YALI_P2P_CHANNELS=0";
    ctx.world->barrier();
    std::vector<yaliComm_t> off = ctx.createComms(label.c_str());
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank, peer = (k + 1) % n;
      const std::string who = " (rank " + std::to_string(k) + ")";
      const cudaStream_t st = ctx.local[i].stream;
      expectFailure(ctx, label + ": yaliSend" + who, yaliSend(S[i].p, c, yaliFloat32, peer, off[i], st),
                    yaliInvalidUsage, "yaliSend", nullptr);
      expectFailure(ctx, label + ": yaliRecv" + who, yaliRecv(R[i].p, c, yaliFloat32, peer, off[i], st),
                    yaliInvalidUsage, "yaliRecv", nullptr);
      allPoison(ctx, i, R[i], label + ": recvbuff of the refused yaliRecv");
      if (asyncOf(off[i]) != yaliSuccess) {
        ctx.fail("%s: rank %d: the refused calls set the comm's async error: %s", label.c_str(), k,
                 commErrors(off[i]).c_str());
      }
    }
    allreduceAndVerify(ctx, off, int32Sum(65537), label + ": an allreduce");
    ctx.destroyComms(off, label.c_str());
  }
  for (size_t i = 0; i < nl; ++i) {
    freeRegion(ctx, i, S[i]);
    freeRegion(ctx, i, R[i]);
    freeDev(ctx, Y[i]);
  }
}

// ==== p2p_size_mismatch ===========================================================================
//
// Matched calls that move different bytes (yali.h: checked on the device; the call and the comm fail
// on both ranks with yaliInvalidUsage, naming the pair), on fresh comms with YALI_TIMEOUT_MS=10000:
// rank 0 sends 1000 bytes, rank 1 receives 1200 (ungrouped); rank 0 sends 1200 bytes as fp32, rank
// 1 receives 1000 as bf16 (grouped; its buffer has exactly 1000 bytes between guards: nothing may
// be written past it); rank 0 sends 3 MiB + 4 bytes (more than the ring), rank 1 receives 3 MiB + 3
// (not with --quick); the two routes crossed, a small send (LL packets) against a large receive
// and the reverse. Both ranks' streams must come back with cudaSuccess within 5 s (not the
// timeout), both comms report yaliInvalidUsage (not yaliTimeout): the receiver at once, the sender
// at once where its send exceeds the ring (it waits for the receiver's credit), else after its next
// launch, which is refused at admission (yali.h: a send that fits in the ring ends eagerly); each
// message names the other rank, the next call on either comm is refused with yaliInvalidUsage, the send buffer is
// unchanged, the guards intact. Other ranks (3+) made no call: their comms may report the failure
// (yaliInvalidUsage or yaliRemoteError) or nothing, noted. Then every rank aborts, and fresh comms
// work.

void caseSizeMismatch(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const size_t nl = ctx.local.size();
  Rng rng(ctx.nextSeed());
  struct Variant {
    const char* name;
    bool grouped;
    size_t sent, recvd;
    yaliDataType_t sdt, rdt;
  };
  std::vector<Variant> vs = {
      {"ungrouped: rank 0 sends 1000 bytes, rank 1 receives 1200", false, 1000, 1200, yaliUint8, yaliUint8},
      {"grouped: rank 0 sends 1200 bytes (fp32), rank 1 receives 1000 (bf16)", true, 1200, 1000, yaliFloat32,
       yaliBfloat16},
      // The two routes crossed (p2p.h: a small call's chunks travel as LL packets, a large call's
      // through the data slots): the receiver must see the sender's announcement on the route it
      // did not expect, not wait for one on its own until the timeout.
      {"grouped: rank 0 sends 1000 bytes (LL packets), rank 1 receives 1 MiB (data slots)", true, 1000, kMiB,
       yaliUint8, yaliUint8},
      {"ungrouped: rank 0 sends 1 MiB (data slots), rank 1 receives 1000 bytes (LL packets)", false, kMiB, 1000,
       yaliUint8, yaliUint8}};
  if (!ctx.quick()) {
    vs.push_back({"ungrouped, more than the ring: rank 0 sends 3 MiB + 4 bytes (fp32), rank 1 receives 3 MiB + 3 "
                  "(int8)",
                  false, 3 * kMiB + 4, 3 * kMiB + 3, yaliFloat32, yaliInt8});
  }
  for (const Variant& v : vs) {
    const std::string label = v.name;
    EnvVar env("YALI_TIMEOUT_MS", std::to_string(kFailureTimeoutMs));
    SmallRings rings;  // kRingBytes holds on these comms
    ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm creation: start it together
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      std::vector<Region> S(nl), R(nl);
      const Bytes data = sendBytes(ctx.nextSeed(), 0, v.sent);
      for (size_t i = 0; i < nl; ++i) {
        if (ctx.local[i].rank == 0) {
          S[i] = makeRegion(ctx, i, v.sent);
          loadRegion(ctx, i, S[i], data);
        } else if (ctx.local[i].rank == 1) {
          R[i] = makeRegion(ctx, i, v.recvd);
          armRegion(ctx, i, R[i], kPoisonByte);
        }
      }
      syncAll(ctx);
      ctx.world->barrier();
      const Clock::time_point t0 = Clock::now();
      watchdogStep("%s: the calls", label.c_str());
      if (v.grouped) groupStart(ctx, label);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        if (k == 0) {
          issued(ctx, yaliSend(S[i].p, v.sent / dtypeSize(v.sdt), v.sdt, 1, comms[i], ctx.local[i].stream), "yaliSend",
                 k, comms[i], label);
        } else if (k == 1) {
          issued(ctx, yaliRecv(R[i].p, v.recvd / dtypeSize(v.rdt), v.rdt, 0, comms[i], ctx.local[i].stream),
                 "yaliRecv", k, comms[i], label);
        }
      }
      if (v.grouped) groupEnd(ctx, label);

      // Ranks 0 and 1: their streams back and their comms failed, well before YALI_TIMEOUT_MS.
      // The receiver checks (yali.h); a sender whose call fit in the ring has ended before the check
      // and learns at its next launch (below): only rank 1's report ends the wait early.
      std::vector<bool> pair(nl), receiver(nl);
      for (size_t i = 0; i < nl; ++i) {
        pair[i] = ctx.local[i].rank <= 1;
        receiver[i] = ctx.local[i].rank == 1;
      }
      const auto [idleMs, toldMs] = waitForFailure(ctx, comms, t0, pair, receiver, kFailureMs, kGiveUpMs, label);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        if (k > 1) continue;
        const yaliComm_t comm = comms[i];
        ctx.note("%s: rank %d's call came back after %.0f ms; its comm reported an error after %.0f ms", label.c_str(),
                 k, idleMs[i], toldMs[i]);
        if (idleMs[i] > kFailureMs) {
          ctx.fail("%s: rank %d's call came back %.0f ms after it was issued, more than %.0f ms: a size mismatch must "
                   "end both calls at once (YALI_TIMEOUT_MS is %d ms)",
                   label.c_str(), k, idleMs[i], kFailureMs, kFailureTimeoutMs);
        }
        if (k == 0 && asyncOf(comm) == yaliSuccess) {
          // yali.h: a send that fit in the pair's ring ended before its receiver's check; the
          // failure reaches it at its next launch, which is refused at admission (nothing sent).
          if (v.sent > kRingBytes)
            ctx.fail("%s: rank 0's send is larger than the ring (%zu bytes), so it waited for the receiver's "
                     "credit and must have learnt of the failure, but its comm reports no error",
                     label.c_str(), static_cast<size_t>(kRingBytes));
          const yaliResult_t probe =
              yaliSend(S[i].p, v.sent / dtypeSize(v.sdt), v.sdt, 1, comm, ctx.local[i].stream);
          if (probe != yaliSuccess && probe != yaliInvalidUsage)
            ctx.fail("%s: rank 0's next yaliSend returned %d (%s)", label.c_str(), (int)probe, yaliGetErrorString(probe));
          CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
          CUDA_OK(ctx, cudaStreamSynchronize(ctx.local[i].stream));
          ctx.note("%s: rank 0 learnt of the failure at its next launch", label.c_str());
        }
        const yaliResult_t a = asyncOf(comm);
        if (a != yaliInvalidUsage) {
          ctx.fail("%s: rank %d: yaliCommGetAsyncError says %d (%s), expected yaliInvalidUsage on both ranks of the "
                   "pair; %s",
                   label.c_str(), k, (int)a, yaliGetErrorString(a), commErrors(comm).c_str());
        } else {
          const std::string msg = str(yaliGetLastError(comm));
          if (!namesPeer(msg, 1 - k)) {
            ctx.fail("%s: rank %d: yaliGetLastError(comm) does not name the other rank of the pair (\"rank %d\"): "
                     "\"%s\"",
                     label.c_str(), k, 1 - k, msg.c_str());
          }
        }
        const std::string who = label + ": the next call on rank " + std::to_string(k) + "'s failed comm";
        if (k == 0) {
          expectFailure(ctx, who, yaliSend(S[i].p, v.sent / dtypeSize(v.sdt), v.sdt, 1, comm, ctx.local[i].stream),
                        yaliInvalidUsage, "yaliSend", nullptr);
          sameBytes(ctx, k, readRegion(ctx, i, S[i]), data, label + ": the send buffer");
          guardsIntact(ctx, S[i], label + ": around rank 0's send buffer");
        } else {
          expectFailure(ctx, who, yaliRecv(R[i].p, v.recvd / dtypeSize(v.rdt), v.rdt, 0, comm, ctx.local[i].stream),
                        yaliInvalidUsage, "yaliRecv", nullptr);
          guardsIntact(ctx, R[i], label + ": around rank 1's receive buffer (nothing past its end)");
        }
      }
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        if (k <= 1) continue;
        const yaliResult_t a = asyncOf(comms[i]);
        ctx.note("%s: rank %d (no call) reports %s", label.c_str(), k, yaliGetErrorString(a));
        if (a != yaliSuccess && a != yaliInvalidUsage && a != yaliRemoteError) {
          ctx.fail("%s: rank %d, which made no call, reports %d (%s); %s", label.c_str(), k, (int)a,
                   yaliGetErrorString(a), commErrors(comms[i]).c_str());
        }
      }
      abortAll(ctx, comms, label);
      for (size_t i = 0; i < nl; ++i) {
        freeRegion(ctx, i, S[i]);
        freeRegion(ctx, i, R[i]);
      }
    }
  }
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_size_mismatch: fresh comms after the failures");
  ringRoundTrip(ctx, comms, rng, "fresh comms after the failures");
  ctx.destroyComms(comms, "p2p_size_mismatch: fresh comms after the failures");
}

// ==== p2p_peer_absent =============================================================================
//
// A peer that never calls (YALI_TIMEOUT_MS: 2000 ms, 4000 ms above 4 ranks, on fresh comms): rank
// 0's ungrouped yaliSend of 3 MiB + 7 bytes (more than the ring) to rank 1, which makes no call;
// then (not with --quick) rank 0's group of a 1000-byte yaliSend to rank 1 and a yaliRecv from it.
// Rank 0's call must end (its stream back with cudaSuccess, or the call returning yaliTimeout if it
// waits on the host) between 0.8 x and YALI_TIMEOUT_MS + 5 s after it was issued, with
// yaliTimeout from yaliCommGetAsyncError, a message that mentions the timeout, and yaliTimeout from
// the next call. Then every other rank makes a late yaliRecv from rank 0: it must end (at the call,
// or on its stream) within YALI_TIMEOUT_MS + 5 s, and every rank's comm must report yaliTimeout
// (yali.h: all survivors report the same code), the others' messages naming rank 0. Fresh comms
// work afterwards.

void casePeerAbsent(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  const size_t nl = ctx.local.size();
  // YALI_TIMEOUT_MS also bounds comm creation, which takes longer with many processes on one GPU.
  const int kTimeoutMs = n <= 4 ? 2000 : 4000;
  Rng rng(ctx.nextSeed());
  struct Variant {
    const char* name;
    bool grouped;
    size_t bytes;
  };
  std::vector<Variant> vs = {
      {"rank 0's ungrouped yaliSend of 3 MiB + 7 bytes to rank 1, which never calls", false, 3 * kMiB + 7}};
  if (!ctx.quick()) {
    vs.push_back({"rank 0's group of a 1000-byte yaliSend to rank 1 and a yaliRecv from it, rank 1 never calls", true,
                  1000});
  }
  for (const Variant& v : vs) {
    const std::string label = v.name;
    EnvVar env("YALI_TIMEOUT_MS", std::to_string(kTimeoutMs));
    SmallRings rings;  // kRingBytes holds on these comms
    ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm creation: start it together
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      std::vector<Region> S(nl), R(nl), L(nl);
      const Bytes data = sendBytes(ctx.nextSeed(), 0, v.bytes);
      for (size_t i = 0; i < nl; ++i) {
        if (ctx.local[i].rank == 0) {
          S[i] = makeRegion(ctx, i, v.bytes);
          R[i] = makeRegion(ctx, i, v.bytes);
          loadRegion(ctx, i, S[i], data);
          armRegion(ctx, i, R[i], kPoisonByte);
        } else {
          L[i] = makeRegion(ctx, i, 1000);
          armRegion(ctx, i, L[i], kPoisonByte);
        }
      }
      syncAll(ctx);
      ctx.world->barrier();
      for (size_t i = 0; i < nl; ++i) {
        if (ctx.local[i].rank != 0) continue;
        const yaliComm_t comm = comms[i];
        const cudaStream_t st = ctx.local[i].stream;
        watchdogStep("%s: rank 0's call (it must time out, not hang)", label.c_str());
        const Clock::time_point t0 = Clock::now();
        yaliResult_t r = yaliSuccess;
        if (v.grouped) {
          groupStart(ctx, label);
          issued(ctx, yaliSend(S[i].p, v.bytes, yaliUint8, 1, comm, st), "yaliSend", 0, comm, label);
          issued(ctx, yaliRecv(R[i].p, v.bytes, yaliUint8, 1, comm, st), "yaliRecv", 0, comm, label);
          r = yaliGroupEnd();
        } else {
          r = yaliSend(S[i].p, v.bytes, yaliUint8, 1, comm, st);
        }
        double ms = msSince(t0);
        if (r == yaliSuccess) {
          std::vector<bool> which(nl, false);
          which[i] = true;
          ms = waitIdle(ctx, which, t0, kTimeoutMs + kGiveUpMs, label)[i];
        } else if (r != yaliTimeout) {
          ctx.fail("%s: rank 0's call returned %d (%s), expected success (a device-side wait) or yaliTimeout; %s",
                   label.c_str(), (int)r, yaliGetErrorString(r), commErrors(comm).c_str());
        }
        ctx.note("%s: rank 0's call ended after %.0f ms (YALI_TIMEOUT_MS=%d)", label.c_str(), ms, kTimeoutMs);
        if (ms < 0.8 * kTimeoutMs) {
          ctx.fail("%s: rank 0's call ended after %.0f ms, before YALI_TIMEOUT_MS=%d: did it wait for rank 1 at all?",
                   label.c_str(), ms, kTimeoutMs);
        }
        if (ms > kTimeoutMs + kMarginMs) {
          ctx.fail("%s: rank 0's call ended after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms", label.c_str(), ms,
                   kMarginMs);
        }
        const yaliResult_t a = asyncOf(comm);
        if (a != yaliTimeout) {
          ctx.fail("%s: rank 0: yaliCommGetAsyncError says %d (%s), expected yaliTimeout; %s", label.c_str(), (int)a,
                   yaliGetErrorString(a), commErrors(comm).c_str());
        }
        const std::string msg = lower(str(yaliGetLastError(comm)));
        if (msg.find("timeout") == std::string::npos && msg.find("timed out") == std::string::npos) {
          ctx.fail("%s: rank 0: yaliGetLastError(comm) does not mention the timeout: \"%s\"", label.c_str(),
                   str(yaliGetLastError(comm)).c_str());
        }
        expectFailure(ctx, label + ": the next yaliSend on rank 0's timed-out comm",
                      yaliSend(S[i].p, v.bytes, yaliUint8, 1, comm, st), yaliTimeout, "yaliSend", nullptr);
      }
      ctx.world->barrier();

      // The others: a late receive from rank 0 ends with the failure, and every comm reports it.
      std::vector<bool> wait(nl, false);
      std::vector<yaliResult_t> late(nl, yaliSuccess);
      const Clock::time_point t1 = Clock::now();
      watchdogStep("%s: the other ranks' late yaliRecv from rank 0", label.c_str());
      for (size_t i = 0; i < nl; ++i) {
        if (ctx.local[i].rank == 0) continue;
        late[i] = yaliRecv(L[i].p, 1000, yaliUint8, 0, comms[i], ctx.local[i].stream);
        if (late[i] == yaliSuccess) {
          wait[i] = true;
        } else if (late[i] != yaliTimeout) {
          ctx.fail("%s: rank %d: the late yaliRecv from rank 0 returned %d (%s), expected success (a device-side "
                   "wait) or yaliTimeout; %s",
                   label.c_str(), ctx.local[i].rank, (int)late[i], yaliGetErrorString(late[i]),
                   commErrors(comms[i]).c_str());
        }
      }
      const std::vector<double> lateMs = waitIdle(ctx, wait, t1, kTimeoutMs + kGiveUpMs, label);
      for (size_t i = 0; i < nl; ++i) {
        const int k = ctx.local[i].rank;
        if (wait[i] && lateMs[i] > kTimeoutMs + kMarginMs) {
          ctx.fail("%s: rank %d's late yaliRecv from rank 0 ended after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms",
                   label.c_str(), k, lateMs[i], kMarginMs);
        }
        const yaliResult_t a = asyncOf(comms[i]);
        if (a != yaliTimeout) {
          ctx.fail("%s: rank %d: yaliCommGetAsyncError says %d (%s), expected yaliTimeout on every rank; %s",
                   label.c_str(), k, (int)a, yaliGetErrorString(a), commErrors(comms[i]).c_str());
        } else if (k != 0 && !namesRank(str(yaliGetLastError(comms[i])), 0)) {
          ctx.fail("%s: rank %d: yaliGetLastError(comm) does not name the rank that timed out (\"rank 0\"): \"%s\"",
                   label.c_str(), k, str(yaliGetLastError(comms[i])).c_str());
        }
      }
      abortAll(ctx, comms, label);
      for (size_t i = 0; i < nl; ++i) {
        freeRegion(ctx, i, S[i]);
        freeRegion(ctx, i, R[i]);
        freeRegion(ctx, i, L[i]);
      }
    }
  }
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms("p2p_peer_absent: fresh comms after the timeouts");
  ringRoundTrip(ctx, comms, rng, "fresh comms after the timeouts", 3 * kMiB + 1);
  ctx.destroyComms(comms, "p2p_peer_absent: fresh comms after the timeouts");
}

// ==== p2p_group_comm_order =========================================================================
//
// One group per rank holding point-to-point calls on two comm sets, A and B, each a ring shift
// (every rank sends to rank + 1 and receives from rank - 1; 5000 bytes on A, LL packets; 1 MiB + 8
// on B, the ring slots), made in an order that differs by rank: even ranks A first, odd ranks B
// first, then the other way round. yaliGroupEnd launches a group's comms in an order every rank
// shares (yali.h), so each rank's launch on A meets its peers' launches on A. Launched in the order
// of the comms' first calls, each rank's two launches on its stream would wait for each other
// across ranks until YALI_TIMEOUT_MS.

void caseGroupCommOrder(Ctx& ctx) {
  if (!ctx.requireAll(ctx.nranks >= 2, "needs at least 2 ranks")) return;
  const int n = ctx.nranks;
  Rng rng(ctx.nextSeed());
  std::vector<yaliComm_t> a = ctx.createComms("p2p_group_comm_order A");
  std::vector<yaliComm_t> b = ctx.createComms("p2p_group_comm_order B");
  for (int round = 0; round < 2; ++round) {
    const std::string what = std::string("one group, comms A and B ") + (round == 0 ? "A first on even ranks" : "B first on even ranks");
    Exchange exA(ctx, "p2p_group_comm_order, comm A: " + what), exB(ctx, "p2p_group_comm_order, comm B: " + what);
    for (Exchange* ex : {&exA, &exB}) {
      const size_t bytes = ex == &exA ? 5000 : kMiB + 8;
      Step st = ex->newStep(true, "ring shift");
      for (int r = 0; r < n; ++r) {
        const size_t x = ex->add(r, (r + 1) % n, bytes, yaliFloat32, yaliUint8, rng);
        st.ops[r].push_back(sendOf(x));
        st.ops[(r + 1) % n].push_back(recvOf(x));
      }
      ex->addStep(std::move(st));
      ex->allocate(rng);
      ex->prepare(ctx.nextSeed());
    }
    syncAll(ctx);
    watchdogStep("p2p_group_comm_order: %s", what.c_str());
    groupStart(ctx, what);
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      if ((ctx.local[i].rank + round) % 2 == 0) {
        exA.issueLocal(i, a[i], 0);
        exB.issueLocal(i, b[i], 0);
      } else {
        exB.issueLocal(i, b[i], 0);
        exA.issueLocal(i, a[i], 0);
      }
    }
    groupEnd(ctx, what);
    exA.verify(a, what);
    exB.verify(b, what);
  }
  ctx.destroyComms(a, "p2p_group_comm_order A");
  ctx.destroyComms(b, "p2p_group_comm_order B");
}

}  // namespace

const std::vector<CaseDef>& p2pCases() {
  static const std::vector<CaseDef> cases = {
      {"p2p_pairs",
       "yaliSend/yaliRecv ring shifts and permutations: random sizes, types, offsets; large and small rings", 600,
       casePairs},
      {"p2p_alltoallv_grouped", "torch's all_to_all_single with splits: one group of sends and receives per rank", 300,
       caseAlltoallv},
      {"p2p_ordering",
       "the k-th send lands in the k-th receive across groups and ungrouped calls; count 0 matches nothing", 300,
       caseOrdering},
      {"p2p_mixed_collectives", "point-to-point among allreduces, on some ranks only; in a group after its collectives",
       300, caseMixed},
      {"p2p_graph", "a group of sends/receives in a CUDA graph, replayed with new data, eager calls between", 300,
       caseGraph},
      {"p2p_self", "sends to self: in a group exact; outside one, or unmatched, refused on the host", 180, caseSelf},
      {"p2p_args", "bad arguments named, nothing queued; count 0; YALI_MAX_P2P_OPS; YALI_P2P_CHANNELS=0", 180,
       caseArgs},
      {"p2p_size_mismatch", "matched calls of different bytes: yaliInvalidUsage on both ranks at once, no write past",
       300, caseSizeMismatch},
      {"p2p_peer_absent", "a peer that never calls: yaliTimeout on every rank, no hang", 300, casePeerAbsent},
      {"p2p_group_comm_order", "one group, point-to-point on two comm sets in an order that differs by rank", 180,
       caseGroupCommOrder},
  };
  return cases;
}

}  // namespace yt
