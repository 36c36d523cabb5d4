// The selector: which algorithm of a collective, how many blocks and threads, which slot size, for a
// given GPU architecture, world size and message size. The candidates and their order come from the
// registry (collectives/registry.h); their thresholds and geometry from the tuning (the built-in
// table in selector.cc, or a file from `yali-perf --tune` named by YALI_TUNING_FILE), which the
// environment's thresholds (core/env.h) override.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "collectives/registry.h"
#include "core/env.h"
#include "vocabulary.h"

namespace yali {

struct AlgoChoice {
  Algo algo;
  int ctas;
  int threads;
  size_t slotBytes;  // two-shot and staged exchanges: bytes per (pipeline, sender) per step;
                     // oneshot_pull: bytes per block; 0 for the LL and direct families
  int teams = 1;     // two-shot variants: pipelines per block, each a team of threads / teams
                     // threads; 1 for the others
};

// One world size's tuning on one architecture: what a tuning file's line holds, by key (the keys are
// in selector.cc, kTuningKeys; every value's reason is in the built-in table's comment).
struct TuningEntry {
  int64_t smMajor;              // sm: compute capability major (9 = Hopper)
  int64_t nranks;               // nranks: world size
  int64_t llThreads;            // ll_threads: LL families, threads per block
  int64_t llMaxCtas;            // ll_ctas: LL families, blocks cap (one 8-byte packet per thread per pass)
  int64_t twoshotThreads;       // twoshot_threads: every other family, threads per block
  int64_t twoshotMaxCtas;       // twoshot_ctas: blocks cap below frugalMinBytes
  int64_t twoshotMinSlotBytes;  // twoshot_min_slot: smallest slot (fewer blocks below n*ctas*this)
  int64_t twoshotMaxSlotBytes;  // twoshot_max_slot: largest slot per step
  int64_t frugalMinBytes;  // frugal_min: from this size up, at most frugalMaxCtas blocks
  int64_t frugalMaxCtas;   // frugal_ctas: (users overlap large collectives with compute)
  int64_t frugalTeams;     // frugal_teams: two-shot from frugalMinBytes up: independent pipelines
                           // (teams of warps) per block, so that the capped blocks keep sending
                           // while one team waits
  // Each bounded algorithm's threshold in bytes, by Algo (its row's tuningKey; 0 never); unused for
  // the fallbacks.
  int64_t thresholds[kNumAlgos];
};

// What one rank's window and kernels can take (core/comm.cc fills it from the window layout).
struct SelectorLimits {
  int smMajor;
  int nranks;              // 1..kMaxRanks
  int64_t llPayloadBytes;  // LL capacity per sender (what the window holds)
  int64_t stagingBytes;    // staging per sender and parity: at least 256
  int64_t pullBufferBytes; // oneshot_pull copy-in capacity (its largest message)
  int maxThreads[kNumAlgos];  // what each algorithm's kernels can launch with (registers); the
                              // tuning's thread counts are clamped to these; at least 32 each
};

// Whether `c` is safe to launch for a message of `bytes` within `limits`: the invariants the
// kernels rely on and nothing checks on the device. Every choice Selector::choose returns meets
// them, whatever the settings and tuning; the launch path checks again before each launch, so that
// a selector bug becomes an error instead of a write past a staging area. `bytes` is what the
// selector was asked about (AllReduce: the message; the exchanges: one piece). The invariants:
//   - ctas in [1, kMaxCtas]; threads a multiple of 32 in [32, 1024] and within the algorithm's
//     limit;
//   - teams in [1, kMaxTeamsPerBlock], more than 1 only for the two-shot family and then with
//     threads a multiple of 32 * teams and at least 64 threads per team;
//   - two-shot and staged exchanges: slotBytes a multiple of 256, at least 256, and ctas * teams *
//     slotBytes <= stagingBytes (pipeline p uses bytes [p * slot, (p + 1) * slot) of each sender's
//     staging, result and gather areas);
//   - oneshot_pull: bytes <= pullBufferBytes, slotBytes (each block's run) a multiple of 16 and
//     ctas * slotBytes >= bytes;
//   - the LL families: bytes <= llPayloadBytes.
// On a violation returns false and, when `why` is not null, says which one in *why.
bool choiceFits(const AlgoChoice& c, size_t bytes, const SelectorLimits& limits, std::string* why);

// The algorithms (bit i: Algo i) that Selector::mayChoose may return true for, with `settings`
// on a comm of `nranks`, on any GPU architecture: forced by YALI_ALGO, a fallback, or a threshold
// that is not 0 in the settings, the built-in table or any line of the tuning file for `nranks`
// (whatever its sm). It reads nothing but the settings and nranks, which every rank of a comm has
// alike (set-up refuses ranks whose settings digests differ before any launch), so every rank
// gets the same set, and the same window layout from it. mayChoose itself depends on the GPU's
// compute capability (the tuning file's line for it), which may differ between ranks.
uint64_t choosableAlgos(const Settings& settings, int nranks);
constexpr uint64_t algoBit(int i) { return uint64_t(1) << i; }
// The window regions (registry.h: Region) that those algorithms need, kAlwaysRegions included:
// what core/window_layout.h's computeLayout lays out.
uint32_t windowRegionsFor(const Settings& settings, int nranks);
// Whether the window laid out `laidOut` (Region bits) holds every region of `a`; else false with
// a message naming the algorithm and the missing regions in *why (when not null). The launch path
// checks it before each launch: a missing region would be an out-of-bounds write.
bool regionsLaidOut(Algo a, uint32_t laidOut, std::string* why);

class Selector {
 public:
  // Parses settings.tuningText (the content of YALI_TUNING_FILE, read by loadSettings) and takes
  // its line for this GPU and world size, if any; returns false with a message on a bad table or
  // on limits the kernels cannot run with.
  bool init(const Settings& settings, const SelectorLimits& limits, std::string* error);
  // The choice for a call of `collective` moving `bytes` (AllReduce: the message; every other
  // collective: one piece, the bytes one rank sends to one receiver). recvRegistered: the output lies
  // in memory registered on every rank (yaliCommRegister), which the *_direct algorithms need.
  // sendRegistered: the inputs do (the *_ce algorithms, which need them at the same offset, and
  // reducescatter_pull and reduce_pull read them). copyEngines: the *_ce algorithms may run (the caller clears it
  // inside a stream capture, or where the driver lacks the memory operations). Any bytes from 0 to
  // SIZE_MAX; the choice meets choiceFits(choice, bytes, limits()).
  AlgoChoice choose(Collective collective, size_t bytes, bool recvRegistered, bool sendRegistered = false,
                    bool copyEngines = true) const;
  // Whether choose() can ever return `a` with these settings and table: YALI_ALGO names it, or its
  // threshold is not 0 (never). The call path skips work that only such a row needs. Within
  // choosableAlgos(settings, nranks) on every architecture (a host test checks it).
  bool mayChoose(Algo a) const;
  const TuningEntry& entry() const { return entry_; }
  const SelectorLimits& limits() const { return limits_; }
  // No algorithm launches more than maxBlocks blocks (the caps only go down, and never below 1).
  // Used when ranks share a GPU: every rank's kernel must be resident at once or their waits never
  // end.
  void limitBlocks(int maxBlocks);

 private:
  bool fitsBuffer(Algo a, size_t bytes) const;
  AlgoChoice geometry(Algo a, size_t bytes) const;
  AlgoChoice twoshot(size_t bytes, Algo variant) const;
  AlgoChoice ll(size_t bytes, Algo a) const;
  AlgoChoice oneshotPull(size_t bytes) const;
  AlgoChoice staged(size_t bytes, Algo a) const;
  bool frugal(size_t bytes) const;
  size_t ctasFor(size_t bytes, size_t pieces) const;
  Settings settings_;
  SelectorLimits limits_;
  TuningEntry entry_;
};

// The built-in entry for (smMajor, nranks), falling back to the nearest world size on Hopper.
TuningEntry builtinTuning(int smMajor, int nranks);

// Tuning file format (text, '#' comments): one line per world size of key=value words,
//   sm=<major> nranks=<n> ll_max=<bytes> ll_threads=<t> ll_ctas=<c> twoshot_threads=<t>
//   twoshot_ctas=<c> twoshot_min_slot=<bytes> twoshot_max_slot=<bytes>
// mandatory, in any order, then optionally frugal_min, frugal_ctas, frugal_teams and every other
// bounded algorithm's threshold key (registry.h: tuningKey, e.g. twoshot_push_min,
// allgather_ll_max): a key left out takes the built-in value for that world size. The keys of
// removed algorithms (ce_min, ce_ctas, direct_min) are refused with a message saying so.
bool parseTuningText(const std::string& text, std::vector<TuningEntry>* out, std::string* error);
// The nine mandatory keys (what `yali-perf --tune` writes); the optional ones are left to the
// built-in table.
std::string formatTuningEntry(const TuningEntry& e);

}  // namespace yali
