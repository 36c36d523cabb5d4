// GPU cases for every collective of yali.h (AllReduce, ReduceScatter, AllGather, Broadcast and
// Bcast, Reduce, Gather, Scatter, AlltoAll) and every element type (data.h). Same rules as cases.cc
// (suite.h): every process takes the same collective steps in the same order; control flow depends
// only on values every process shares.
//
// Names: every case here starts with "coll_" (--filter coll_).
//
// One call is described by a CSpec (collective, count, type, op, root, buffer layout) and run by a
// CollRun, which lays its buffers out in a Slab (two allocations per rank, A and B, optionally
// registered with yaliCommRegister), then:
//   prepare: the whole of A and B get the guard byte; the output region gets the poison (all-ones:
//            NaN for floating types), the input region the generator's data (data.h);
//   issue:   the call on every local rank (one thread, a loop over the comms in single mode), after
//            checking that yaliAlgoInfo names one of the collective's algorithms;
//   verify:  on the device, per rank: the output against the reference (reductions: float64 and
//            exact-integer references plus the accumulation model; moved data: bit for bit); the
//            input region where the call must not write; every byte of A and B outside the two
//            regions still the guard (out-of-bounds writes, peers' stores included); then, where
//            every rank's output must be the same (AllReduce, AllGather, Broadcast, Bcast), the
//            outputs' hashes compared across ranks.
// Buffers a rank does not use (recvbuff of a non-root in Reduce and Gather, sendbuff of a non-root
// in Scatter) are passed either as NULL or as a pointer into guard bytes, which must stay intact;
// a non-root's Broadcast sendbuff holds that rank's own data, which must neither reach the output
// nor change.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runs.h"
#include "suite.h"
#include "text_helpers.h"

namespace yt {

namespace {





std::string upper(std::string s) {
  for (char& c : s) c = (char)std::toupper((unsigned char)c);
  return s;
}

// Sets (value) or unsets (nullptr) variables for the comms created while it lives; restores them
// when it ends (the MPI launcher runs every case in one process). Settings are read at comm
// creation, so a scope must outlive only the creation, but keeping it for the case is harmless.
class EnvScope {
 public:
  explicit EnvScope(const std::vector<std::pair<std::string, std::string>>& vars, bool unset = false) {
    for (const auto& v : vars) set(v.first, unset ? nullptr : v.second.c_str());
  }
  EnvScope(const char* name, const char* value) { set(name, value); }
  ~EnvScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) setenv(it->name.c_str(), it->value.c_str(), 1);
      else unsetenv(it->name.c_str());
    }
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  void set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved_.push_back({name, old != nullptr, old ? old : ""});
    if (value != nullptr) setenv(name.c_str(), value, 1);
    else unsetenv(name.c_str());
  }
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

// Every setting that changes which algorithm runs: cleared by the cases that assert a choice, so
// that a ctest entry's environment (YALI_ALGO=twoshot, a tuning file) cannot make them fail.
const char* const kSelectorVars[] = {
    "YALI_ALGO",
    "YALI_TUNING_FILE",
    "YALI_ONESHOT_LL_MAX_BYTES",
    "YALI_ONESHOT_PULL_MAX_BYTES",
    "YALI_TWOSHOT_PUSH_MIN_BYTES",
    "YALI_TWOSHOT_DIRECT_MIN_BYTES",
    "YALI_REDUCESCATTER_LL_MAX_BYTES",
    "YALI_ALLGATHER_LL_MAX_BYTES",
    "YALI_BROADCAST_LL_MAX_BYTES",
    "YALI_REDUCE_LL_MAX_BYTES",
    "YALI_GATHER_LL_MAX_BYTES",
    "YALI_SCATTER_LL_MAX_BYTES",
    "YALI_ALLTOALL_LL_MAX_BYTES",
    "YALI_ALLGATHER_DIRECT_MIN_BYTES",
    "YALI_BROADCAST_DIRECT_MIN_BYTES",
    "YALI_SCATTER_DIRECT_MIN_BYTES",
    "YALI_ALLTOALL_DIRECT_MIN_BYTES",
    "YALI_ALLGATHER_CE_MIN_BYTES",
    "YALI_BROADCAST_CE_MIN_BYTES",
    "YALI_GATHER_CE_MIN_BYTES",
    "YALI_SCATTER_CE_MIN_BYTES",
    "YALI_ALLTOALL_CE_MIN_BYTES",
    "YALI_LL_BUFFER_BYTES",
    "YALI_STAGING_BYTES",
    "YALI_PULL_BUFFER_BYTES",
};

// The selector's settings cleared, then `vars` set.
using Vars = std::vector<std::pair<std::string, std::string>>;

Vars selectorEnv(const Vars& vars) {
  std::vector<std::pair<std::string, std::string>> all;
  for (const char* v : kSelectorVars) {
    bool given = false;
    for (const auto& g : vars) given |= g.first == v;
    if (!given) all.push_back({v, std::string()});
  }
  for (const auto& g : vars) all.push_back(g);
  return all;
}

// Applies selectorEnv: variables with an empty value are unset.
class SelectorScope {
 public:
  explicit SelectorScope(const Vars& vars) { apply(vars); }
  // (A list constructor too, so that {{"NAME", "value"}} is not ambiguous with the copy constructor.)
  SelectorScope(std::initializer_list<std::pair<std::string, std::string>> vars) { apply(Vars(vars)); }
  SelectorScope(const SelectorScope&) = delete;
  SelectorScope& operator=(const SelectorScope&) = delete;
  ~SelectorScope() {
    while (!scopes_.empty()) scopes_.pop_back();  // restore in reverse order
  }

 private:
  void apply(const Vars& vars) {
    for (const auto& v : selectorEnv(vars)) {
      scopes_.emplace_back(new EnvScope(v.first.c_str(), v.second.empty() ? nullptr : v.second.c_str()));
    }
  }
  std::vector<std::unique_ptr<EnvScope>> scopes_;
};

// ---- The collectives -----------------------------------------------------------------------------

enum Coll : int {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBcast,  // yaliBcast: Broadcast in place through its own entry point
  kReduce,
  kGather,
  kScatter,
  kAlltoAll,
  kNumColls
};

struct CollDesc {
  const char* name;     // for labels
  const char* call;     // the entry point, as messages must name it
  yaliCollective_t id;  // for yaliAlgoInfo
  bool reduces, rooted;
  const char* countArg;  // yali.h's name of the count parameter
  const char* prefix;    // algorithm names: prefix_ll, prefix_staged, prefix_direct
  bool hasDirect;
  bool sameOutput;  // every rank's output is the same (hashes compared across ranks)
};

const CollDesc kColl[kNumColls] = {
    {"allreduce", "yaliAllReduce", yaliCollAllReduce, true, false, "count", "", false, true},
    {"reducescatter", "yaliReduceScatter", yaliCollReduceScatter, true, false, "recvcount", "reducescatter",
     false, false},
    {"allgather", "yaliAllGather", yaliCollAllGather, false, false, "sendcount", "allgather", true, true},
    {"broadcast", "yaliBroadcast", yaliCollBroadcast, false, true, "count", "broadcast", true, true},
    {"bcast", "yaliBcast", yaliCollBroadcast, false, true, "count", "broadcast", true, true},
    {"reduce", "yaliReduce", yaliCollReduce, true, true, "count", "reduce", false, false},
    {"gather", "yaliGather", yaliCollGather, false, true, "count", "gather", false, false},
    {"scatter", "yaliScatter", yaliCollScatter, false, true, "count", "scatter", true, false},
    {"alltoall", "yaliAlltoAll", yaliCollAlltoAll, false, false, "count", "alltoall", true, false},
};

const Coll kEveryColl[] = {kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBcast,
                           kReduce,    kGather,        kScatter,   kAlltoAll};
// The collectives with LL/staged variants of their own (AllReduce has its own algorithm set).
const Coll kNewColls[] = {kReduceScatter, kAllGather, kBroadcast, kReduce, kGather, kScatter, kAlltoAll};
const Coll kDirectColls[] = {kAllGather, kBroadcast, kScatter, kAlltoAll};
// The collectives with a copy-engine algorithm (*_ce), as entry points (Bcast is Broadcast's).
const Coll kCopyEngineColls[] = {kAllGather, kBroadcast, kBcast, kGather, kScatter, kAlltoAll};

bool canInPlace(Coll c) { return c != kAlltoAll; }

// The names yaliAlgoInfo may report for a collective.
const std::vector<std::string>& algoNames(Coll c) {
  static const std::vector<std::string> names[kNumColls] = {
      // (AllReduce's "direct" was removed from the library: never ahead of the staged choice.)
      {"oneshot_ll", "oneshot_pull", "twoshot", "twoshot_push", "twoshot_direct"},
      {"reducescatter_ll", "reducescatter_staged", "reducescatter_pull"},
      {"allgather_ll", "allgather_staged", "allgather_direct", "allgather_ce"},
      {"broadcast_ll", "broadcast_staged", "broadcast_direct", "broadcast_ce", "broadcast_twoshot"},
      {"broadcast_ll", "broadcast_staged", "broadcast_direct", "broadcast_ce", "broadcast_twoshot"},
      {"reduce_ll", "reduce_staged", "reduce_twoshot", "reduce_pull"},
      {"gather_ll", "gather_staged", "gather_ce"},
      {"scatter_ll", "scatter_staged", "scatter_direct", "scatter_ce"},
      {"alltoall_ll", "alltoall_staged", "alltoall_direct", "alltoall_ce"},
  };
  return names[c];
}

// "<prefix>_<family>" (family: ll, staged, direct, ce); AllReduce's counterparts are oneshot_ll,
// twoshot and twoshot_direct.
std::string algoName(Coll c, const std::string& family) {
  if (c == kAllReduce) return family == "ll" ? "oneshot_ll" : family == "staged" ? "twoshot" : "twoshot_direct";
  return std::string(kColl[c].prefix) + "_" + family;
}

// YALI_<NAME>_MAX_BYTES / _MIN_BYTES of an algorithm.
std::string thresholdVar(Coll c, const std::string& family) {
  return "YALI_" + upper(algoName(c, family)) + (family == "ll" ? "_MAX_BYTES" : "_MIN_BYTES");
}

// The call itself. Bcast takes recvbuff as its one buffer.
yaliResult_t callColl(Coll c, const void* send, void* recv, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                      int root, yaliComm_t comm, cudaStream_t s) {
  switch (c) {
    case kAllReduce: return yaliAllReduce(send, recv, count, dt, op, comm, s);
    case kReduceScatter: return yaliReduceScatter(send, recv, count, dt, op, comm, s);
    case kAllGather: return yaliAllGather(send, recv, count, dt, comm, s);
    case kBroadcast: return yaliBroadcast(send, recv, count, dt, root, comm, s);
    case kBcast: return yaliBcast(recv, count, dt, root, comm, s);
    case kReduce: return yaliReduce(send, recv, count, dt, op, root, comm, s);
    case kGather: return yaliGather(send, recv, count, dt, root, comm, s);
    case kScatter: return yaliScatter(send, recv, count, dt, root, comm, s);
    case kAlltoAll: return yaliAlltoAll(send, recv, count, dt, comm, s);
    default: return yaliInternalError;
  }
}

// What yaliAlgoInfo reports for a call ("?<code>" when it fails; *ret gets the code, *whole the
// whole answer).
std::string algoOf(yaliComm_t comm, Coll c, const void* send, const void* recv, size_t count,
                   yaliDataType_t dt, yaliRedOp_t op, int root, yaliResult_t* ret = nullptr,
                   yaliAlgoInfo_t* whole = nullptr) {
  yaliAlgoInfo_t info;
  std::memset(&info, 0, sizeof info);
  if (c == kBcast) send = recv;
  const yaliResult_t r =
      yaliAlgoInfo(comm, kColl[c].id, send, recv, count, dt, kColl[c].reduces ? op : yaliSum, root, &info);
  if (ret) *ret = r;
  if (r != yaliSuccess) return "?" + std::to_string((int)r);
  info.algorithm[sizeof info.algorithm - 1] = '\0';
  if (whole) *whole = info;
  return info.algorithm;
}

bool isLL(const std::string& a) { return a.size() > 3 && a.compare(a.size() - 3, 3, "_ll") == 0; }

// ---- Call specifications -------------------------------------------------------------------------

// Where a call's buffers lie. Offsets are in elements past a 4 KiB-aligned start (at most 7).
struct CLayout {
  size_t sendOff = 0, recvOff = 0;
  // The first region (the input; in place, the outer buffer) a further rank * sendOffPerRank
  // elements on: each rank's input at its own offset within the corresponding registration, which
  // the algorithms that read their peers' registered inputs (reducescatter_pull, reduce_pull) learn
  // from each other.
  size_t sendOffPerRank = 0;
  bool inplace = false;     // the collective's in-place form (Bcast always)
  bool oneAlloc = false;    // out of place: send and recv in one allocation, a guard gap between
  bool nullUnused = false;  // NULL for the buffers this rank does not use (non-roots)
  // In place, Gather's and Scatter's non-roots lay their buffers out like the root's, as the
  // copy-engine algorithms need (yali.h): Gather's pass recvbuff where the root's lies and their
  // input at recvbuff + rank * count (nccl-tests' in-place layout); Scatter's pass sendbuff where
  // the root's lies. Otherwise they pass an unused recvbuff (Gather) or sendbuff (Scatter) in guard
  // bytes elsewhere. Out of place, every rank's sendbuff lies at the same offset already.
  bool sendAtRootOffset = false;
};

struct CSpec {
  Coll coll = kAllReduce;
  size_t count = 0;
  yaliDataType_t dt = yaliFloat32;
  yaliRedOp_t op = yaliSum;  // ignored by the collectives that only move data
  int root = 0;
  CLayout L;
  yaliRedOp_t genOp() const { return kColl[coll].reduces ? op : kMoveOp; }
  bool inplace() const { return coll == kBcast || (L.inplace && canInPlace(coll)); }
};

CSpec cspec(Coll c, size_t count, yaliDataType_t dt, yaliRedOp_t op = yaliSum, int root = 0,
            CLayout L = CLayout()) {
  CSpec s;
  s.coll = c;
  s.count = count;
  s.dt = dt;
  s.op = op;
  s.root = root;
  s.L = L;
  return s;
}

std::string describe(const CSpec& s) {
  char buf[256];
  std::string what = kColl[s.coll].name;
  if (kColl[s.coll].reduces) what += std::string(" ") + opName(s.op);
  std::snprintf(buf, sizeof buf, "%s %s count=%zu", what.c_str(), dtypeName(s.dt), s.count);
  std::string d = buf;
  if (kColl[s.coll].rooted) d += " root=" + std::to_string(s.root);
  if (s.inplace()) d += " in-place";
  if (s.L.sendOff || s.L.recvOff) {
    std::snprintf(buf, sizeof buf, " send+%zu recv+%zu elems", s.L.sendOff, s.L.recvOff);
    d += buf;
  }
  if (s.L.sendOffPerRank) {
    std::snprintf(buf, sizeof buf, " send+%zu*rank elems", s.L.sendOffPerRank);
    d += buf;
  }
  if (s.L.oneAlloc) d += " one-allocation";
  if (s.L.sendAtRootOffset && s.inplace() && (s.coll == kGather || s.coll == kScatter))
    d += " non-roots laid out like the root";
  if (s.L.nullUnused && kColl[s.coll].rooted) d += " NULL-unused";
  return d;
}

// The most bytes a region can reach past kGuardBytes: n * count elements after their offsets
// (sendOff or recvOff, up to 7 elements, plus sendOffPerRank * rank).
size_t regionReach(const CSpec& s, int nranks) {
  return (size_t)nranks * s.count * dtypeSize(s.dt) + 8 * (7 + (size_t)(nranks - 1) * s.L.sendOffPerRank) + 8;
}

// Bytes each of a Slab's two allocations needs for a call: guard, the largest region (regionReach),
// a 4 KiB-aligned guard gap, a second such region (oneAlloc), guard.
size_t slabBytesFor(const CSpec& s, int nranks) {
  const size_t region = (regionReach(s, nranks) + 4095) / 4096 * 4096;
  return (s.L.oneAlloc ? 3 * kGuardBytes + 4096 + 2 * region : 2 * kGuardBytes + region);
}

// ---- Device-side checks, batched per rank ----------------------------------------------------------

// Each local rank has kSlots VerifyResults on its device and their pinned host copies: a rank's
// checks of one call are enqueued together, and one copy and one synchronization bring them all.
class Verifier {
 public:
  static constexpr int kSlots = 16;
  explicit Verifier(Ctx& ctx)
      : ctx_(ctx),
        dev_(ctx.local.size()),
        host_(ctx.local.size()),
        pending_(ctx.local.size()),
        stream_(ctx.local.size(), nullptr) {
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      void* p = nullptr;
      CUDA_OK(ctx, cudaMalloc(&p, kSlots * sizeof(VerifyResult)));
      dev_[i] = static_cast<VerifyResult*>(p);
      CUDA_OK(ctx, cudaMallocHost(&p, kSlots * sizeof(VerifyResult)));
      host_[i] = static_cast<VerifyResult*>(p);
    }
  }
  ~Verifier() {
    for (size_t i = 0; i < dev_.size(); ++i) {
      cudaSetDevice(ctx_.local[i].dev);
      cudaDeviceSynchronize();
      cudaFree(dev_[i]);
      cudaFreeHost(host_[i]);
    }
  }
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  // Output region against the reference of `map` (reductions: op; moved data: kMoveOp).
  void output(size_t i, cudaStream_t s, const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
              uint64_t seed, const OutputMap& map, const std::string& what) {
    VerifyResult* r = take(i, s, Check::kOutput, what, count);
    CUDA_OK(ctx_, enqueueVerifyMapped(out, count, dt, op, ctx_.nranks, seed, map, r, s));
  }
  // in[0..count) holds rank `rank`'s input elements first.. for (seed, op).
  void input(size_t i, cudaStream_t s, const void* in, size_t count, size_t first, yaliDataType_t dt,
             yaliRedOp_t op, int rank, uint64_t seed, const std::string& what) {
    VerifyResult* r = take(i, s, Check::kInput, what, count);
    CUDA_OK(ctx_, enqueueVerifyInput(in, count, first, dt, op, rank, seed, r, s));
  }
  // base[0..bytes) outside `skips` holds `value` (kGuardByte: guard; kPoisonByte: an output that a
  // refused or empty call must not have written).
  void bytes(size_t i, cudaStream_t s, const void* base, size_t bytes, unsigned char value,
             const ByteSkips& skips, const std::string& what) {
    VerifyResult* r = take(i, s, value == kGuardByte ? Check::kGuard : Check::kBytes, what, bytes);
    CUDA_OK(ctx_, enqueueCheckBytes(base, bytes, value, skips, r, s));
  }

  // Waits for local rank i's stream, reports every failed check (with the comm's errors), adds the
  // output hashes to *hash. Returns whether all passed.
  bool finish(size_t i, yaliComm_t comm, uint64_t* hash = nullptr);

 private:
  enum class Check { kOutput, kInput, kGuard, kBytes };
  struct Pending {
    Check kind;
    std::string what;
    size_t count;
  };
  VerifyResult* take(size_t i, cudaStream_t s, Check kind, const std::string& what, size_t count) {
    // A batch is settled before it overflows, or when its stream changes (one copy, one stream).
    if (pending_[i].size() >= (size_t)kSlots || (!pending_[i].empty() && stream_[i] != s)) finish(i, nullptr);
    stream_[i] = s;
    const size_t k = pending_[i].size();
    CUDA_OK(ctx_, cudaSetDevice(ctx_.local[i].dev));
    CUDA_OK(ctx_, enqueueReset(dev_[i] + k, s));
    pending_[i].push_back({kind, what, count});
    return dev_[i] + k;
  }
  Ctx& ctx_;
  std::vector<VerifyResult*> dev_, host_;
  std::vector<std::vector<Pending>> pending_;
  std::vector<cudaStream_t> stream_;  // the stream of each rank's pending batch
};

std::string commErrors(yaliComm_t comm) {
  std::string s = "yaliGetLastError(NULL)=\"" + str(yaliGetLastError(nullptr)) + "\"";
  if (comm != nullptr) {
    s += " yaliGetLastError(comm)=\"" + str(yaliGetLastError(comm)) + "\"";
    yaliResult_t async = yaliSuccess;
    if (yaliCommGetAsyncError(comm, &async) == yaliSuccess && async != yaliSuccess) {
      s += std::string(" asyncError=") + yaliGetErrorString(async);
    }
  }
  return s;
}

const char* whyName(int why) {
  switch (why) {
    case VerifyResult::kTolerance: return "outside the float64 reference's tolerance";
    case VerifyResult::kModel: return "off the accumulation model (fp32/fp64 in rank order, one rounding)";
    case VerifyResult::kInteger: return "not the exact wrapped integer";
    case VerifyResult::kMoved: return "not the source element's bits";
    case VerifyResult::kByte: return "byte changed";
    default: return "?";
  }
}

bool Verifier::finish(size_t i, yaliComm_t comm, uint64_t* hash) {
  std::vector<Pending> pending;
  pending.swap(pending_[i]);
  if (pending.empty()) return true;
  const LocalRank& lr = ctx_.local[i];
  const cudaStream_t s = stream_[i];
  watchdogStep("%s: waiting for rank %d's stream, then checking", pending[0].what.c_str(), lr.rank);
  CUDA_OK(ctx_, cudaSetDevice(lr.dev));
  cudaError_t e =
      cudaMemcpyAsync(host_[i], dev_[i], pending.size() * sizeof(VerifyResult), cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    ctx_.fatal("%s: rank %d: CUDA error while running or checking the call: %s; %s", pending[0].what.c_str(),
               lr.rank, cudaGetErrorString(e), commErrors(comm).c_str());
  }
  bool ok = true;
  for (size_t k = 0; k < pending.size(); ++k) {
    const VerifyResult& r = host_[i][k];
    const Pending& p = pending[k];
    if (p.kind == Check::kOutput && hash != nullptr) *hash += r.hash;
    std::string detail;
    const size_t nrec = std::min<size_t>(r.nrec, VerifyResult::kRecords);
    std::vector<VerifyResult::Record> recs(r.rec, r.rec + nrec);
    std::sort(recs.begin(), recs.end(),
              [](const VerifyResult::Record& a, const VerifyResult::Record& b) { return a.index < b.index; });
    char buf[320];
    for (size_t j = 0; j < recs.size(); ++j) {
      const VerifyResult::Record& x = recs[j];
      if (p.kind == Check::kOutput) {
        std::snprintf(buf, sizeof buf, "%s[%llu] got %.9g (0x%llx) expected %.9g (0x%llx, tol %.3g): %s",
                      j ? "; " : "", x.index, x.got, x.gotBits, x.expected, x.wantBits, x.tol,
                      whyName(x.why));
      } else {
        std::snprintf(buf, sizeof buf, "%s+%llu: 0x%02llx", j ? ", " : "", x.index, x.gotBits);
      }
      detail += buf;
    }
    switch (p.kind) {
      case Check::kOutput:
        if (r.nbad) {
          ok = false;
          ctx_.fail(
              "%s: rank %d: %llu of %zu output elements wrong (%llu still the poison or NaN, %llu off the "
              "accumulation model only), first wrong index %llu; some: %s; %s",
              p.what.c_str(), lr.rank, r.nbad, p.count, r.nnan, r.nmodel, r.firstBad, detail.c_str(),
              commErrors(comm).c_str());
        }
        break;
      case Check::kInput:
        if (r.nbadInput) {
          ok = false;
          ctx_.fail(
              "%s: rank %d: the input changed (the call must not write it): %llu of %zu elements differ, "
              "first at element %llu; %s",
              p.what.c_str(), lr.rank, r.nbadInput, p.count, r.firstBadInput, commErrors(comm).c_str());
        }
        break;
      case Check::kGuard:
        if (r.nbad) {
          ok = false;
          ctx_.fail(
              "%s: rank %d: %llu guard bytes overwritten (out-of-bounds write) in an allocation of %zu "
              "bytes, first at offset %llu (expected 0x%02x); bytes: %s",
              p.what.c_str(), lr.rank, r.nbad, p.count, r.firstBad, kGuardByte, detail.c_str());
        }
        break;
      case Check::kBytes:
        if (r.nbad) {
          ok = false;
          ctx_.fail(
              "%s: rank %d: %llu of %zu bytes changed that must not have been written, first at offset %llu; "
              "bytes: %s",
              p.what.c_str(), lr.rank, r.nbad, p.count, r.firstBad, detail.c_str());
        }
        break;
    }
  }
  return ok;
}

// ---- Slabs: per rank two allocations, A and B ------------------------------------------------------

struct Slab {
  size_t bytes = 0;
  Alloc kind = Alloc::Malloc;
  std::vector<DevAlloc> A, B;     // per local rank
  std::vector<void*> regA, regB;  // registration handles (nullptr: not registered)
  bool owns = true;               // a view (mixed registration) frees nothing
  bool registeredA() const { return !regA.empty() && regA[0] != nullptr; }
  bool registeredB() const { return !regB.empty() && regB[0] != nullptr; }
};

std::unique_ptr<Slab> makeSlab(Ctx& ctx, size_t bytes, Alloc kind,
                               const std::vector<cudaStream_t>& streams = {}) {
  std::unique_ptr<Slab> s(new Slab);
  s->bytes = bytes;
  s->kind = kind;
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    cudaStream_t st = streams.empty() ? ctx.local[i].stream : streams[i];
    s->A.push_back(allocDev(ctx, ctx.local[i].dev, bytes, kind, st));
    s->B.push_back(allocDev(ctx, ctx.local[i].dev, bytes, kind, st));
    s->regA.push_back(nullptr);
    s->regB.push_back(nullptr);
  }
  return s;
}

void registerPart(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<DevAlloc>& part,
                  std::vector<void*>& handles, const char* name) {
  watchdogStep("yaliCommRegister (slab %s, %zu bytes)", name, part[0].bytes);
  for (size_t i = 0; i < comms.size(); ++i) {
    void* h = nullptr;
    const yaliResult_t r = yaliCommRegister(comms[i], part[i].p, part[i].bytes, &h);
    if (r != yaliSuccess || h == nullptr) {
      // Fatal: a rank that did not register would leave its peers' zero-copy calls waiting.
      ctx.fatal("yaliCommRegister(slab %s, %zu bytes) (rank %d) returned %d (%s), handle %p: %s", name,
                part[i].bytes, ctx.local[i].rank, (int)r, yaliGetErrorString(r), h,
                str(yaliGetLastError(nullptr)).c_str());
    }
    handles[i] = h;
  }
}

void deregisterPart(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<void*>& handles,
                    const char* name) {
  watchdogStep("yaliCommDeregister (slab %s)", name);
  for (size_t i = 0; i < comms.size(); ++i) {
    if (handles[i] == nullptr) continue;
    const yaliResult_t r = yaliCommDeregister(comms[i], handles[i]);
    if (r != yaliSuccess) {
      ctx.fatal("yaliCommDeregister(slab %s) (rank %d) returned %d (%s): %s", name, ctx.local[i].rank, (int)r,
                yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
    }
    handles[i] = nullptr;
  }
}

void freeSlab(Ctx& ctx, Slab& s) {
  if (!s.owns) return;
  for (DevAlloc& a : s.A) freeDev(ctx, a);
  for (DevAlloc& a : s.B) freeDev(ctx, a);
}

// Slabs for calls made one after the other: one per power-of-two size class (at least 256 KiB),
// kept until the pool ends, so that small calls use small slabs (the guard fill and scan cover the
// whole slab). With comms, every slab is registered with them when made (collective: every process
// asks for the same classes in the same order). release() deregisters and frees; call it before
// the comms are destroyed.
class SlabPool {
 public:
  SlabPool(Ctx& ctx, Alloc kind = Alloc::Malloc, const std::vector<yaliComm_t>* registerWith = nullptr)
      : ctx_(ctx), kind_(kind), comms_(registerWith ? *registerWith : std::vector<yaliComm_t>()) {}
  ~SlabPool() { release(); }
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  Slab& get(size_t bytes) {
    size_t cls = (size_t)256 << 10;
    while (cls < bytes) cls *= 2;
    for (auto& s : slabs_) {
      if (s->bytes == cls) return *s;
    }
    slabs_.push_back(makeSlab(ctx_, cls, kind_));
    if (!comms_.empty()) {
      registerPart(ctx_, comms_, slabs_.back()->A, slabs_.back()->regA, "A");
      registerPart(ctx_, comms_, slabs_.back()->B, slabs_.back()->regB, "B");
    }
    return *slabs_.back();
  }
  // Collective when registered (every process releases at the same point).
  void release() {
    if (!comms_.empty() && !slabs_.empty()) {
      for (auto& s : slabs_) {
        deregisterPart(ctx_, comms_, s->regA, "A");
        deregisterPart(ctx_, comms_, s->regB, "B");
      }
      // Every rank has deregistered (and so stopped using its peers' copies) before any frees.
      ctx_.world->barrier();
    }
    for (auto& s : slabs_) freeSlab(ctx_, *s);
    slabs_.clear();
  }
  bool registered() const { return !comms_.empty(); }

 private:
  Ctx& ctx_;
  Alloc kind_;
  std::vector<yaliComm_t> comms_;
  std::vector<std::unique_ptr<Slab>> slabs_;
};

// ---- One call on every local rank ----------------------------------------------------------------

class CollRun {
 public:
  // Lays the call out in `slab` (which it uses alone while it lives). `streams`: one per local
  // rank (default: the ranks' main streams).
  CollRun(Ctx& ctx, const CSpec& s, Slab& slab, std::vector<cudaStream_t> streams = {});

  // Guard over A and B, poison over the output, the input: asynchronous on each rank's stream.
  // With seedDev (graphs), the generator reads combineSeed(*seedDev[i], salt) when it runs; call
  // setSeed(combineSeed(replaySeed, salt)) before verify.
  void prepare(uint64_t seed, const std::vector<uint64_t*>* seedDev = nullptr, uint64_t salt = 0);
  void setSeed(uint64_t s) { seed = s; }
  // The call on every local rank (a loop from this thread), after a local yaliAlgoInfo check.
  bool issue(const std::vector<yaliComm_t>& comms);
  // Enqueues local rank i's checks into `v` (the caller finishes them).
  void enqueueChecks(size_t i, Verifier& v, const std::string& label);
  // Collective: every check, and identity of the outputs where they must agree.
  bool verify(const std::vector<yaliComm_t>& comms, Verifier& v, const std::string& extra = "");
  // yaliAlgoInfo with this call's buffers on local rank i.
  std::string algo(const std::vector<yaliComm_t>& comms, size_t i) const {
    const Plan& P = plans[i];
    return algoOf(comms[i], spec.coll, P.send, P.recv, spec.count, spec.dt, spec.op, spec.root);
  }
  std::string label(const std::string& extra = "") const {
    return extra.empty() ? describe(spec) : extra + ": " + describe(spec);
  }

  const CSpec spec;
  uint64_t seed = 0;
  struct Keep {
    const char* p;
    size_t elems, first;
  };
  struct Plan {
    const void* send = nullptr;  // the call's arguments
    void* recv = nullptr;
    char* genAt = nullptr;  // this rank's input elements 0..genElems-1 go here
    size_t genElems = 0;
    char* poisonAt = nullptr;  // poisoned before the input is written
    size_t poisonElems = 0;
    bool checkOut = false;  // the output region (recv) against outMap
    size_t outElems = 0;
    OutputMap outMap;
    std::vector<Keep> keep;                            // regions that must still hold the input afterwards
    std::vector<std::pair<const char*, size_t>> used;  // regions the guard check leaves out
  };
  std::vector<Plan> plans;  // per local rank
  std::vector<cudaStream_t> streams;

 private:
  void plan(size_t i);
  Ctx& ctx_;
  Slab& slab_;
};

CollRun::CollRun(Ctx& ctx, const CSpec& s, Slab& slab, std::vector<cudaStream_t> st)
    : spec(s), plans(ctx.local.size()), streams(std::move(st)), ctx_(ctx), slab_(slab) {
  if (streams.empty()) {
    for (const LocalRank& lr : ctx.local) streams.push_back(lr.stream);
  }
  if (slabBytesFor(s, ctx.nranks) > slab.bytes) {
    ctx.fatal("%s: needs %zu bytes per slab allocation, the slab has %zu (a bug in the test)",
              describe(s).c_str(), slabBytesFor(s, ctx.nranks), slab.bytes);
  }
  for (size_t i = 0; i < plans.size(); ++i) plan(i);
}

void CollRun::plan(size_t i) {
  const int n = ctx_.nranks, k = ctx_.local[i].rank, root = spec.root;
  const size_t c = spec.count, es = dtypeSize(spec.dt);
  const bool isRoot = k == root;
  const Coll C = spec.coll;
  Plan& P = plans[i];
  char* const A = slab_.A[i].p;
  char* const B = slab_.B[i].p;
  const size_t regionMax = regionReach(spec, n);
  // The first region: in A at the send offset (in place: the outer buffer).
  char* const first = A + kGuardBytes + (spec.L.sendOff + spec.L.sendOffPerRank * k) * es;
  // The second region (out of place): in B, or in A after the first region and a guard gap.
  char* const second =
      spec.L.oneAlloc ? A + (kGuardBytes + regionMax + 4095) / 4096 * 4096 + kGuardBytes + spec.L.recvOff * es
                      : B + kGuardBytes + spec.L.recvOff * es;
  // A buffer this rank does not use: NULL, or a pointer into guard bytes (B's start when in place,
  // else the region's own place, never written).
  auto unused = [&](char* place) -> char* { return spec.L.nullUnused ? nullptr : place; };

  // Expected output maps.
  OutputMap m;
  switch (C) {
    case kAllReduce:
    case kReduce: break;
    case kReduceScatter: m.inBase = (unsigned long long)k * c; break;
    case kAllGather:
    case kGather: m.block = c; break;
    case kBroadcast:
    case kBcast:
      m.block = c;
      m.srcRank = root;
      break;
    case kScatter:
      m.block = c;
      m.srcRank = root;
      m.srcChunk = (unsigned long long)k;
      break;
    case kAlltoAll:
      m.block = c;
      m.srcChunk = (unsigned long long)k;
      break;
    default: break;
  }
  if (m.block == 0) m.block = 1;
  P.outMap = m;

  if (c == 0) {
    // Nothing to move: real pointers (or NULL), nothing written anywhere (the guard check covers
    // both allocations whole).
    P.send = spec.L.nullUnused ? nullptr : first;
    P.recv = spec.L.nullUnused ? nullptr : second;
    if (spec.inplace()) P.recv = const_cast<void*>(P.send);
    return;
  }

  auto gen = [&](char* at, size_t elems) {
    P.genAt = at;
    P.genElems = elems;
    P.used.push_back({at, elems * es});
  };
  auto out = [&](char* at, size_t elems, bool poison) {
    P.recv = at;
    P.checkOut = true;
    P.outElems = elems;
    if (poison) {
      P.poisonAt = at;
      P.poisonElems = elems;
    }
    P.used.push_back({at, elems * es});
  };
  auto keep = [&](const char* at, size_t elems, size_t firstIndex) {
    if (elems) P.keep.push_back({at, elems, firstIndex});
  };

  if (!spec.inplace()) {
    switch (C) {
      case kAllReduce:
      case kAlltoAll:
      case kReduceScatter:
      case kAllGather: {
        const size_t sendN = C == kAllReduce || C == kAllGather ? c : (size_t)n * c;
        const size_t recvN = C == kAllReduce || C == kReduceScatter ? c : (size_t)n * c;
        gen(first, sendN);
        keep(first, sendN, 0);
        P.send = first;
        out(second, recvN, true);
        break;
      }
      case kBroadcast:
        // Non-roots pass their own data as sendbuff: it must not be read (the output is root's)
        // nor written.
        gen(first, c);
        keep(first, c, 0);
        P.send = first;
        out(second, c, true);
        break;
      case kReduce:
        gen(first, c);
        keep(first, c, 0);
        P.send = first;
        if (isRoot) out(second, c, true);
        else P.recv = unused(second);
        break;
      case kGather:
        gen(first, c);
        keep(first, c, 0);
        P.send = first;
        if (isRoot) out(second, (size_t)n * c, true);
        else P.recv = unused(second);
        break;
      case kScatter:
        if (isRoot) {
          gen(first, (size_t)n * c);
          keep(first, (size_t)n * c, 0);
          P.send = first;
        } else {
          P.send = unused(first);
        }
        out(second, c, true);
        break;
      default: break;
    }
    return;
  }

  // In place: NCCL's rules (yali.h).
  switch (C) {
    case kAllReduce:
      gen(first, c);
      P.send = first;
      out(first, c, false);
      break;
    case kBroadcast:
    case kBcast:
      P.send = first;
      if (isRoot) {
        gen(first, c);
        out(first, c, false);  // root's output is its input (the map says root's data)
      } else {
        out(first, c, true);
      }
      break;
    case kReduce:
      gen(first, c);
      P.send = first;
      if (isRoot) {
        out(first, c, false);
      } else {
        // recvbuff == sendbuff on a non-root: nothing may be written there.
        P.recv = spec.L.nullUnused ? nullptr : first;
        keep(first, c, 0);
      }
      break;
    case kReduceScatter:
      // recvbuff = sendbuff + rank * recvcount; the other blocks of sendbuff must keep the input.
      gen(first, (size_t)n * c);
      P.send = first;
      out(first + (size_t)k * c * es, c, false);
      keep(first, (size_t)k * c, 0);
      keep(first + (size_t)(k + 1) * c * es, (size_t)(n - k - 1) * c, (size_t)(k + 1) * c);
      break;
    case kAllGather:
      // sendbuff = recvbuff + rank * sendcount.
      out(first, (size_t)n * c, true);
      gen(first + (size_t)k * c * es, c);
      P.send = first + (size_t)k * c * es;
      break;
    case kGather:
      if (isRoot) {
        out(first, (size_t)n * c, true);
        gen(first + (size_t)k * c * es, c);
        P.send = first + (size_t)k * c * es;
      } else {
        // Where an in-place AllGather would put it; recvbuff unused (where the root's lies, or in
        // guard bytes elsewhere).
        gen(first + (size_t)k * c * es, c);
        keep(first + (size_t)k * c * es, c, 0);
        P.send = first + (size_t)k * c * es;
        P.recv = spec.L.sendAtRootOffset ? first : unused(B + kGuardBytes);
      }
      break;
    case kScatter:
      if (isRoot) {
        // recvbuff = sendbuff + root * count; the other blocks must keep the input.
        gen(first, (size_t)n * c);
        P.send = first;
        out(first + (size_t)root * c * es, c, false);
        keep(first, (size_t)root * c, 0);
        keep(first + (size_t)(root + 1) * c * es, (size_t)(n - root - 1) * c, (size_t)(root + 1) * c);
      } else {
        // At root's recv offset, so that registered buffers lie at the same offset on every rank.
        // sendbuff (never read here) in guard bytes, or where the root's lies.
        out(first + (size_t)root * c * es, c, true);
        P.send = spec.L.sendAtRootOffset ? first : unused(B + kGuardBytes);
      }
      break;
    default: break;
  }
}

void CollRun::prepare(uint64_t s, const std::vector<uint64_t*>* seedDev, uint64_t salt) {
  seed = s;
  const size_t es = dtypeSize(spec.dt);
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& P = plans[i];
    const LocalRank& lr = ctx_.local[i];
    CUDA_OK(ctx_, cudaSetDevice(lr.dev));
    CUDA_OK(ctx_, cudaMemsetAsync(slab_.A[i].p, kGuardByte, slab_.bytes, streams[i]));
    CUDA_OK(ctx_, cudaMemsetAsync(slab_.B[i].p, kGuardByte, slab_.bytes, streams[i]));
    if (P.poisonElems)
      CUDA_OK(ctx_, cudaMemsetAsync(P.poisonAt, kPoisonByte, P.poisonElems * es, streams[i]));
    if (P.genElems) {
      CUDA_OK(ctx_, launchGenerate(P.genAt, P.genElems, spec.dt, spec.genOp(), lr.rank, seedDev ? salt : seed,
                                   seedDev ? (*seedDev)[i] : nullptr, streams[i]));
    }
  }
}

bool CollRun::issue(const std::vector<yaliComm_t>& comms) {
  bool ok = true;
  const std::string l = describe(spec);
  watchdogStep("%s %s", kColl[spec.coll].call, l.c_str());
  // No cudaSetDevice per comm: a comm carries its device (one thread issues on every comm).
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& P = plans[i];
    const yaliResult_t r =
        callColl(spec.coll, P.send, P.recv, spec.count, spec.dt, spec.op, spec.root, comms[i], streams[i]);
    if (r != yaliSuccess) {
      ok = false;
      ctx_.fail("%s: rank %d: %s returned %d (%s); %s", l.c_str(), ctx_.local[i].rank, kColl[spec.coll].call,
                (int)r, yaliGetErrorString(r), commErrors(comms[i]).c_str());
    }
  }
  // yaliAlgoInfo must name one of the collective's algorithms ("none" for count 0). After the
  // calls, so that a failing query cannot leave peers waiting.
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string a = algo(comms, i);
    const auto& names = algoNames(spec.coll);
    const bool known =
        spec.count == 0 ? a == "none" : std::find(names.begin(), names.end(), a) != names.end();
    if (!known) {
      ok = false;
      ctx_.fail("%s: rank %d: yaliAlgoInfo reports \"%s\", not %s of %s; %s", l.c_str(), ctx_.local[i].rank,
                a.c_str(), spec.count == 0 ? "\"none\" (count 0)" : "an algorithm", kColl[spec.coll].name,
                commErrors(comms[i]).c_str());
    }
  }
  return ok;
}

ByteSkips skipsIn(const DevAlloc& a, const std::vector<std::pair<const char*, size_t>>& used) {
  ByteSkips s;
  for (const auto& u : used) {
    if (u.first >= a.p && u.first + u.second <= a.p + a.bytes && s.n < ByteSkips::kMaxSkips) {
      s.begin[s.n] = (unsigned long long)(u.first - a.p);
      s.end[s.n] = s.begin[s.n] + u.second;
      ++s.n;
    }
  }
  return s;
}

void CollRun::enqueueChecks(size_t i, Verifier& v, const std::string& label) {
  const Plan& P = plans[i];
  const LocalRank& lr = ctx_.local[i];
  const size_t es = dtypeSize(spec.dt);
  CUDA_OK(ctx_, cudaSetDevice(lr.dev));
  if (P.checkOut) {
    v.output(i, streams[i], P.recv, P.outElems, spec.dt, spec.genOp(), seed, P.outMap, label);
  }
  for (const Keep& kp : P.keep) {
    v.input(i, streams[i], kp.p, kp.elems, kp.first, spec.dt, spec.genOp(), lr.rank, seed,
            label + " (input)");
  }
  v.bytes(i, streams[i], slab_.A[i].p, slab_.bytes, kGuardByte, skipsIn(slab_.A[i], P.used),
          label + " (allocation A)");
  v.bytes(i, streams[i], slab_.B[i].p, slab_.bytes, kGuardByte, skipsIn(slab_.B[i], P.used),
          label + " (allocation B)");
  (void)es;
}

bool CollRun::verify(const std::vector<yaliComm_t>& comms, Verifier& v, const std::string& extra) {
  const std::string l = label(extra);
  bool ok = true;
  std::vector<uint64_t> hashes(plans.size(), 0);
  for (size_t i = 0; i < plans.size(); ++i) {
    enqueueChecks(i, v, l);
    ok &= v.finish(i, comms[i], &hashes[i]);
  }
  if (kColl[spec.coll].sameOutput) {
    watchdogStep("%s: comparing output hashes across ranks", l.c_str());
    ok &= checkIdentity(ctx_, hashes, l);
  }
  return ok;
}

// prepare (fresh seed) + issue + verify in a slab of `pool`. Collective.
bool runColl(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& pool, Verifier& v, const CSpec& s,
             const std::string& label = "") {
  CollRun run(ctx, s, pool.get(slabBytesFor(s, ctx.nranks)));
  run.prepare(ctx.nextSeed());
  bool ok = run.issue(comms);
  ok &= run.verify(comms, v, label);
  return ok;
}

// Collective: yaliAlgoInfo for the call `run` makes reports `want` on every rank (or, with
// `wantNot`, anything but it; empty: only that every rank agrees).
bool expectAlgo(Ctx& ctx, const std::vector<yaliComm_t>& comms, const CollRun& run, const std::string& want,
                const std::string& label, bool negate = false) {
  bool ok = true;
  std::vector<uint64_t> hashes(comms.size(), 0);
  for (size_t i = 0; i < comms.size(); ++i) {
    const std::string a = run.algo(comms, i);
    for (char ch : a) hashes[i] = mix64(hashes[i] ^ (unsigned char)ch);
    if (want.empty()) continue;
    if (negate ? a == want : a != want) {
      ok = false;
      ctx.fail("%s: rank %d: yaliAlgoInfo reports \"%s\"; expected %s\"%s\"", run.label(label).c_str(),
               ctx.local[i].rank, a.c_str(), negate ? "anything but " : "", want.c_str());
    }
  }
  ok &= checkIdentity(ctx, hashes, run.label(label) + ": yaliAlgoInfo (the same algorithm on every rank)");
  return ok;
}

// The call in `slab`: yaliAlgoInfo with the call's buffers must report `want` (negate: not `want`)
// on every rank before the call; then prepare (fresh seed) + issue + verify. Collective.
bool runCollAlgoIn(Ctx& ctx, const std::vector<yaliComm_t>& comms, Slab& slab, Verifier& v, const CSpec& s,
                   const std::string& want, const std::string& label, bool negate = false) {
  CollRun run(ctx, s, slab);
  bool ok = expectAlgo(ctx, comms, run, want, label, negate);
  run.prepare(ctx.nextSeed());
  ok &= run.issue(comms);
  ok &= run.verify(comms, v, label);
  return ok;
}

// runCollAlgoIn in a slab of `pool`.
bool runCollAlgo(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& pool, Verifier& v, const CSpec& s,
                 const std::string& want, const std::string& label, bool negate = false) {
  return runCollAlgoIn(ctx, comms, pool.get(slabBytesFor(s, ctx.nranks)), v, s, want, label, negate);
}

// The ops a reduction runs for a type (avg only for floating types).
std::vector<yaliRedOp_t> opsFor(yaliDataType_t dt) {
  std::vector<yaliRedOp_t> v;
  for (yaliRedOp_t op : kEveryOp) {
    if (opValidFor(op, dt)) v.push_back(op);
  }
  return v;
}

// The ops a case runs for `dt`: all of opsFor's, or under --quick one of them, rotating with the
// case's running `combo` so that the quick suite still meets every op across types.
std::vector<yaliRedOp_t> opsToRun(const Ctx& ctx, yaliDataType_t dt, int combo) {
  std::vector<yaliRedOp_t> ops = opsFor(dt);
  if (ctx.quick()) ops = {ops[combo % ops.size()]};
  return ops;
}

// A count whose per-receiver message is about `bytes` for the type, made odd (never a multiple of
// a vector width).
size_t countFor(size_t bytes, yaliDataType_t dt) {
  size_t c = bytes / dtypeSize(dt);
  return c | 1;
}

}  // namespace

namespace {

// ==== coll_matrix ====================================================================================
//
// Every collective x type x op (reductions) x root (every rank) x in place and out of place, at a
// single element and at 65537 elements (several blocks, the LL range of every type). With --quick:
// 4093 elements, and the root and placement rotate from one combination to the next (so at 2 and 4
// ranks every root and both placements still occur for every collective). Unused buffers are NULL
// in every third call, guard bytes otherwise.

void caseMatrix(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_matrix");
  {
    SlabPool pool(ctx);
    Verifier v(ctx);
    const int n = ctx.nranks;
    const std::vector<size_t> counts =
        ctx.quick() ? std::vector<size_t>{4093} : std::vector<size_t>{1, 65537};
    int combo = 0;
    for (size_t count : counts) {
      for (Coll c : kEveryColl) {
        for (yaliDataType_t dt : kEveryDtype) {
          const std::vector<yaliRedOp_t> ops =
              kColl[c].reduces ? opsFor(dt) : std::vector<yaliRedOp_t>{yaliSum};
          for (yaliRedOp_t op : ops) {
            std::vector<int> roots = {0};
            if (kColl[c].rooted) {
              roots.clear();
              if (ctx.quick()) roots.push_back(combo % n);
              else
                for (int r = 0; r < n; ++r) roots.push_back(r);
            }
            std::vector<bool> places;
            if (c == kBcast) places = {true};
            else if (!canInPlace(c)) places = {false};
            else if (ctx.quick()) places = {(combo / n) % 2 == 1};  // independent of the root
            else places = {false, true};
            for (int root : roots) {
              for (bool inplace : places) {
                CLayout L;
                L.inplace = inplace;
                L.nullUnused = combo % 3 == 0;
                runColl(ctx, comms, pool, v, cspec(c, count, dt, op, root, L));
                ++combo;
              }
            }
          }
        }
      }
    }
  }
  ctx.destroyComms(comms, "coll_matrix");
}

// ==== coll_counts ====================================================================================
//
// Counts 0, 1, 2, 3, 7, 31, 127, 1023, 1024, 4093, 65537, 262147 and 1048573 (up to 8 MB per rank and
// receiver for 8-byte types), every collective and type; reductions every op (--quick: the op
// rotates, counts 0, 1, 7 and 65537). Root and placement rotate.

void caseCounts(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_counts");
  {
    SlabPool pool(ctx);
    Verifier v(ctx);
    const int n = ctx.nranks;
    std::vector<size_t> counts = {0, 1, 2, 3, 7, 31, 127, 1023, 1024, 4093, 65537, 262147, 1048573};
    if (ctx.quick()) counts = {0, 1, 7, 65537};
    int combo = 0;
    for (size_t count : counts) {
      for (Coll c : kEveryColl) {
        for (yaliDataType_t dt : kEveryDtype) {
          std::vector<yaliRedOp_t> ops = {yaliSum};
          if (kColl[c].reduces) {
            ops = opsToRun(ctx, dt, combo);
          }
          for (yaliRedOp_t op : ops) {
            CLayout L;
            L.inplace = (combo / n) % 2 == 1;  // independent of the root
            L.nullUnused = combo % 3 == 1;
            runColl(ctx, comms, pool, v, cspec(c, count, dt, op, combo % n, L));
            ++combo;
          }
        }
      }
    }
  }
  ctx.destroyComms(comms, "coll_counts");
}

// ==== coll_large =====================================================================================
//
// Messages of 9 MB per receiver (5 MB with --quick): above the LL buffer (1 MB per sender), so no
// LL algorithm may be chosen, and above the default staging (4 MB per sender), so the staged
// algorithms pipeline several steps. Every collective; fp32, bf16, int8, fp64 and fp8 (saturating
// sums) for the reductions, int8, fp16 and fp64 for the data movers; in place too.

void caseLarge(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_large");
  {
    SlabPool pool(ctx);
    Verifier v(ctx);
    const int n = ctx.nranks;
    const size_t bytes = ctx.quick() ? (5u << 20) : (9u << 20);
    // The settings of the environment apply (the fuzz stage of scripts/gpu_check.sh varies them).
    const char* llEnv = std::getenv("YALI_LL_BUFFER_BYTES");
    const size_t llBuffer = llEnv && *llEnv ? (size_t)std::strtoull(llEnv, nullptr, 10) : (size_t)1 << 20;
    struct Pick {
      yaliDataType_t dt;
      yaliRedOp_t op;
    };
    std::vector<Pick> reds = {{yaliFloat32, yaliSum},
                              {yaliBfloat16, yaliSum},
                              {yaliInt8, yaliSum},
                              {yaliFloat64, yaliMax},
                              {yaliFloat8e4m3, yaliSum}};
    std::vector<yaliDataType_t> moves = {yaliInt8, yaliFloat16, yaliFloat64};
    if (ctx.quick()) {
      reds.resize(1);
      moves = {yaliFloat32};
    }
    int combo = 0;
    for (Coll c : kEveryColl) {
      std::vector<Pick> picks = reds;
      if (!kColl[c].reduces) {
        picks.clear();
        for (yaliDataType_t dt : moves) picks.push_back({dt, yaliSum});
      }
      for (const Pick& p : picks) {
        for (bool inplace : {false, true}) {
          if (inplace && (!canInPlace(c) || (ctx.quick() && c != kAllGather && c != kReduceScatter)))
            continue;
          if (!inplace && c == kBcast) continue;
          CLayout L;
          L.inplace = inplace;
          L.sendOff = combo % 3;  // element-aligned, mostly not 16-byte aligned
          L.recvOff = (combo + 1) % 5;
          const CSpec s = cspec(c, countFor(bytes, p.dt), p.dt, p.op, (n - 1 + combo) % n, L);
          CollRun run(ctx, s, pool.get(slabBytesFor(s, n)));
          // Above the LL buffer: whatever the selector picks, it is not an LL algorithm.
          for (size_t i = 0; i < comms.size() && llBuffer < s.count * dtypeSize(s.dt); ++i) {
            const std::string a = run.algo(comms, i);
            if (isLL(a)) {
              ctx.fail(
                  "%s: rank %d: yaliAlgoInfo chose \"%s\" for %zu bytes per receiver, more than the LL "
                  "buffer (%zu bytes)",
                  run.label().c_str(), ctx.local[i].rank, a.c_str(), s.count * dtypeSize(s.dt), llBuffer);
            }
          }
          run.prepare(ctx.nextSeed());
          run.issue(comms);
          run.verify(comms, v);
          ++combo;
        }
      }
    }
  }
  ctx.destroyComms(comms, "coll_large");
}

// ==== coll_offsets ===================================================================================
//
// Buffers 1, 3, 5 or 7 elements past an aligned start (element-aligned, not 16-byte aligned), send
// and recv in separate allocations or in one, in place at an offset too: every collective, for the
// 1-, 2-, 4- and 8-byte types, counts 4093 (LL range) and 262147 (beyond the 1 MB LL buffer for the
// 4- and 8-byte types: the staged range).

void caseOffsets(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_offsets");
  {
    SlabPool pool(ctx);
    Verifier v(ctx);
    const int n = ctx.nranks;
    struct Off {
      size_t send, recv;
      bool oneAlloc;
    };
    std::vector<Off> offs = {{1, 3, false}, {3, 5, false}, {5, 1, true}, {0, 3, false}, {7, 0, true}};
    std::vector<size_t> counts = {4093, 262147};
    std::vector<yaliDataType_t> dts = {yaliInt8,    yaliFloat16,    yaliFloat32,
                                       yaliFloat64, yaliFloat8e5m2, yaliUint64};
    if (ctx.quick()) {
      offs = {{1, 3, false}, {7, 0, true}};
      counts = {4093};
      dts = {yaliInt8, yaliFloat16, yaliFloat64};
    }
    int combo = 0;
    for (Coll c : kEveryColl) {
      for (yaliDataType_t dt : dts) {
        for (size_t count : counts) {
          for (const Off& o : offs) {
            CLayout L;
            L.sendOff = o.send;
            L.recvOff = o.recv;
            L.oneAlloc = o.oneAlloc;
            const yaliRedOp_t op = opsFor(dt)[combo % opsFor(dt).size()];
            if (c != kBcast) runColl(ctx, comms, pool, v, cspec(c, count, dt, op, combo % n, L));
            if (canInPlace(c) && o.send != 0) {
              CLayout I;
              I.inplace = true;
              I.sendOff = o.send;
              runColl(ctx, comms, pool, v, cspec(c, count, dt, op, (combo + 1) % n, I));
            }
            ++combo;
          }
        }
      }
    }
  }
  ctx.destroyComms(comms, "coll_offsets");
}

// ==== coll_pool_memory ===============================================================================
//
// Buffers from cudaMallocAsync (the device's default pool, and a pool of the test's own): every
// collective, out of place and in place, at an offset, in the LL and the staged range.

void casePool(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_pool_memory");
  {
    Verifier v(ctx);
    const int n = ctx.nranks;
    for (Alloc a : {Alloc::DefaultPool, Alloc::OwnPool}) {
      SlabPool pool(ctx, a);
      std::vector<std::pair<size_t, yaliDataType_t>> calls = {
          {4093, yaliFloat32}, {1048573, yaliBfloat16}, {65537, yaliInt32}};
      if (ctx.quick()) calls = {{4093, yaliFloat32}, {262147, yaliBfloat16}};
      int combo = 0;
      for (Coll c : kEveryColl) {
        for (const auto& call : calls) {
          CLayout L;
          L.sendOff = 1;
          L.recvOff = 3;
          L.inplace = c == kBcast || (canInPlace(c) && combo % 2 == 1);
          runColl(ctx, comms, pool, v, cspec(c, call.first, call.second, yaliSum, combo % n, L),
                  std::string("pool ") + allocName(a));
          ++combo;
        }
      }
    }
  }
  ctx.destroyComms(comms, "coll_pool_memory");
}

// ==== coll_staging_small =============================================================================
//
// YALI_STAGING_BYTES=65536 and YALI_LL_BUFFER_BYTES=65536, every collective's staged algorithm
// forced: messages of about 1 MB per receiver pipeline through 16 or more steps; odd counts (the
// last step is partial); int8 and fp64 too. Then the LL algorithms forced under the same small LL
// buffer: 32 KB per receiver runs LL, 128 KB falls back to the staged algorithm (AllReduce: not
// oneshot_ll).

std::string forcedList(const std::string& family) {
  std::string s;
  for (Coll c : kNewColls) s += (s.empty() ? "" : ",") + algoName(c, family);
  return s;
}

void caseStagingSmall(Ctx& ctx) {
  const int n = ctx.nranks;
  {
    SelectorScope env({{"YALI_STAGING_BYTES", "65536"},
                       {"YALI_LL_BUFFER_BYTES", "65536"},
                       {"YALI_ALGO", "twoshot," + forcedList("staged")}});
    std::vector<yaliComm_t> comms = ctx.createComms("coll_staging_small (staged forced)");
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      std::vector<std::pair<size_t, yaliDataType_t>> calls = {
          {262147, yaliFloat32}, {1000003, yaliInt8}, {131071, yaliFloat64}, {65537, yaliBfloat16}};
      if (ctx.quick()) calls = {{262147, yaliFloat32}, {1000003, yaliInt8}};
      int combo = 0;
      for (Coll c : kEveryColl) {
        for (const auto& call : calls) {
          CLayout L;
          L.inplace = c == kBcast || (canInPlace(c) && combo % 3 == 2);
          L.sendOff = combo % 2;
          const yaliRedOp_t op = opsFor(call.second)[combo % opsFor(call.second).size()];
          runCollAlgo(ctx, comms, pool, v, cspec(c, call.first, call.second, op, combo % n, L),
                      algoName(c, "staged"), "YALI_STAGING_BYTES=65536, staged forced");
          ++combo;
        }
      }
    }
    ctx.destroyComms(comms, "coll_staging_small (staged forced)");
  }
  {
    SelectorScope env({{"YALI_STAGING_BYTES", "65536"},
                       {"YALI_LL_BUFFER_BYTES", "65536"},
                       {"YALI_ALGO", "oneshot_ll," + forcedList("ll")}});
    std::vector<yaliComm_t> comms = ctx.createComms("coll_staging_small (LL forced)");
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (Coll c : kEveryColl) {
        for (yaliDataType_t dt : {yaliFloat32, yaliUint8}) {
          const std::string label = "YALI_LL_BUFFER_BYTES=65536, LL forced";
          // Inside the LL buffer: the forced LL algorithm.
          runCollAlgo(ctx, comms, pool, v, cspec(c, countFor(32 << 10, dt), dt, yaliSum, combo % n),
                      algoName(c, "ll"), label + ", 32 KB per receiver");
          // Beyond it: the fallback (AllReduce's one-shot gets a two-shot; the others their staged).
          const CSpec big = cspec(c, countFor(128 << 10, dt), dt, yaliMax, (combo + 1) % n);
          if (c == kAllReduce) runCollAlgo(ctx, comms, pool, v, big, "oneshot_ll", label + ", 128 KB", true);
          else runCollAlgo(ctx, comms, pool, v, big, algoName(c, "staged"), label + ", 128 KB per receiver");
          ++combo;
        }
      }
    }
    ctx.destroyComms(comms, "coll_staging_small (LL forced)");
  }
}

}  // namespace

namespace {

// A slab whose A is `a`'s and whose B is `b`'s (which must be the same size): to place send and
// recv in differently registered memory. Frees nothing.
Slab viewOf(const Slab& a, const Slab& b) {
  Slab s;
  s.bytes = std::min(a.bytes, b.bytes);
  s.kind = a.kind;
  s.A = a.A;
  s.B = b.B;
  s.regA = a.regA;
  s.regB = b.regB;
  s.owns = false;
  return s;
}

// Comm creation under `vars` must fail on every rank with yaliInvalidArgument naming `var`.
// Collective.
void expectInitRefused(Ctx& ctx, const std::vector<std::pair<std::string, std::string>>& vars,
                       const std::string& var, const std::string& what) {
  SelectorScope env(vars);
  std::vector<yaliComm_t> comms(ctx.local.size(), nullptr);
  const char* call = ctx.single() ? "yaliCommInitAll" : "yaliCommInitRank";
  watchdogStep("%s with %s (must be refused)", call, what.c_str());
  ctx.world->barrier();
  yaliResult_t r;
  if (ctx.single()) {
    std::vector<int> devs;
    for (const LocalRank& lr : ctx.local) devs.push_back(lr.dev);
    r = yaliCommInitAll(comms.data(), (int)comms.size(), devs.data());
  } else {
    const yaliUniqueId id = ctx.sharedUniqueId();
    CUDA_OK(ctx, cudaSetDevice(ctx.local[0].dev));
    r = yaliCommInitRank(&comms[0], ctx.nranks, id, ctx.local[0].rank);
  }
  const std::string label = std::string(call) + " with " + what;
  if (r == yaliSuccess) ctx.fail("%s succeeded; the setting must be refused", label.c_str());
  else expectFailure(ctx, label, r, yaliInvalidArgument, call, var.c_str());
  // Comms made by a library that accepted it: every process made them (the same environment).
  if (!ctx.allTrue(r != yaliSuccess)) {
    for (yaliComm_t& c : comms) {
      if (c != nullptr) yaliCommAbort(c);
      c = nullptr;
    }
  }
  ctx.world->barrier();
}

// One buffer of the call registered, the other not (Slabs A and B from the two pools): `want` is
// expected with only sendbuff registered when `sendEnough`, with only recvbuff registered when
// `recvEnough` (else any other algorithm), and the results must be right either way.
void runWithOneBufferRegistered(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& reg, SlabPool& unreg,
                                Verifier& v, const CSpec& s, const std::string& want, const std::string& label,
                                bool sendEnough, bool recvEnough) {
  const size_t bytes = slabBytesFor(s, ctx.nranks);
  Slab& r = reg.get(bytes);
  Slab& u = unreg.get(bytes);
  Slab sendOnly = viewOf(r, u);  // send in registered A, recv in unregistered B
  Slab recvOnly = viewOf(u, r);
  runCollAlgoIn(ctx, comms, sendOnly, v, s, want, label + ", only sendbuff registered", !sendEnough);
  runCollAlgoIn(ctx, comms, recvOnly, v, s, want, label + ", only recvbuff registered", !recvEnough);
}

// ==== coll_algos =====================================================================================
//
// Every algorithm forced with YALI_ALGO (one name per collective in one list), and yaliAlgoInfo
// must name it wherever it applies, on every rank, and the call must be right:
//  - the LL family and the staged family, every collective x every type, at 31 elements and about
//    64 KB per receiver (--quick: 16 KB); beyond the LL buffer (2 MB per receiver, YALI_LL_BUFFER_BYTES
//    1 MB) the LL family falls back to the staged one (AllReduce: anything but oneshot_ll); the
//    staged family also at 9 MB (several staging steps);
//  - AllReduce's oneshot_pull and twoshot_push, every type x op;
//  - the zero-copy family on registered buffers (*_direct for AllGather, Broadcast, Bcast, Scatter,
//    AlltoAll), every type, in place too, and with only the receive buffer registered (which is
//    what they need); on unregistered buffers, or with only the send buffer registered, never
//    *_direct; AllReduce's twoshot_direct with the output registered, every type x op;
//  - a forced name changes only its own collective (the others choose as with no YALI_ALGO);
//  - settings that name two algorithms of one collective, an unknown name, or a threshold out of
//    range are refused at comm creation (yaliInvalidArgument naming the variable).

void captureAndReplay(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<std::unique_ptr<CollRun>>& runs,
                      Verifier& v, int replays, const std::string& label);  // coll_graphs, below

void caseAlgos(Ctx& ctx) {
  const int n = ctx.nranks;
  // The LL and staged families.
  for (const std::string family : {"ll", "staged"}) {
    const std::string list = algoName(kAllReduce, family) + "," + forcedList(family);
    const std::string label = "YALI_ALGO=" + list;
    SelectorScope env({{"YALI_ALGO", list}, {"YALI_LL_BUFFER_BYTES", "1048576"}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (Coll c : kEveryColl) {
        for (yaliDataType_t dt : kEveryDtype) {
          std::vector<size_t> counts = {31, countFor(64 << 10, dt)};
          if (ctx.quick()) counts = {countFor(16 << 10, dt)};
          for (size_t count : counts) {
            const std::vector<yaliRedOp_t> ops = opsFor(dt);
            CLayout L;
            L.inplace = c == kBcast || (canInPlace(c) && combo % 2 == 1);
            runCollAlgo(ctx, comms, pool, v, cspec(c, count, dt, ops[combo % ops.size()], combo % n, L),
                        algoName(c, family), label);
            ++combo;
          }
        }
        std::vector<yaliDataType_t> bigTypes = {yaliFloat32, yaliInt8};
        if (ctx.quick()) bigTypes = {yaliFloat32};
        for (yaliDataType_t dt : bigTypes) {
          const size_t bytes = family == "ll" ? (2u << 20) + 4096 : ctx.quick() ? (5u << 20) : (9u << 20);
          const CSpec s = cspec(c, countFor(bytes, dt), dt, yaliSum, (combo + 1) % n);
          if (c == kAllReduce && family == "ll") {
            runCollAlgo(ctx, comms, pool, v, s, "oneshot_ll", label + ", beyond the LL buffer", true);
          } else {
            runCollAlgo(ctx, comms, pool, v, s, algoName(c, "staged"),
                        label + (family == "ll" ? ", beyond the LL buffer" : ", several staging steps"));
          }
          ++combo;
        }
      }
    }
    ctx.destroyComms(comms, label.c_str());
  }

  // AllReduce's other algorithms, on every new type.
  for (const char* algo : {"oneshot_pull", "twoshot_push"}) {
    const std::string label = std::string("YALI_ALGO=") + algo;
    SelectorScope env(Vars{{"YALI_ALGO", algo}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (yaliDataType_t dt : kEveryDtype) {
        std::vector<yaliRedOp_t> ops = opsToRun(ctx, dt, combo);
        for (yaliRedOp_t op : ops) {
          CLayout L;
          L.inplace = combo % 2 == 1;
          runCollAlgo(ctx, comms, pool, v, cspec(kAllReduce, ctx.quick() ? 4093 : 65537, dt, op, 0, L), algo,
                      label);
          ++combo;
        }
      }
    }
    ctx.destroyComms(comms, label.c_str());
  }

  // The rooted collectives on two-shot's pipeline (broadcast_twoshot, reduce_twoshot; off by
  // default): every type (Reduce: every op), roots rotating, in place and not, counts that nranks
  // does not divide (short and empty shards), then several tiles.
  {
    const std::string list = "broadcast_twoshot,reduce_twoshot";
    const std::string label = "YALI_ALGO=" + list;
    SelectorScope env(Vars{{"YALI_ALGO", list}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (Coll c : {kBroadcast, kBcast, kReduce}) {
        const std::string want = c == kReduce ? "reduce_twoshot" : "broadcast_twoshot";
        for (yaliDataType_t dt : kEveryDtype) {
          std::vector<yaliRedOp_t> ops = c == kReduce ? opsFor(dt) : std::vector<yaliRedOp_t>{yaliSum};
          if (ctx.quick()) ops = {ops[combo % ops.size()]};
          std::vector<size_t> counts = {1, 31, 65537};
          if (ctx.quick()) counts = {4093};
          for (yaliRedOp_t op : ops) {
            for (size_t count : counts) {
              CLayout L;
              L.inplace = c == kBcast || combo % 2 == 1;
              runCollAlgo(ctx, comms, pool, v, cspec(c, count, dt, op, combo % n, L), want, label);
              ++combo;
            }
          }
        }
        for (yaliDataType_t dt : {yaliFloat32, yaliInt8}) {
          const size_t count = countFor(ctx.quick() ? (5u << 20) : (9u << 20), dt) + 3;
          runCollAlgo(ctx, comms, pool, v, cspec(c, count, dt, yaliSum, (combo + 1) % n), want,
                      label + ", several tiles");
          ++combo;
        }
      }
    }
    ctx.destroyComms(comms, label.c_str());
  }

  // The zero-copy family on registered buffers (AllReduce's zero-copy algorithm, twoshot_direct,
  // follows on its own comms).
  {
    std::string list;
    for (Coll c : kDirectColls) list += (list.empty() ? "" : ",") + algoName(c, "direct");
    const std::string label = "YALI_ALGO=" + list;
    SelectorScope env({{"YALI_ALGO", list}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      SlabPool unreg(ctx);
      Verifier v(ctx);
      int combo = 0;
      const Coll movers[] = {kAllGather, kBroadcast, kBcast, kScatter, kAlltoAll};
      for (Coll c : movers) {
        const std::string want = algoName(c, "direct");
        for (yaliDataType_t dt : kEveryDtype) {
          std::vector<size_t> counts = {1, 4093, 262147};
          if (ctx.quick()) counts = {4093};
          for (size_t count : counts) {
            CLayout L;
            L.inplace = c == kBcast || (canInPlace(c) && combo % 2 == 1);
            const CSpec s = cspec(c, count, dt, yaliSum, combo % n, L);
            runCollAlgo(ctx, comms, reg, v, s, want, label + ", registered");
            ++combo;
          }
        }
        if (c == kBcast) {
          runCollAlgo(ctx, comms, unreg, v, cspec(c, 4093, yaliInt32, yaliSum, 1 % n), want,
                      label + ", not registered", true);
          continue;
        }
        for (yaliDataType_t dt : {yaliFloat32, yaliUint8}) {
          const CSpec s = cspec(c, 65537, dt, yaliSum, combo % n);
          runCollAlgo(ctx, comms, unreg, v, s, want, label + ", not registered", true);
          runWithOneBufferRegistered(ctx, comms, reg, unreg, v, s, want, label, false, true);
          ++combo;
        }
      }
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
  }
  // twoshot_direct: the output registered.
  {
    const std::string label = "YALI_ALGO=twoshot_direct";
    SelectorScope env(Vars{{"YALI_ALGO", "twoshot_direct"}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      SlabPool unreg(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (yaliDataType_t dt : kEveryDtype) {
        std::vector<yaliRedOp_t> ops = opsToRun(ctx, dt, combo);
        for (yaliRedOp_t op : ops) {
          const CSpec s = cspec(kAllReduce, 65537, dt, op);
          Slab& r = reg.get(slabBytesFor(s, n));
          Slab& u = unreg.get(slabBytesFor(s, n));
          Slab recvOnly = viewOf(u, r);
          runCollAlgoIn(ctx, comms, recvOnly, v, s, "twoshot_direct", label + ", recvbuff registered");
          ++combo;
        }
      }
      runCollAlgo(ctx, comms, unreg, v, cspec(kAllReduce, 65537, yaliFloat32, yaliSum), "twoshot_direct",
                  label + ", not registered", true);
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
  }

  // The pull exchange (reducescatter_pull, reduce_pull: one kernel, exchange.cuh: exchangePull), the
  // inputs registered (off by default), each row forced on comms of its own: every type x op,
  // counts that leave blocks short and runs unaligned, in place and not (alternating independently
  // of the root), several blocks; Reduce: the root rotating over every rank (and then every root
  // in place and not at several blocks), NULL recvbuff on the non-roots every third call (which
  // must write nothing); inputs at rank-different offsets within their registrations; with only
  // sendbuff registered too (which is what it needs), never with only recvbuff or neither; and in a
  // graph (coll_graphs covers captures in general; this one the pull's own handshake across
  // replays).
  struct PullRow {
    Coll coll;
    const char* algo;
  };
  for (const PullRow& row : {PullRow{kReduceScatter, "reducescatter_pull"}, PullRow{kReduce, "reduce_pull"}}) {
    const Coll c = row.coll;
    const bool rooted = kColl[c].rooted;
    const std::string want = row.algo;
    const std::string label = "YALI_ALGO=" + want;
    SelectorScope env(Vars{{"YALI_ALGO", want}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      SlabPool unreg(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (yaliDataType_t dt : kEveryDtype) {
        std::vector<yaliRedOp_t> ops = opsToRun(ctx, dt, combo);
        std::vector<size_t> counts = {1, 31, 4093, 262147};
        if (ctx.quick()) counts = {31, 4093};
        for (yaliRedOp_t op : ops) {
          for (size_t count : counts) {
            CLayout L;
            L.inplace = (combo / n) % 2 == 1;  // independent of the root
            L.nullUnused = rooted && combo % 3 == 0;
            runCollAlgo(ctx, comms, reg, v, cspec(c, count, dt, op, combo % n, L), want, label + ", registered");
            ++combo;
          }
        }
      }
      if (rooted) {
        // Every root, in place and out of place (NULL recvbuff on the non-roots then), several
        // blocks and a short last run.
        for (int root = 0; root < n; ++root) {
          for (bool inplace : {false, true}) {
            CLayout L;
            L.inplace = inplace;
            L.nullUnused = !inplace;
            runCollAlgo(ctx, comms, reg, v, cspec(c, 65537, yaliFloat32, yaliSum, root, L), want,
                        label + ", registered, every root");
          }
        }
      }
      // Each rank's input at an offset of its own within the registration (rank elements further
      // on, in place too): every rank reads each peer's input where that peer says it lies.
      for (yaliDataType_t dt : {yaliFloat32, yaliBfloat16, yaliFloat64}) {
        for (bool inplace : {false, true}) {
          CLayout L;
          L.sendOffPerRank = 1;
          L.inplace = inplace;
          runCollAlgo(ctx, comms, reg, v, cspec(c, 4093, dt, yaliSum, combo % n, L), want,
                      label + ", registered, inputs at rank-different offsets");
          ++combo;
        }
      }
      for (yaliDataType_t dt : {yaliFloat32, yaliBfloat16}) {
        const CSpec s = cspec(c, 65537, dt, yaliSum, (combo + 1) % n);
        runCollAlgo(ctx, comms, unreg, v, s, want, label + ", not registered", true);
        runWithOneBufferRegistered(ctx, comms, reg, unreg, v, s, want, label, true, false);
        ++combo;
      }
      {
        // Two calls in one graph, each in a registered slab of its own (Reduce: a non-root's
        // recvbuff NULL in the first, in place in the second, two different roots).
        CLayout nullUnused, inplace;
        nullUnused.nullUnused = true;
        inplace.inplace = true;
        const std::vector<CSpec> specs =
            rooted ? std::vector<CSpec>{cspec(c, 4093, yaliFloat32, yaliSum, n - 1, nullUnused),
                                        cspec(c, 65537, yaliBfloat16, yaliMax, 0, inplace)}
                   : std::vector<CSpec>{cspec(c, 4093, yaliFloat32, yaliSum), cspec(c, 65537, yaliBfloat16, yaliMax)};
        std::vector<std::unique_ptr<Slab>> slabs;
        std::vector<std::unique_ptr<CollRun>> runs;
        for (const CSpec& s : specs) {
          slabs.push_back(makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc));
          registerPart(ctx, comms, slabs.back()->A, slabs.back()->regA, "A");
          registerPart(ctx, comms, slabs.back()->B, slabs.back()->regB, "B");
          runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
          expectAlgo(ctx, comms, *runs.back(), want, label + ", captured");
        }
        syncAll(ctx);
        captureAndReplay(ctx, comms, runs, v, ctx.quick() ? 3 : 8, label + ", captured");
        runs.clear();
        for (auto& sl : slabs) {
          deregisterPart(ctx, comms, sl->regA, "A");
          deregisterPart(ctx, comms, sl->regB, "B");
        }
        ctx.world->barrier();  // every rank stopped using its peers' copies before any frees
        for (auto& sl : slabs) freeSlab(ctx, *sl);
      }
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
  }

  // A forced name changes only its own collective.
  {
    std::vector<yaliComm_t> autoComms, agComms, arComms;
    {
      SelectorScope env({{"YALI_LL_BUFFER_BYTES", "1048576"}});
      autoComms = ctx.createComms("no YALI_ALGO");
    }
    {
      SelectorScope env({{"YALI_ALGO", "allgather_ll"}, {"YALI_LL_BUFFER_BYTES", "1048576"}});
      agComms = ctx.createComms("YALI_ALGO=allgather_ll");
    }
    {
      SelectorScope env({{"YALI_ALGO", "twoshot"}, {"YALI_LL_BUFFER_BYTES", "1048576"}});
      arComms = ctx.createComms("YALI_ALGO=twoshot");
    }
    const size_t sizes[] = {4, 4096, 65536, (2u << 20) + 4096};
    for (Coll c : kEveryColl) {
      for (yaliDataType_t dt : {yaliFloat32, yaliInt8}) {
        for (size_t bytes : sizes) {
          const size_t count = std::max<size_t>(1, bytes / dtypeSize(dt));
          for (size_t i = 0; i < ctx.local.size(); ++i) {
            const int rank = ctx.local[i].rank;
            const std::string a0 = algoOf(autoComms[i], c, nullptr, nullptr, count, dt, yaliSum, 0);
            const std::string a1 = algoOf(agComms[i], c, nullptr, nullptr, count, dt, yaliSum, 0);
            const std::string a2 = algoOf(arComms[i], c, nullptr, nullptr, count, dt, yaliSum, 0);
            const std::string want1 =
                c == kAllGather ? (bytes <= (1u << 20) ? "allgather_ll" : "allgather_staged") : a0;
            const std::string want2 = c == kAllReduce ? "twoshot" : a0;
            if (a1 != want1) {
              ctx.fail(
                  "YALI_ALGO=allgather_ll: %s %s count=%zu (rank %d): yaliAlgoInfo reports \"%s\", expected "
                  "\"%s\"%s",
                  kColl[c].name, dtypeName(dt), count, rank, a1.c_str(), want1.c_str(),
                  c == kAllGather ? "" : " (the choice without YALI_ALGO)");
            }
            if (a2 != want2) {
              ctx.fail(
                  "YALI_ALGO=twoshot: %s %s count=%zu (rank %d): yaliAlgoInfo reports \"%s\", expected "
                  "\"%s\"%s",
                  kColl[c].name, dtypeName(dt), count, rank, a2.c_str(), want2.c_str(),
                  c == kAllReduce ? "" : " (the choice without YALI_ALGO)");
            }
          }
        }
      }
    }
    ctx.destroyComms(arComms, "YALI_ALGO=twoshot");
    ctx.destroyComms(agComms, "YALI_ALGO=allgather_ll");
    ctx.destroyComms(autoComms, "no YALI_ALGO");
  }

  // Settings refused at creation.
  expectInitRefused(ctx, {{"YALI_ALGO", "allgather_ll,allgather_staged"}}, "YALI_ALGO",
                    "YALI_ALGO=allgather_ll,allgather_staged (two names for one collective)");
  expectInitRefused(ctx, {{"YALI_ALGO", "twoshot,alltoall_fast"}}, "YALI_ALGO",
                    "YALI_ALGO=twoshot,alltoall_fast");
  expectInitRefused(ctx, {{"YALI_ALGO", "gather_direct"}}, "YALI_ALGO",
                    "YALI_ALGO=gather_direct (Gather has no zero-copy algorithm)");
  expectInitRefused(ctx, {{"YALI_ALLGATHER_LL_MAX_BYTES", "-3"}}, "YALI_ALLGATHER_LL_MAX_BYTES",
                    "YALI_ALLGATHER_LL_MAX_BYTES=-3");
  expectInitRefused(ctx, {{"YALI_ALLTOALL_DIRECT_MIN_BYTES", "12abc"}}, "YALI_ALLTOALL_DIRECT_MIN_BYTES",
                    "YALI_ALLTOALL_DIRECT_MIN_BYTES=12abc");
  expectInitRefused(ctx, {{"YALI_REDUCESCATTER_LL_MAX_BYTES", "-7"}}, "YALI_REDUCESCATTER_LL_MAX_BYTES",
                    "YALI_REDUCESCATTER_LL_MAX_BYTES=-7");
}

// ==== coll_thresholds ================================================================================
//
// YALI_<NAME>_MAX_BYTES of every LL algorithm and YALI_<NAME>_MIN_BYTES of every *_direct: -1
// (wherever it fits), 0 (never), and a byte size, with the boundary on both sides (the size
// compared is count * element size; a threshold in bytes is inclusive). Three comm sets each: in
// every set each collective has one of the three values, rotating, so that every collective sees
// every value. The direct sets run on registered buffers with the collectives' LL off, so that the
// choice is between *_direct and *_staged.

void caseThresholds(Ctx& ctx) {
  const int n = ctx.nranks;
  const char* llValues[3] = {"-1", "0", "4096"};
  for (int set = 0; set < 3; ++set) {
    std::vector<std::pair<std::string, std::string>> vars = {{"YALI_LL_BUFFER_BYTES", "1048576"}};
    std::string label = "LL thresholds";
    for (size_t j = 0; j < sizeof kNewColls / sizeof kNewColls[0]; ++j) {
      vars.push_back({thresholdVar(kNewColls[j], "ll"), llValues[(set + j) % 3]});
      label += " " + vars.back().first + "=" + vars.back().second;
    }
    SelectorScope env(vars);
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool pool(ctx);
      Verifier v(ctx);
      int combo = 0;
      for (size_t j = 0; j < sizeof kNewColls / sizeof kNewColls[0]; ++j) {
        const std::string value = llValues[(set + j) % 3];
        std::vector<Coll> colls = {kNewColls[j]};
        if (kNewColls[j] == kBroadcast) colls.push_back(kBcast);
        for (Coll c : colls) {
          const std::string what = thresholdVar(c, "ll") + "=" + value;
          const std::string ll = algoName(c, "ll"), staged = algoName(c, "staged");
          for (yaliDataType_t dt : {yaliFloat32, yaliInt8}) {
            const size_t es = dtypeSize(dt);
            struct Point {
              size_t count;
              const char* want;
            };
            // (push_back, not assignment from a list: GCC 12 warns wrongly about the latter.)
            std::vector<Point> points;
            if (value == "-1") {
              points.push_back({1, "ll"});
              points.push_back({countFor(512 << 10, dt), "ll"});
              points.push_back({countFor(2u << 20, dt), "staged"});
            } else if (value == "0") {
              points.push_back({1, "staged"});
              points.push_back({countFor(64 << 10, dt), "staged"});
            } else {
              points.push_back({1, "ll"});
              points.push_back({4096 / es, "ll"});
              points.push_back({4096 / es + 1, "staged"});
            }
            for (const Point& p : points) {
              runCollAlgo(ctx, comms, pool, v, cspec(c, p.count, dt, yaliSum, combo % n),
                          std::string(p.want) == "ll" ? ll : staged, what);
              ++combo;
            }
          }
        }
      }
    }
    ctx.destroyComms(comms, label.c_str());
  }

  const char* directValues[3] = {"-1", "0", "65536"};
  for (int set = 0; set < 3; ++set) {
    std::vector<std::pair<std::string, std::string>> vars;
    std::string label = "direct thresholds";
    for (size_t j = 0; j < sizeof kDirectColls / sizeof kDirectColls[0]; ++j) {
      vars.push_back({thresholdVar(kDirectColls[j], "ll"), "0"});
      vars.push_back({thresholdVar(kDirectColls[j], "direct"), directValues[(set + j) % 3]});
      label += " " + vars.back().first + "=" + vars.back().second;
    }
    SelectorScope env(vars);
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      Verifier v(ctx);
      int combo = 0;
      for (size_t j = 0; j < sizeof kDirectColls / sizeof kDirectColls[0]; ++j) {
        const std::string value = directValues[(set + j) % 3];
        std::vector<Coll> colls = {kDirectColls[j]};
        if (kDirectColls[j] == kBroadcast) colls.push_back(kBcast);
        for (Coll c : colls) {
          const std::string what = thresholdVar(c, "direct") + "=" + value + ", registered buffers, LL off";
          const std::string direct = algoName(c, "direct"), staged = algoName(c, "staged");
          struct Point {
            size_t count;
            yaliDataType_t dt;
            bool direct;
          };
          std::vector<Point> points;
          if (value == "-1") {
            points.push_back({1, yaliUint8, true});
            points.push_back({262147, yaliFloat32, true});
          } else if (value == "0") {
            points.push_back({1, yaliUint8, false});
            points.push_back({262147, yaliFloat32, false});
          } else {
            points.push_back({65536 / 4, yaliFloat32, true});
            points.push_back({65536 / 4 - 1, yaliFloat32, false});
            points.push_back({65536, yaliInt8, true});
            points.push_back({65535, yaliInt8, false});
          }
          for (const Point& p : points) {
            runCollAlgo(ctx, comms, reg, v, cspec(c, p.count, p.dt, yaliSum, combo % n),
                        p.direct ? direct : staged, what);
            ++combo;
          }
        }
      }
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
  }
}

// ==== coll_registered ================================================================================
//
// Registered buffers under the selector's own choice (whatever the environment says): every
// collective x every type at 1, 4093, 262147 and 2 MB+ per receiver, in place and out of place;
// the choice must be the same on every rank and the result right. Then the same memory after
// yaliCommDeregister: never *_direct, still right. Every call is laid out as the copy-engine
// algorithms need it (yali.h), so that settings turning them on (YALI_ALGO=*_ce,
// YALI_*_CE_MIN_BYTES: the settings fuzz of scripts/gpu_check.sh) may take them: in place, the
// non-roots' unused Gather recvbuff and Scatter sendbuff lie where the root's do, and a Scatter
// non-root's sendbuff is never NULL (a rank whose input is not registered would take another
// algorithm than its peers, which yali.h answers with yaliTimeout).

void caseRegistered(Ctx& ctx) {
  const int n = ctx.nranks;
  std::vector<yaliComm_t> comms = ctx.createComms("coll_registered");
  {
    Verifier v(ctx);
    std::vector<size_t> counts = {1, 4093, 262147, 524309};
    if (ctx.quick()) counts = {4093, 262147};
    const size_t maxBytes = slabBytesFor(cspec(kAlltoAll, counts.back(), yaliFloat64), n);
    std::unique_ptr<Slab> slab = makeSlab(ctx, maxBytes, Alloc::Malloc);
    registerPart(ctx, comms, slab->A, slab->regA, "A");
    registerPart(ctx, comms, slab->B, slab->regB, "B");
    int combo = 0;
    for (size_t count : counts) {
      for (Coll c : kEveryColl) {
        for (yaliDataType_t dt : kEveryDtype) {
          if (ctx.quick() && (combo % 3 != 0)) {
            ++combo;
            continue;
          }
          CLayout L;
          L.inplace = c == kBcast || (canInPlace(c) && combo % 2 == 1);
          L.nullUnused = combo % 4 == 3 && c != kScatter;
          L.sendAtRootOffset = true;
          const std::vector<yaliRedOp_t> ops = opsFor(dt);
          CollRun run(ctx, cspec(c, count, dt, ops[combo % ops.size()], combo % n, L), *slab);
          expectAlgo(ctx, comms, run, "", "registered");
          run.prepare(ctx.nextSeed());
          run.issue(comms);
          run.verify(comms, v, "registered");
          ++combo;
        }
      }
    }
    deregisterPart(ctx, comms, slab->regA, "A");
    deregisterPart(ctx, comms, slab->regB, "B");
    for (Coll c : kEveryColl) {
      const CSpec s = cspec(c, 262147, yaliFloat32, yaliSum, combo++ % n);
      CollRun run(ctx, s, *slab);
      if (kColl[c].hasDirect)
        expectAlgo(ctx, comms, run, algoName(c, "direct"), "after yaliCommDeregister", true);
      if (c == kAllReduce) expectAlgo(ctx, comms, run, "twoshot_direct", "after yaliCommDeregister", true);
      run.prepare(ctx.nextSeed());
      run.issue(comms);
      run.verify(comms, v, "after yaliCommDeregister");
    }
    ctx.destroyComms(comms, "coll_registered");
    ctx.world->barrier();  // no peer maps our memory any more
    freeSlab(ctx, *slab);
  }
}

}  // namespace

namespace {

// Right after an out-of-place call, overwrites its input (the test's generator, another seed) in
// stream order: a library that still read sendbuff after its call had ended on the stream would
// produce wrong outputs. The input checks no longer apply: verify checks outputs and guards only.
void overwriteInputAfterCall(Ctx& ctx, CollRun& run) {
  if (run.spec.inplace()) return;
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CollRun::Plan& P = run.plans[i];
    P.keep.clear();
    if (P.genElems == 0) continue;
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, launchGenerate(P.genAt, P.genElems, run.spec.dt, run.spec.genOp(), ctx.local[i].rank, ~run.seed,
                                nullptr, run.streams[i]));
  }
}

// ==== coll_back_to_back ==============================================================================
//
// 60 calls (24 with --quick) of changing collectives on one stream per rank without a host
// synchronization: AllGather, ReduceScatter, AllReduce, Broadcast (the root moving), AlltoAll,
// Reduce, Gather, Scatter, Bcast, in turn, alternating 4 KB (LL) and 1.5 MB (staged) per receiver,
// changing types and ops, every fifth in place. Each call has its own buffers, prepared on the
// stream just before it; right after an out-of-place call, the test's own kernel overwrites that
// call's input (in stream order), so a library that still read its sendbuff after the call had
// ended on the stream would produce wrong outputs. All outputs are checked at the end.

void caseBackToBack(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_back_to_back");
  {
    const int n = ctx.nranks;
    const int kCalls = ctx.quick() ? 24 : 60;
    const Coll cycle[] = {kAllGather, kReduceScatter, kAllReduce, kBroadcast, kAlltoAll,
                          kReduce,    kGather,        kScatter,   kBcast};
    const yaliDataType_t types[] = {yaliFloat32,    yaliBfloat16, yaliInt32,
                                    yaliFloat8e4m3, yaliUint8,    yaliFloat64};
    std::vector<std::unique_ptr<Slab>> slabs;
    std::vector<std::unique_ptr<CollRun>> runs;
    for (int k = 0; k < kCalls; ++k) {
      const Coll c = cycle[k % 9];
      const yaliDataType_t dt = types[k % 6];
      const std::vector<yaliRedOp_t> ops = opsFor(dt);
      CLayout L;
      L.inplace = c == kBcast || (canInPlace(c) && k % 5 == 4);
      L.sendOff = k % 3;
      const size_t bytes = k % 2 == 0 ? 4096 : (3u << 19);
      const CSpec s = cspec(c, countFor(bytes, dt), dt, ops[k % ops.size()], k % n, L);
      slabs.push_back(makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc));
      runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
    }
    syncAll(ctx);
    watchdogStep("coll_back_to_back: issuing %d calls without host synchronization", kCalls);
    for (int k = 0; k < kCalls; ++k) {
      CollRun& run = *runs[k];
      run.prepare(ctx.nextSeed());
      run.issue(comms);
      overwriteInputAfterCall(ctx, run);
    }
    Verifier v(ctx);
    for (int k = 0; k < kCalls; ++k) {
      CollRun& run = *runs[k];
      char what[96];
      std::snprintf(what, sizeof what, "back-to-back call %d of %d", k + 1, kCalls);
      run.verify(comms, v, what);
    }
    runs.clear();
    for (auto& s : slabs) freeSlab(ctx, *s);
  }
  ctx.destroyComms(comms, "coll_back_to_back");
}

// ==== coll_multi_comm ================================================================================
//
// Two comm sets. Different streams: calls on comm A (main stream) and comm B (a second stream) in
// flight at once, in an order that alternates. The same stream: A, B, A, B queued back to back with
// different collectives. One group on the same stream whose calls on A and B the ranks make in
// different orders (even ranks A first, odd ranks B first), as NCCL allows: yaliGroupEnd launches a
// group's comms in an order every rank shares (yali.h); in call order the two kernels on each
// rank's stream would wait for each other across ranks until YALI_TIMEOUT_MS. Then A is destroyed
// and B still runs every collective.

void caseMultiComm(Ctx& ctx) {
  std::vector<yaliComm_t> a = ctx.createComms("coll_multi_comm A");
  std::vector<yaliComm_t> b = ctx.createComms("coll_multi_comm B");
  const int n = ctx.nranks;
  std::vector<cudaStream_t> second(ctx.local.size());
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamCreateWithFlags(&second[i], cudaStreamNonBlocking));
  }
  {
    Verifier v(ctx);
    std::vector<std::unique_ptr<Slab>> slabs;
    auto slabFor = [&](const CSpec& s, const std::vector<cudaStream_t>& st) -> Slab& {
      slabs.push_back(makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc, st));
      return *slabs.back();
    };
    const int iters = ctx.quick() ? 3 : 9;
    for (int it = 0; it < iters; ++it) {
      const CSpec sa = cspec(kEveryColl[it % 9], 65537, yaliFloat32, yaliSum, it % n);
      const CSpec sb = cspec(kEveryColl[(it + 4) % 9], 4093, yaliInt64, yaliMax, (it + 1) % n);
      CollRun ra(ctx, sa, slabFor(sa, {}));
      CollRun rb(ctx, sb, slabFor(sb, second), second);
      ra.prepare(ctx.nextSeed());
      rb.prepare(ctx.nextSeed());
      if (it % 2 == 0) {
        ra.issue(a);
        rb.issue(b);
      } else {
        rb.issue(b);
        ra.issue(a);
      }
      ra.verify(a, v, "comm A (main stream)");
      rb.verify(b, v, "comm B (second stream)");
    }
    {
      const CSpec s1 = cspec(kAllGather, 4093, yaliFloat16),
                  s2 = cspec(kReduceScatter, 262147, yaliBfloat16, yaliSum),
                  s3 = cspec(kAlltoAll, 1031, yaliUint32),
                  s4 = cspec(kBroadcast, 1048573, yaliInt8, yaliSum, n - 1);
      CollRun a1(ctx, s1, slabFor(s1, {})), b1(ctx, s2, slabFor(s2, {})), a2(ctx, s3, slabFor(s3, {})),
          b2(ctx, s4, slabFor(s4, {}));
      a1.prepare(ctx.nextSeed());
      b1.prepare(ctx.nextSeed());
      a2.prepare(ctx.nextSeed());
      b2.prepare(ctx.nextSeed());
      a1.issue(a);
      b1.issue(b);
      a2.issue(a);
      b2.issue(b);
      a1.verify(a, v, "same stream, comm A #1");
      b1.verify(b, v, "same stream, comm B #1");
      a2.verify(a, v, "same stream, comm A #2");
      b2.verify(b, v, "same stream, comm B #2");
    }
    for (int it = 0; it < (ctx.quick() ? 2 : 4); ++it) {
      const CSpec sa = cspec(kEveryColl[(it * 2) % 9], 65537, yaliFloat32, yaliSum, it % n),
                  sb = cspec(kEveryColl[(it * 2 + 5) % 9], 4093, yaliBfloat16, yaliSum, (it + 1) % n);
      CollRun ra(ctx, sa, slabFor(sa, {})), rb(ctx, sb, slabFor(sb, {}));
      ra.prepare(ctx.nextSeed());
      rb.prepare(ctx.nextSeed());
      const std::string what = "one group, comms A and B in an order that differs by rank, round " + std::to_string(it + 1);
      watchdogStep("coll_multi_comm: %s", what.c_str());
      auto call = [&](CollRun& r, const std::vector<yaliComm_t>& comms, size_t i) {
        const CollRun::Plan& P = r.plans[i];
        const yaliResult_t res =
            callColl(r.spec.coll, P.send, P.recv, r.spec.count, r.spec.dt, r.spec.op, r.spec.root, comms[i], r.streams[i]);
        if (res != yaliSuccess)
          ctx.fail("%s: rank %d: %s returned %d (%s); %s", what.c_str(), ctx.local[i].rank, r.label().c_str(), (int)res,
                   yaliGetErrorString(res), commErrors(comms[i]).c_str());
      };
      if (yaliGroupStart() != yaliSuccess) ctx.fail("%s: yaliGroupStart failed", what.c_str());
      for (size_t i = 0; i < ctx.local.size(); ++i) {
        if ((ctx.local[i].rank + it) % 2 == 0) {
          call(ra, a, i);
          call(rb, b, i);
        } else {
          call(rb, b, i);
          call(ra, a, i);
        }
      }
      const yaliResult_t ended = yaliGroupEnd();
      if (ended != yaliSuccess)
        ctx.fail("%s: yaliGroupEnd returned %d (%s): %s", what.c_str(), (int)ended, yaliGetErrorString(ended),
                 str(yaliGetLastError(nullptr)).c_str());
      ra.verify(a, v, what + ", comm A");
      rb.verify(b, v, what + ", comm B");
    }
    ctx.destroyComms(a, "coll_multi_comm A");
    SlabPool pool(ctx);
    for (Coll c : kEveryColl)
      runColl(ctx, b, pool, v, cspec(c, 4093, yaliFloat32, yaliSum, 1 % n), "comm B after A was destroyed");
    ctx.destroyComms(b, "coll_multi_comm B");
    for (auto& s : slabs) freeSlab(ctx, *s);
  }
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaStreamDestroy(second[i]));
  }
}

// Captures every run's call, each after its preparation (whose generator reads its seed from the
// graph's seed word, salt k + 1 for run k), into `graphs`: one CUDA graph per rank. Collective;
// true when every rank captured and instantiated its graph.
bool captureColl(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<std::unique_ptr<CollRun>>& runs,
                 ReplayableGraphs& graphs, const std::string& label) {
  watchdogStep("%s: capturing", label.c_str());
  bool issued = true;
  graphs.beginCapture();
  for (size_t k = 0; k < runs.size(); ++k) {
    runs[k]->prepare(0, &graphs.seedDev, /*salt=*/k + 1);
    CollRun& run = *runs[k];
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const CollRun::Plan& P = run.plans[i];
      const yaliResult_t r = callColl(run.spec.coll, P.send, P.recv, run.spec.count, run.spec.dt, run.spec.op,
                                      run.spec.root, comms[i], run.streams[i]);
      if (r != yaliSuccess) {
        issued = false;
        ctx.fail("%s: captured %s (rank %d) returned %d (%s): %s", label.c_str(), run.label().c_str(),
                 ctx.local[i].rank, (int)r, yaliGetErrorString(r), commErrors(comms[i]).c_str());
      }
    }
  }
  return graphs.endCapture(issued);
}

// One replay of graphs that captureColl made, with new inputs; then every call checked (`label`:
// which replay). Collective.
void replayColl(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<std::unique_ptr<CollRun>>& runs,
                ReplayableGraphs& graphs, Verifier& v, const std::string& label) {
  const uint64_t replaySeed = ctx.nextSeed();
  watchdogStep("%s", label.c_str());
  graphs.replay(replaySeed);
  for (size_t k = 0; k < runs.size(); ++k) {
    runs[k]->setSeed(combineSeed(replaySeed, k + 1));
    runs[k]->verify(comms, v, label + ", call " + std::to_string(k + 1));
  }
}

// No comm recorded an asynchronous error.
void expectNoAsyncError(Ctx& ctx, const std::vector<yaliComm_t>& comms, const std::string& label) {
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliResult_t async = yaliInProgress;
    if (yaliCommGetAsyncError(comms[i], &async) != yaliSuccess || async != yaliSuccess) {
      ctx.fail("%s: rank %d: yaliCommGetAsyncError says %d (%s)", label.c_str(), ctx.local[i].rank, (int)async,
               yaliGetErrorString(async));
    }
  }
}

// captureColl, then `replays` replays (replayColl), then no asynchronous error on any comm. The
// graphs are destroyed before it returns. Collective.
void captureAndReplay(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<std::unique_ptr<CollRun>>& runs,
                      Verifier& v, int replays, const std::string& label) {
  ReplayableGraphs graphs(ctx);
  if (!captureColl(ctx, comms, runs, graphs, label)) return;
  for (int rep = 0; rep < replays; ++rep) {
    replayColl(ctx, comms, runs, graphs, v, label + ": replay " + std::to_string(rep + 1));
  }
  expectNoAsyncError(ctx, comms, label + ": after the replays");
}

// ==== coll_graphs ====================================================================================
//
// One CUDA graph per rank capturing ten calls (every collective, LL and staged sizes, several
// types), each preceded by its guard fill, poison and generator, whose seed the host rewrites
// between replays: every replay checks fresh data. Then eager calls on the same comms.

void caseGraphs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_graphs");
  {
    const int n = ctx.nranks;
    const std::vector<CSpec> specs = {
        cspec(kAllGather, 4093, yaliFloat32),
        cspec(kReduceScatter, 65537, yaliBfloat16, yaliSum),
        cspec(kAllReduce, 1024, yaliInt32, yaliSum),
        cspec(kBroadcast, 4093, yaliFloat16, yaliSum, 1 % n),
        cspec(kAlltoAll, 1031, yaliUint8),
        cspec(kReduce, 262147, yaliFloat32, yaliMax, n - 1),
        cspec(kGather, 31, yaliFloat64, yaliSum, 0),
        cspec(kScatter, 4093, yaliFloat8e5m2, yaliSum, n / 2),
        cspec(kBcast, 1024, yaliInt64, yaliSum, n - 1),
        cspec(kAllGather, countFor(3u << 19, yaliInt8), yaliInt8),  // 1.5 MB per receiver: staged
    };
    const int kReplays = ctx.quick() ? 4 : 12;
    std::vector<std::unique_ptr<Slab>> slabs;
    std::vector<std::unique_ptr<CollRun>> runs;
    for (const CSpec& s : specs) {
      slabs.push_back(makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc));
      runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
    }
    syncAll(ctx);
    Verifier v(ctx);
    captureAndReplay(ctx, comms, runs, v, kReplays, "coll_graphs");
    // The comm still works eagerly.
    for (size_t k = 0; k < runs.size(); ++k) {
      runs[k]->prepare(ctx.nextSeed());
      runs[k]->issue(comms);
      runs[k]->verify(comms, v, "eager after the graphs");
    }
    runs.clear();
    for (auto& s : slabs) freeSlab(ctx, *s);
  }
  ctx.destroyComms(comms, "coll_graphs");
}

// ==== coll_groups ====================================================================================
//
// yaliGroupStart/End around several collectives (single mode: one thread, every comm; multi mode:
// one comm per process): a group of ten calls of different collectives (the same one twice, LL and
// staged sizes), nested groups, a group ended by yaliGroupSimulateEnd then issued again, and one
// group per collective around the per-GPU calls (the pattern yali.h prescribes for one thread
// driving several GPUs). Nothing may run before the outermost yaliGroupEnd, which must succeed, nor
// at all in a simulated group; every output is checked.

void caseGroups(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_groups");
  {
    const int n = ctx.nranks;
    Verifier v(ctx);
    const std::vector<CSpec> specs = {
        cspec(kAllGather, 4093, yaliFloat32),
        cspec(kReduceScatter, 65537, yaliFloat16, yaliSum),
        cspec(kBroadcast, countFor(3u << 19, yaliUint8), yaliUint8, yaliSum, 1 % n),
        cspec(kAllReduce, 262147, yaliBfloat16, yaliAvg),
        cspec(kAlltoAll, 4093, yaliInt32),
        cspec(kReduce, 1031, yaliFloat64, yaliSum, n - 1),
        cspec(kGather, 4093, yaliFloat8e4m3, yaliSum, 0),
        cspec(kScatter, 65537, yaliUint64, yaliSum, n / 2),
        cspec(kBcast, 4093, yaliInt8, yaliSum, 0),
        cspec(kAllGather, 31, yaliFloat64),
    };
    std::vector<std::unique_ptr<Slab>> slabs;
    std::vector<std::unique_ptr<CollRun>> runs;
    for (const CSpec& s : specs) {
      slabs.push_back(makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc));
      runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
    }
    auto prepareAll = [&]() {
      for (auto& r : runs) r->prepare(ctx.nextSeed());
      syncAll(ctx);
    };
    auto groupEnd = [&](const char* what) {
      const yaliResult_t r = yaliGroupEnd();
      if (r != yaliSuccess)
        ctx.fail("%s: yaliGroupEnd returned %d (%s): %s", what, (int)r, yaliGetErrorString(r),
                 str(yaliGetLastError(nullptr)).c_str());
    };
    // One group of every call.
    prepareAll();
    if (yaliGroupStart() != yaliSuccess)
      ctx.fail("yaliGroupStart failed: %s", str(yaliGetLastError(nullptr)).c_str());
    for (auto& r : runs) r->issue(comms);
    groupEnd("one group of ten calls");
    for (size_t k = 0; k < runs.size(); ++k)
      runs[k]->verify(comms, v, "one group, call " + std::to_string(k + 1));

    // Nested: nothing runs before the outermost yaliGroupEnd.
    prepareAll();
    yaliGroupStart();
    yaliGroupStart();
    for (size_t k = 0; k < runs.size() / 2; ++k) runs[k]->issue(comms);
    groupEnd("inner group");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      // Read without waiting for the stream: the legacy-stream copy does not order with it.
      const CollRun::Plan& P = runs[0]->plans[i];
      std::vector<unsigned char> head(std::min<size_t>(P.outElems * dtypeSize(runs[0]->spec.dt), 4096));
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      CUDA_OK(ctx, cudaMemcpy(head.data(), P.recv, head.size(), cudaMemcpyDeviceToHost));
      if (std::any_of(head.begin(), head.end(), [](unsigned char b) { return b != kPoisonByte; })) {
        ctx.fail("rank %d: a call of a nested group ran before the outermost yaliGroupEnd",
                 ctx.local[i].rank);
      }
    }
    for (size_t k = runs.size() / 2; k < runs.size(); ++k) runs[k]->issue(comms);
    groupEnd("outer group");
    for (size_t k = 0; k < runs.size(); ++k)
      runs[k]->verify(comms, v, "nested groups, call " + std::to_string(k + 1));

    // Simulated (yaliGroupSimulateEnd, which libyali-nccl's ncclGroupSimulateEnd calls): nothing
    // runs, and the same group issued for real afterwards runs once, an in-place sum among its
    // calls (launched at the simulation too, it came out doubled). Ran on 2 H200s on 2026-11-30 (suite
    // --quick, single 2 and 4, multi 2 and 3: passed).
    {
      CLayout inPlace;
      inPlace.inplace = true;
      const CSpec sumSpec = cspec(kAllReduce, 4093, yaliFloat32, yaliSum, 0, inPlace);
      slabs.push_back(makeSlab(ctx, slabBytesFor(sumSpec, n), Alloc::Malloc));
      runs.emplace_back(new CollRun(ctx, sumSpec, *slabs.back()));
    }
    prepareAll();
    yaliGroupStart();
    for (auto& r : runs) r->issue(comms);
    const yaliResult_t simulated = yaliGroupSimulateEnd();
    if (simulated != yaliSuccess)
      ctx.fail("yaliGroupSimulateEnd returned %d (%s): %s", (int)simulated, yaliGetErrorString(simulated),
               str(yaliGetLastError(nullptr)).c_str());
    syncAll(ctx);
    for (size_t k = 0; k < runs.size(); ++k) {
      for (size_t i = 0; i < ctx.local.size(); ++i) {
        // The poisoned outputs of the calls out of place (in place, the input lies there too).
        const CollRun::Plan& P = runs[k]->plans[i];
        if (runs[k]->spec.inplace() || P.poisonAt == nullptr) continue;
        std::vector<unsigned char> head(std::min<size_t>(P.poisonElems * dtypeSize(runs[k]->spec.dt), 4096));
        CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
        CUDA_OK(ctx, cudaMemcpy(head.data(), P.poisonAt, head.size(), cudaMemcpyDeviceToHost));
        if (std::any_of(head.begin(), head.end(), [](unsigned char b) { return b != kPoisonByte; }))
          ctx.fail("rank %d: call %zu of a group ended by yaliGroupSimulateEnd ran", ctx.local[i].rank, k + 1);
      }
    }
    yaliGroupStart();
    for (auto& r : runs) r->issue(comms);
    groupEnd("the simulated group, for real");
    for (size_t k = 0; k < runs.size(); ++k)
      runs[k]->verify(comms, v, "after a simulated group, call " + std::to_string(k + 1));
    runs.pop_back();  // the in-place sum: the rest is about the ten calls

    // One group per collective (yali.h's pattern for one thread and several GPUs).
    prepareAll();
    for (auto& r : runs) {
      yaliGroupStart();
      r->issue(comms);
      groupEnd("one group per call");
    }
    for (size_t k = 0; k < runs.size(); ++k)
      runs[k]->verify(comms, v, "a group per call, call " + std::to_string(k + 1));
    runs.clear();
    for (auto& s : slabs) freeSlab(ctx, *s);
  }
  ctx.destroyComms(comms, "coll_groups");
}

// ==== coll_count0 ====================================================================================
//
// Count 0: every collective returns success at once with NULL buffers and with real ones (every
// root, in place too), writes nothing (guard bytes over both allocations), yaliAlgoInfo says
// "none"; then a real call of each works.

void caseCount0(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_count0");
  {
    const int n = ctx.nranks;
    SlabPool pool(ctx);
    Verifier v(ctx);
    for (Coll c : kEveryColl) {
      for (size_t i = 0; i < comms.size(); ++i) {
        const yaliResult_t r =
            callColl(c, nullptr, nullptr, 0, yaliFloat32, yaliSum, n - 1, comms[i], ctx.local[i].stream);
        if (r != yaliSuccess) {
          ctx.fail("%s(NULL, NULL, count=0) (rank %d) returned %d (%s): %s", kColl[c].call, ctx.local[i].rank,
                   (int)r, yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
        }
        const std::string a = algoOf(comms[i], c, nullptr, nullptr, 0, yaliFloat32, yaliSum, 0);
        if (a != "none") {
          ctx.fail("yaliAlgoInfo(%s, count=0) (rank %d) reports \"%s\", expected \"none\"", kColl[c].name,
                   ctx.local[i].rank, a.c_str());
        }
      }
      int combo = 0;
      for (yaliDataType_t dt : {yaliFloat32, yaliInt8, yaliFloat64}) {
        for (int root = 0; root < (kColl[c].rooted ? n : 1); ++root) {
          CLayout L;
          L.inplace = c == kBcast || (canInPlace(c) && combo % 2 == 1);
          runColl(ctx, comms, pool, v, cspec(c, 0, dt, yaliSum, root, L), "count 0");
          ++combo;
        }
      }
      runColl(ctx, comms, pool, v, cspec(c, 4093, yaliFloat32, yaliSum, n - 1), "after count 0");
    }
  }
  ctx.destroyComms(comms, "coll_count0");
}

// ==== coll_timeout ===================================================================================
//
// A peer that never calls: rank 0 issues a collective alone (every other rank makes no call), as a
// rank that must wait for data (a non-root in Broadcast and Scatter, the root in Reduce and
// Gather). Its stream must come back with cudaSuccess between 0.9 x and YALI_TIMEOUT_MS + 5 s
// (YALI_TIMEOUT_MS: 2000 ms, 4000 ms above 4 ranks); yaliCommGetAsyncError must say yaliTimeout,
// so must the next call and yaliGetLastError(comm); then every rank aborts. Each collective with
// the selector's choice at 4093 elements (LL), and without --quick also with its staged algorithm
// forced.

void caseTimeout(Ctx& ctx) {
  const int n = ctx.nranks;
  // YALI_TIMEOUT_MS also bounds comm creation, which takes longer with many processes on one GPU.
  const int kTimeoutMs = n <= 4 ? 2000 : 4000;
  const double kMarginMs = 5000;
  std::vector<std::string> families = {"auto"};
  if (!ctx.quick()) families.push_back("staged");
  for (const std::string& family : families) {
    for (Coll c : kEveryColl) {
      if (c == kBcast && ctx.quick()) continue;
      std::vector<std::pair<std::string, std::string>> vars = {
          {"YALI_TIMEOUT_MS", std::to_string(kTimeoutMs)}};
      if (family == "staged") vars.push_back({"YALI_ALGO", "twoshot," + forcedList("staged")});
      SelectorScope env(vars);
      const std::string label = std::string(kColl[c].name) + " alone on rank 0 (" + family + ")";
      ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm init: start it together
      std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
      const int root = (c == kBroadcast || c == kBcast || c == kScatter) ? 1 % n : 0;
      const CSpec s = cspec(c, family == "staged" ? 65537 : 4093, yaliFloat32, yaliSum, root);
      std::unique_ptr<Slab> slab = makeSlab(ctx, slabBytesFor(s, n), Alloc::Malloc);
      {
        CollRun run(ctx, s, *slab);
        run.prepare(ctx.nextSeed());
        syncAll(ctx);
        ctx.world->barrier();
        for (size_t i = 0; i < ctx.local.size(); ++i) {
          if (ctx.local[i].rank != 0) continue;
          const CollRun::Plan& P = run.plans[i];
          const cudaStream_t st = ctx.local[i].stream;
          watchdogStep("%s: rank 0's lone call (must time out, not hang)", label.c_str());
          const auto t0 = Clock::now();
          yaliResult_t r = callColl(c, P.send, P.recv, s.count, s.dt, s.op, s.root, comms[i], st);
          if (r != yaliSuccess) {
            ctx.fail("%s: the call returned %d (%s): %s", label.c_str(), (int)r, yaliGetErrorString(r),
                     commErrors(comms[i]).c_str());
            continue;
          }
          CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
          cudaError_t e;
          while ((e = cudaStreamQuery(st)) == cudaErrorNotReady) {
            if (msSince(t0) > kTimeoutMs + 60000)
              ctx.fatal("%s: the stream is still busy after 62 s", label.c_str());
            std::this_thread::sleep_for(std::chrono::microseconds(500));
          }
          const double ms = msSince(t0);
          ctx.note("%s: the stream came back after %.0f ms (%s)", label.c_str(), ms, cudaGetErrorString(e));
          if (e != cudaSuccess) {
            ctx.fatal("%s: the stream ended with %s: a timed-out wait must end its kernel cleanly (no trap)",
                      label.c_str(), cudaGetErrorString(e));
          }
          if (ms > kTimeoutMs + kMarginMs) {
            ctx.fail("%s: the stream came back after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms",
                     label.c_str(), ms, kMarginMs);
          }
          if (ms < 0.9 * kTimeoutMs) {
            ctx.fail(
                "%s: the stream came back after %.0f ms, before YALI_TIMEOUT_MS=%d: did the call wait for "
                "its "
                "peers at all?",
                label.c_str(), ms, kTimeoutMs);
          }
          yaliResult_t async = yaliSuccess;
          r = yaliCommGetAsyncError(comms[i], &async);
          if (r != yaliSuccess || async != yaliTimeout) {
            ctx.fail("%s: yaliCommGetAsyncError returned %d with asyncError %d (%s); expected yaliTimeout",
                     label.c_str(), (int)r, (int)async, yaliGetErrorString(async));
          }
          r = callColl(c, P.send, P.recv, s.count, s.dt, s.op, s.root, comms[i], st);
          if (r != yaliTimeout) {
            ctx.fail("%s: the next %s on the timed-out comm returned %d (%s); expected yaliTimeout",
                     label.c_str(), kColl[c].call, (int)r, yaliGetErrorString(r));
          }
          const std::string msg = lower(str(yaliGetLastError(comms[i])));
          if (msg.find("timeout") == std::string::npos && msg.find("timed out") == std::string::npos) {
            ctx.fail("%s: yaliGetLastError(comm) does not mention the timeout: \"%s\"", label.c_str(),
                     str(yaliGetLastError(comms[i])).c_str());
          }
        }
        ctx.world->barrier();
        watchdogStep("%s: yaliCommAbort on every comm", label.c_str());
        for (size_t i = 0; i < comms.size(); ++i) {
          const yaliResult_t r = yaliCommAbort(comms[i]);
          if (r != yaliSuccess) {
            ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label.c_str(), ctx.local[i].rank,
                     (int)r, yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
          }
        }
        syncAll(ctx);
      }
      ctx.world->barrier();
      freeSlab(ctx, *slab);
    }
  }
}

// ==== coll_bad_args ==================================================================================
//
// Every collective with bad arguments on a real comm: NULL buffers where the rank uses them,
// unknown types and ops, avg on every integer type, roots out of range, counts whose byte size
// overflows (count x element size, and nranks x count x element size), buffers not aligned to the
// element, host memory, buffers too small for the call (2 MiB allocations, one element short),
// overlaps that are not the collective's in-place form. Each must return yaliInvalidArgument with
// yaliGetLastError naming the call and the argument, and touch nothing: afterwards every output
// region still holds the poison, every input its data, every guard byte is intact, the comm has no
// async error, and a valid call of each collective works. A bad call is made only where it is bad
// on that rank (a non-root's unused buffer is no error), so that no rank is left waiting. Then
// yaliAlgoInfo's argument errors, and every collective on a destroyed and on an aborted comm
// (yaliInvalidUsage naming the comm, nothing written).

// `got` must be `want` and yaliGetLastError(NULL) must name `call` and one of `args` (whole words).
bool expectRefused(Ctx& ctx, const std::string& what, yaliResult_t got, const char* call,
                   const std::vector<std::string>& args, yaliResult_t want = yaliInvalidArgument) {
  const std::string msg = str(yaliGetLastError(nullptr));
  if (got != want) {
    ctx.fail("%s: returned %d (%s), expected %d (%s); yaliGetLastError(NULL)=\"%s\"", what.c_str(), (int)got,
             yaliGetErrorString(got), (int)want, yaliGetErrorString(want), msg.c_str());
    return false;
  }
  bool ok = true;
  if (msg.find(call) == std::string::npos) {
    ctx.fail("%s: yaliGetLastError(NULL) does not name %s: \"%s\"", what.c_str(), call, msg.c_str());
    ok = false;
  }
  bool named = args.empty();
  std::string list;
  for (const std::string& a : args) {
    named |= containsWord(msg, a);
    list += (list.empty() ? "'" : " or '") + a + "'";
  }
  if (!named) {
    ctx.fail("%s: yaliGetLastError(NULL) does not name the argument %s: \"%s\"", what.c_str(), list.c_str(),
             msg.c_str());
    ok = false;
  }
  return ok;
}

void caseBadArgs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("coll_bad_args");
  const int n = ctx.nranks;
  const size_t nl = ctx.local.size();
  const size_t c = 4093;
  const yaliDataType_t dt = yaliFloat32;
  const size_t es = 4;
  const size_t kTwoMiB = (size_t)2 << 20;
  const size_t capElems = kTwoMiB / es;  // elements of a 2 MiB allocation
  // Elements per rank and call such that n * count just exceeds a 2 MiB allocation.
  const size_t overN = (capElems + n - 1) / n + ((capElems % n) == 0 ? 1 : 0);
  Verifier v(ctx);
  // S: inputs (n * c elements, every rank's data); R: outputs (poison). X, Y: 2 MiB, for the
  // allocation-size checks; W: large enough for any call here (poison too).
  const CSpec big = cspec(kAlltoAll, c, yaliFloat64);
  std::unique_ptr<Slab> slab = makeSlab(ctx, slabBytesFor(big, n), Alloc::Malloc);
  std::vector<DevAlloc> X(nl), Y(nl), W(nl);
  const size_t wBytes = (size_t)n * (capElems + (size_t)n + 1) * es;
  std::vector<char> hostMem(c * n * es + 64);
  char* host = hostMem.data() + (64 - ((uintptr_t)hostMem.data() & 63));
  const uint64_t seed = ctx.nextSeed();
  auto S = [&](size_t i) { return slab->A[i].p + kGuardBytes; };
  auto R = [&](size_t i) { return slab->B[i].p + kGuardBytes; };
  for (size_t i = 0; i < nl; ++i) {
    const LocalRank& lr = ctx.local[i];
    X[i] = allocDev(ctx, lr.dev, kTwoMiB, Alloc::Malloc, lr.stream);
    Y[i] = allocDev(ctx, lr.dev, kTwoMiB, Alloc::Malloc, lr.stream);
    W[i] = allocDev(ctx, lr.dev, wBytes, Alloc::Malloc, lr.stream);
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    CUDA_OK(ctx, cudaMemsetAsync(slab->A[i].p, kGuardByte, slab->bytes, lr.stream));
    CUDA_OK(ctx, cudaMemsetAsync(slab->B[i].p, kGuardByte, slab->bytes, lr.stream));
    CUDA_OK(ctx, launchGenerate(S(i), (size_t)n * c, dt, yaliSum, lr.rank, seed, nullptr, lr.stream));
    CUDA_OK(ctx, cudaMemsetAsync(R(i), kPoisonByte, (size_t)n * c * es, lr.stream));
    for (DevAlloc* a : {&X[i], &Y[i], &W[i]})
      CUDA_OK(ctx, cudaMemsetAsync(a->p, kPoisonByte, a->bytes, lr.stream));
  }
  syncAll(ctx);

  // Everything untouched, and no async error. Collective (finishes every rank's checks).
  auto untouched = [&](const std::string& what) {
    for (size_t i = 0; i < nl; ++i) {
      const cudaStream_t st = ctx.local[i].stream;
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      ByteSkips none;
      v.bytes(i, st, R(i), (size_t)n * c * es, kPoisonByte, none, what + " (output region)");
      v.input(i, st, S(i), (size_t)n * c, 0, dt, yaliSum, ctx.local[i].rank, seed, what + " (input region)");
      std::vector<std::pair<const char*, size_t>> used = {{S(i), (size_t)n * c * es},
                                                          {R(i), (size_t)n * c * es}};
      v.bytes(i, st, slab->A[i].p, slab->bytes, kGuardByte, skipsIn(slab->A[i], used),
              what + " (allocation A)");
      v.bytes(i, st, slab->B[i].p, slab->bytes, kGuardByte, skipsIn(slab->B[i], used),
              what + " (allocation B)");
      for (DevAlloc* a : {&X[i], &Y[i], &W[i]})
        v.bytes(i, st, a->p, a->bytes, kPoisonByte, none, what + " (2 MiB / large buffers)");
      v.finish(i, comms[i]);
      yaliResult_t async = yaliInProgress;
      if (yaliCommGetAsyncError(comms[i], &async) != yaliSuccess || async != yaliSuccess) {
        ctx.fail("%s: refused calls set the comm's async error to %d (%s)", what.c_str(), (int)async,
                 yaliGetErrorString(async));
      }
    }
  };

  for (Coll C : kEveryColl) {
    const CollDesc& d = kColl[C];
    const char* bufArg = C == kBcast ? "buff" : nullptr;
    for (size_t i = 0; i < nl; ++i) {
      const int k = ctx.local[i].rank;
      const yaliComm_t comm = comms[i];
      const cudaStream_t st = ctx.local[i].stream;
      const int root = 0;
      const bool isRoot = k == root;
      // Which buffers this rank's call uses (with root 0).
      bool readsSend = true, writesRecv = true;
      if (C == kBroadcast) readsSend = isRoot;
      if (C == kBcast) readsSend = false;  // its one buffer is the recvbuff argument below
      if (C == kScatter) readsSend = isRoot;
      if (C == kReduce || C == kGather) writesRecv = isRoot;
      // Elements of send and recv (for the size checks).
      const bool nSend = C == kReduceScatter || C == kAlltoAll || (C == kScatter);
      const bool nRecv = C == kAllGather || C == kAlltoAll || (C == kGather);
      const std::string who = std::string(d.call) + " (rank " + std::to_string(k) + ") with ";
      auto call = [&](const void* s, void* r, size_t count, yaliDataType_t t, yaliRedOp_t op, int rt) {
        return callColl(C, s, r, count, t, op, rt, comm, st);
      };
      // The messages use yali.h's names: yaliBcast's one buffer is `buff`, yaliReduceScatter's count
      // recvcount, yaliAllGather's sendcount (they said sendbuff, recvbuff and count before).
      const std::vector<std::string> sendArg =
          bufArg ? std::vector<std::string>{bufArg} : std::vector<std::string>{"sendbuff"};
      const std::vector<std::string> recvArg =
          bufArg ? std::vector<std::string>{bufArg} : std::vector<std::string>{"recvbuff"};
      const std::vector<std::string> countArgs = {d.countArg};
      const std::vector<std::string> eitherBuf = {"sendbuff", "recvbuff"};

      if (readsSend)
        expectRefused(ctx, who + "sendbuff NULL", call(nullptr, R(i), c, dt, yaliSum, root), d.call, sendArg);
      if (writesRecv) {
        expectRefused(ctx, who + (bufArg ? "buff NULL" : "recvbuff NULL"),
                      call(S(i), nullptr, c, dt, yaliSum, root), d.call, recvArg);
      }
      for (int bad : {(int)yaliNumTypes, -1, 255}) {
        expectRefused(ctx, who + "datatype " + std::to_string(bad),
                      call(S(i), R(i), c, (yaliDataType_t)bad, yaliSum, root), d.call, {"datatype"});
      }
      if (d.reduces) {
        for (int bad : {(int)yaliNumOps, -1, 17}) {
          expectRefused(ctx, who + "op " + std::to_string(bad),
                        call(S(i), R(i), c, dt, (yaliRedOp_t)bad, root), d.call, {"op"});
        }
        for (yaliDataType_t it : kEveryDtype) {
          if (dtypeIsFloat(it)) continue;
          expectRefused(ctx, who + "avg on " + dtypeName(it), call(S(i), R(i), c, it, yaliAvg, root), d.call,
                        {"op", "datatype"});
        }
      }
      if (d.rooted) {
        for (int bad : {-1, n, n + 7, 1 << 30}) {
          expectRefused(ctx, who + "root " + std::to_string(bad), call(S(i), R(i), c, dt, yaliSum, bad),
                        d.call, {"root"});
        }
      }
      // Byte sizes that overflow: count x 4, and (where the rank's buffer holds n blocks) n x count x 4.
      for (size_t bad : {SIZE_MAX / 2, SIZE_MAX / 4 + 1}) {
        expectRefused(ctx, who + "count " + std::to_string(bad) + " (bytes overflow)",
                      call(S(i), R(i), bad, dt, yaliSum, root), d.call, countArgs);
      }
      const bool nBlocksHere = C == kReduceScatter || C == kAllGather || C == kAlltoAll ||
                               ((C == kGather || C == kScatter) && isRoot);
      if (nBlocksHere) {
        const size_t bad = SIZE_MAX / (es * (size_t)n) + 1;  // bad * 4 fits, n * bad * 4 does not
        expectRefused(ctx, who + "count " + std::to_string(bad) + " (nranks x count x 4 overflows)",
                      call(S(i), R(i), bad, dt, yaliSum, root), d.call, countArgs);
      }
      // Not aligned to the element size.
      if (readsSend) {
        expectRefused(ctx, who + "fp32 sendbuff at byte offset 2",
                      call(S(i) + 2, R(i), c - 1, dt, yaliSum, root), d.call, sendArg);
      }
      if (writesRecv) {
        expectRefused(ctx, who + "fp32 recvbuff at byte offset 2",
                      call(S(i), R(i) + 2, c - 1, dt, yaliSum, root), d.call, recvArg);
      }
      // Host memory.
      if (readsSend)
        expectRefused(ctx, who + "host sendbuff", call(host, R(i), c, dt, yaliSum, root), d.call, sendArg);
      if (writesRecv)
        expectRefused(ctx, who + "host recvbuff", call(S(i), host, c, dt, yaliSum, root), d.call, recvArg);
      // Allocations one element too small (X, Y: 2 MiB; W holds anything).
      if (readsSend && C != kBcast) {
        const size_t cnt = (nSend ? overN : capElems + 1);
        expectRefused(ctx, who + "sendbuff one element past its 2 MiB allocation",
                      call(X[i].p, W[i].p, cnt, dt, yaliSum, root), d.call, {"sendbuff"});
        expectRefused(ctx, who + "sendbuff 4 KiB into its 2 MiB allocation, one element past its end",
                      call(X[i].p + 4096, W[i].p, nSend ? (capElems - 1024) / n + 1 : capElems - 1024 + 1, dt,
                           yaliSum, root),
                      d.call, {"sendbuff"});
      }
      if (writesRecv) {
        const size_t cnt = (nRecv ? overN : capElems + 1);
        expectRefused(ctx, who + (bufArg ? "buff" : "recvbuff") + " one element past its 2 MiB allocation",
                      call(W[i].p, Y[i].p, cnt, dt, yaliSum, root), d.call, recvArg);
      }
      // Overlaps that are not the in-place form.
      const size_t blk = c * es;
      switch (C) {
        case kAllReduce:
          expectRefused(ctx, who + "recvbuff = sendbuff + 1 element",
                        call(S(i), S(i) + es, c, dt, yaliSum, root), d.call, eitherBuf);
          break;
        case kReduceScatter:
          expectRefused(ctx, who + "recvbuff in another rank's block of sendbuff",
                        call(S(i), S(i) + ((k + 1) % n) * blk, c, dt, yaliSum, root), d.call, eitherBuf);
          expectRefused(ctx, who + "recvbuff one element past its in-place block",
                        call(S(i), S(i) + k * blk + es, c, dt, yaliSum, root), d.call, eitherBuf);
          break;
        case kAllGather:
          expectRefused(ctx, who + "sendbuff in another rank's block of recvbuff",
                        call(R(i) + ((k + 1) % n) * blk, R(i), c, dt, yaliSum, root), d.call, eitherBuf);
          expectRefused(ctx, who + "sendbuff one element past its in-place block",
                        call(R(i) + k * blk + es, R(i), c, dt, yaliSum, root), d.call, eitherBuf);
          break;
        case kBroadcast:
        case kReduce:
          if (isRoot) {
            expectRefused(ctx, who + "recvbuff = sendbuff + 1 element on the root",
                          call(S(i), S(i) + es, c, dt, yaliSum, root), d.call, eitherBuf);
          }
          break;
        case kGather:
          if (isRoot) {
            expectRefused(ctx, who + "sendbuff in another rank's block of the root's recvbuff",
                          call(R(i) + ((root + 1) % n) * blk, R(i), c, dt, yaliSum, root), d.call, eitherBuf);
            expectRefused(ctx, who + "sendbuff one element past the root's block",
                          call(R(i) + root * blk + es, R(i), c, dt, yaliSum, root), d.call, eitherBuf);
          }
          break;
        case kScatter:
          if (isRoot) {
            expectRefused(ctx, who + "recvbuff in another rank's block of the root's sendbuff",
                          call(S(i), S(i) + ((root + 1) % n) * blk, c, dt, yaliSum, root), d.call, eitherBuf);
            expectRefused(ctx, who + "recvbuff one element past the root's block",
                          call(S(i), S(i) + root * blk + es, c, dt, yaliSum, root), d.call, eitherBuf);
          }
          break;
        case kAlltoAll:
          expectRefused(ctx, who + "recvbuff == sendbuff (AlltoAll is never in place)",
                        call(S(i), S(i), c, dt, yaliSum, root), d.call, eitherBuf);
          expectRefused(ctx, who + "recvbuff = sendbuff + 1 element",
                        call(S(i), S(i) + es, c, dt, yaliSum, root), d.call, eitherBuf);
          break;
        default: break;
      }
      // Inside a group: refused at the call.
      yaliGroupStart();
      if (d.rooted) {
        expectRefused(ctx, who + "root -1 inside a group", call(S(i), R(i), c, dt, yaliSum, -1), d.call,
                      {"root"});
      } else {
        expectRefused(ctx, who + "datatype 12 inside a group",
                      call(S(i), R(i), c, (yaliDataType_t)12, yaliSum, root), d.call, {"datatype"});
      }
      const yaliResult_t ge = yaliGroupEnd();
      if (ge != yaliSuccess && ge != yaliInvalidArgument) {
        ctx.fail("%s: yaliGroupEnd of a group whose one call was refused returned %d (%s)", d.call, (int)ge,
                 yaliGetErrorString(ge));
      }
      // yaliAlgoInfo: the same argument errors.
      yaliAlgoInfo_t info;
      const char* ai = "yaliAlgoInfo";
      expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", info NULL)",
                    yaliAlgoInfo(comm, d.id, nullptr, nullptr, c, dt, yaliSum, 0, nullptr), ai, {"info"});
      expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", datatype 12)",
                    yaliAlgoInfo(comm, d.id, nullptr, nullptr, c, (yaliDataType_t)12, yaliSum, 0, &info), ai,
                    {"datatype"});
      expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", count overflow)",
                    yaliAlgoInfo(comm, d.id, nullptr, nullptr, SIZE_MAX / 2, dt, yaliSum, 0, &info), ai,
                    {"count"});
      if (d.reduces) {
        expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", op 9)",
                      yaliAlgoInfo(comm, d.id, nullptr, nullptr, c, dt, (yaliRedOp_t)9, 0, &info), ai,
                      {"op"});
        expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", avg on int32)",
                      yaliAlgoInfo(comm, d.id, nullptr, nullptr, c, yaliInt32, yaliAvg, 0, &info), ai,
                      {"op", "datatype"});
      }
      if (d.rooted) {
        expectRefused(ctx, std::string("yaliAlgoInfo(") + d.name + ", root nranks)",
                      yaliAlgoInfo(comm, d.id, nullptr, nullptr, c, dt, yaliSum, n, &info), ai, {"root"});
      }
    }
    untouched(std::string("after the refused ") + d.call + " calls");
  }
  for (size_t i = 0; i < nl; ++i) {
    yaliAlgoInfo_t info;
    for (int bad : {(int)yaliNumCollectives, -1}) {
      expectRefused(ctx, "yaliAlgoInfo(collective " + std::to_string(bad) + ")",
                    yaliAlgoInfo(comms[i], (yaliCollective_t)bad, nullptr, nullptr, 1024, yaliFloat32,
                                 yaliSum, 0, &info),
                    "yaliAlgoInfo", {"collective"});
    }
  }
  // Valid calls of every collective still work.
  {
    SlabPool pool(ctx);
    for (Coll C : kEveryColl)
      runColl(ctx, comms, pool, v, cspec(C, c, dt, yaliSum, n - 1), "after the refused calls");
  }

  // A destroyed comm, then an aborted one: invalid usage naming the comm, nothing written.
  std::vector<yaliComm_t> dead = comms;
  ctx.destroyComms(comms, "coll_bad_args");
  std::vector<yaliComm_t> ab = ctx.createComms("coll_bad_args (to abort)");
  {
    SlabPool pool(ctx);
    runColl(ctx, ab, pool, v, cspec(kAllGather, c, dt), "before the abort");
  }
  ctx.world->barrier();
  for (size_t i = 0; i < nl; ++i) {
    const yaliResult_t r = yaliCommAbort(ab[i]);
    if (r != yaliSuccess)
      ctx.fail("yaliCommAbort (rank %d) returned %d: %s", ctx.local[i].rank, (int)r,
               str(yaliGetLastError(nullptr)).c_str());
  }
  for (size_t i = 0; i < nl; ++i) {
    for (Coll C : kEveryColl) {
      const std::string w =
          std::string(kColl[C].call) + " (rank " + std::to_string(ctx.local[i].rank) + ") on a ";
      expectRefused(ctx, w + "destroyed comm",
                    callColl(C, S(i), R(i), c, dt, yaliSum, 0, dead[i], ctx.local[i].stream), kColl[C].call,
                    {"comm"}, yaliInvalidUsage);
      expectRefused(ctx, w + "aborted comm",
                    callColl(C, S(i), R(i), c, dt, yaliSum, 0, ab[i], ctx.local[i].stream), kColl[C].call,
                    {"comm"}, yaliInvalidUsage);
    }
  }
  for (size_t i = 0; i < nl; ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    CUDA_OK(ctx, cudaDeviceSynchronize());
    ByteSkips none;
    v.bytes(i, ctx.local[i].stream, R(i), (size_t)n * c * es, kPoisonByte, none,
            "after calls on destroyed and aborted comms");
    v.finish(i, nullptr);
  }
  ctx.world->barrier();
  for (size_t i = 0; i < nl; ++i) {
    freeDev(ctx, X[i]);
    freeDev(ctx, Y[i]);
    freeDev(ctx, W[i]);
  }
  freeSlab(ctx, *slab);
}

}  // namespace

namespace {

// ==== coll_copy_engine ===============================================================================
//
// The copy-engine algorithms (*_ce: AllGather, Broadcast and Bcast, Gather, Scatter, AlltoAll), which
// run no kernel: each rank's copy engines pull every peer's registered input into its own output,
// and stream memory operations order the ranks (src/collectives/copy_engine/copy_engine.h). Every
// rank must pass its sendbuff at the same offset within its registration (yali.h; in place in the
// slot layout, AllGather and Gather, its recvbuff), so the in-place Gather and Scatter calls here
// lay the non-roots' buffers out like the root's (CLayout::sendAtRootOffset), and no unused
// sendbuff is NULL: a non-root of Scatter passing NULL takes a kernel while the root waits in the
// copy engines' handshake (until YALI_TIMEOUT_MS). Ranks of one process sharing a GPU never take
// *_ce (their stream waits would share the GPU's hardware queues): in single mode with ranks
// sharing a GPU the case checks only that, and the rest runs in multi mode (one process per rank).
//  1. YALI_ALGO naming every *_ce row, both buffers registered: every collective x type at 1, 4093
//     and 262147 elements (--quick: 4093, four types), the root rotating, in place alternating,
//     sendbuff and recvbuff 0..2 elements past an aligned start, Gather's non-roots' recvbuff NULL
//     in every third call: yaliAlgoInfo names the *_ce row, with 0 blocks and 0 threads, on every
//     rank, and the result is right;
//  2. when they apply: only sendbuff registered, still *_ce; only recvbuff registered, or neither,
//     never *_ce; all right. YALI_ALLGATHER_CE_MIN_BYTES=-1 (every size) and the other
//     YALI_<NAME>_MIN_BYTES=4096 without YALI_ALGO: *_ce from 4096 bytes per piece on, not below;
//  3. back to back without a host synchronization: *_ce calls of every collective with kernels in
//     between (an AllReduce, a staged AllGather, on unregistered buffers), each out-of-place input
//     overwritten right after its call (a rank's call may end only once every peer has read its
//     input); then one call three times on the same buffers with new inputs in between, whose
//     handshake value is the same each time (only the words' resets keep a call from passing on
//     the words of the call before it); every output checked at the end;
//  4. a CUDA graph: *_ce-eligible calls of every collective captured (yaliAlgoInfo, which has no
//     stream, names *_ce; the capture takes another algorithm), replayed with new data; then the
//     same calls eagerly (*_ce again) on the comms that ran the graph;
//  5. bounded waits, allgather_ce forced, the last rank never calling: every other rank's stream
//     comes back within 0.9 T .. T + 10 s (T = YALI_TIMEOUT_MS) with yaliTimeout, asynchronously
//     and from the next call, whose message names the copy engines' wait; with T = 60 s, a call
//     waiting for the last rank ends within 1.5 s of yaliCommAbort on its rank. After each, a fresh
//     comm set's allgather_ce is right;
//  6. a CUDA call failing half-way through rank 0's call (a test hook, which also leaves the call's
//     end unrecorded): the call and the comm fail on rank 0, whose stream comes back before any
//     peer calls (before, with the end unrecorded, the watch let the call go unreleased), every
//     other rank's waiting call ends at once with yaliRemoteError (copyEngineHostFailure);
//  7. the last rank aborts while the others wait for it: their calls end at once with
//     yaliRemoteError (copyEnginePeerAbort);
//  8. rank 0's call released by its abort, or by its timeout, before the others call: their calls,
//     whose handshake passes on the words rank 0's released call sent, end with rank 0's failure,
//     not without an error on rank 0's since overwritten input (copyEngineReleasedPeer);
//  9. multi mode: the last rank never calling, and meanwhile every rank registers a buffer with a
//     second comm (mapping its peers' by CUDA IPC), deregisters it and destroys that comm, so that
//     the closes of those mappings are posted while the others' calls wait: the calls still time
//     out, between 0.9 T and T + 10 s (copyEngineCloseWhileWaiting).

// Collective: no process has two of its ranks on one GPU. The library turns the copy-engine
// algorithms off for comms whose ranks of one process share a GPU (yali.h: their streams' waits
// could hold each other up in the GPU's hardware queues).
bool copyEnginesAllowed(Ctx& ctx) {
  bool sharedHere = false;  // two ranks of this process on one GPU
  for (size_t i = 0; i < ctx.local.size(); ++i)
    for (size_t j = i + 1; j < ctx.local.size(); ++j) sharedHere |= ctx.local[i].dev == ctx.local[j].dev;
  return ctx.allTrue(!sharedHere);
}

// YALI_ALGO naming every copy-engine algorithm (Bcast shares Broadcast's).
std::string copyEngineList() {
  std::string list;
  for (Coll c : kCopyEngineColls) {
    if (c != kBcast) list += (list.empty() ? "" : ",") + algoName(c, "ce");
  }
  return list;
}

// A slab registered with `comms` (both allocations) and used by no other call: for calls issued
// together (a SlabPool hands every call of a size class the same slab).
std::unique_ptr<Slab> makeRegisteredSlab(Ctx& ctx, const std::vector<yaliComm_t>& comms, size_t bytes) {
  std::unique_ptr<Slab> s = makeSlab(ctx, bytes, Alloc::Malloc);
  registerPart(ctx, comms, s->A, s->regA, "A");
  registerPart(ctx, comms, s->B, s->regB, "B");
  return s;
}

// Deregisters the registered ones among `slabs`, then frees them all. Collective.
void releaseSlabs(Ctx& ctx, const std::vector<yaliComm_t>& comms, std::vector<std::unique_ptr<Slab>>& slabs) {
  for (auto& s : slabs) {
    deregisterPart(ctx, comms, s->regA, "A");
    deregisterPart(ctx, comms, s->regB, "B");
  }
  ctx.world->barrier();  // every rank has stopped using its peers' mappings before any frees
  for (auto& s : slabs) freeSlab(ctx, *s);
  slabs.clear();
}

// yaliAlgoInfo for `run`'s call reports no blocks and no threads on every local rank (a
// copy-engine algorithm launches no kernel).
bool expectNoKernel(Ctx& ctx, const std::vector<yaliComm_t>& comms, const CollRun& run, const std::string& label) {
  bool ok = true;
  for (size_t i = 0; i < comms.size(); ++i) {
    const CollRun::Plan& P = run.plans[i];
    yaliAlgoInfo_t info;
    std::memset(&info, 0xFF, sizeof info);
    const std::string a = algoOf(comms[i], run.spec.coll, P.send, P.recv, run.spec.count, run.spec.dt,
                                 run.spec.op, run.spec.root, nullptr, &info);
    if (info.ctas != 0 || info.threads != 0) {
      ok = false;
      ctx.fail("%s: rank %d: yaliAlgoInfo reports \"%s\" with %d blocks of %d threads; a copy-engine "
               "algorithm launches no kernel (0 and 0)",
               run.label(label).c_str(), ctx.local[i].rank, a.c_str(), info.ctas, info.threads);
    }
  }
  return ok;
}

// Part 1: every collective x type, forced, both buffers registered.
void copyEngineEveryType(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& reg, Verifier& v,
                         const std::string& label) {
  const int n = ctx.nranks;
  std::vector<size_t> counts = {1, 4093, 262147};
  std::vector<yaliDataType_t> types(std::begin(kEveryDtype), std::end(kEveryDtype));
  if (ctx.quick()) {
    counts = {4093};
    types = {yaliUint8, yaliBfloat16, yaliFloat32, yaliFloat64};  // 1-, 2-, 4- and 8-byte elements
  }
  int combo = 0;
  for (Coll c : kCopyEngineColls) {
    for (yaliDataType_t dt : types) {
      for (size_t count : counts) {
        CLayout L;
        L.inplace = (combo / n) % 2 == 1;  // independent of the root
        L.sendOff = combo % 3;
        L.recvOff = (combo / 3) % 3;
        L.sendAtRootOffset = true;
        // Gather's non-roots may pass a NULL recvbuff (the output need not be registered); not
        // Scatter's non-roots a NULL sendbuff (not registered: that rank would take a kernel).
        L.nullUnused = c == kGather && combo % 3 == 0;
        const CSpec s = cspec(c, count, dt, yaliSum, combo % n, L);
        CollRun run(ctx, s, reg.get(slabBytesFor(s, n)));
        expectAlgo(ctx, comms, run, algoName(c, "ce"), label);
        expectNoKernel(ctx, comms, run, label);
        run.prepare(ctx.nextSeed());
        run.issue(comms);
        run.verify(comms, v, label);
        ++combo;
      }
    }
  }
}

// Part 2: only the input's registration counts.
void copyEngineWhichBuffers(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& reg, SlabPool& unreg,
                            Verifier& v, const std::string& label) {
  const int n = ctx.nranks;
  int combo = 0;
  for (Coll c : kCopyEngineColls) {
    const std::string want = algoName(c, "ce");
    for (yaliDataType_t dt : {yaliFloat32, yaliUint8}) {
      const CSpec s = cspec(c, 65537, dt, yaliSum, combo % n);
      runCollAlgo(ctx, comms, unreg, v, s, want, label + ", neither buffer registered", true);
      ++combo;
      if (c == kBcast) continue;  // one buffer: registered or not
      runWithOneBufferRegistered(ctx, comms, reg, unreg, v, s, want, label, true, false);
    }
  }
}

// Part 2, thresholds: YALI_<NAME>_MIN_BYTES instead of YALI_ALGO, registered buffers.
void copyEngineThresholds(Ctx& ctx) {
  const int n = ctx.nranks;
  Vars vars;
  for (Coll c : kCopyEngineColls) {
    if (c != kBcast) vars.push_back({thresholdVar(c, "ce"), c == kAllGather ? "-1" : "4096"});
  }
  const std::string label = "YALI_ALLGATHER_CE_MIN_BYTES=-1, the other *_CE_MIN_BYTES=4096";
  SelectorScope env(vars);
  std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
  {
    SlabPool reg(ctx, Alloc::Malloc, &comms);
    Verifier v(ctx);
    int combo = 0;
    for (Coll c : kCopyEngineColls) {
      const std::string want = algoName(c, "ce");
      if (c == kAllGather) {
        runCollAlgo(ctx, comms, reg, v, cspec(c, 1, yaliFloat32), want, label + ", 4 bytes");
        continue;
      }
      // 1024 fp32 elements: 4096 bytes per piece, at the threshold (inclusive); 1023 just below.
      runCollAlgo(ctx, comms, reg, v, cspec(c, 1024, yaliFloat32, yaliSum, combo++ % n), want,
                  label + ", 4096 bytes per piece");
      runCollAlgo(ctx, comms, reg, v, cspec(c, 1023, yaliFloat32, yaliSum, combo++ % n), want,
                  label + ", 4092 bytes per piece", true);
    }
    reg.release();
  }
  ctx.destroyComms(comms, label.c_str());
}

// Part 3, second half: the same call `times` times on the same buffers, new inputs in between,
// without a host synchronization (3 calls: their checks fit the Verifier's slots, so nothing
// settles in between). Every call's handshake carries the same value.
void copyEngineSameCallRepeated(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& reg, Verifier& v,
                                const CSpec& s, const std::string& label) {
  const int kTimes = 3;
  CollRun run(ctx, s, reg.get(slabBytesFor(s, ctx.nranks)));
  expectAlgo(ctx, comms, run, algoName(s.coll, "ce"), label);
  watchdogStep("%s: %d calls without host synchronization", run.label(label).c_str(), kTimes);
  for (int t = 0; t < kTimes; ++t) {
    run.prepare(ctx.nextSeed());
    run.issue(comms);
    const std::string what = label + ", call " + std::to_string(t + 1) + " of " + std::to_string(kTimes);
    for (size_t i = 0; i < ctx.local.size(); ++i) run.enqueueChecks(i, v, run.label(what));
  }
  std::vector<uint64_t> hashes(ctx.local.size(), 0);
  for (size_t i = 0; i < ctx.local.size(); ++i) v.finish(i, comms[i], &hashes[i]);
  if (kColl[s.coll].sameOutput) checkIdentity(ctx, hashes, run.label(label));
}

// Part 3: *_ce calls and kernels back to back on one stream per rank.
void copyEngineBackToBack(Ctx& ctx, const std::vector<yaliComm_t>& comms, SlabPool& reg, Verifier& v,
                          const std::string& label) {
  const int n = ctx.nranks;
  const int rounds = ctx.quick() ? 2 : 4;
  const yaliDataType_t types[] = {yaliFloat32, yaliUint8, yaliBfloat16, yaliInt64, yaliFloat8e4m3};
  std::vector<std::unique_ptr<Slab>> slabs;
  std::vector<std::unique_ptr<CollRun>> runs;
  std::vector<std::string> wants;  // "": any algorithm, the same on every rank
  auto add = [&](const CSpec& s, bool registered, const std::string& want) {
    const size_t bytes = slabBytesFor(s, n);
    slabs.push_back(registered ? makeRegisteredSlab(ctx, comms, bytes) : makeSlab(ctx, bytes, Alloc::Malloc));
    runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
    wants.push_back(want);
  };
  int k = 0;
  for (int round = 0; round < rounds; ++round) {
    for (Coll c : kCopyEngineColls) {
      const yaliDataType_t dt = types[k % 5];
      CLayout L;
      L.inplace = c == kBcast || (canInPlace(c) && k % 3 == 2);
      L.sendAtRootOffset = true;
      const size_t bytes = k % 2 == 0 ? 4096 : (256u << 10);
      add(cspec(c, countFor(bytes, dt), dt, yaliSum, k % n, L), true, algoName(c, "ce"));
      ++k;
      if (k % 2 != 0) continue;
      // A kernel between two *_ce calls: AllReduce, or AllGather at 1.5 MB per receiver, beyond
      // the LL range, unregistered: the staged algorithm.
      if ((k / 2) % 2 == 0) add(cspec(kAllReduce, 65537, yaliFloat32, yaliSum), false, "");
      else add(cspec(kAllGather, countFor(3u << 19, yaliInt8), yaliInt8), false, "allgather_staged");
    }
  }
  for (size_t j = 0; j < runs.size(); ++j) expectAlgo(ctx, comms, *runs[j], wants[j], label);
  syncAll(ctx);
  watchdogStep("%s: issuing %zu calls without host synchronization", label.c_str(), runs.size());
  for (auto& run : runs) {
    run->prepare(ctx.nextSeed());
    run->issue(comms);
    overwriteInputAfterCall(ctx, *run);
  }
  for (size_t j = 0; j < runs.size(); ++j) {
    runs[j]->verify(comms, v, label + ", call " + std::to_string(j + 1) + " of " + std::to_string(runs.size()));
  }
  runs.clear();
  releaseSlabs(ctx, comms, slabs);

  copyEngineSameCallRepeated(ctx, comms, reg, v, cspec(kAllGather, 65537, yaliInt32),
                             label + ", the same call repeated");
  copyEngineSameCallRepeated(ctx, comms, reg, v, cspec(kBroadcast, 65537, yaliFloat16, yaliSum, n - 1),
                             label + ", the same call repeated");
}

// Part 4: *_ce-eligible calls inside a CUDA graph, then eagerly.
void copyEngineGraph(Ctx& ctx, const std::vector<yaliComm_t>& comms, Verifier& v, const std::string& label) {
  const int n = ctx.nranks;
  const yaliDataType_t types[] = {yaliFloat32, yaliInt8, yaliFloat64, yaliFloat16, yaliUint32, yaliFloat8e5m2};
  std::vector<std::unique_ptr<Slab>> slabs;
  std::vector<std::unique_ptr<CollRun>> runs;
  int k = 0;
  for (Coll c : kCopyEngineColls) {
    CLayout L;
    L.inplace = c == kBcast || (canInPlace(c) && k % 2 == 1);
    L.sendAtRootOffset = true;
    const CSpec s = cspec(c, 4093, types[k % 6], yaliSum, k % n, L);
    slabs.push_back(makeRegisteredSlab(ctx, comms, slabBytesFor(s, n)));
    runs.emplace_back(new CollRun(ctx, s, *slabs.back()));
    ++k;
  }
  for (auto& run : runs) {
    expectAlgo(ctx, comms, *run, algoName(run->spec.coll, "ce"),
               label + " (yaliAlgoInfo, which has no stream, cannot tell a capture)");
  }
  syncAll(ctx);
  captureAndReplay(ctx, comms, runs, v, 2, label + ", captured");
  for (auto& run : runs) {
    run->prepare(ctx.nextSeed());
    run->issue(comms);
    run->verify(comms, v, label + ", eager after the graph");
  }
  runs.clear();
  releaseSlabs(ctx, comms, slabs);
}

// Polls the main streams of local ranks `which` until each is idle; returns when each was first
// seen idle. A stream busy past `limitMs` after t0 is a hang (fatal), one that ends with an error
// a failure of the bounded wait (which must release the stream cleanly).
std::vector<Clock::time_point> waitStreamsIdle(Ctx& ctx, const std::vector<size_t>& which, Clock::time_point t0,
                                               double limitMs, const std::string& label) {
  std::vector<Clock::time_point> idleAt(which.size());
  std::vector<bool> idle(which.size(), false);
  for (size_t left = which.size(); left > 0;) {
    for (size_t w = 0; w < which.size(); ++w) {
      if (idle[w]) continue;
      const LocalRank& lr = ctx.local[which[w]];
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      const cudaError_t e = cudaStreamQuery(lr.stream);
      if (e == cudaErrorNotReady) continue;
      if (e != cudaSuccess) ctx.fatal("%s: rank %d's stream ended with %s", label.c_str(), lr.rank, cudaGetErrorString(e));
      idle[w] = true;
      idleAt[w] = Clock::now();
      --left;
    }
    if (left > 0 && msSince(t0) > limitMs)
      ctx.fatal("%s: a stream is still busy %.0f ms later (a hang)", label.c_str(), limitMs);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return idleAt;
}

// allgather_ce forced on registered buffers, issued by every rank but the last, which never calls:
// the others wait in the copy engines' handshake for its word. finish() aborts every comm.
class WaitingForLastRank {
 public:
  WaitingForLastRank(Ctx& ctx, int timeoutMs, const std::string& label) : ctx_(ctx), label_(label) {
    {
      // Settings are read at creation.
      SelectorScope env({{"YALI_ALGO", "allgather_ce"}, {"YALI_TIMEOUT_MS", std::to_string(timeoutMs)}});
      ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm creation: start it together
      comms = ctx.createComms(label.c_str());
    }
    const CSpec s = cspec(kAllGather, 65537, yaliFloat32);
    slab_ = makeRegisteredSlab(ctx, comms, slabBytesFor(s, ctx.nranks));
    run.reset(new CollRun(ctx, s, *slab_));
    expectAlgo(ctx, comms, *run, "allgather_ce", label);
    run->prepare(ctx.nextSeed());
    syncAll(ctx);
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      if (ctx.local[i].rank != ctx.nranks - 1) callers.push_back(i);
    }
    ctx.world->barrier();
    issuedAt.assign(ctx.local.size(), Clock::now());
    for (size_t i : callers) {
      watchdogStep("%s: rank %d's call, the last rank never calling", label.c_str(), ctx.local[i].rank);
      issuedAt[i] = Clock::now();
      checkIssued(ctx, call(i), ctx.local[i].rank, comms[i], label + ": the call");
    }
  }

  // The call on local rank i (again: the same arguments).
  yaliResult_t call(size_t i) {
    const CollRun::Plan& P = run->plans[i];
    const CSpec& s = run->spec;
    return callColl(s.coll, P.send, P.recv, s.count, s.dt, s.op, s.root, comms[i], ctx_.local[i].stream);
  }

  // Every rank aborts its comm (those not aborted yet: non-null), then frees the slab, whose
  // registrations ended with the comms. Collective.
  void finish() {
    ctx_.world->barrier();
    watchdogStep("%s: yaliCommAbort on every comm", label_.c_str());
    for (size_t i = 0; i < comms.size(); ++i) {
      if (comms[i] == nullptr) continue;
      const yaliResult_t r = yaliCommAbort(comms[i]);
      if (r != yaliSuccess) {
        ctx_.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label_.c_str(), ctx_.local[i].rank, (int)r,
                  yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
      }
      comms[i] = nullptr;
    }
    syncAll(ctx_);
    ctx_.world->barrier();  // no peer maps our memory any more
    freeSlab(ctx_, *slab_);
  }

  std::vector<yaliComm_t> comms;
  std::unique_ptr<CollRun> run;
  std::vector<size_t> callers;              // the local ranks that called
  std::vector<Clock::time_point> issuedAt;  // per local rank

 private:
  Ctx& ctx_;
  std::string label_;
  std::unique_ptr<Slab> slab_;
};

// A fresh comm set under the forced list runs allgather_ce right on newly registered buffers, and
// an AllReduce: nothing of the comms that failed before lingers.
void copyEngineFreshComms(Ctx& ctx, const std::string& label) {
  SelectorScope env({{"YALI_ALGO", copyEngineList()}});
  std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
  {
    SlabPool reg(ctx, Alloc::Malloc, &comms);
    SlabPool unreg(ctx);
    Verifier v(ctx);
    runCollAlgo(ctx, comms, reg, v, cspec(kAllGather, 65537, yaliFloat32), "allgather_ce", label);
    runColl(ctx, comms, unreg, v, cspec(kAllReduce, 65537, yaliFloat32, yaliSum), label);
    reg.release();
  }
  ctx.destroyComms(comms, label.c_str());
}

// Part 5: the host's watch times a waiting call out.
void copyEngineTimeout(Ctx& ctx) {
  // YALI_TIMEOUT_MS also bounds comm creation, which takes longer with many processes on one GPU.
  const int kTimeoutMs = ctx.nranks <= 4 ? 2000 : 4000;
  const double kSlackMs = 10000;
  const std::string label = "allgather_ce, the last rank never calling, YALI_TIMEOUT_MS=" + std::to_string(kTimeoutMs);
  WaitingForLastRank w(ctx, kTimeoutMs, label);
  const std::vector<Clock::time_point> idleAt =
      waitStreamsIdle(ctx, w.callers, *std::min_element(w.issuedAt.begin(), w.issuedAt.end()),
                      kTimeoutMs + 60000, label + ": waiting for the streams");
  for (size_t c = 0; c < w.callers.size(); ++c) {
    const size_t i = w.callers[c];
    const int rank = ctx.local[i].rank;
    const double ms = std::chrono::duration<double, std::milli>(idleAt[c] - w.issuedAt[i]).count();
    ctx.note("%s: rank %d's stream came back after %.0f ms", label.c_str(), rank, ms);
    if (ms > kTimeoutMs + kSlackMs) {
      ctx.fail("%s: rank %d's stream came back after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms", label.c_str(),
               rank, ms, kSlackMs);
    }
    if (ms < 0.9 * kTimeoutMs) {
      ctx.fail("%s: rank %d's stream came back after %.0f ms, before YALI_TIMEOUT_MS: did the call wait for "
               "the last rank at all?",
               label.c_str(), rank, ms);
    }
    yaliResult_t async = yaliSuccess;
    const yaliResult_t r = yaliCommGetAsyncError(w.comms[i], &async);
    if (r != yaliSuccess || async != yaliTimeout) {
      ctx.fail("%s: rank %d: yaliCommGetAsyncError returned %d with asyncError %d (%s); expected yaliTimeout",
               label.c_str(), rank, (int)r, (int)async, yaliGetErrorString(async));
    }
    const yaliResult_t again = w.call(i);
    if (again != yaliTimeout) {
      ctx.fail("%s: rank %d: the next yaliAllGather on the timed-out comm returned %d (%s); expected yaliTimeout",
               label.c_str(), rank, (int)again, yaliGetErrorString(again));
    }
    const std::string msg = lower(str(yaliGetLastError(w.comms[i])));
    const bool namesTimeout = msg.find("timeout") != std::string::npos || msg.find("timed out") != std::string::npos;
    if (!namesTimeout || msg.find("copy engines") == std::string::npos) {
      ctx.fail("%s: rank %d: yaliGetLastError(comm) does not name the timeout in the copy engines' wait: \"%s\"",
               label.c_str(), rank, str(yaliGetLastError(w.comms[i])).c_str());
    }
  }
  w.finish();
  copyEngineFreshComms(ctx, "a fresh comm after the copy engines' timeout");
}

// Part 5: yaliCommAbort releases a waiting call.
void copyEngineAbort(Ctx& ctx) {
  const int kTimeoutMs = 60000;  // the call would give up only after this
  const double kReleaseMs = 1500;
  const double kAbortReturnMs = 2000;
  const std::string label = "allgather_ce, the last rank never calling, aborted";
  WaitingForLastRank w(ctx, kTimeoutMs, label);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (size_t i : w.callers) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    if (cudaStreamQuery(ctx.local[i].stream) != cudaErrorNotReady) {
      ctx.fail("%s: rank %d's stream is idle 300 ms after the call: did the call wait for the last rank at all?",
               label.c_str(), ctx.local[i].rank);
    }
  }
  std::vector<Clock::time_point> abortAt(w.callers.size());
  for (size_t c = 0; c < w.callers.size(); ++c) {
    const size_t i = w.callers[c];
    watchdogStep("%s: yaliCommAbort on rank %d", label.c_str(), ctx.local[i].rank);
    abortAt[c] = Clock::now();
    const yaliResult_t r = yaliCommAbort(w.comms[i]);
    const double ms = msSince(abortAt[c]);
    w.comms[i] = nullptr;
    if (r != yaliSuccess) {
      ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label.c_str(), ctx.local[i].rank, (int)r,
               yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
    }
    if (ms > kAbortReturnMs) {
      ctx.fail("%s: yaliCommAbort (rank %d) took %.0f ms, more than %.0f ms", label.c_str(), ctx.local[i].rank, ms,
               kAbortReturnMs);
    }
  }
  const std::vector<Clock::time_point> idleAt =
      waitStreamsIdle(ctx, w.callers, Clock::now(), 30000, label + ": waiting for the streams");
  for (size_t c = 0; c < w.callers.size(); ++c) {
    const double ms = std::chrono::duration<double, std::milli>(idleAt[c] - abortAt[c]).count();
    ctx.note("%s: rank %d's stream came back %.0f ms after yaliCommAbort began", label.c_str(),
             ctx.local[w.callers[c]].rank, ms);
    if (ms > kReleaseMs) {
      ctx.fail("%s: rank %d's stream came back %.0f ms after yaliCommAbort began, more than %.0f ms",
               label.c_str(), ctx.local[w.callers[c]].rank, ms, kReleaseMs);
    }
  }
  w.finish();
  copyEngineFreshComms(ctx, "a fresh comm after aborting a copy-engine call");
}

// Local comm `comm` (rank `rank`) failed because rank `origin` did: yaliCommGetAsyncError gives
// yaliRemoteError and yaliGetLastError names the origin and `what` (commAsyncErrorText).
void expectPeerFailure(Ctx& ctx, yaliComm_t comm, int rank, int origin, const std::string& what,
                       const std::string& label) {
  yaliResult_t async = yaliSuccess;
  const yaliResult_t r = yaliCommGetAsyncError(comm, &async);
  const std::string msg = str(yaliGetLastError(comm));
  const std::string named = "rank " + std::to_string(origin) + " failed and told this rank";
  if (r != yaliSuccess || async != yaliRemoteError || msg.find(named) == std::string::npos ||
      msg.find(what) == std::string::npos) {
    ctx.fail("%s: rank %d: yaliCommGetAsyncError returned %d with asyncError %d (%s), \"%s\"; expected "
             "yaliRemoteError, \"%s\", \"%s\"",
             label.c_str(), rank, (int)r, (int)async, yaliGetErrorString(async), msg.c_str(), named.c_str(),
             what.c_str());
  }
}

// Part 7: a peer's yaliCommAbort ends a copy-engine call that waits for it. allgather_ce forced,
// YALI_TIMEOUT_MS=60 s, the last rank never calling: it aborts its comm 300 ms after the others'
// calls; each of their streams comes back within 2 s of a barrier that follows the abort, with
// yaliRemoteError naming the last rank's abort (before, they waited out the 60 s).
void copyEnginePeerAbort(Ctx& ctx) {
  const int kTimeoutMs = 60000;
  const double kPromptMs = 2000;
  const int last = ctx.nranks - 1;
  const std::string label = "allgather_ce, the last rank aborting while the others wait for it";
  WaitingForLastRank w(ctx, kTimeoutMs, label);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (size_t i : w.callers) {  // still waiting for the last rank: the abort is what ends them
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    if (cudaStreamQuery(ctx.local[i].stream) != cudaErrorNotReady)
      ctx.fail("%s: rank %d's stream is idle 300 ms after the call: did the call wait for the last rank at all?",
               label.c_str(), ctx.local[i].rank);
  }
  ctx.world->barrier();  // the checks above come before the abort
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    if (ctx.local[i].rank != last) continue;
    watchdogStep("%s: yaliCommAbort on the last rank", label.c_str());
    const yaliResult_t r = yaliCommAbort(w.comms[i]);
    w.comms[i] = nullptr;
    if (r != yaliSuccess)
      ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s)", label.c_str(), last, (int)r, yaliGetErrorString(r));
  }
  ctx.world->barrier();  // the abort has returned: its words are in the peers' windows
  const Clock::time_point t0 = Clock::now();
  const std::vector<Clock::time_point> idleAt =
      waitStreamsIdle(ctx, w.callers, t0, kTimeoutMs + 60000, label + ": waiting for the streams");
  for (size_t c = 0; c < w.callers.size(); ++c) {
    const size_t i = w.callers[c];
    const int rank = ctx.local[i].rank;
    const double ms = std::chrono::duration<double, std::milli>(idleAt[c] - t0).count();
    ctx.note("%s: rank %d's stream came back %.0f ms after the abort", label.c_str(), rank, ms);
    if (ms > kPromptMs)
      ctx.fail("%s: rank %d's stream came back %.0f ms after the abort, more than %.0f ms", label.c_str(), rank, ms,
               kPromptMs);
    expectPeerFailure(ctx, w.comms[i], rank, last, "it called yaliCommAbort", label);
    const yaliResult_t again = w.call(i);
    if (again != yaliRemoteError)
      ctx.fail("%s: rank %d: the next call returned %d (%s); expected yaliRemoteError", label.c_str(), rank,
               (int)again, yaliGetErrorString(again));
  }
  w.finish();
  copyEngineFreshComms(ctx, "a fresh comm after a peer aborted during a copy-engine call");
}

// Comms with allgather_ce forced and YALI_TIMEOUT_MS = timeoutMs, created together (settings are
// read at creation; so is YALI_TEST_COPY_ENGINE_FAIL, set to `failHook` where it is not null).
std::vector<yaliComm_t> allgatherCeComms(Ctx& ctx, int timeoutMs, const std::string& label,
                                         const char* failHook = nullptr) {
  SelectorScope env({{"YALI_ALGO", "allgather_ce"}, {"YALI_TIMEOUT_MS", std::to_string(timeoutMs)}});
  EnvScope hook("YALI_TEST_COPY_ENGINE_FAIL", failHook);
  ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm creation: start it together
  return ctx.createComms(label.c_str());
}

// Local ranks `which` each make their call now (issue(i), checked as issued); every stream must
// come back within promptMs of its call (still busy limitMs later: a hang, fatal). `why` ends the
// message of a stream that came back late.
void issueAndWaitPrompt(Ctx& ctx, const std::vector<size_t>& which, const std::function<yaliResult_t(size_t)>& issue,
                        const std::vector<yaliComm_t>& comms, double limitMs, double promptMs, const std::string& why,
                        const std::string& label) {
  std::vector<Clock::time_point> issuedAt(ctx.local.size(), Clock::now());
  for (size_t i : which) {
    watchdogStep("%s: rank %d's call", label.c_str(), ctx.local[i].rank);
    issuedAt[i] = Clock::now();
    checkIssued(ctx, issue(i), ctx.local[i].rank, comms[i], label + ": the call");
  }
  const std::vector<Clock::time_point> idleAt =
      waitStreamsIdle(ctx, which, Clock::now(), limitMs, label + ": waiting for the streams");
  for (size_t c = 0; c < which.size(); ++c) {
    const size_t i = which[c];
    const double ms = std::chrono::duration<double, std::milli>(idleAt[c] - issuedAt[i]).count();
    ctx.note("%s: rank %d's stream came back after %.0f ms", label.c_str(), ctx.local[i].rank, ms);
    if (ms > promptMs)
      ctx.fail("%s: rank %d's stream came back after %.0f ms, more than %.0f ms%s", label.c_str(), ctx.local[i].rank,
               ms, promptMs, why.c_str());
  }
}

// Every comm not aborted yet (non-null) is aborted, then the slab freed, then a fresh comm set runs
// allgather_ce right (copyEngineFreshComms, labelled `fresh`). Collective.
void abortEveryCommAndFree(Ctx& ctx, const std::vector<yaliComm_t>& comms, Slab& slab, const std::string& label,
                           const std::string& fresh) {
  ctx.world->barrier();
  for (size_t i = 0; i < comms.size(); ++i) {
    if (comms[i] == nullptr) continue;
    watchdogStep("%s: yaliCommAbort (rank %d)", label.c_str(), ctx.local[i].rank);
    const yaliResult_t r = yaliCommAbort(comms[i]);
    if (r != yaliSuccess)
      ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label.c_str(), ctx.local[i].rank, (int)r,
               yaliGetErrorString(r), str(yaliGetLastError(nullptr)).c_str());
  }
  syncAll(ctx);
  ctx.world->barrier();  // no peer maps our memory any more
  freeSlab(ctx, slab);
  copyEngineFreshComms(ctx, fresh);
}

// Part 6: a CUDA call of a *_ce call fails half-way on rank 0 (YALI_TEST_COPY_ENGINE_FAIL=2 in
// rank 0's process: the second call's ready handshake and copies are queued, its done handshake is
// not, and its end is not recorded: the watch must find it by the stream). Rank 0 alone makes that call first, in a group with a third call (the same input, into a
// poisoned buffer of its own):
//   - yaliGroupEnd returns yaliUnhandledCudaError naming the hook, and rank 0's comm has failed: the
//     group's third call is refused (it was issued before: its handshake passed on the words the
//     failed call's release left holding the same tag, and it wrote the buffer), and so is the
//     identical next call outside a group (issued before 066a14f);
//   - rank 0's stream comes back within 1.5 s, before any peer has called: only the watch's release
//     ends the failed call's ready wait;
// then the other ranks call: each comes back within 2 s (YALI_TIMEOUT_MS is 30 s) with
// yaliRemoteError naming rank 0: its watch reads the failure rank 0 wrote into its window while it
// waits for rank 0's done word (before, it waited out YALI_TIMEOUT_MS); its next call is refused. Every comm is then aborted and a
// fresh comm set's allgather_ce is right. Only where rank 0's process holds no other rank (the
// hook is per process).
void copyEngineHostFailure(Ctx& ctx) {
  const int kTimeoutMs = 30000;  // the peers must not need it
  const double kPromptMs = 2000;
  const double kReleaseMs = 1500;
  const std::string label = "allgather_ce, rank 0's second call failing half-way (YALI_TEST_COPY_ENGINE_FAIL=2), "
                            "YALI_TIMEOUT_MS=" + std::to_string(kTimeoutMs);
  bool rank0Here = false;
  for (const LocalRank& lr : ctx.local) rank0Here |= lr.rank == 0;
  if (!ctx.allTrue(!rank0Here || ctx.local.size() == 1)) {
    ctx.note("%s: skipped: rank 0's process holds other ranks too (the hook is per process)", label.c_str());
    return;
  }
  std::vector<yaliComm_t> comms = allgatherCeComms(ctx, kTimeoutMs, label, rank0Here ? "2" : nullptr);
  const CSpec spec = cspec(kAllGather, 65537, yaliFloat32);
  std::unique_ptr<Slab> slab = makeRegisteredSlab(ctx, comms, slabBytesFor(spec, ctx.nranks));
  CollRun run(ctx, spec, *slab);
  expectAlgo(ctx, comms, run, "allgather_ce", label);
  {
    Verifier v(ctx);
    run.prepare(ctx.nextSeed());
    run.issue(comms);
    run.verify(comms, v, label + ": the first call");
  }
  auto call = [&](size_t i, void* recv) {
    const CollRun::Plan& P = run.plans[i];
    return callColl(spec.coll, P.send, recv, spec.count, spec.dt, spec.op, spec.root, comms[i], ctx.local[i].stream);
  };
  run.prepare(ctx.nextSeed());
  const size_t outBytes = spec.count * ctx.nranks * sizeof(float);
  void* poisoned = nullptr;  // the group's third call's output (rank 0)
  if (rank0Here) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[0].dev));
    CUDA_OK(ctx, cudaMalloc(&poisoned, outBytes));
    CUDA_OK(ctx, cudaMemset(poisoned, 0xA5, outBytes));
  }
  syncAll(ctx);
  ctx.world->barrier();
  if (rank0Here) {
    const int rank = ctx.local[0].rank;
    watchdogStep("%s: rank 0's group: the failing call, then a third", label.c_str());
    yaliGroupStart();
    const yaliResult_t r2 = call(0, run.plans[0].recv);
    const yaliResult_t r3 = call(0, poisoned);
    const Clock::time_point t0 = Clock::now();
    const yaliResult_t r = yaliGroupEnd();
    const std::string msg = str(yaliGetLastError(nullptr));
    if (r2 != yaliSuccess || r3 != yaliSuccess)
      ctx.fail("%s: queuing the group's calls returned %d and %d", label.c_str(), (int)r2, (int)r3);
    if (r != yaliUnhandledCudaError || msg.find("YALI_TEST_COPY_ENGINE_FAIL") == std::string::npos) {
      ctx.fail("%s: rank %d: yaliGroupEnd returned %d (%s) with \"%s\"; expected yaliUnhandledCudaError naming "
               "YALI_TEST_COPY_ENGINE_FAIL",
               label.c_str(), rank, (int)r, yaliGetErrorString(r), msg.c_str());
    }
    yaliResult_t async = yaliSuccess;
    if (yaliCommGetAsyncError(comms[0], &async) != yaliSuccess || async != yaliUnhandledCudaError) {
      ctx.fail("%s: rank %d: yaliCommGetAsyncError gives %d (%s) after the failed call; expected "
               "yaliUnhandledCudaError (the comm failed)",
               label.c_str(), rank, (int)async, yaliGetErrorString(async));
    }
    const yaliResult_t again = call(0, run.plans[0].recv);
    const std::string why = lower(str(yaliGetLastError(comms[0])));
    if (again != yaliUnhandledCudaError || why.find("copy-engine") == std::string::npos) {
      ctx.fail("%s: rank %d: the identical next call returned %d (%s) with \"%s\"; expected it refused with "
               "yaliUnhandledCudaError naming the copy-engine call",
               label.c_str(), rank, (int)again, yaliGetErrorString(again), why.c_str());
    }
    const std::vector<Clock::time_point> idle =
        waitStreamsIdle(ctx, {0}, t0, kTimeoutMs + 60000, label + ": waiting for rank 0's stream");
    const double ms = std::chrono::duration<double, std::milli>(idle[0] - t0).count();
    ctx.note("%s: rank 0's stream came back %.0f ms after yaliGroupEnd, before any peer called", label.c_str(), ms);
    if (ms > kReleaseMs)
      ctx.fail("%s: rank 0's stream came back %.0f ms after yaliGroupEnd, more than %.0f ms: the failed call was "
               "not released",
               label.c_str(), ms, kReleaseMs);
    std::vector<unsigned char> host(outBytes);
    CUDA_OK(ctx, cudaMemcpy(host.data(), poisoned, outBytes, cudaMemcpyDeviceToHost));
    size_t written = 0;
    for (unsigned char b : host) written += b != 0xA5;
    if (written != 0)
      ctx.fail("%s: the group's third call, after the comm failed, wrote %zu of %zu bytes of its output; expected "
               "it refused, the output untouched",
               label.c_str(), written, outBytes);
    CUDA_OK(ctx, cudaFree(poisoned));
  }
  ctx.world->barrier();  // the others call only now
  std::vector<size_t> others;
  for (size_t i = 0; i < ctx.local.size() && !rank0Here; ++i) others.push_back(i);
  issueAndWaitPrompt(
      ctx, others, [&](size_t i) { return call(i, run.plans[i].recv); }, comms, kTimeoutMs + 60000, kPromptMs,
      ": rank 0's failure did not reach its wait", label + ", the second call");
  for (size_t i : others) {
    const int rank = ctx.local[i].rank;
    expectPeerFailure(ctx, comms[i], rank, 0, "a CUDA call failed half-way", label);
    const yaliResult_t again = call(i, run.plans[i].recv);
    if (again != yaliRemoteError)
      ctx.fail("%s: rank %d: the next call on the failed comm returned %d (%s); expected yaliRemoteError",
               label.c_str(), rank, (int)again, yaliGetErrorString(again));
  }
  abortEveryCommAndFree(ctx, comms, *slab, label, "a fresh comm after a copy-engine call failed half-way");
}

// Part 8: a peer's call released by its abort or its timeout does not let another rank's call end
// without an error. allgather_ce forced. Rank 0 alone calls; its call is released either by its
// yaliCommAbort 300 ms later (YALI_TIMEOUT_MS=60 s), or by its own timeout (YALI_TIMEOUT_MS=2 s or
// 4 s; there only rank 0's watch tells the peers, at the timeout and before the release; no
// yaliCommAbort does). The released stream
// goes on to copy the peers' inputs and to write its done words into their windows. Rank 0 then
// overwrites its own input (0xA5), as a program may once its call has come back, and only then do
// the others call: their ready and done waits pass on rank 0's words, and their copies read rank
// 0's overwritten input. Each must come back within 2 s with rank 0's failure: yaliRemoteError
// naming its abort, or yaliTimeout naming rank 0 (handshake step 4, the gate). Before the gate they
// ended without any error, rank 0's piece of their output holding the 0xA5 bytes.
void copyEngineReleasedPeer(Ctx& ctx, bool byAbort) {
  const int kTimeoutMs = byAbort ? 60000 : ctx.nranks <= 4 ? 2000 : 4000;
  const double kReleaseMs = byAbort ? 1500 : kTimeoutMs + 1500;
  const double kPromptMs = 2000;
  const std::string label = std::string("allgather_ce, rank 0's call released by its ") +
                            (byAbort ? "abort" : "timeout (YALI_TIMEOUT_MS=" + std::to_string(kTimeoutMs) + ")") +
                            " before the others call";
  std::vector<yaliComm_t> comms = allgatherCeComms(ctx, kTimeoutMs, label);
  const CSpec spec = cspec(kAllGather, 65537, yaliFloat32);
  std::unique_ptr<Slab> slab = makeRegisteredSlab(ctx, comms, slabBytesFor(spec, ctx.nranks));
  CollRun run(ctx, spec, *slab);
  expectAlgo(ctx, comms, run, "allgather_ce", label);
  run.prepare(ctx.nextSeed());
  syncAll(ctx);
  auto call = [&](size_t i) {
    const CollRun::Plan& P = run.plans[i];
    return callColl(spec.coll, P.send, P.recv, spec.count, spec.dt, spec.op, spec.root, comms[i], ctx.local[i].stream);
  };
  const size_t pieceBytes = spec.count * sizeof(float);
  ctx.world->barrier();
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    if (ctx.local[i].rank != 0) continue;
    watchdogStep("%s: rank 0's call", label.c_str());
    const Clock::time_point issued = Clock::now();
    checkIssued(ctx, call(i), 0, comms[i], label + ": rank 0's call");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    if (cudaStreamQuery(ctx.local[i].stream) != cudaErrorNotReady)
      ctx.fail("%s: rank 0's stream is idle 300 ms after its call: did the call wait for the others at all?",
               label.c_str());
    Clock::time_point t0 = issued;
    if (byAbort) {
      t0 = Clock::now();
      const yaliResult_t r = yaliCommAbort(comms[i]);
      comms[i] = nullptr;
      if (r != yaliSuccess)
        ctx.fail("%s: yaliCommAbort (rank 0) returned %d (%s)", label.c_str(), (int)r, yaliGetErrorString(r));
    }
    const std::vector<Clock::time_point> idle =
        waitStreamsIdle(ctx, {i}, t0, kTimeoutMs + 60000, label + ": waiting for rank 0's stream");
    const double ms = std::chrono::duration<double, std::milli>(idle[0] - t0).count();
    ctx.note("%s: rank 0's stream came back %.0f ms after its %s", label.c_str(), ms, byAbort ? "abort" : "call");
    if (ms > kReleaseMs)
      ctx.fail("%s: rank 0's stream came back %.0f ms after its %s, more than %.0f ms", label.c_str(), ms,
               byAbort ? "abort" : "call", kReleaseMs);
    if (!byAbort) {
      yaliResult_t async = yaliSuccess;
      if (yaliCommGetAsyncError(comms[i], &async) != yaliSuccess || async != yaliTimeout)
        ctx.fail("%s: rank 0: yaliCommGetAsyncError gives %d (%s); expected yaliTimeout", label.c_str(), (int)async,
                 yaliGetErrorString(async));
    }
    CUDA_OK(ctx, cudaMemset(const_cast<void*>(run.plans[i].send), 0xA5, pieceBytes));  // the program reuses its input
    CUDA_OK(ctx, cudaDeviceSynchronize());
  }
  ctx.world->barrier();  // the others call only now
  std::vector<size_t> others;
  for (size_t i = 0; i < ctx.local.size(); ++i)
    if (ctx.local[i].rank != 0) others.push_back(i);
  issueAndWaitPrompt(ctx, others, call, comms, kTimeoutMs + 60000, kPromptMs, "", label + ", the others' call");
  for (size_t i : others) {
    const int rank = ctx.local[i].rank;
    yaliResult_t async = yaliSuccess;
    if (yaliCommGetAsyncError(comms[i], &async) == yaliSuccess && async == yaliSuccess) {
      std::vector<unsigned char> host(pieceBytes);
      CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
      CUDA_OK(ctx, cudaMemcpy(host.data(), run.plans[i].recv, pieceBytes, cudaMemcpyDeviceToHost));
      size_t overwritten = 0;
      for (unsigned char b : host) overwritten += b == 0xA5;
      ctx.fail("%s: rank %d: the call ended without an error, %zu of the %zu bytes of rank 0's piece in its output "
               "being rank 0's overwritten input; expected rank 0's failure",
               label.c_str(), rank, overwritten, pieceBytes);
      continue;
    }
    if (byAbort) {
      expectPeerFailure(ctx, comms[i], rank, 0, "it called yaliCommAbort", label);
    } else {
      const std::string msg = str(yaliGetLastError(comms[i]));
      if (async != yaliTimeout || msg.find("rank 0 failed and told this rank") == std::string::npos)
        ctx.fail("%s: rank %d: yaliCommGetAsyncError gives %d (%s), \"%s\"; expected yaliTimeout, \"rank 0 failed and "
                 "told this rank\"",
                 label.c_str(), rank, (int)async, yaliGetErrorString(async), msg.c_str());
    }
  }
  abortEveryCommAndFree(ctx, comms, *slab, label, "a fresh comm after a peer's released copy-engine call");
}

// Part 9: an IPC close posted while a copy-engine call waits. While cudaIpcCloseMemHandle waits
// for the device the driver holds up the process's other CUDA calls: a close started while a call
// waited for a peer held up the watch that would time the call out, and the close waited for the
// call (a hang; the library starts no close while a copy-engine call is in flight, CloseGate). The
// second comm's slab is freed only after the calls ended: cudaFree waits for the device too.
// Only in multi mode: in single mode no peer memory is mapped by IPC.
void copyEngineCloseWhileWaiting(Ctx& ctx) {
  if (!ctx.allTrue(ctx.local.size() == 1)) return;
  const int kTimeoutMs = ctx.nranks <= 4 ? 6000 : 12000;  // room for the second comm's set-up
  const double kSlackMs = 10000;
  const std::string label = "allgather_ce, the last rank never calling, another comm's registration closed meanwhile";
  WaitingForLastRank w(ctx, kTimeoutMs, label);
  const Clock::time_point first = *std::min_element(w.issuedAt.begin(), w.issuedAt.end());
  const std::string other = label + ": the second comm";
  watchdogStep("%s", other.c_str());
  std::vector<yaliComm_t> comms = ctx.createComms(other.c_str());
  std::unique_ptr<Slab> slab = makeRegisteredSlab(ctx, comms, 1 << 20);
  deregisterPart(ctx, comms, slab->regA, "A");  // the peers' mappings go: their closes are posted
  deregisterPart(ctx, comms, slab->regB, "B");
  ctx.destroyComms(comms, other.c_str());
  const double postedMs = msSince(first);
  ctx.note("%s: the closes were posted %.0f ms after the calls", label.c_str(), postedMs);
  if (!ctx.allTrue(postedMs < 0.9 * kTimeoutMs))
    ctx.fail("%s: the second comm's set-up and deregistration took %.0f ms here, too close to YALI_TIMEOUT_MS=%d "
             "ms: the closes may not have been posted while the calls waited (raise the case's timeout)",
             label.c_str(), postedMs, kTimeoutMs);
  const std::vector<Clock::time_point> idleAt =
      waitStreamsIdle(ctx, w.callers, first, kTimeoutMs + 60000, label + ": waiting for the streams");
  for (size_t c = 0; c < w.callers.size(); ++c) {
    const size_t i = w.callers[c];
    const int rank = ctx.local[i].rank;
    const double ms = std::chrono::duration<double, std::milli>(idleAt[c] - w.issuedAt[i]).count();
    ctx.note("%s: rank %d's stream came back after %.0f ms", label.c_str(), rank, ms);
    if (ms > kTimeoutMs + kSlackMs || ms < 0.9 * kTimeoutMs)
      ctx.fail("%s: rank %d's stream came back after %.0f ms, outside 0.9 x YALI_TIMEOUT_MS to YALI_TIMEOUT_MS + "
               "%.0f ms (T = %d ms)",
               label.c_str(), rank, ms, kSlackMs, kTimeoutMs);
    yaliResult_t async = yaliSuccess;
    const yaliResult_t r = yaliCommGetAsyncError(w.comms[i], &async);
    if (r != yaliSuccess || async != yaliTimeout)
      ctx.fail("%s: rank %d: yaliCommGetAsyncError returned %d with asyncError %d (%s); expected yaliTimeout",
               label.c_str(), rank, (int)r, (int)async, yaliGetErrorString(async));
  }
  ctx.world->barrier();  // the calls have ended everywhere: the slab's memory may go
  freeSlab(ctx, *slab);
  w.finish();
}

void caseCopyEngine(Ctx& ctx) {
  if (!copyEnginesAllowed(ctx)) {
    const std::string label = "YALI_ALGO=" + copyEngineList() + ", ranks of one process share a GPU";
    SelectorScope env({{"YALI_ALGO", copyEngineList()}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      Verifier v(ctx);
      for (Coll c : {kAllGather, kGather, kAlltoAll})
        runCollAlgo(ctx, comms, reg, v, cspec(c, 4093, yaliFloat32), algoName(c, "ce"), label + ": never *_ce", true);
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
    ctx.note("ranks of one process share a GPU: *_ce is off there (checked); run --mode multi for the rest");
    return;
  }
  {
    const std::string label = "YALI_ALGO=" + copyEngineList();
    SelectorScope env({{"YALI_ALGO", copyEngineList()}});
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    {
      SlabPool reg(ctx, Alloc::Malloc, &comms);
      SlabPool unreg(ctx);
      Verifier v(ctx);
      copyEngineEveryType(ctx, comms, reg, v, label + ", registered");
      copyEngineWhichBuffers(ctx, comms, reg, unreg, v, label);
      copyEngineBackToBack(ctx, comms, reg, v, label + ", back to back");
      copyEngineGraph(ctx, comms, v, label + ", graph");
      reg.release();
    }
    ctx.destroyComms(comms, label.c_str());
  }
  copyEngineThresholds(ctx);
  copyEngineTimeout(ctx);
  copyEngineAbort(ctx);
  copyEngineHostFailure(ctx);
  copyEnginePeerAbort(ctx);
  copyEngineReleasedPeer(ctx, true);
  copyEngineReleasedPeer(ctx, false);
  copyEngineCloseWhileWaiting(ctx);
}

// ==== trust_epoch_wrap: the exchange families ========================================================
//
// The part of trust_epoch_wrap (cases_trust.cc) for the collectives' own algorithm families, here
// beside the helpers it uses. Each family, forced with YALI_ALGO for every collective that has
// it (and AllReduce's counterpart), runs on a comm whose launch counter YALI_TEST_EPOCH_START
// (suite.h: kEpochMax) puts a few launches before its wrap: a CUDA graph of three calls captured
// before the wrap is replayed (four times with --quick, else six), each replay followed by two
// eager calls of other collectives; every call is checked, and every eager call's algorithm with
// yaliAlgoInfo. The launch of epoch 2^32 - 1, whose end rebases every rank's epochs
// (device.cuh: rebaseEpochs), is
//   LL exchange:       the second call of the second replay (mid-graph);
//   staged exchange:   the first eager call (the rebase in an eager launch);
//   direct and pull:   the fourth of the five calls of the second replay (reduce_pull), buffers
//                      registered (twoshot_direct, every *_direct, reducescatter_pull, reduce_pull);
//   copy engines:      a graph call, with *_ce calls (which launch no kernel, so do not advance the
//                      epoch) before and after it, interleaved with eager kernel calls of the
//                      collectives that have no *_ce; inputs registered. Only where no process has
//                      two ranks on one GPU: the library turns *_ce off there (yali.h), so single
//                      mode with ranks sharing a GPU skips this family (multi mode runs it).

struct EpochCall {
  CSpec spec;
  std::string algo;  // what yaliAlgoInfo must name ("": anything, the same on every rank)
};

struct EpochFamily {
  std::string name;
  std::string algoList;          // YALI_ALGO
  bool registered = false;       // every slab registered with the comms (both allocations)
  std::vector<EpochCall> graph;  // captured once
  std::vector<EpochCall> eager;  // two after each replay, in turn
  int wrapAt = 0;                // the kernel launch (from 0) whose epoch is 2^32 - 1
};

bool isCopyEngineAlgo(const std::string& a) { return a.size() > 3 && a.compare(a.size() - 3, 3, "_ce") == 0; }

// "2^32-k" near the wrap, else the number.
std::string epochText(uint64_t e) {
  return e + 64 > kEpochMax ? "2^32-" + std::to_string(kEpochMax - e + 1) : std::to_string(e);
}

void epochFamily(Ctx& ctx, const EpochFamily& f) {
  const uint64_t start = kEpochMax - (uint64_t)f.wrapAt;
  const std::string label = "epoch wrap, " + f.name + " (YALI_ALGO=" + f.algoList + ", from launch " +
                            epochText(start) + ")";
  SelectorScope env({{"YALI_ALGO", f.algoList}, {"YALI_TEST_EPOCH_START", std::to_string(start)}});
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
  uint64_t epoch = start;  // the next kernel launch's
  int afterWrap = 0;       // kernel launches after the one of epoch 2^32 - 1
  auto launch = [&]() {    // the epoch of a kernel launch just made
    const uint64_t e = epoch;
    if (e < start) ++afterWrap;
    epoch = e == kEpochMax ? 1 : e + 1;
    return e;
  };
  {
    SlabPool pool(ctx, Alloc::Malloc, f.registered ? &comms : nullptr);
    Verifier v(ctx);
    std::vector<std::unique_ptr<Slab>> slabs;
    std::vector<std::unique_ptr<CollRun>> runs;
    for (const EpochCall& c : f.graph) {
      const size_t bytes = slabBytesFor(c.spec, ctx.nranks);
      slabs.push_back(f.registered ? makeRegisteredSlab(ctx, comms, bytes) : makeSlab(ctx, bytes, Alloc::Malloc));
      runs.emplace_back(new CollRun(ctx, c.spec, *slabs.back()));
      if (!c.algo.empty()) expectAlgo(ctx, comms, *runs.back(), c.algo, label + ": to be captured");
    }
    syncAll(ctx);
    {
      ReplayableGraphs graphs(ctx);
      if (captureColl(ctx, comms, runs, graphs, label)) {
        const int replays = ctx.quick() ? 4 : 6;
        size_t next = 0;
        for (int rep = 1; rep <= replays; ++rep) {
          const uint64_t first = launch();
          uint64_t last = first;
          for (size_t k = 1; k < runs.size(); ++k) last = launch();
          replayColl(ctx, comms, runs, graphs, v,
                     label + ": replay " + std::to_string(rep) + " (epochs " + epochText(first) + ".." +
                         epochText(last) + ")");
          for (int k = 0; k < 2; ++k) {
            const EpochCall& c = f.eager[next++ % f.eager.size()];
            const std::string when = isCopyEngineAlgo(c.algo) ? "no kernel" : "epoch " + epochText(launch());
            runCollAlgo(ctx, comms, pool, v, c.spec, c.algo,
                        label + ": eager call after replay " + std::to_string(rep) + " (" + when + ")");
          }
        }
      }
    }  // the graphs are destroyed here, before their buffers are deregistered
    expectNoAsyncError(ctx, comms, label + ": at the end");
    runs.clear();
    if (f.registered) {
      releaseSlabs(ctx, comms, slabs);
    } else {
      for (auto& s : slabs) freeSlab(ctx, *s);
    }
    pool.release();
  }
  if (afterWrap == 0) ctx.fail("%s: no launch after the wrap (a bug in the test)", label.c_str());
  ctx.destroyComms(comms, label.c_str());
}

}  // namespace

void epochWrapExchange(Ctx& ctx) {
  const int n = ctx.nranks;
  std::vector<EpochFamily> families;
  {
    EpochFamily f;
    f.name = "LL exchange";
    f.algoList = algoName(kAllReduce, "ll") + "," + forcedList("ll");
    f.graph = {{cspec(kAllGather, 4093, yaliFloat32), "allgather_ll"},
               {cspec(kReduceScatter, 16411, yaliBfloat16, yaliSum), "reducescatter_ll"},
               {cspec(kScatter, 1031, yaliInt32, yaliSum, n - 1), "scatter_ll"}};
    f.eager = {{cspec(kBroadcast, 4093, yaliFloat16, yaliSum, 1 % n), "broadcast_ll"},
               {cspec(kReduce, 4093, yaliFloat32, yaliMax, 0), "reduce_ll"},
               {cspec(kGather, 1031, yaliFloat64, yaliSum, n / 2), "gather_ll"},
               {cspec(kAlltoAll, 1031, yaliUint8), "alltoall_ll"},
               {cspec(kAllReduce, 4093, yaliFloat32, yaliSum), "oneshot_ll"},
               {cspec(kAllGather, 31, yaliInt8), "allgather_ll"}};
    f.wrapAt = 6;
    families.push_back(f);
  }
  {
    EpochFamily f;
    f.name = "staged exchange";
    f.algoList = algoName(kAllReduce, "staged") + "," + forcedList("staged");  // twoshot
    f.graph = {{cspec(kAlltoAll, 65537, yaliFloat32), "alltoall_staged"},
               {cspec(kReduce, 262147, yaliBfloat16, yaliSum, n - 1), "reduce_staged"},
               {cspec(kBroadcast, 65537, yaliInt32, yaliSum, 0), "broadcast_staged"}};
    f.eager = {{cspec(kReduceScatter, 65537, yaliFloat32, yaliSum), "reducescatter_staged"},
               {cspec(kGather, 16411, yaliFloat16, yaliSum, 1 % n), "gather_staged"},
               {cspec(kScatter, 65537, yaliFloat32, yaliSum, n / 2), "scatter_staged"},
               {cspec(kAllGather, 262147, yaliInt8), "allgather_staged"},
               {cspec(kAllReduce, 1048573, yaliFloat32, yaliSum), "twoshot"}};
    f.wrapAt = 3;
    families.push_back(f);
  }
  {
    // Off by default (not run on a GPU when they were added): forced here so that the epoch wrap,
    // graphs and eager calls around it cover them.
    EpochFamily f;
    f.name = "rooted two-shot";
    f.algoList = "twoshot_push,broadcast_twoshot,reduce_twoshot";
    f.graph = {{cspec(kBroadcast, 65537, yaliFloat32, yaliSum, n - 1), "broadcast_twoshot"},
               {cspec(kReduce, 262147, yaliBfloat16, yaliSum, 1 % n), "reduce_twoshot"}};
    f.eager = {{cspec(kReduce, 65537, yaliFloat32, yaliMax, 0), "reduce_twoshot"},
               {cspec(kBroadcast, 16411, yaliInt8, yaliSum, n / 2), "broadcast_twoshot"},
               {cspec(kAllReduce, 1048573, yaliFloat32, yaliSum), "twoshot_push"}};
    f.wrapAt = 3;
    families.push_back(f);
  }
  {
    EpochFamily f;
    f.name = "direct and pull exchanges, buffers registered";
    f.algoList = "twoshot_direct,reducescatter_pull,reduce_pull";
    for (Coll c : kDirectColls) f.algoList += "," + algoName(c, "direct");
    f.registered = true;
    f.graph = {{cspec(kAllGather, 16411, yaliFloat32), "allgather_direct"},
               {cspec(kScatter, 4093, yaliBfloat16, yaliSum, 1 % n), "scatter_direct"},
               {cspec(kReduceScatter, 4093, yaliBfloat16, yaliSum), "reducescatter_pull"},
               {cspec(kReduce, 16411, yaliFloat32, yaliSum, n - 1), "reduce_pull"},
               {cspec(kAllReduce, 65537, yaliFloat32, yaliSum), "twoshot_direct"}};
    // Gather has no registered-buffer algorithm: the selector's choice among the rest.
    f.eager = {{cspec(kBroadcast, 65537, yaliFloat32, yaliSum, n - 1), "broadcast_direct"},
               {cspec(kAlltoAll, 4093, yaliInt64), "alltoall_direct"},
               {cspec(kReduceScatter, 4093, yaliFloat32, yaliSum), "reducescatter_pull"},
               {cspec(kReduce, 4093, yaliBfloat16, yaliMax, 1 % n), "reduce_pull"},
               {cspec(kAllGather, 1031, yaliFloat16), "allgather_direct"},
               {cspec(kGather, 4093, yaliFloat32, yaliSum, 0), ""}};
    // Launches 0-4 the first replay, 5-6 eager, 7-11 the second replay: the wrap is its reduce_pull.
    f.wrapAt = 10;
    families.push_back(f);
  }
  if (copyEnginesAllowed(ctx)) {
    EpochFamily f;
    f.name = "copy engines, inputs registered";
    f.algoList = copyEngineList();
    f.registered = true;
    // A capture never takes *_ce: the graph's calls are the selector's choice among the rest, and
    // so are the eager calls of the collectives without a *_ce (ReduceScatter, AllReduce, Reduce).
    f.graph = {{cspec(kReduceScatter, 4093, yaliFloat32, yaliSum), ""},
               {cspec(kAllGather, 4093, yaliFloat32), ""},
               {cspec(kAllReduce, 16411, yaliFloat32, yaliSum), ""}};
    f.eager = {{cspec(kAllGather, 65537, yaliFloat32), "allgather_ce"},
               {cspec(kAllReduce, 4093, yaliFloat32, yaliSum), ""},
               {cspec(kBroadcast, 4093, yaliBfloat16, yaliSum, 1 % n), "broadcast_ce"},
               {cspec(kReduce, 4093, yaliFloat32, yaliSum, 0), ""},
               {cspec(kGather, 1031, yaliFloat32, yaliSum, n - 1), "gather_ce"},
               {cspec(kReduceScatter, 1031, yaliFloat16, yaliSum), ""},
               {cspec(kScatter, 4093, yaliInt32, yaliSum, n / 2), "scatter_ce"},
               {cspec(kAllReduce, 1031, yaliFloat32, yaliSum), ""},
               {cspec(kAlltoAll, 4093, yaliUint8), "alltoall_ce"},
               {cspec(kReduce, 1031, yaliFloat32, yaliMin, n - 1), ""}};
    f.wrapAt = 5;
    families.push_back(f);
  } else {
    ctx.note("epoch wrap: ranks of one process share a GPU, where the library turns the copy-engine "
             "algorithms off: their family is left out here (multi mode runs it)");
  }
  for (const EpochFamily& f : families) epochFamily(ctx, f);
}

const std::vector<CaseDef>& collectiveCases() {
  static const std::vector<CaseDef> cases = {
      {"coll_matrix", "every collective x type x op x root x in-place, counts 1 and 65537", 1800, caseMatrix},
      {"coll_counts", "counts 0..1048573, every collective x type x op", 1800, caseCounts},
      {"coll_large", "9 MB per receiver: no LL, several staging steps; every collective", 600, caseLarge},
      {"coll_offsets", "buffers 1..7 elements off alignment, one allocation, in place", 600, caseOffsets},
      {"coll_pool_memory", "buffers from cudaMallocAsync pools, every collective", 300, casePool},
      {"coll_staging_small", "YALI_STAGING_BYTES=65536: many steps; small LL buffer fallback", 600,
       caseStagingSmall},
      {"coll_algos", "every algorithm forced (YALI_ALGO) x every type; refused settings", 1200, caseAlgos},
      {"coll_thresholds", "YALI_*_LL_MAX_BYTES / *_DIRECT_MIN_BYTES: -1, 0, bytes, both sides", 600,
       caseThresholds},
      {"coll_registered", "registered buffers, the selector's choice; after deregistering", 600,
       caseRegistered},
      {"coll_back_to_back", "60 calls of changing collectives, no host sync, inputs overwritten", 300,
       caseBackToBack},
      {"coll_multi_comm", "two comm sets, two streams and one; a group ordered differently by rank; one destroyed",
       300, caseMultiComm},
      {"coll_graphs", "10 collectives in one CUDA graph, replays with new data", 300, caseGraphs},
      {"coll_groups", "yaliGroupStart/End around different collectives, nested", 300, caseGroups},
      {"coll_count0", "count 0: NULL and real buffers, nothing written, algorithm none", 300, caseCount0},
      {"coll_timeout", "a collective alone on rank 0: yaliTimeout, no hang (each collective)", 600,
       caseTimeout},
      {"coll_bad_args", "bad arguments of every collective: named, nothing touched", 300, caseBadArgs},
      {"coll_copy_engine", "*_ce forced: every collective x type, registration, graphs, timeout, abort", 900,
       caseCopyEngine},
  };
  return cases;
}

}  // namespace yt
