// Helpers the point-to-point and AlltoAllv case files share (cases_p2p.cc, cases_alltoallv.cc):
// random choices from a case's seed, send bytes that are never the poison, environment settings
// around comm creation, buffers each alone in its allocation between guard regions, and the checks
// on a call's result and messages. Defined in runs.cc.
//
// Not in runs.h, which every case file includes: cases_collectives.cc and cases_trust.cc define
// their own expectRefused and abortAll (of other behavior; also commErrors, asyncOf, roundUp) in
// unnamed namespaces, and the same names declared in yt would make their calls ambiguous (for the
// ones taking a Ctx, argument-dependent lookup finds both).
#ifndef YALI_TESTS_GPU_CASE_HELPERS_H_
#define YALI_TESTS_GPU_CASE_HELPERS_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runs.h"
#include "suite.h"
#include "text_helpers.h"

namespace yt {

using Bytes = std::vector<unsigned char>;

inline size_t roundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }

// Random choices from one of the case's seeds: the same sequence on every process.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  size_t below(size_t n) { return n == 0 ? 0 : (size_t)(next() % n); }
  bool chance(int percent) { return (int)(next() % 100) < percent; }

 private:
  uint64_t state_;
};

// Rank `rank`'s send bytes for `seed`: random, never 0xFF (the poison), so an output byte still
// 0xFF where data was due is a byte the call never wrote.
Bytes sendBytes(uint64_t seed, int rank, size_t bytes);

// Sets one environment variable for the comms created while it lives (settings are read at comm
// creation) and restores it afterwards (the MPI launcher runs every case in one process).
class EnvVar {
 public:
  EnvVar(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~EnvVar() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// ---- Results and messages --------------------------------------------------------------------------

// yaliGetLastError(NULL), and with a comm its async error (when there is one) and
// yaliGetLastError(comm): the context a failure report appends.
std::string commErrors(yaliComm_t comm);

// yaliCommGetAsyncError's answer (yaliInternalError if the query itself failed).
yaliResult_t asyncOf(yaliComm_t comm);

// A call that must have been issued: `r` yaliSuccess, else a failure naming `call`, the rank and
// commErrors(comm).
bool issued(Ctx& ctx, yaliResult_t r, const char* call, int rank, yaliComm_t comm, const std::string& what);

// `got` must be yaliInvalidArgument, and yaliGetLastError(NULL) and (with a comm)
// yaliGetLastError(comm) must name `call` and one of `args` (whole words).
bool expectRefused(Ctx& ctx, const std::string& what, yaliResult_t got, const char* call,
                   const std::vector<std::string>& args, yaliComm_t comm);

// yaliCommAbort on every local comm once every process is done with its checks (a rank that aborts
// early would turn its peers' failure into yaliRemoteError). Collective.
void abortAll(Ctx& ctx, std::vector<yaliComm_t>& comms, const std::string& label);

// When each watched local rank's stream was seen idle and its comm seen reporting an async error,
// in milliseconds from the calls (-1: not seen, or not watched).
struct FailureTimes {
  std::vector<double> idleMs, toldMs;  // per local rank
};

// After calls issued at t0 that must fail on the device (a failed check tells the peers at once,
// before YALI_TIMEOUT_MS): polls the main streams and comms of the local ranks marked in `watch`
// until every watched stream is idle and every comm marked in `mustTell` reports an async error,
// or, once the streams are idle, `failureMs` has passed (the caller then reports what is late or
// missing). A stream that ends with a CUDA error (a failed check must end its kernel cleanly, never
// trap) or is still busy `giveUpMs` after t0 is fatal. Not collective.
FailureTimes waitForFailure(Ctx& ctx, const std::vector<yaliComm_t>& comms, Clock::time_point t0,
                            const std::vector<bool>& watch, const std::vector<bool>& mustTell, double failureMs,
                            double giveUpMs, const std::string& label);

// ---- Buffers: each alone in its allocation, between guard regions --------------------------------

struct Region {
  DevAlloc alloc;
  char* p = nullptr;  // kGuardBytes (+ lead) into the allocation
  size_t bytes = 0;
};

// A region of `bytes` on local rank i's device. `lead` more bytes of guard before the region put
// its start off the allocation's alignment (keep it a multiple of the element sizes used in the
// region). In cuMem chunks (Alloc::CuMemChunks) the region straddles the first chunk's end (from
// 32 bytes on), so that CUDA's range for its start holds only part of it.
Region makeRegion(Ctx& ctx, size_t i, size_t bytes, size_t lead = 0, Alloc kind = Alloc::Malloc);

// Waits for local rank i's stream, then frees the region (a region never made is left alone).
void freeRegion(Ctx& ctx, size_t i, Region& r);

// Guard over the allocation, then `fill` over the region: asynchronous on local rank i's stream.
void armRegion(Ctx& ctx, size_t i, const Region& r, unsigned char fill);

// Guard over the allocation, `bytes` of `data` at the start of the region, poison after them (more
// bytes than the region holds: a bug in the test, fatal). The copy is from pageable memory, which
// makes the host wait for the stream: call it only while no YALI call is queued there.
void loadRegion(Ctx& ctx, size_t i, const Region& r, const void* data, size_t bytes);
inline void loadRegion(Ctx& ctx, size_t i, const Region& r, const Bytes& data) {
  loadRegion(ctx, i, r, data.data(), data.size());
}

// Waits for local rank i's stream (everything queued there must be able to finish: call it only
// after every rank's calls were issued), then copies the region back.
Bytes readRegion(Ctx& ctx, size_t i, const Region& r);

// Every byte of the allocation outside the region still holds kGuardByte (runs.h: checkGuard).
bool guardsIntact(Ctx& ctx, const Region& r, const std::string& what);

// `got` (read from rank `rank`) equals `want` byte for byte; a failure counts the bytes still the
// poison where data was due (never written) and those written where nothing was due, and appends
// commErrors(comm) when a comm is given.
bool sameBytes(Ctx& ctx, int rank, const Bytes& got, const Bytes& want, const std::string& what,
               yaliComm_t comm = nullptr);

// The region still holds the poison everywhere (a refused or failed call wrote nothing into it).
// Waits for local rank i's stream (readRegion).
bool allPoison(Ctx& ctx, size_t i, const Region& r, const std::string& what);

}  // namespace yt

#endif  // YALI_TESTS_GPU_CASE_HELPERS_H_
