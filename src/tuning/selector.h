// The AllReduce selector: which algorithm, how many blocks and threads, which slot size, for a
// given GPU architecture, world size and message size. Tuning is data (kBuiltinTables in
// selector.cc, or a file from `yali-perf --tune` named by YALI_TUNING_FILE); environment
// thresholds (core/env.h) override it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "core/env.h"

namespace yali {

// Row order of the kernel tables: keep in sync with launch.cu.
enum class DataType : int { kFloat16 = 0, kFloat32 = 1, kBfloat16 = 2 };
size_t dataTypeSize(DataType t);

enum class Algo : int {
  kOneshotLL = 0,
  kTwoshot = 1,
  kTwoshotPush = 2,
  kOneshotPull = 3,
  kDirect = 4,         // both buffers registered (direct.cuh)
  kTwoshotDirect = 5,  // output registered (twoshot.cuh: Gather::kIntoOutputs)
};
constexpr int kNumAlgos = 6;
const char* algoName(Algo a);
bool algoFromName(const std::string& name, Algo* out);
std::string algoNameList();  // "oneshot_ll, twoshot, ..." for messages

struct AlgoChoice {
  Algo algo;
  int ctas;
  int threads;
  size_t slotBytes;  // two-shot variants: bytes per (pipeline, sender) per step; oneshot_pull:
                     // bytes per block; 0 for one-shot LL and direct
  int teams = 1;     // two-shot variants: pipelines per block, each a team of threads / teams
                     // threads; 1 for the others
};

// One world size's tuning on one architecture. Every field's value is justified in selector.cc.
struct TuningEntry {
  int smMajor;                // compute capability major (9 = Hopper)
  int nranks;                 // world size
  int64_t oneshotLLMaxBytes;  // crossover: LL for messages up to this size, two-shot above
  int llThreads;              // LL: threads per block
  int llMaxCtas;              // LL: blocks cap (one 8-byte packet per thread per pass)
  int twoshotThreads;         // two-shot: threads per block
  int twoshotMaxCtas;         // two-shot: blocks cap below frugalMinBytes
  int64_t twoshotMinSlotBytes;  // two-shot: smallest slot (fewer blocks below n*ctas*this)
  int64_t twoshotMaxSlotBytes;  // two-shot: largest slot per step
  int64_t twoshotPushMinBytes;  // crossover: twoshot_push (all-writes) from this size up, 0 never
  // Optional keys (a tuning file may leave them out; the built-in value applies):
  int64_t frugalMinBytes;  // from this size up, two-shot uses at most frugalMaxCtas blocks
  int frugalMaxCtas;       // (users overlap large collectives with compute)
  int64_t oneshotPullMaxBytes;  // crossover: oneshot_pull above LL up to this size, 0 never
  int frugalTeams;     // two-shot from frugalMinBytes up: independent pipelines (teams of
                       // warps) per block, so that the capped blocks keep sending while one
                       // team waits
  int64_t directMinBytes;  // crossover: direct (both buffers registered) from this size up, 0 never
  int64_t twoshotDirectMinBytes;  // crossover: twoshot_direct (output registered) from this size
                                  // up, 0 never
};

// What one rank's window and kernels can take (core/comm.cc fills it from the window layout).
struct SelectorLimits {
  int smMajor;
  int nranks;              // 1..kMaxRanks
  int64_t llPayloadBytes;  // LL capacity per sender (what the window holds)
  int64_t stagingBytes;    // two-shot staging per sender and parity: at least 256
  int64_t pullBufferBytes; // oneshot_pull copy-in capacity (its largest message)
  int maxLLThreads;        // what the kernels can launch with (registers); table values are
  int maxTwoshotThreads;   // clamped to these (the smallest of the two-shot variants,
                           // oneshot_pull and direct); at least 32 each
};

// Whether `c` is safe to launch for a message of `bytes` within `limits`: the invariants the
// kernels rely on and nothing checks on the device. Every choice Selector::choose returns meets
// them, whatever the settings and tuning; the API layer checks again before each launch, so that a
// selector bug becomes an error instead of a write past a staging area. The invariants:
//   - ctas in [1, kMaxCtas]; threads a multiple of 32 in [32, 1024] and within the limit for its
//     algorithm (maxLLThreads for oneshot_ll, maxTwoshotThreads for the others);
//   - teams in [1, kMaxTeamsPerBlock], more than 1 only for the two-shot variants and then with
//     threads a multiple of 32 * teams and at least 64 threads per team;
//   - two-shot variants (twoshot, twoshot_push, twoshot_direct): slotBytes a multiple of 256, at
//     least 256, and ctas * teams * slotBytes <= stagingBytes (pipeline p uses bytes
//     [p * slot, (p + 1) * slot) of each sender's staging, result and gather areas);
//   - oneshot_pull: bytes <= pullBufferBytes, slotBytes (each block's run) a multiple of 16 and
//     ctas * slotBytes >= bytes;
//   - oneshot_ll: bytes <= llPayloadBytes.
// On a violation returns false and, when `why` is not null, says which one in *why.
bool choiceFits(const AlgoChoice& c, size_t bytes, const SelectorLimits& limits, std::string* why);

class Selector {
 public:
  // Parses settings.tuningText (the content of YALI_TUNING_FILE, read by loadSettings) and takes
  // its line for this GPU and world size, if any; returns false with a message on a bad table or
  // on limits the kernels cannot run with.
  bool init(const Settings& settings, const SelectorLimits& limits, std::string* error);
  // sendRegistered / recvRegistered: the buffer lies in memory registered on every rank
  // (yaliCommRegister): direct needs both, twoshot_direct the output. Any bytes from 0 to SIZE_MAX;
  // the choice meets choiceFits(choice, bytes, limits()).
  AlgoChoice choose(size_t bytes, bool sendRegistered, bool recvRegistered) const;
  const TuningEntry& entry() const { return entry_; }
  const SelectorLimits& limits() const { return limits_; }
  // No algorithm launches more than maxBlocks blocks (the caps only go down, and never below 1).
  // Used when ranks share a GPU: every rank's kernel must be resident at once or their waits never
  // end.
  void limitBlocks(int maxBlocks);

 private:
  AlgoChoice twoshot(size_t bytes, Algo variant) const;
  AlgoChoice oneshotLL(size_t bytes) const;
  AlgoChoice oneshotPull(size_t bytes) const;
  AlgoChoice direct(size_t bytes) const;
  bool frugal(size_t bytes) const;
  size_t ctasFor(size_t bytes) const;
  Settings settings_;
  SelectorLimits limits_;
  TuningEntry entry_;
};

// The built-in entry for (smMajor, nranks), falling back to the nearest world size on Hopper.
TuningEntry builtinTuning(int smMajor, int nranks);

// Tuning file format (text, '#' comments): one line per world size,
//   sm=<major> nranks=<n> ll_max=<bytes> ll_threads=<t> ll_ctas=<c> twoshot_threads=<t>
//   twoshot_ctas=<c> twoshot_min_slot=<bytes> twoshot_max_slot=<bytes> [twoshot_push_min=<bytes>]
//   [frugal_min=<bytes>] [frugal_ctas=<c>] [oneshot_pull_max=<bytes>] [frugal_teams=<t>]
//   [direct_min=<bytes>] [twoshot_direct_min=<bytes>]
// (the bracketed keys are optional: a missing one takes the built-in value for that world size).
// ce_min and ce_ctas, the keys of the removed copy_engine, are refused with a message saying so.
bool parseTuningText(const std::string& text, std::vector<TuningEntry>* out, std::string* error);
// The nine mandatory keys (what `yali-perf --tune` writes); the optional ones are left to the
// built-in table.
std::string formatTuningEntry(const TuningEntry& e);

}  // namespace yali
