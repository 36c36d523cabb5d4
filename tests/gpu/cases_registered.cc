// GPU cases for registered buffers (yaliCommRegister / yaliCommDeregister) and the zero-copy
// AllReduce they enable, twoshot_direct. Same rules as cases.cc (suite.h): every process takes the
// same collective steps in the same order.
//
// A case allocates per rank one or more "arenas" (one cudaMalloc each, the same size on every
// rank), registers some of them, and places each call's send and recv regions inside them at byte
// offsets that are the same on every rank (the condition for twoshot_direct: the OUTPUT in the
// corresponding registration on every rank, at the same offset within it; where the input lies does
// not matter). Every byte of every arena outside the call's regions must keep the guard pattern
// after the call: with twoshot_direct, peers store reduced shards into our output over NVLink, so a
// wrong offset on any rank lands somewhere in our arena and is caught.
//
// Whether a call must run twoshot_direct follows the environment the comms were created under
// (settings are read at comm creation): YALI_ALGO naming twoshot_direct (or another AllReduce
// algorithm: then never), or YALI_TWOSHOT_DIRECT_MIN_BYTES -1 / 0 / >0 decide it; with the tuning
// table's threshold (unset or -2) the cases only check that the ranks agree and that calls whose
// output is not registered never report twoshot_direct. ctest runs these cases once more with
// YALI_TWOSHOT_DIRECT_MIN_BYTES=-1 (gpu_multi_twoshot_direct_*), where every call whose output is
// registered is zero-copy; registered_threshold, registered_mismatch and registered_partial set
// their own values. The AllReduce algorithm `direct` (both buffers registered) was removed:
// registered_threshold checks that YALI_ALGO=direct is refused at comm creation.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runs.h"
#include "suite.h"

namespace yt {
namespace {

const yaliDataType_t kDtypes[] = {yaliFloat32, yaliFloat16, yaliBfloat16};
const yaliRedOp_t kOps[] = {yaliSum, yaliProd, yaliMax, yaliMin, yaliAvg};

// ---- Environment ---------------------------------------------------------------------------------

// Sets (value) or unsets (nullptr) variables for the comms created while it lives; restores them
// when it ends (the MPI launcher runs every case in one process).
class EnvScope {
 public:
  explicit EnvScope(const std::vector<std::pair<const char*, const char*>>& vars) {
    for (const auto& v : vars) {
      const char* old = std::getenv(v.first);
      saved_.push_back({v.first, old != nullptr, old ? old : ""});
      if (v.second != nullptr) setenv(v.first, v.second, 1);
      else unsetenv(v.first);
    }
  }
  ~EnvScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) setenv(it->name.c_str(), it->value.c_str(), 1);
      else unsetenv(it->name.c_str());
    }
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

// The zero-copy AllReduce, as yaliAllReduceAlgoInfo names it.
const char* const kZeroCopy = "twoshot_direct";

// What yaliAllReduceAlgoInfo must report for a call.
enum class Want { ZeroCopy, NotZeroCopy, Any };

const char* wantName(Want w) {
  switch (w) {
    case Want::ZeroCopy: return "twoshot_direct";
    case Want::NotZeroCopy: return "not twoshot_direct";
    case Want::Any: return "any";
  }
  return "?";
}

const char* envOr(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : otherwise;
}

// The AllReduce algorithm YALI_ALGO (a comma-separated list, at most one name per collective)
// forces, or "" when it names none (unset, "auto", or only other collectives' algorithms).
std::string forcedAllReduce() {
  static const char* const kAllReduceAlgos[] = {"oneshot_ll", "oneshot_pull", "twoshot_push", "twoshot",
                                                "twoshot_direct"};
  const std::string list = envOr("YALI_ALGO", "");
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    for (const char* a : kAllReduceAlgos) {
      if (name == a) return name;
    }
  }
  return "";
}

// For a call of `bytes` whose OUTPUT is registered on every rank at the same offset within the
// corresponding registration (the input anywhere), under the environment the comms were created
// with.
Want registeredWant(size_t bytes) {
  if (bytes == 0) return Want::NotZeroCopy;  // count 0 launches nothing ("none")
  // A forced AllReduce algorithm wins over the threshold: twoshot_direct runs wherever the output
  // is registered, any other one everywhere (or its fallback, twoshot, beyond its buffer).
  const std::string forced = forcedAllReduce();
  if (!forced.empty()) return forced == kZeroCopy ? Want::ZeroCopy : Want::NotZeroCopy;
  const char* m = std::getenv("YALI_TWOSHOT_DIRECT_MIN_BYTES");
  if (m == nullptr || m[0] == '\0') return Want::Any;  // the tuning table's threshold
  long long v = std::strtoll(m, nullptr, 10);
  if (v == -1) return Want::ZeroCopy;
  if (v == 0) return Want::NotZeroCopy;
  if (v > 0) return (long long)bytes >= v ? Want::ZeroCopy : Want::NotZeroCopy;
  return Want::Any;  // -2: the table's
}

// ---- Arenas: one allocation per rank, optionally registered --------------------------------------

struct Arena {
  std::string name;
  std::vector<DevAlloc> a;        // per local rank, the same size everywhere
  std::vector<void*> handle;      // per local rank; nullptr while not registered
  size_t regOff = 0, regBytes = 0;  // the registered range of each allocation
};

Arena makeArena(Ctx& ctx, const char* name, size_t bytes) {
  Arena A;
  A.name = name;
  for (const LocalRank& lr : ctx.local) {
    A.a.push_back(allocDev(ctx, lr.dev, bytes, Alloc::Malloc, lr.stream));
    A.handle.push_back(nullptr);
  }
  return A;
}

void freeArena(Ctx& ctx, Arena& A) {
  for (DevAlloc& d : A.a) freeDev(ctx, d);
}

// The end of a case: destroys the comms, waits until every rank has (so no peer maps our arenas
// any more), then frees the arenas. Collective.
void destroyCommsAndFree(Ctx& ctx, std::vector<yaliComm_t>& comms, const char* label,
                         std::initializer_list<Arena*> arenas) {
  ctx.destroyComms(comms, label);
  ctx.world->barrier();
  for (Arena* A : arenas) freeArena(ctx, *A);
}

// Collective. Registers [off, off + bytes) of each rank's allocation (bytes 0: to the end) with
// the rank's comm, in a loop over the local comms (single-process mode: one thread, every comm).
// Fatal on failure: a rank that did not register would leave the others' zero-copy calls waiting.
void registerArena(Ctx& ctx, const std::vector<yaliComm_t>& comms, Arena& A, size_t off = 0,
                   size_t bytes = 0) {
  if (bytes == 0) bytes = A.a[0].bytes - off;
  watchdogStep("yaliCommRegister %s (%zu bytes at +%zu)", A.name.c_str(), bytes, off);
  for (size_t i = 0; i < comms.size(); ++i) {
    void* h = nullptr;
    yaliResult_t r = yaliCommRegister(comms[i], A.a[i].p + off, bytes, &h);
    if (r != yaliSuccess) {
      ctx.fatal("yaliCommRegister(%s, %zu bytes at +%zu) (rank %d) returned %d (%s): %s",
                A.name.c_str(), bytes, off, ctx.local[i].rank, (int)r, yaliGetErrorString(r),
                yaliGetLastError(nullptr));
    }
    if (h == nullptr) {
      ctx.fatal("yaliCommRegister(%s) (rank %d) returned success with a NULL handle", A.name.c_str(),
                ctx.local[i].rank);
    }
    A.handle[i] = h;
  }
  A.regOff = off;
  A.regBytes = bytes;
}

// Collective. Fatal on failure (peers would wait in theirs).
void deregisterArena(Ctx& ctx, const std::vector<yaliComm_t>& comms, Arena& A) {
  watchdogStep("yaliCommDeregister %s", A.name.c_str());
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliResult_t r = yaliCommDeregister(comms[i], A.handle[i]);
    if (r != yaliSuccess) {
      ctx.fatal("yaliCommDeregister(%s) (rank %d) returned %d (%s): %s", A.name.c_str(),
                ctx.local[i].rank, (int)r, yaliGetErrorString(r), yaliGetLastError(nullptr));
    }
    A.handle[i] = nullptr;
  }
  A.regOff = A.regBytes = 0;
}

// Hands out regions of an arena, each after a guard gap of kGuardBytes, at `skew` bytes past a
// 4 KiB-aligned start. The same sequence of take() gives the same offsets on every rank.
class Carver {
 public:
  size_t take(size_t bytes, size_t skew = 0) {
    size_t off = at_ + kGuardBytes + skew;
    at_ = (off + bytes + 4095) / 4096 * 4096;
    return off;
  }
  size_t size() const { return at_ + kGuardBytes; }

 private:
  size_t at_ = 0;
};

// ---- One allreduce at given places ---------------------------------------------------------------

struct Call {
  size_t count;
  yaliDataType_t dt;
  yaliRedOp_t op;
  size_t bytes() const { return count * dtypeSize(dt); }
};

std::string callName(const Call& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %s count=%zu", dtypeName(c.dt), opName(c.op), c.count);
  return buf;
}

struct Placed {
  char* send;
  char* recv;
};
using Placement = std::vector<Placed>;  // per local rank

// send at sendOff in S, recv at recvOff in R (byte offsets from each allocation's start).
Placement place(const Arena& S, size_t sendOff, const Arena& R, size_t recvOff) {
  Placement p;
  for (size_t i = 0; i < S.a.size(); ++i) p.push_back({S.a[i].p + sendOff, R.a[i].p + recvOff});
  return p;
}
Placement placeInPlace(const Arena& A, size_t off) { return place(A, off, A, off); }

uint64_t infoHash(const yaliAlgoInfo_t& info) {
  uint64_t h = mix64((uint64_t)info.ctas * 1000003u + (uint64_t)info.threads);
  h = mix64(h ^ (uint64_t)info.chunkBytes);
  for (size_t k = 0; k < sizeof info.algorithm && info.algorithm[k]; ++k) {
    h = mix64(h ^ (unsigned char)info.algorithm[k]);
  }
  return h;
}

// yaliAllReduceAlgoInfo with the call's buffers reports `want`, and the same choice on every rank;
// with NULL buffers (the unregistered choice) never twoshot_direct; and a call that does not go
// zero-copy takes the unregistered choice (the output's registration changes nothing else).
// Collective.
bool checkAlgo(Ctx& ctx, const std::vector<yaliComm_t>& comms, const Placement& at, const Call& c,
               Want want, const std::string& label) {
  bool ok = true;
  std::vector<uint64_t> hashes(comms.size(), 0);
  for (size_t i = 0; i < comms.size(); ++i) {
    const int rank = ctx.local[i].rank;
    yaliAlgoInfo_t info;
    std::memset(&info, 0, sizeof info);
    yaliResult_t r = yaliAllReduceAlgoInfo(comms[i], at[i].send, at[i].recv, c.count, c.dt, c.op, &info);
    if (r != yaliSuccess) {
      ctx.fail("%s: yaliAllReduceAlgoInfo with the call's buffers (rank %d) returned %d (%s): %s",
               label.c_str(), rank, (int)r, yaliGetErrorString(r), yaliGetLastError(nullptr));
      ok = false;
      continue;
    }
    info.algorithm[sizeof info.algorithm - 1] = '\0';
    const bool zeroCopy = std::strcmp(info.algorithm, kZeroCopy) == 0;
    if ((want == Want::ZeroCopy && !zeroCopy) || (want == Want::NotZeroCopy && zeroCopy)) {
      ctx.fail("%s: yaliAllReduceAlgoInfo with the call's buffers (rank %d) reports \"%s\"; expected "
               "%s (YALI_TWOSHOT_DIRECT_MIN_BYTES=%s, YALI_ALGO=%s)",
               label.c_str(), rank, info.algorithm, wantName(want),
               envOr("YALI_TWOSHOT_DIRECT_MIN_BYTES", "(unset)"), envOr("YALI_ALGO", "(unset)"));
      ok = false;
    }
    hashes[i] = infoHash(info);
    yaliAlgoInfo_t plain;
    std::memset(&plain, 0, sizeof plain);
    r = yaliAllReduceAlgoInfo(comms[i], nullptr, nullptr, c.count, c.dt, c.op, &plain);
    plain.algorithm[sizeof plain.algorithm - 1] = '\0';
    if (r != yaliSuccess || std::strcmp(plain.algorithm, kZeroCopy) == 0) {
      ctx.fail("%s: yaliAllReduceAlgoInfo with NULL buffers (rank %d) returned %d, algorithm \"%s\"; "
               "expected success and not %s",
               label.c_str(), rank, (int)r, plain.algorithm, kZeroCopy);
      ok = false;
    } else if (!zeroCopy && std::strcmp(plain.algorithm, info.algorithm) != 0) {
      ctx.fail("%s: yaliAllReduceAlgoInfo (rank %d) reports \"%s\" with the call's buffers but \"%s\" "
               "with NULL buffers: a call that is not zero-copy must take the unregistered choice",
               label.c_str(), rank, info.algorithm, plain.algorithm);
      ok = false;
    }
  }
  ok &= checkIdentity(ctx, hashes, label + ": yaliAllReduceAlgoInfo (the same choice on every rank)");
  return ok;
}

// Output against the reference, input unchanged (out of place, when checkInput), guard bytes of
// every arena outside `slices` (default: this call's send and recv) intact, identical outputs.
// Collective.
bool verifyPlaced(Ctx& ctx, const std::vector<yaliComm_t>& comms, const Placement& at,
                  const std::vector<const Arena*>& arenas, const Call& c, uint64_t seed,
                  const std::string& label, bool checkInput = true,
                  const std::vector<std::vector<std::pair<const void*, size_t>>>* slices = nullptr) {
  bool ok = true;
  std::vector<uint64_t> hashes(comms.size(), 0);
  for (size_t i = 0; i < comms.size(); ++i) {
    const bool inplace = at[i].send == at[i].recv;
    ok &= checkOutput(ctx, (int)i, comms[i], ctx.local[i].stream, at[i].recv, c.count, c.dt, c.op,
                      seed, inplace || !checkInput ? nullptr : at[i].send, label, &hashes[i]);
    std::vector<std::pair<const void*, size_t>> mine = {{at[i].send, c.bytes()},
                                                        {at[i].recv, c.bytes()}};
    for (const Arena* A : arenas) {
      ok &= checkGuard(ctx, A->a[i], slices ? (*slices)[i] : mine, label + " (" + A->name + ")");
    }
  }
  watchdogStep("%s: comparing output hashes across ranks", label.c_str());
  ok &= checkIdentity(ctx, hashes, label);
  return ok;
}

// Guard pattern over `arenas`, the input at send, poison at recv (out of place). Asynchronous.
void preparePlaced(Ctx& ctx, const Placement& at, const std::vector<const Arena*>& arenas,
                   const Call& c, uint64_t seed) {
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    const LocalRank& lr = ctx.local[i];
    for (const Arena* A : arenas) fillGuard(ctx, A->a[i], lr.stream);
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    CUDA_OK(ctx, launchGenerate(at[i].send, c.count, c.dt, c.op, lr.rank, seed, nullptr, lr.stream));
    if (at[i].recv != at[i].send && c.count > 0) {
      CUDA_OK(ctx, cudaMemsetAsync(at[i].recv, kPoisonByte, c.bytes(), lr.stream));
    }
  }
}

bool issuePlaced(Ctx& ctx, const std::vector<yaliComm_t>& comms, const Placement& at, const Call& c,
                 const std::string& label) {
  bool ok = true;
  watchdogStep("yaliAllReduce %s", label.c_str());
  for (size_t i = 0; i < comms.size(); ++i) {
    yaliResult_t r = yaliAllReduce(at[i].send, at[i].recv, c.count, c.dt, c.op, comms[i],
                                   ctx.local[i].stream);
    ok &= checkIssued(ctx, r, ctx.local[i].rank, comms[i], label);
  }
  return ok;
}

// Algorithm check, prepare, issue, verify. Collective.
bool placedAllReduce(Ctx& ctx, const std::vector<yaliComm_t>& comms, const Placement& at,
                     const std::vector<const Arena*>& arenas, const Call& c, Want want,
                     const std::string& where) {
  const std::string label = callName(c) + " " + where;
  bool ok = checkAlgo(ctx, comms, at, c, want, label);
  const uint64_t seed = ctx.nextSeed();
  preparePlaced(ctx, at, arenas, c, seed);
  ok &= issuePlaced(ctx, comms, at, c, label);
  ok &= verifyPlaced(ctx, comms, at, arenas, c, seed, label);
  return ok;
}

// ---- Sweeps over counts, dtypes, ops and placements ----------------------------------------------

// How a call's buffers lie in the registered arenas A and B.
struct RegLayout {
  const char* name;
  size_t sendSkew, recvSkew;  // elements past a 4 KiB-aligned start
  bool inplace;
  bool recvInB;  // recv in the second registration
};

const RegLayout kLayouts[] = {
    {"out-of-place, aligned", 0, 0, false, false},
    {"out-of-place, send +1 recv +3 elements", 1, 3, false, false},
    {"in-place, aligned", 0, 0, true, false},
    {"in-place, +3 elements", 3, 3, true, false},
    {"send in A, recv +5 elements in B (second registration)", 0, 5, false, true},
};
constexpr size_t kMaxSkew = 5;

// Bytes of A and B that any layout of `maxCount` elements (any dtype) needs.
size_t arenaABytes(size_t maxCount) {
  Carver cv;
  cv.take(maxCount * 4, kMaxSkew * 4);
  cv.take(maxCount * 4, kMaxSkew * 4);
  return cv.size();
}
size_t arenaBBytes(size_t maxCount) {
  Carver cv;
  cv.take(maxCount * 4, kMaxSkew * 4);
  return cv.size();
}

Placement placeLayout(const Arena& A, const Arena& B, const RegLayout& L, const Call& c) {
  const size_t es = dtypeSize(c.dt);
  Carver cv;
  size_t s = cv.take(c.bytes(), L.sendSkew * es);
  if (L.inplace) return placeInPlace(A, s);
  if (L.recvInB) {
    Carver cb;
    return place(A, s, B, cb.take(c.bytes(), L.recvSkew * es));
  }
  return place(A, s, A, cv.take(c.bytes(), L.recvSkew * es));
}

// Every call of counts x dtypes x ops x layouts, in registered arenas A and B.
void registeredSweep(Ctx& ctx, const char* label, const std::vector<size_t>& counts,
                     const std::vector<yaliDataType_t>& dtypes, const std::vector<yaliRedOp_t>& ops,
                     const std::vector<int>& layouts) {
  std::vector<yaliComm_t> comms = ctx.createComms(label);
  const size_t maxCount = *std::max_element(counts.begin(), counts.end());
  Arena A = makeArena(ctx, "A", arenaABytes(maxCount));
  Arena B = makeArena(ctx, "B", arenaBBytes(maxCount));
  registerArena(ctx, comms, A);
  registerArena(ctx, comms, B);
  for (size_t count : counts) {
    for (int li : layouts) {
      const RegLayout& L = kLayouts[li];
      for (yaliDataType_t dt : dtypes) {
        for (yaliRedOp_t op : ops) {
          Call c{count, dt, op};
          placedAllReduce(ctx, comms, placeLayout(A, B, L, c), {&A, &B}, c, registeredWant(c.bytes()),
                          std::string("registered, ") + L.name);
        }
      }
    }
  }
  deregisterArena(ctx, comms, B);
  deregisterArena(ctx, comms, A);
  destroyCommsAndFree(ctx, comms, label, {&A, &B});
}

const std::vector<yaliDataType_t> kAllDtypes(std::begin(kDtypes), std::end(kDtypes));
const std::vector<yaliRedOp_t> kAllOps(std::begin(kOps), std::end(kOps));

void caseRegCountsSmall(Ctx& ctx) {
  std::vector<size_t> counts = {0, 1, 2, 3, 7, 31, 127, 1023, 1024, 4093};
  if (ctx.quick()) counts = {0, 1, 3, 31, 1024, 4093};
  registeredSweep(ctx, "registered_small", counts, kAllDtypes, kAllOps, {0, 1, 2, 3, 4});
}

void caseRegCountsMedium(Ctx& ctx) {
  std::vector<size_t> counts = {65537, 262147, 1048573};
  std::vector<int> layouts = {0, 1, 2, 3, 4};
  if (ctx.quick()) {
    counts = {65537, 1048573};
    layouts = {1, 3};
  }
  registeredSweep(ctx, "registered_medium", counts, kAllDtypes, kAllOps, layouts);
}

void caseRegCountsLarge(Ctx& ctx) {
  // 16 MB of fp32 every time; 64 MB (16777259 fp32) without --quick.
  std::vector<yaliComm_t> comms = ctx.createComms("registered_large");
  const size_t big = ctx.quick() ? 4194301 : 16777259;
  Arena A = makeArena(ctx, "A", arenaABytes(big));
  Arena B = makeArena(ctx, "B", arenaBBytes(big));
  registerArena(ctx, comms, A);
  registerArena(ctx, comms, B);
  struct One {
    Call c;
    int layout;
  };
  std::vector<One> calls = {{{4194301, yaliFloat32, yaliSum}, 1},
                            {{4194301, yaliBfloat16, yaliSum}, 3},
                            {{4194301, yaliFloat16, yaliMax}, 4},
                            {{4194301, yaliBfloat16, yaliAvg}, 0}};
  if (ctx.quick()) {
    calls.resize(2);
  } else {
    calls.push_back({{16777259, yaliFloat32, yaliSum}, 1});
    calls.push_back({{16777259, yaliBfloat16, yaliSum}, 3});
    calls.push_back({{16777259, yaliFloat16, yaliProd}, 4});
  }
  for (const One& o : calls) {
    const RegLayout& L = kLayouts[o.layout];
    placedAllReduce(ctx, comms, placeLayout(A, B, L, o.c), {&A, &B}, o.c,
                    registeredWant(o.c.bytes()), std::string("registered, ") + L.name);
  }
  deregisterArena(ctx, comms, A);
  deregisterArena(ctx, comms, B);
  destroyCommsAndFree(ctx, comms, "registered_large", {&A, &B});
}

// ---- Mixed: one buffer registered, the other not -------------------------------------------------

// Only the output's registration counts: the output registered and the input not goes zero-copy
// (where the environment says so); the input registered and the output not never does.
void caseRegMixed(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("registered_mixed");
  const size_t maxCount = ctx.quick() ? 1048573 : 4194301;
  Arena A = makeArena(ctx, "A (registered)", arenaABytes(maxCount));
  Arena U = makeArena(ctx, "U (not registered)", arenaABytes(maxCount));
  registerArena(ctx, comms, A);
  std::vector<Call> calls = {{4093, yaliFloat32, yaliSum}, {65537, yaliBfloat16, yaliAvg},
                             {1048573, yaliFloat32, yaliSum}, {1048573, yaliFloat16, yaliMin}};
  if (!ctx.quick()) calls.push_back({4194301, yaliBfloat16, yaliSum});
  for (const Call& c : calls) {
    const size_t es = dtypeSize(c.dt);
    Carver cv;
    const size_t s = cv.take(c.bytes(), 1 * es);
    const size_t r = cv.take(c.bytes(), 3 * es);
    placedAllReduce(ctx, comms, place(A, s, U, r), {&A, &U}, c, Want::NotZeroCopy,
                    "send registered, recv not");
    placedAllReduce(ctx, comms, place(U, s, A, r), {&A, &U}, c, registeredWant(c.bytes()),
                    "recv registered, send not");
    placedAllReduce(ctx, comms, place(U, s, U, r), {&A, &U}, c, Want::NotZeroCopy,
                    "neither registered");
    placedAllReduce(ctx, comms, placeInPlace(U, s), {&A, &U}, c, Want::NotZeroCopy,
                    "in-place, not registered");
    placedAllReduce(ctx, comms, place(A, s, A, r), {&A, &U}, c, registeredWant(c.bytes()),
                    "both registered");
  }
  deregisterArena(ctx, comms, A);
  destroyCommsAndFree(ctx, comms, "registered_mixed", {&A, &U});
}

// ---- Life cycle: several registrations, deregistration, re-registration, a sub-range ------------

// Two questions about peers' allocations that the process-wide IPC table (src/core/ipc_imports.h)
// keys by CUDA buffer id, which only a GPU answers (multi mode: peers are other processes):
//  - small cudaMallocs, which the driver may carve from one larger block: each one registered on
//    its own must be mapped and written at its own place (two imports of one block would fail
//    with "resource already mapped", a wrong offset would write the neighbour). Two sizes: a few
//    KB, and 512 KB (two 512 KB slabs of one block failed so on 2 H200s, 2026-11-29, before the
//    table keyed blocks);
//  - a peer that frees a registered allocation and gets the same address back from cudaMalloc
//    right away, while this process's mapping of the old one may still wait to close: the new
//    registration must map the new memory, never the old mapping.
// Every call is zero-copy (YALI_TWOSHOT_DIRECT_MIN_BYTES=-1) and checked, guards included.
void caseRegSmallAllocs(Ctx& ctx) {
  EnvScope scope({{"YALI_TWOSHOT_DIRECT_MIN_BYTES", "-1"}, {"YALI_ALGO", nullptr}});
  const char* const label = "registered_small_allocs";
  std::vector<yaliComm_t> comms = ctx.createComms(label);
  const Call c{1021, yaliFloat32, yaliSum};
  const size_t es = dtypeSize(c.dt);
  Carver cv;
  const size_t s = cv.take(c.bytes(), es), r = cv.take(c.bytes(), 3 * es);
  const size_t bytes = arenaABytes(c.count);
  Arena A = makeArena(ctx, "A (small)", bytes);
  Arena B = makeArena(ctx, "B (small, allocated right after A)", bytes);
  registerArena(ctx, comms, A);
  registerArena(ctx, comms, B);
  placedAllReduce(ctx, comms, place(A, s, A, r), {&A, &B}, c, Want::ZeroCopy, "small A, registered");
  placedAllReduce(ctx, comms, place(A, s, B, r), {&A, &B}, c, Want::ZeroCopy, "small B, registered beside A");
  placedAllReduce(ctx, comms, placeInPlace(B, s), {&A, &B}, c, Want::ZeroCopy, "small B in place");
  {
    Arena C = makeArena(ctx, "C (512 KB)", 512u << 10);
    Arena D = makeArena(ctx, "D (512 KB, allocated right after C)", 512u << 10);
    registerArena(ctx, comms, C);
    registerArena(ctx, comms, D);
    placedAllReduce(ctx, comms, place(C, s, D, r), {&C, &D}, c, Want::ZeroCopy, "512 KB C into D, both registered");
    placedAllReduce(ctx, comms, place(D, s, C, r), {&C, &D}, c, Want::ZeroCopy, "512 KB D into C, both registered");
    deregisterArena(ctx, comms, C);
    deregisterArena(ctx, comms, D);
    ctx.world->barrier();  // every rank has stopped using its peers' mappings before any frees
    freeArena(ctx, C);
    freeArena(ctx, D);
  }
  const int rounds = ctx.quick() ? 3 : 10;
  for (int round = 1; round <= rounds; ++round) {
    // No barrier between a rank's free and its new allocation: peers may still hold the old mapping.
    deregisterArena(ctx, comms, A);
    std::vector<char*> before;
    for (const DevAlloc& d : A.a) before.push_back(d.p);
    freeArena(ctx, A);
    A = makeArena(ctx, "A (freed and allocated again)", bytes);
    int sameAddress = 0;
    for (size_t i = 0; i < A.a.size(); ++i) sameAddress += A.a[i].p == before[i] ? 1 : 0;
    registerArena(ctx, comms, A);
    char where[128];
    std::snprintf(where, sizeof where, "round %d of %d: A freed and made again (%d of %zu local ranks at the old address)",
                  round, rounds, sameAddress, A.a.size());
    if (round == 1 || round == rounds) ctx.note("%s", where);
    placedAllReduce(ctx, comms, place(B, s, A, r), {&A, &B}, c, Want::ZeroCopy, where);
    placedAllReduce(ctx, comms, place(A, s, B, r), {&A, &B}, c, Want::ZeroCopy, std::string(where) + ", recv in B");
  }
  deregisterArena(ctx, comms, A);
  deregisterArena(ctx, comms, B);
  destroyCommsAndFree(ctx, comms, label, {&A, &B});
}

void caseRegLifecycle(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("registered_lifecycle");
  const size_t maxCount = 262147;
  Arena A = makeArena(ctx, "A", arenaABytes(maxCount));
  Arena B = makeArena(ctx, "B", arenaABytes(maxCount));
  const Call c1{262147, yaliFloat32, yaliSum}, c2{65537, yaliBfloat16, yaliAvg},
      c3{4093, yaliFloat16, yaliMax};
  auto offs = [](const Call& c, size_t* s, size_t* r) {
    const size_t es = dtypeSize(c.dt);
    Carver cv;
    *s = cv.take(c.bytes(), 1 * es);
    *r = cv.take(c.bytes(), 3 * es);
  };
  size_t s1, r1, s2, r2, s3, r3;
  offs(c1, &s1, &r1);
  offs(c2, &s2, &r2);
  offs(c3, &s3, &r3);
  const std::vector<const Arena*> both = {&A, &B};

  // One registration.
  registerArena(ctx, comms, A);
  placedAllReduce(ctx, comms, place(A, s1, A, r1), both, c1, registeredWant(c1.bytes()), "A registered");
  placedAllReduce(ctx, comms, placeInPlace(A, s2), both, c2, registeredWant(c2.bytes()),
                  "A registered, in-place");
  placedAllReduce(ctx, comms, place(A, s1, B, r1), both, c1, Want::NotZeroCopy,
                  "recv in B, not yet registered");
  placedAllReduce(ctx, comms, place(B, s1, A, r1), both, c1, registeredWant(c1.bytes()),
                  "send in B, not registered; recv in A");
  // A second one: buffers in both registrations.
  registerArena(ctx, comms, B);
  placedAllReduce(ctx, comms, place(A, s1, B, r1), both, c1, registeredWant(c1.bytes()),
                  "send in A, recv in B");
  placedAllReduce(ctx, comms, place(B, s2, A, r2), both, c2, registeredWant(c2.bytes()),
                  "send in B, recv in A");
  placedAllReduce(ctx, comms, place(B, s3, B, r3), both, c3, registeredWant(c3.bytes()), "B only");
  // A deregistered: outputs in A take the unregistered path, outputs in B still go zero-copy
  // (wherever the input lies).
  deregisterArena(ctx, comms, A);
  placedAllReduce(ctx, comms, place(A, s1, A, r1), both, c1, Want::NotZeroCopy, "A after deregistering A");
  placedAllReduce(ctx, comms, place(B, s1, A, r1), both, c1, Want::NotZeroCopy,
                  "send in B, recv in A after deregistering A");
  placedAllReduce(ctx, comms, place(A, s1, B, r1), both, c1, registeredWant(c1.bytes()),
                  "send in A after deregistering A, recv in B");
  placedAllReduce(ctx, comms, place(B, s1, B, r1), both, c1, registeredWant(c1.bytes()),
                  "B after deregistering A");
  // A again (now the third registration of every rank).
  registerArena(ctx, comms, A);
  placedAllReduce(ctx, comms, place(A, s1, B, r1), both, c1, registeredWant(c1.bytes()),
                  "A registered again, recv in B");
  placedAllReduce(ctx, comms, placeInPlace(A, s3), both, c3, registeredWant(c3.bytes()),
                  "A registered again, in-place");

  // Many calls on the same registrations, every fifth on unregistered memory in between.
  {
    Arena U = makeArena(ctx, "U (not registered)", arenaABytes(maxCount));
    const int iters = ctx.quick() ? 30 : 100;
    watchdogStep("registered_lifecycle: %d calls on the same registrations", iters);
    for (int it = 0; it < iters; ++it) {
      char where[96];
      std::snprintf(where, sizeof where, "many calls, #%d of %d", it + 1, iters);
      if (it % 5 == 4) {
        placedAllReduce(ctx, comms, place(U, s2, U, r2), {&A, &B, &U}, c2, Want::NotZeroCopy,
                        std::string(where) + ", unregistered");
      } else if (it % 2 == 0) {
        placedAllReduce(ctx, comms, place(A, s2, B, r2), {&A, &B, &U}, c2,
                        registeredWant(c2.bytes()), where);
      } else {
        placedAllReduce(ctx, comms, placeInPlace(B, s3), {&A, &B, &U}, c3,
                        registeredWant(c3.bytes()), std::string(where) + ", in-place");
      }
    }
    ctx.world->barrier();
    freeArena(ctx, U);
  }

  // A registration of a sub-range of an allocation: [64 KiB, size - 64 KiB) of C.
  {
    const size_t margin = 64 << 10;
    Carver cv;
    const Call c{65537, yaliFloat32, yaliSum};
    const size_t inS = margin + cv.take(c.bytes(), 4);   // inside the registration
    const size_t inR = margin + cv.take(c.bytes(), 12);
    const size_t regBytes = cv.size();
    Arena C = makeArena(ctx, "C (sub-range registered)", regBytes + 2 * margin);
    registerArena(ctx, comms, C, margin, regBytes);
    const std::vector<const Arena*> arenas = {&A, &B, &C};
    placedAllReduce(ctx, comms, place(C, inS, C, inR), arenas, c, registeredWant(c.bytes()),
                    "inside a registered sub-range");
    placedAllReduce(ctx, comms, placeInPlace(C, inR), arenas, c, registeredWant(c.bytes()),
                    "inside a registered sub-range, in-place");
    // Straddling the registration's end (last 1 KiB of the call outside it).
    const Call s{4093, yaliFloat32, yaliSum};
    const size_t endOff = margin + regBytes;
    // Only the output must lie inside: an input straddling either end does not matter.
    placedAllReduce(ctx, comms, place(C, inS, C, endOff - s.bytes() + 1024), arenas, s,
                    Want::NotZeroCopy, "recv straddling the end of the registration");
    placedAllReduce(ctx, comms, place(C, endOff - s.bytes() + 1024, C, inS), arenas, s,
                    registeredWant(s.bytes()), "send straddling the end of the registration, recv inside");
    // Straddling its start.
    placedAllReduce(ctx, comms, place(C, inR, C, margin - 1024), arenas, s, Want::NotZeroCopy,
                    "recv straddling the start of the registration");
    placedAllReduce(ctx, comms, place(C, margin - 1024, C, inR), arenas, s, registeredWant(s.bytes()),
                    "send straddling the start of the registration, recv inside");
    // Entirely before it.
    placedAllReduce(ctx, comms, placeInPlace(C, margin - s.bytes() - 64), arenas, s, Want::NotZeroCopy,
                    "in-place, before the registration");
    // Deregistered in another order than registered: B, C, A.
    deregisterArena(ctx, comms, B);
    deregisterArena(ctx, comms, C);
    placedAllReduce(ctx, comms, place(C, inS, C, inR), arenas, c, Want::NotZeroCopy,
                    "sub-range after deregistering it");
    ctx.world->barrier();
    freeArena(ctx, C);
  }
  deregisterArena(ctx, comms, A);
  placedAllReduce(ctx, comms, place(A, s1, B, r1), both, c1, Want::NotZeroCopy,
                  "after deregistering everything");
  destroyCommsAndFree(ctx, comms, "registered_lifecycle", {&A, &B});
}

// ---- Two communicators sharing a registered buffer -----------------------------------------------

void caseRegTwoComms(Ctx& ctx) {
  std::vector<yaliComm_t> a = ctx.createComms("registered_two_comms A");
  std::vector<yaliComm_t> b = ctx.createComms("registered_two_comms B");
  const Call c{262147, yaliFloat32, yaliSum};
  Carver cv;
  const size_t sa = cv.take(c.bytes(), 4), ra = cv.take(c.bytes(), 12);
  const size_t sb = cv.take(c.bytes(), 8), rb = cv.take(c.bytes(), 0);
  Arena X = makeArena(ctx, "X (registered with A and B)", cv.size());
  Arena Y = makeArena(ctx, "Y (registered with B)", cv.size());
  registerArena(ctx, a, X);
  const std::vector<void*> xOnA = X.handle;
  registerArena(ctx, b, X);
  const std::vector<void*> xOnB = X.handle;
  registerArena(ctx, b, Y);
  const std::vector<const Arena*> arenas = {&X, &Y};
  const Want w = registeredWant(c.bytes());
  placedAllReduce(ctx, a, place(X, sa, X, ra), arenas, c, w, "comm A, X");
  placedAllReduce(ctx, b, place(X, sb, X, rb), arenas, c, w, "comm B, X");
  placedAllReduce(ctx, b, place(X, sb, Y, rb), arenas, c, w, "comm B, send in X, recv in Y");
  placedAllReduce(ctx, a, place(X, sa, Y, ra), arenas, c, Want::NotZeroCopy,
                  "comm A, recv in Y (registered with B only)");
  placedAllReduce(ctx, a, place(Y, sa, X, ra), arenas, c, w,
                  "comm A, send in Y (registered with B only), recv in X");
  // Both comms in flight on the same streams, on different regions of X.
  {
    const Placement pa = place(X, sa, X, ra), pb = place(X, sb, X, rb);
    const std::string la = callName(c) + " comm A, X, queued with comm B";
    const std::string lb = callName(c) + " comm B, X, queued after comm A";
    const uint64_t seedA = ctx.nextSeed(), seedB = ctx.nextSeed();
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const LocalRank& lr = ctx.local[i];
      fillGuard(ctx, X.a[i], lr.stream);
      fillGuard(ctx, Y.a[i], lr.stream);
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      CUDA_OK(ctx, launchGenerate(pa[i].send, c.count, c.dt, c.op, lr.rank, seedA, nullptr, lr.stream));
      CUDA_OK(ctx, launchGenerate(pb[i].send, c.count, c.dt, c.op, lr.rank, seedB, nullptr, lr.stream));
      CUDA_OK(ctx, cudaMemsetAsync(pa[i].recv, kPoisonByte, c.bytes(), lr.stream));
      CUDA_OK(ctx, cudaMemsetAsync(pb[i].recv, kPoisonByte, c.bytes(), lr.stream));
    }
    issuePlaced(ctx, a, pa, c, la);
    issuePlaced(ctx, b, pb, c, lb);
    std::vector<std::vector<std::pair<const void*, size_t>>> slices(ctx.local.size());
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      slices[i] = {{pa[i].send, c.bytes()}, {pa[i].recv, c.bytes()}, {pb[i].send, c.bytes()},
                   {pb[i].recv, c.bytes()}};
    }
    verifyPlaced(ctx, a, pa, arenas, c, seedA, la, true, &slices);
    verifyPlaced(ctx, b, pb, arenas, c, seedB, lb, true, &slices);
  }
  // X deregistered from A only: B still goes zero-copy on it.
  X.handle = xOnA;
  deregisterArena(ctx, a, X);
  placedAllReduce(ctx, a, place(X, sa, X, ra), arenas, c, Want::NotZeroCopy,
                  "comm A, X after deregistering it from A");
  placedAllReduce(ctx, b, place(X, sb, X, rb), arenas, c, w, "comm B, X after deregistering it from A");
  ctx.destroyComms(a, "registered_two_comms A");
  placedAllReduce(ctx, b, place(X, sb, Y, rb), arenas, c, w, "comm B, X and Y, after A was destroyed");
  X.handle = xOnB;
  deregisterArena(ctx, b, X);
  deregisterArena(ctx, b, Y);
  destroyCommsAndFree(ctx, b, "registered_two_comms B", {&X, &Y});
}

// ---- Back to back: many calls without a host sync ------------------------------------------------

// kCalls allreduces without a host synchronization, all reading one registered send region that
// the generator rewrites before each call (so a rank must not leave a call while a peer still
// reads its input), each writing its own output: two of three in the registered arena, every third
// in unregistered memory (the algorithm changes from call to call).
void regBackToBack(Ctx& ctx, const std::vector<yaliComm_t>& comms, yaliDataType_t dt, yaliRedOp_t op) {
  const int kCalls = ctx.quick() ? 20 : 50;
  const size_t cycle[] = {1023, 65537, 4093, 262147, 1048573, 7, 16384};
  const size_t ncycle = sizeof cycle / sizeof cycle[0];
  const size_t es = dtypeSize(dt);
  const size_t maxCount = *std::max_element(cycle, cycle + ncycle);
  std::vector<size_t> counts(kCalls), outOff(kCalls);
  std::vector<bool> inU(kCalls);
  std::vector<uint64_t> seeds(kCalls);
  Carver cs, cu;
  const size_t sendOff = cs.take(maxCount * es, es);
  for (int k = 0; k < kCalls; ++k) {
    counts[k] = cycle[k % ncycle];
    seeds[k] = ctx.nextSeed();
    inU[k] = k % 3 == 2;
    outOff[k] = (inU[k] ? cu : cs).take(counts[k] * es, (size_t)(k % 4) * es);
  }
  Arena S = makeArena(ctx, "S (registered)", cs.size());
  Arena U = makeArena(ctx, "U (not registered)", cu.size());
  registerArena(ctx, comms, S);
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    const LocalRank& lr = ctx.local[i];
    fillGuard(ctx, S.a[i], lr.stream);
    fillGuard(ctx, U.a[i], lr.stream);
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    for (int k = 0; k < kCalls; ++k) {
      char* out = (inU[k] ? U : S).a[i].p + outOff[k];
      CUDA_OK(ctx, cudaMemsetAsync(out, kPoisonByte, counts[k] * es, lr.stream));
    }
  }
  syncAll(ctx);
  char label[128];
  std::snprintf(label, sizeof label, "registered back-to-back %s %s", dtypeName(dt), opName(op));
  // The algorithm each call must take.
  for (int k = 0; k < kCalls && k < (int)ncycle * 2; ++k) {
    Call c{counts[k], dt, op};
    char what[256];
    std::snprintf(what, sizeof what, "%s call %d (count %zu%s)", label, k, counts[k],
                  inU[k] ? ", output not registered" : "");
    checkAlgo(ctx, comms, place(S, sendOff, inU[k] ? U : S, outOff[k]), c,
              inU[k] ? Want::NotZeroCopy : registeredWant(c.bytes()), what);
  }
  watchdogStep("%s: issuing %d allreduces without host synchronization", label, kCalls);
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const LocalRank& lr = ctx.local[i];
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      CUDA_OK(ctx, launchGenerate(S.a[i].p + sendOff, counts[k], dt, op, lr.rank, seeds[k], nullptr,
                                  lr.stream));
    }
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      char* out = (inU[k] ? U : S).a[i].p + outOff[k];
      yaliResult_t r = yaliAllReduce(S.a[i].p + sendOff, out, counts[k], dt, op, comms[i],
                                     ctx.local[i].stream);
      char what[256];
      std::snprintf(what, sizeof what, "%s call %d (count %zu)", label, k, counts[k]);
      checkIssued(ctx, r, ctx.local[i].rank, comms[i], what);
    }
  }
  for (int k = 0; k < kCalls; ++k) {
    char what[256];
    std::snprintf(what, sizeof what, "%s call %d of %d (count %zu%s)", label, k, kCalls, counts[k],
                  inU[k] ? ", output not registered" : "");
    std::vector<uint64_t> hashes(ctx.local.size(), 0);
    for (size_t i = 0; i < ctx.local.size(); ++i) {
      const char* out = (inU[k] ? U : S).a[i].p + outOff[k];
      const void* in = k == kCalls - 1 ? S.a[i].p + sendOff : nullptr;
      checkOutput(ctx, (int)i, comms[i], ctx.local[i].stream, out, counts[k], dt, op, seeds[k], in,
                  what, &hashes[i]);
    }
    checkIdentity(ctx, hashes, what);
  }
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    std::vector<std::pair<const void*, size_t>> slices = {{S.a[i].p + sendOff, maxCount * es}};
    for (int k = 0; k < kCalls; ++k) {
      slices.push_back({(inU[k] ? U : S).a[i].p + outOff[k], counts[k] * es});
    }
    checkGuard(ctx, S.a[i], slices, std::string(label) + " (S)");
    checkGuard(ctx, U.a[i], slices, std::string(label) + " (U)");
  }
  deregisterArena(ctx, comms, S);
  ctx.world->barrier();
  freeArena(ctx, S);
  freeArena(ctx, U);
}

void caseRegBackToBack(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("registered_back_to_back");
  regBackToBack(ctx, comms, yaliFloat32, yaliSum);
  regBackToBack(ctx, comms, yaliBfloat16, yaliSum);
  if (!ctx.quick()) regBackToBack(ctx, comms, yaliFloat16, yaliMax);
  ctx.destroyComms(comms, "registered_back_to_back");
}

// ---- CUDA graphs on registered buffers -----------------------------------------------------------

void caseRegGraphs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("registered_graphs");
  // Five allreduces captured together, each after its generator and poisoning: about 4 KB out of
  // place at odd offsets, 1 MB in place, 16 MB (1 MB with --quick) from A into the second
  // registration B, one whose output is not registered (never zero-copy) and one whose input is
  // not (its output in B: zero-copy where the environment says so) in the same graph.
  struct G {
    Call c;
    const char* where;
    int sendArena, recvArena;  // 0 A, 1 B, 2 U (not registered)
    size_t sendOff, recvOff;
  };
  std::vector<G> gs = {
      {{1024, yaliFloat32, yaliSum}, "A, send +1 recv +3 elements", 0, 0, 0, 0},
      {{524288, yaliBfloat16, yaliAvg}, "A, in-place +1 element", 0, 0, 0, 0},
      {{ctx.quick() ? (size_t)262147 : (size_t)4194301, yaliFloat32, yaliSum}, "send in A, recv in B",
       0, 1, 0, 0},
      {{65537, yaliFloat16, yaliMax}, "send in A, recv not registered", 0, 2, 0, 0},
      {{131071, yaliFloat32, yaliMin}, "send not registered, recv in B", 2, 1, 0, 0},
  };
  Carver ca, cb, cu;
  gs[0].sendOff = ca.take(gs[0].c.bytes(), 4);
  gs[0].recvOff = ca.take(gs[0].c.bytes(), 12);
  gs[1].sendOff = gs[1].recvOff = ca.take(gs[1].c.bytes(), 2);
  gs[2].sendOff = ca.take(gs[2].c.bytes(), 0);
  gs[2].recvOff = cb.take(gs[2].c.bytes(), 4);
  gs[3].sendOff = ca.take(gs[3].c.bytes(), 6);
  gs[3].recvOff = cu.take(gs[3].c.bytes(), 2);
  gs[4].sendOff = cu.take(gs[4].c.bytes(), 8);
  gs[4].recvOff = cb.take(gs[4].c.bytes(), 12);
  Arena A = makeArena(ctx, "A", ca.size());
  Arena B = makeArena(ctx, "B", cb.size());
  Arena U = makeArena(ctx, "U (not registered)", cu.size());
  Arena* arenaOf[3] = {&A, &B, &U};
  const std::vector<const Arena*> arenas = {&A, &B, &U};
  registerArena(ctx, comms, A);
  registerArena(ctx, comms, B);
  auto placementOf = [&](const G& g) {
    return place(*arenaOf[g.sendArena], g.sendOff, *arenaOf[g.recvArena], g.recvOff);
  };
  for (const G& g : gs) {
    checkAlgo(ctx, comms, placementOf(g), g.c,
              g.recvArena == 2 ? Want::NotZeroCopy : registeredWant(g.c.bytes()),
              "graph: " + callName(g.c) + " " + g.where);
  }
  const size_t nl = ctx.local.size();
  std::vector<std::vector<std::pair<const void*, size_t>>> slices(nl);
  for (size_t i = 0; i < nl; ++i) {
    for (const G& g : gs) {
      Placement p = placementOf(g);
      slices[i].push_back({p[i].send, g.c.bytes()});
      slices[i].push_back({p[i].recv, g.c.bytes()});
    }
  }
  const int kReplays = ctx.quick() ? 5 : 20;
  for (size_t i = 0; i < nl; ++i) {
    CUDA_OK(ctx, cudaSetDevice(ctx.local[i].dev));
    for (const Arena* ar : arenas) fillGuard(ctx, ar->a[i], ctx.local[i].stream);
  }
  syncAll(ctx);

  {
    ReplayableGraphs graphs(ctx);
    watchdogStep("registered graphs: capturing");
    bool issued = true;
    graphs.beginCapture();
    for (size_t k = 0; k < gs.size(); ++k) {
      const G& g = gs[k];
      Placement p = placementOf(g);
      for (size_t i = 0; i < nl; ++i) {
        const LocalRank& lr = ctx.local[i];
        CUDA_OK(ctx, cudaSetDevice(lr.dev));
        CUDA_OK(ctx, launchGenerate(p[i].send, g.c.count, g.c.dt, g.c.op, lr.rank, /*salt=*/k + 1,
                                    graphs.seedDev[i], lr.stream));
        if (p[i].recv != p[i].send) {
          CUDA_OK(ctx, cudaMemsetAsync(p[i].recv, kPoisonByte, g.c.bytes(), lr.stream));
        }
      }
      for (size_t i = 0; i < nl; ++i) {
        yaliResult_t r = yaliAllReduce(p[i].send, p[i].recv, g.c.count, g.c.dt, g.c.op, comms[i],
                                       ctx.local[i].stream);
        issued &= checkIssued(ctx, r, ctx.local[i].rank, comms[i],
                              "captured yaliAllReduce " + callName(g.c) + " " + g.where);
      }
    }
    if (graphs.endCapture(issued)) {
      for (int rep = 0; rep < kReplays; ++rep) {
        uint64_t replaySeed = ctx.nextSeed();
        watchdogStep("registered graphs: replay %d of %d", rep + 1, kReplays);
        graphs.replay(replaySeed);
        for (size_t k = 0; k < gs.size(); ++k) {
          const G& g = gs[k];
          char what[192];
          std::snprintf(what, sizeof what, "registered graph replay %d, allreduce %zu (%s %s)", rep,
                        k, callName(g.c).c_str(), g.where);
          // Guards only once per replay (after the last allreduce's check), against every slice.
          const bool last = k + 1 == gs.size();
          verifyPlaced(ctx, comms, placementOf(g), last ? arenas : std::vector<const Arena*>{}, g.c,
                       combineSeed(replaySeed, k + 1), what, true, &slices);
        }
      }
    }
  }  // the graphs are destroyed here
  // Eager calls on the same registered buffers after the graphs are gone.
  for (const G& g : gs) {
    placedAllReduce(ctx, comms, placementOf(g), arenas, g.c,
                    g.recvArena == 2 ? Want::NotZeroCopy : registeredWant(g.c.bytes()),
                    std::string("eager after graphs, ") + g.where);
  }
  deregisterArena(ctx, comms, A);
  deregisterArena(ctx, comms, B);
  destroyCommsAndFree(ctx, comms, "registered_graphs", {&A, &B, &U});
}

// ---- Thresholds: YALI_TWOSHOT_DIRECT_MIN_BYTES and YALI_ALGO -------------------------------------

// Comms made under `env`, A registered, U not. Each registered call runs with its output in A
// (input in A, in place, and input in U) and must report its Want; each unregistered call runs with
// its output in U (input in U, and input in A) and must never go zero-copy.
void thresholdPart(Ctx& ctx, const char* label,
                   const std::vector<std::pair<const char*, const char*>>& env,
                   const std::vector<std::pair<Call, Want>>& registeredCalls,
                   const std::vector<Call>& unregisteredCalls) {
  EnvScope scope(env);
  std::vector<yaliComm_t> comms = ctx.createComms(label);
  size_t maxCount = 1;
  for (const auto& rc : registeredCalls) maxCount = std::max(maxCount, rc.first.count);
  for (const Call& c : unregisteredCalls) maxCount = std::max(maxCount, c.count);
  Arena A = makeArena(ctx, "A", arenaABytes(maxCount));
  Arena U = makeArena(ctx, "U (not registered)", arenaABytes(maxCount));
  registerArena(ctx, comms, A);
  const std::string where = std::string("(") + label + ")";
  for (const auto& rc : registeredCalls) {
    const Call& c = rc.first;
    const size_t es = dtypeSize(c.dt);
    Carver cv;
    const size_t s = cv.take(c.bytes(), es), r = cv.take(c.bytes(), 3 * es);
    placedAllReduce(ctx, comms, place(A, s, A, r), {&A, &U}, c, rc.second, "registered " + where);
    placedAllReduce(ctx, comms, placeInPlace(A, r), {&A, &U}, c, rc.second,
                    "registered, in-place " + where);
    placedAllReduce(ctx, comms, place(U, s, A, r), {&A, &U}, c, rc.second,
                    "recv registered, send not " + where);
  }
  for (const Call& c : unregisteredCalls) {
    const size_t es = dtypeSize(c.dt);
    Carver cv;
    const size_t s = cv.take(c.bytes(), es), r = cv.take(c.bytes(), 3 * es);
    placedAllReduce(ctx, comms, place(U, s, U, r), {&A, &U}, c, Want::NotZeroCopy,
                    "not registered " + where);
    placedAllReduce(ctx, comms, place(A, s, U, r), {&A, &U}, c, Want::NotZeroCopy,
                    "send registered, recv not " + where);
  }
  deregisterArena(ctx, comms, A);
  destroyCommsAndFree(ctx, comms, label, {&A, &U});
}

// Collective: comm creation under `env` must fail with yaliInvalidArgument, the message naming the
// call and `var`. Every process makes the attempt (the same environment everywhere); comms that a
// library which accepted the setting made are aborted.
void expectCreationRefused(Ctx& ctx, const std::vector<std::pair<const char*, const char*>>& env,
                           const char* var, const std::string& what) {
  EnvScope scope(env);
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
  else expectFailure(ctx, label, r, yaliInvalidArgument, call, var);
  if (!ctx.allTrue(r != yaliSuccess)) {
    for (yaliComm_t& c : comms) {
      if (c != nullptr) yaliCommAbort(c);
      c = nullptr;
    }
  }
  ctx.world->barrier();
}

void caseRegThreshold(Ctx& ctx) {
  const Want Z = Want::ZeroCopy, N = Want::NotZeroCopy;
  const char* const kVar = "YALI_TWOSHOT_DIRECT_MIN_BYTES";
  // 0: never.
  thresholdPart(ctx, "YALI_TWOSHOT_DIRECT_MIN_BYTES=0", {{kVar, "0"}, {"YALI_ALGO", nullptr}},
                {{{4093, yaliFloat32, yaliSum}, N}, {{1048573, yaliFloat32, yaliSum}, N},
                 {{4194301, yaliBfloat16, yaliSum}, N}},
                {});
  // 65536 bytes: zero-copy from exactly that size up.
  thresholdPart(ctx, "YALI_TWOSHOT_DIRECT_MIN_BYTES=65536", {{kVar, "65536"}, {"YALI_ALGO", nullptr}},
                {{{16384, yaliFloat32, yaliSum}, Z},
                 {{16383, yaliFloat32, yaliSum}, N},
                 {{32768, yaliBfloat16, yaliAvg}, Z},
                 {{32767, yaliFloat16, yaliMax}, N},
                 {{1048573, yaliFloat32, yaliProd}, Z},
                 {{7, yaliFloat32, yaliMin}, N}},
                {{1048573, yaliFloat32, yaliSum}});
  // -1: every size.
  thresholdPart(ctx, "YALI_TWOSHOT_DIRECT_MIN_BYTES=-1", {{kVar, "-1"}, {"YALI_ALGO", nullptr}},
                {{{1, yaliFloat32, yaliSum}, Z},
                 {{3, yaliFloat16, yaliProd}, Z},
                 {{4093, yaliBfloat16, yaliMin}, Z},
                 {{0, yaliFloat32, yaliSum}, N}},
                {{1, yaliFloat32, yaliSum}, {65537, yaliBfloat16, yaliSum}});
  // YALI_ALGO=twoshot_direct: every call whose output is registered, the automatic choice for the
  // others.
  thresholdPart(ctx, "YALI_ALGO=twoshot_direct", {{"YALI_ALGO", "twoshot_direct"}, {kVar, nullptr}},
                {{{7, yaliFloat32, yaliSum}, Z},
                 {{65537, yaliBfloat16, yaliAvg}, Z},
                 {{1048573, yaliFloat16, yaliSum}, Z}},
                {{7, yaliFloat32, yaliSum}, {1048573, yaliFloat32, yaliSum}});
  // In a list with other collectives' algorithms, over a threshold that says never: the forced
  // name wins.
  thresholdPart(ctx, "YALI_ALGO=allgather_ll,twoshot_direct,scatter_staged, threshold 0",
                {{"YALI_ALGO", "allgather_ll,twoshot_direct,scatter_staged"}, {kVar, "0"}},
                {{{4093, yaliFloat32, yaliSum}, Z}, {{262147, yaliBfloat16, yaliMax}, Z}},
                {{4093, yaliFloat32, yaliSum}});
  // Another AllReduce algorithm forced: never zero-copy, whatever the threshold says.
  thresholdPart(ctx, "YALI_ALGO=twoshot_push, threshold -1", {{"YALI_ALGO", "twoshot_push"}, {kVar, "-1"}},
                {{{4093, yaliFloat32, yaliSum}, N}, {{1048573, yaliFloat32, yaliSum}, N}},
                {});
  // The removed AllReduce algorithm `direct` is no name YALI_ALGO takes, alone or in a list.
  expectCreationRefused(ctx, {{"YALI_ALGO", "direct"}, {kVar, nullptr}}, "YALI_ALGO",
                        "YALI_ALGO=direct (removed)");
  expectCreationRefused(ctx, {{"YALI_ALGO", "allgather_direct,direct"}, {kVar, nullptr}}, "YALI_ALGO",
                        "YALI_ALGO=allgather_direct,direct (removed)");
}

// ---- A registration used by a call waiting in a group ---------------------------------------------

// A zero-copy call queued in an open group launches at yaliGroupEnd through its registration's
// peer mappings, so yaliCommDeregister refuses that handle (yaliInvalidUsage, naming the group)
// until the group has ended; the call's result is right, and the deregistration succeeds after
// the end. (Before, the deregistration dropped the mappings and freed the registration the queued
// call pointed into: a use after free on the host, and a kernel writing through unmapped peer
// memory at yaliGroupEnd.) A call dropped by yaliGroupSimulateEnd gives its use back too.
void caseRegDeregisterInGroup(Ctx& ctx) {
  EnvScope scope({{"YALI_TWOSHOT_DIRECT_MIN_BYTES", "-1"}, {"YALI_ALGO", nullptr}});  // zero-copy at every size
  std::vector<yaliComm_t> comms = ctx.createComms("registered_deregister_in_group");
  const Call c{65537, yaliFloat32, yaliSum};
  Arena A = makeArena(ctx, "A", arenaABytes(c.count));
  Arena U = makeArena(ctx, "U (not registered)", arenaABytes(c.count));
  const std::vector<const Arena*> arenas = {&A, &U};
  Carver cv;
  const size_t s = cv.take(c.bytes(), 4), r = cv.take(c.bytes(), 12);
  const Placement at = place(A, s, A, r);
  registerArena(ctx, comms, A);
  const std::string label = callName(c) + " in a group, A deregistered before the group ends";
  checkAlgo(ctx, comms, at, c, Want::ZeroCopy, label);
  auto deregisterAll = [&](yaliResult_t expected, const char* when) {
    for (size_t i = 0; i < comms.size(); ++i) {
      const yaliResult_t got = yaliCommDeregister(comms[i], A.handle[i]);
      const std::string detail = yaliGetLastError(nullptr);
      if (got != expected)
        ctx.fail("%s: yaliCommDeregister %s (rank %d) returned %d (%s), expected %d (%s): %s", label.c_str(), when,
                 ctx.local[i].rank, (int)got, yaliGetErrorString(got), (int)expected, yaliGetErrorString(expected),
                 detail.c_str());
      else if (expected == yaliInvalidUsage &&
               (detail.find("yaliCommDeregister") == std::string::npos || detail.find("group") == std::string::npos))
        ctx.fail("%s: the refusal does not name yaliCommDeregister and the group: %s", label.c_str(), detail.c_str());
      if (got == yaliSuccess) A.handle[i] = nullptr;
    }
  };
  // Queued, refused, launched, right; then a call dropped by a simulated group end.
  const uint64_t seed = ctx.nextSeed();
  preparePlaced(ctx, at, arenas, c, seed);
  if (yaliGroupStart() != yaliSuccess) ctx.fatal("%s: yaliGroupStart failed", label.c_str());
  issuePlaced(ctx, comms, at, c, label);
  deregisterAll(yaliInvalidUsage, "inside the group");
  const yaliResult_t ended = yaliGroupEnd();
  if (ended != yaliSuccess)
    ctx.fail("%s: yaliGroupEnd returned %d (%s): %s", label.c_str(), (int)ended, yaliGetErrorString(ended),
             yaliGetLastError(nullptr));
  verifyPlaced(ctx, comms, at, arenas, c, seed, label);
  if (yaliGroupStart() != yaliSuccess) ctx.fatal("%s: yaliGroupStart failed", label.c_str());
  issuePlaced(ctx, comms, at, c, label + " (simulated)");
  deregisterAll(yaliInvalidUsage, "inside the simulated group");
  if (yaliGroupSimulateEnd() != yaliSuccess)
    ctx.fail("%s: yaliGroupSimulateEnd failed: %s", label.c_str(), yaliGetLastError(nullptr));
  ctx.world->barrier();
  deregisterAll(yaliSuccess, "after the groups ended");
  placedAllReduce(ctx, comms, at, arenas, c, Want::NotZeroCopy, "after deregistering A");
  destroyCommsAndFree(ctx, comms, "registered_deregister_in_group", {&A, &U});
}

// ---- Argument errors -----------------------------------------------------------------------------

void caseRegBadArgs(Ctx& ctx) {
  std::vector<yaliComm_t> comms = ctx.createComms("registered_bad_args");
  const size_t kBytes = 1 << 20;
  Arena A = makeArena(ctx, "A", kBytes);
  std::vector<char> hostMem(1 << 16);
  void* pinned = nullptr;
  CUDA_OK(ctx, cudaSetDevice(ctx.local[0].dev));
  CUDA_OK(ctx, cudaMallocHost(&pinned, 1 << 16));
  const size_t nl = ctx.local.size();
  auto reg = [&](size_t i, const char* what, const char* arg, yaliResult_t got) {
    std::string w = std::string("yaliCommRegister with ") + what + " (rank " +
                    std::to_string(ctx.local[i].rank) + ")";
    expectFailure(ctx, w, got, yaliInvalidArgument, "yaliCommRegister", arg);
  };
  auto dereg = [&](size_t i, const char* what, yaliResult_t got, yaliResult_t want = yaliInvalidArgument,
                   const char* arg = "handle") {
    std::string w = std::string("yaliCommDeregister with ") + what + " (rank " +
                    std::to_string(ctx.local[i].rank) + ")";
    expectFailure(ctx, w, got, want, "yaliCommDeregister", arg);
  };
  watchdogStep("registered_bad_args: rejected registrations");
  for (size_t i = 0; i < nl; ++i) {
    yaliComm_t c = comms[i];
    void* p = A.a[i].p;
    void* h = nullptr;
    reg(i, "buff NULL", "buff", yaliCommRegister(c, nullptr, 4096, &h));
    reg(i, "size 0", "size", yaliCommRegister(c, p, 0, &h));
    reg(i, "handle NULL", "handle", yaliCommRegister(c, p, 4096, nullptr));
    reg(i, "buff in host memory (malloc)", "buff", yaliCommRegister(c, hostMem.data(), 4096, &h));
    reg(i, "buff in pinned host memory (cudaMallocHost)", "buff", yaliCommRegister(c, pinned, 4096, &h));
    const LocalRank& next = ctx.local[(i + 1) % nl];
    if (ctx.single() && next.dev != ctx.local[i].dev) {  // not where ranks share a GPU
      // Device memory, but of another rank's GPU.
      reg(i, "buff on another GPU", "buff", yaliCommRegister(c, A.a[(i + 1) % nl].p, 4096, &h));
    }
    dereg(i, "handle NULL", yaliCommDeregister(c, nullptr));
    dereg(i, "a handle that is no registration", yaliCommDeregister(c, &hostMem[64]));
  }
  // Rank 0 alone fails two more registrations: a rejected call must not count as one (the k-th
  // registration of every rank must still match).
  for (size_t i = 0; i < nl; ++i) {
    if (ctx.local[i].rank != 0) continue;
    void* h = nullptr;
    reg(i, "buff NULL (rank 0 only)", "buff", yaliCommRegister(comms[i], nullptr, 4096, &h));
    reg(i, "size 0 (rank 0 only)", "size", yaliCommRegister(comms[i], A.a[i].p, 0, &h));
  }
  for (size_t i = 0; i < nl; ++i) {
    yaliResult_t async = yaliInProgress;
    if (yaliCommGetAsyncError(comms[i], &async) != yaliSuccess || async != yaliSuccess) {
      ctx.fail("rejected registrations set the comm's async error to %d (%s)", (int)async,
               yaliGetErrorString(async));
    }
  }
  // Ranks that disagree on the size: refused where the disagreement shows (every rank across
  // processes; in single mode the comms after the first), and the later registrations still pair
  // (the check after registerArena below wants twoshot_direct where the environment demands it:
  // a registration paired with another rank's would fail the call on the device).
  {
    watchdogStep("registered_bad_args: registrations of different sizes");
    std::vector<void*> made(nl, nullptr);
    int refused = 0;
    for (size_t i = 0; i < nl; ++i) {
      const size_t bytes = ctx.local[i].rank == 0 ? 4096 : 8192;
      yaliResult_t r = yaliCommRegister(comms[i], A.a[i].p, bytes, &made[i]);
      if (r == yaliSuccess) continue;
      ++refused;
      made[i] = nullptr;
      expectFailure(ctx, "yaliCommRegister with sizes that differ across ranks (rank " +
                             std::to_string(ctx.local[i].rank) + ")",
                    r, yaliInvalidUsage, "yaliCommRegister", "size");
    }
    if (!ctx.allTrue(refused > 0)) ctx.fail("registrations of different sizes: no rank refused one");
    for (size_t i = 0; i < nl; ++i) {
      if (made[i] != nullptr && yaliCommDeregister(comms[i], made[i]) != yaliSuccess)
        ctx.fail("yaliCommDeregister of the one part of a refused registration: %s",
                 yaliGetLastError(comms[i]));
    }
  }
  // The next registration works and matches across ranks.
  registerArena(ctx, comms, A);
  const Call c{65537, yaliFloat32, yaliSum};
  Carver cv;
  const size_t s = cv.take(c.bytes(), 4), r = cv.take(c.bytes(), 8);
  placedAllReduce(ctx, comms, place(A, s, A, r), {&A}, c, registeredWant(c.bytes()),
                  "registered after rejected calls");

  // A handle of another comm is not a registration of this one.
  std::vector<yaliComm_t> other = ctx.createComms("registered_bad_args (second comm)");
  Arena X = makeArena(ctx, "X (second comm)", 1 << 16);
  registerArena(ctx, other, X);
  for (size_t i = 0; i < nl; ++i) {
    dereg(i, "the handle of another comm's registration", yaliCommDeregister(comms[i], X.handle[i]));
    dereg(i, "the handle of another comm's registration", yaliCommDeregister(other[i], A.handle[i]));
  }
  placedAllReduce(ctx, comms, place(A, s, A, r), {&A}, c, registeredWant(c.bytes()),
                  "registered after rejected deregistrations");
  deregisterArena(ctx, other, X);
  ctx.destroyComms(other, "registered_bad_args (second comm)");

  // Deregistered twice: the second time the handle is no live registration.
  std::vector<void*> stale = A.handle;
  deregisterArena(ctx, comms, A);
  for (size_t i = 0; i < nl; ++i) {
    dereg(i, "a handle already deregistered", yaliCommDeregister(comms[i], stale[i]));
  }
  placedAllReduce(ctx, comms, place(A, s, A, r), {&A}, c, Want::NotZeroCopy, "after deregistering");

  // A destroyed comm: invalid usage, naming the comm, like every other call.
  std::vector<yaliComm_t> dead = comms;
  ctx.destroyComms(comms, "registered_bad_args");
  for (size_t i = 0; i < nl; ++i) {
    void* h = nullptr;
    std::string w = "yaliCommRegister on a destroyed comm (rank " + std::to_string(ctx.local[i].rank) + ")";
    expectFailure(ctx, w, yaliCommRegister(dead[i], A.a[i].p, 4096, &h), yaliInvalidUsage,
                  "yaliCommRegister", "comm");
    dereg(i, "a destroyed comm", yaliCommDeregister(dead[i], stale[i]), yaliInvalidUsage, "comm");
  }
  ctx.world->barrier();
  CUDA_OK(ctx, cudaFreeHost(pinned));
  freeArena(ctx, A);
  freeArena(ctx, X);
}

// ---- Ranks that disagree: the call fails on the device without writing ---------------------------

// Each variant gets fresh comms (the failed one must be aborted): YALI_TWOSHOT_DIRECT_MIN_BYTES=-1
// makes every call whose output is registered zero-copy (twoshot_direct); rank 0 makes a different
// call than the others (its output at another offset in the registration, or in another
// registration; another count, op or dtype). Every rank's stream must come back (no hang, no trap),
// yaliCommGetAsyncError must say yaliInvalidUsage, the outputs must still hold the poison, nothing
// else in the arenas may change, the next call must return yaliInvalidUsage, and yaliCommAbort must
// succeed. Inputs that differ (another offset, unregistered memory) are no mismatch: the last part
// checks that such a call succeeds.
void caseRegMismatch(Ctx& ctx) {
  const int kTimeoutMs = 10000;
  EnvScope env({{"YALI_TWOSHOT_DIRECT_MIN_BYTES", "-1"},
                {"YALI_ALGO", nullptr},
                {"YALI_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str()}});
  enum Kind { kOffset, kRegistration, kCount, kOp, kDtype };
  struct Variant {
    const char* name;
    Kind kind;
  };
  const Variant variants[] = {{"output offsets (rank 0's recv at +256 bytes)", kOffset},
                              {"output registrations (rank 0's recv in B, the others' in A)", kRegistration},
                              {"counts (rank 0 one element fewer)", kCount},
                              {"ops (rank 0 sum, the others max)", kOp},
                              {"dtypes (rank 0 fp16, the others bf16)", kDtype}};
  const size_t count = 65537;
  const size_t shift = 256;
  for (const Variant& v : variants) {
    const std::string label = std::string("mismatched ") + v.name;
    ctx.world->barrier();  // YALI_TIMEOUT_MS also bounds comm init: start together
    std::vector<yaliComm_t> comms = ctx.createComms(label.c_str());
    Carver cv;
    const size_t s0 = cv.take(count * 4 + shift), r0 = cv.take(count * 4 + shift);
    Arena A = makeArena(ctx, "A", cv.size());
    Arena B = makeArena(ctx, "B", cv.size());
    registerArena(ctx, comms, A);
    registerArena(ctx, comms, B);
    const size_t nl = ctx.local.size();
    std::vector<Call> calls(nl);
    Placement at(nl);
    const uint64_t seed = ctx.nextSeed();
    for (size_t i = 0; i < nl; ++i) {
      const bool r0rank = ctx.local[i].rank == 0;
      Call c{count, v.kind == kDtype ? yaliBfloat16 : yaliFloat32, v.kind == kOp ? yaliMax : yaliSum};
      size_t r = r0;
      const Arena* out = &A;
      if (r0rank) {
        if (v.kind == kOffset) r += shift;
        if (v.kind == kRegistration) out = &B;
        if (v.kind == kCount) c.count = count - 1;
        if (v.kind == kOp) c.op = yaliSum;
        if (v.kind == kDtype) c.dt = yaliFloat16;
      }
      calls[i] = c;
      at[i] = {A.a[i].p + s0, out->a[i].p + r};
      yaliAlgoInfo_t info;
      std::memset(&info, 0, sizeof info);
      yaliResult_t ir = yaliAllReduceAlgoInfo(comms[i], at[i].send, at[i].recv, c.count, c.dt, c.op, &info);
      info.algorithm[sizeof info.algorithm - 1] = '\0';
      if (ir != yaliSuccess || std::strcmp(info.algorithm, kZeroCopy) != 0) {
        ctx.fail("%s: yaliAllReduceAlgoInfo (rank %d) returned %d, algorithm \"%s\"; expected %s "
                 "(YALI_TWOSHOT_DIRECT_MIN_BYTES=-1, output registered)",
                 label.c_str(), ctx.local[i].rank, (int)ir, info.algorithm, kZeroCopy);
      }
      const LocalRank& lr = ctx.local[i];
      fillGuard(ctx, A.a[i], lr.stream);
      fillGuard(ctx, B.a[i], lr.stream);
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      CUDA_OK(ctx, launchGenerate(at[i].send, c.count, c.dt, c.op, lr.rank, seed, nullptr, lr.stream));
      CUDA_OK(ctx, cudaMemsetAsync(at[i].recv, kPoisonByte, c.bytes(), lr.stream));
    }
    syncAll(ctx);
    ctx.world->barrier();
    watchdogStep("%s: issuing", label.c_str());
    for (size_t i = 0; i < nl; ++i) {
      const Call& c = calls[i];
      yaliResult_t r = yaliAllReduce(at[i].send, at[i].recv, c.count, c.dt, c.op, comms[i],
                                     ctx.local[i].stream);
      checkIssued(ctx, r, ctx.local[i].rank, comms[i], label + " (the call itself)");
    }
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < nl; ++i) {
      const LocalRank& lr = ctx.local[i];
      const Call& c = calls[i];
      watchdogStep("%s: waiting for rank %d's stream (it must come back, not hang)", label.c_str(),
                   lr.rank);
      CUDA_OK(ctx, cudaSetDevice(lr.dev));
      cudaError_t e = cudaStreamSynchronize(lr.stream);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (lr.rank == 0) ctx.note("%s: rank 0's stream returned after %.0f ms (%s)", label.c_str(), ms,
                                 cudaGetErrorString(e));
      if (e != cudaSuccess) {
        ctx.fail("%s: rank %d: cudaStreamSynchronize returned %s: a mismatch must end the kernel "
                 "cleanly (no trap)", label.c_str(), lr.rank, cudaGetErrorString(e));
        continue;
      }
      yaliResult_t async = yaliSuccess;
      yaliResult_t r = yaliCommGetAsyncError(comms[i], &async);
      if (r != yaliSuccess || async != yaliInvalidUsage) {
        ctx.fail("%s: rank %d: yaliCommGetAsyncError returned %d with asyncError %d (%s); expected "
                 "yaliInvalidUsage; yaliGetLastError(comm)=\"%s\"",
                 label.c_str(), lr.rank, (int)r, (int)async, yaliGetErrorString(async),
                 yaliGetLastError(comms[i]));
      }
      expectPoisoned(ctx, lr.dev, at[i].recv, c.bytes(),
                     label + " (rank " + std::to_string(lr.rank) + "'s output)");
      checkGuard(ctx, A.a[i], {{at[i].send, c.bytes()}, {at[i].recv, c.bytes()}}, label + " (A)");
      checkGuard(ctx, B.a[i], {{at[i].send, c.bytes()}, {at[i].recv, c.bytes()}}, label + " (B)");
      r = yaliAllReduce(at[i].send, at[i].recv, c.count, c.dt, c.op, comms[i], lr.stream);
      expectFailure(ctx, label + ": the next yaliAllReduce (rank " + std::to_string(lr.rank) + ")", r,
                    yaliInvalidUsage, "yaliAllReduce", nullptr);
    }
    ctx.world->barrier();  // every rank has seen its failure before anyone aborts
    watchdogStep("%s: yaliCommAbort on every comm", label.c_str());
    for (size_t i = 0; i < nl; ++i) {
      yaliResult_t r = yaliCommAbort(comms[i]);
      if (r != yaliSuccess) {
        ctx.fail("%s: yaliCommAbort (rank %d) returned %d (%s): %s", label.c_str(), ctx.local[i].rank,
                 (int)r, yaliGetErrorString(r), yaliGetLastError(nullptr));
      }
    }
    ctx.world->barrier();
    freeArena(ctx, A);
    freeArena(ctx, B);
  }
  // The devices are still fine: fresh comms, a fresh registration, a correct zero-copy call.
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms("after the mismatches");
  const Call c{65537, yaliFloat32, yaliSum};
  Carver cv;
  const size_t s = cv.take(c.bytes(), 4), r = cv.take(c.bytes(), 8);
  Arena A = makeArena(ctx, "A", cv.size());
  Arena U = makeArena(ctx, "U (not registered)", cv.size());
  registerArena(ctx, comms, A);
  placedAllReduce(ctx, comms, place(A, s, A, r), {&A, &U}, c, Want::ZeroCopy,
                  "fresh comm after the mismatches");
  // Inputs that differ across ranks are no mismatch (only the output's registration and offset
  // must agree): rank 0 reads from unregistered memory, rank 1 from 16 bytes further into A than
  // the others, every output at the same offset of A.
  Placement differ = place(A, s, A, r);
  for (size_t i = 0; i < ctx.local.size(); ++i) {
    if (ctx.local[i].rank == 0) differ[i].send = U.a[i].p + r;
    if (ctx.local[i].rank == 1) differ[i].send = A.a[i].p + s + 16;
  }
  placedAllReduce(ctx, comms, differ, {&A, &U}, c, Want::ZeroCopy,
                  "inputs at different places on different ranks, outputs at one offset");
  deregisterArena(ctx, comms, A);
  destroyCommsAndFree(ctx, comms, "after the mismatches", {&A, &U});
}

// ---- Some ranks registered, others not: yaliTimeout, no hang -------------------------------------

// Rank 0's output is not registered (its input is), the others' are: rank 0 takes the unregistered
// choice, the others twoshot_direct, and every rank must time out (yaliTimeout), not hang.
void caseRegPartial(Ctx& ctx) {
  const int kTimeoutMs = 2000;
  const double kMarginMs = 5000;
  EnvScope env({{"YALI_TWOSHOT_DIRECT_MIN_BYTES", "-1"},
                {"YALI_ALGO", nullptr},
                {"YALI_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str()}});
  ctx.world->barrier();
  std::vector<yaliComm_t> comms = ctx.createComms("registered_partial (YALI_TIMEOUT_MS=2000)");
  const Call c{65537, yaliFloat32, yaliSum};
  Carver cv;
  const size_t s = cv.take(c.bytes(), 4), r = cv.take(c.bytes(), 8);
  Arena A = makeArena(ctx, "A (registered)", cv.size());
  Arena U = makeArena(ctx, "U (not registered)", cv.size());
  registerArena(ctx, comms, A);
  const size_t nl = ctx.local.size();
  // Rank 0 writes into unregistered memory (reading registered memory does not make up for it),
  // the others into the registration.
  Placement at = place(A, s, A, r);
  for (size_t i = 0; i < nl; ++i) {
    if (ctx.local[i].rank == 0) at[i].recv = U.a[i].p + r;
  }
  const uint64_t seed = ctx.nextSeed();
  preparePlaced(ctx, at, {&A, &U}, c, seed);
  syncAll(ctx);
  ctx.world->barrier();
  issuePlaced(ctx, comms, at, c, "output registered on every rank but rank 0");
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < nl; ++i) {
    const LocalRank& lr = ctx.local[i];
    watchdogStep("registered_partial: waiting for rank %d's stream (must time out, not hang)", lr.rank);
    CUDA_OK(ctx, cudaSetDevice(lr.dev));
    cudaError_t e = cudaStreamSynchronize(lr.stream);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ctx.note("rank %d's stream returned after %.0f ms (%s)", lr.rank, ms, cudaGetErrorString(e));
    if (e != cudaSuccess) {
      ctx.fail("rank %d: cudaStreamSynchronize returned %s: a timed-out wait must end its kernel "
               "cleanly", lr.rank, cudaGetErrorString(e));
      continue;
    }
    if (ms > kTimeoutMs + kMarginMs) {
      ctx.fail("rank %d: the stream returned after %.0f ms, more than YALI_TIMEOUT_MS + %.0f ms",
               lr.rank, ms, kMarginMs);
    }
    yaliResult_t async = yaliSuccess;
    yaliResult_t rr = yaliCommGetAsyncError(comms[i], &async);
    if (rr != yaliSuccess || async != yaliTimeout) {
      ctx.fail("rank %d: yaliCommGetAsyncError returned %d with asyncError %d (%s); expected "
               "yaliTimeout (some ranks' outputs registered, others' not)",
               lr.rank, (int)rr, (int)async, yaliGetErrorString(async));
    }
  }
  ctx.world->barrier();
  for (size_t i = 0; i < nl; ++i) {
    yaliResult_t rr = yaliCommAbort(comms[i]);
    if (rr != yaliSuccess) {
      ctx.fail("yaliCommAbort (rank %d) returned %d (%s): %s", ctx.local[i].rank, (int)rr,
               yaliGetErrorString(rr), yaliGetLastError(nullptr));
    }
  }
  ctx.world->barrier();
  freeArena(ctx, A);
  freeArena(ctx, U);
}

}  // namespace

const std::vector<CaseDef>& registeredCases() {
  static const std::vector<CaseDef> cases = {
      {"registered_small", "registered buffers: counts 0..4093, every dtype x op x placement", 120,
       caseRegCountsSmall},
      {"registered_medium", "registered buffers: counts 65537..1048573, every dtype x op", 180,
       caseRegCountsMedium},
      {"registered_large", "registered buffers: 16 MB and 64 MB", 180, caseRegCountsLarge},
      {"registered_mixed", "only recv registered: zero-copy; only send: not; always correct", 120,
       caseRegMixed},
      {"registered_lifecycle", "two registrations, deregister, re-register, sub-range, many calls",
       180, caseRegLifecycle},
      {"registered_two_comms", "one buffer registered with two comms", 120, caseRegTwoComms},
      {"registered_small_allocs",
       "two small cudaMallocs registered side by side; an allocation freed and made again at once, re-registered",
       120, caseRegSmallAllocs},
      {"registered_back_to_back", "registered input rewritten between calls, no host sync", 120,
       caseRegBackToBack},
      {"registered_graphs", "registered buffers captured in a graph, replays with new data", 180,
       caseRegGraphs},
      {"registered_threshold",
       "YALI_TWOSHOT_DIRECT_MIN_BYTES 0 / 65536 / -1, YALI_ALGO=twoshot_direct, YALI_ALGO=direct refused",
       300,
       caseRegThreshold},
      {"registered_deregister_in_group",
       "yaliCommDeregister refused while a zero-copy call waits in an open group; right after the end", 120,
       caseRegDeregisterInGroup},
      {"registered_bad_args", "yaliCommRegister/Deregister argument errors", 120, caseRegBadArgs},
      {"registered_mismatch", "ranks disagree on a zero-copy call: yaliInvalidUsage, nothing written",
       150, caseRegMismatch},
      {"registered_partial", "rank 0's output unregistered, others' registered: yaliTimeout, no hang", 60,
       caseRegPartial},
  };
  return cases;
}

}  // namespace yt
