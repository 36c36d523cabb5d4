// The algorithm registry: every algorithm of every collective, as one row of data. The selector
// (tuning/selector.h), the launch path (core/enqueue.cc), the settings (core/env.cc: each row with a
// size bound has its YALI_<NAME>_{MAX,MIN}_BYTES threshold), the tuning file (its key) and
// yaliAlgoInfo all read these rows; nothing else lists algorithms.
//
// A new algorithm: its kernel file (a lookup `KernelFn f(DataType, RedOp)` and its thread limit),
// one Algo value and one row in registry.cc, in the place of its collective's priority order.
#pragma once

#include <cuda_runtime.h>

#include <stdint.h>

#include <string>

#include "collectives/common/device_state.h"
#include "vocabulary.h"

namespace yali {

// Row order of kAlgorithms (registry.cc), checked there. Within a collective, rows are listed in
// the selector's order of preference (below).
enum class Algo : int {
  // AllReduce
  kTwoshotDirect = 0,
  kOneshotLL,
  kOneshotPull,
  kTwoshotPush,
  kTwoshot,
  // ReduceScatter
  kReduceScatterPull,
  kReduceScatterLL,
  kReduceScatterStaged,
  // AllGather
  kAllGatherCopyEngine,
  kAllGatherDirect,
  kAllGatherLL,
  kAllGatherStaged,
  // Broadcast
  kBroadcastCopyEngine,
  kBroadcastDirect,
  kBroadcastLL,
  kBroadcastTwoshot,
  kBroadcastStaged,
  // Reduce
  kReducePull,
  kReduceLL,
  kReduceTwoshot,
  kReduceStaged,
  // Gather
  kGatherCopyEngine,
  kGatherLL,
  kGatherStaged,
  // Scatter
  kScatterCopyEngine,
  kScatterDirect,
  kScatterLL,
  kScatterStaged,
  // AlltoAll
  kAlltoAllCopyEngine,
  kAlltoAllDirect,
  kAlltoAllLL,
  kAlltoAllStaged,
  // AlltoAllv
  kAlltoAllvStaged,
};
constexpr int kNumAlgos = 33;

// How an algorithm is shaped: its geometry rule (selector.cc) and the invariants its kernels rely
// on (choiceFits).
enum class Family : int {
  kOneshotLL,       // one-shot AllReduce by LL packets (allreduce/oneshot_ll.cuh)
  kOneshotPull,     // one-shot AllReduce by copy-in and NVLink reads (allreduce/oneshot_pull.cuh)
  kTwoshot,         // two-shot AllReduce and its variants, and the rooted Broadcast and Reduce
                    // on its protocol (allreduce/twoshot.cuh; arguments: core/pattern.h fillTwoshot)
  kExchangeLL,      // a pattern of pieces as LL packets (exchange/ll.cuh)
  kExchangeStaged,  // a pattern of pieces, pipelined through staging (exchange/staged.cuh)
  kExchangeDirect,  // a pattern of pieces written into registered outputs (exchange/direct.cuh)
  kExchangePull,    // a reducing pattern read straight from registered inputs: ReduceScatter,
                    // Reduce (exchange.cuh: exchangePull)
  kCopyEngine,      // a pattern of pieces pulled by the copy engines from registered inputs, no
                    // kernel (copy_engine/copy_engine.h)
};

// When the selector takes a row (the collective's rows in order; the first that applies wins):
enum class Bound : int {
  kUpTo,      // messages up to its threshold (and within its buffer)
  kFrom,      // messages from its threshold up
  kFallback,  // always: the collective's last row
};

// The regions of the window (device_state.h: WindowLayout) that an algorithm's launches read or
// write, in our window or in a peer's, kernels and host side (core/enqueue.cc, copy_engine/)
// together. The window lays out only the regions that some algorithm the comm may choose needs
// (core/window_layout.h: computeLayout); the others keep their offset and get no bytes, and
// enqueue refuses to launch an algorithm whose regions are not all laid out. The header (remoteFailure, the
// rebase's words) is no region: every window has it.
enum Region : uint32_t {
  kRegionCeFlags = 1u << 0,      // the copy-engine handshake words
  kRegionPushFlags = 1u << 1,
  kRegionResultFlags = 1u << 2,
  kRegionDirectFlags = 1u << 3,  // enter, leave and output offsets of the registered-buffer kernels
  kRegionArriveFlags = 1u << 4,
  kRegionLL = 1u << 5,
  kRegionCounts = 1u << 6,       // alltoallv's count packets
  kRegionStaging = 1u << 7,
  kRegionResult = 1u << 8,
  kRegionGather = 1u << 9,
  kRegionCopyIn = 1u << 10,
  kRegionLocal = 1u << 11,       // LocalState: every launch (its epoch and gate)
  kRegionP2P = 1u << 12,         // point-to-point rings and their flags (no row: yaliSend and
                                 // yaliRecv, collectives/p2p/p2p.h), laid out while
                                 // YALI_P2P_CHANNELS > 0
};
constexpr uint32_t kAllRegions = (1u << 13) - 1;
// Laid out whatever the algorithms: every kernel launch reads and writes LocalState (runLaunch).
constexpr uint32_t kAlwaysRegions = kRegionLocal;
// A set of wait phases (device_state.h: WaitPhase, every value below 32): bit p is phase p.
constexpr uint32_t phaseBit(int phase) { return 1u << phase; }

using KernelFn = void (*)(DeviceArgs);

struct AlgorithmDesc {
  Algo id;
  const char* name;       // YALI_ALGO, yaliAlgoInfo_t::algorithm, logs
  Collective collective;
  Family family;
  Bound bound;
  // The threshold's key in a tuning file and in the built-in table (selector.cc), null for
  // kFallback. Its environment variable is YALI_<NAME>_MAX_BYTES (kUpTo) or _MIN_BYTES (kFrom).
  const char* tuningKey;
  bool needsRegisteredRecv;  // only for outputs in memory registered on every rank
  bool needsRegisteredSend;  // only for inputs in memory registered on every rank (copy_engine/,
                             // exchangePull)
  // The kernel for a data type and op, or null where the pair is not supported (avg on integers).
  // Data-moving algorithms return their one byte-wise kernel for every pair; the copy-engine rows
  // have no kernel at all (null: they are issued by core/enqueue.cc through copy_engine.h).
  KernelFn (*kernel)(DataType, RedOp);
  const char* summary;  // one line: what it does and when it pays (help texts, docs)
  // What this row needs beyond its family's (familyNeeds below; most rows add nothing): window
  // regions (Region bits) and the wait phases its kernels can report (phaseBit of each).
  uint32_t extraRegions = 0;
  uint32_t extraPhases = 0;
};

// What a family's kernels (or host path) need: `regions` and `phases` every row of the family
// needs or can report; `rowRegions` and `rowPhases` what a row of it may add (its extraRegions
// and extraPhases, which a host test keeps within these).
struct FamilyNeeds {
  uint32_t regions;
  uint32_t phases;
  uint32_t rowRegions;
  uint32_t rowPhases;
};
const FamilyNeeds& familyNeeds(Family f);
// A row's window regions (kAlwaysRegions included) and wait phases: its family's and its own.
uint32_t algoRegions(Algo a);
uint32_t algoPhases(Algo a);
// "staging, result" for messages; "" for none.
std::string regionNames(uint32_t regions);

// The rows, in Algo order.
const AlgorithmDesc& algorithm(Algo a);
const AlgorithmDesc* algorithms(int* count);

const char* algoName(Algo a);
bool algoFromName(const std::string& name, Algo* out);
std::string algoNameList();  // "twoshot_direct, oneshot_ll, ..." for messages
// The README's algorithm table (name, collective, when the selector takes it, what it does),
// generated from the rows; a host test compares it with README.md.
std::string algorithmsMarkdownTable();
// "YALI_ONESHOT_LL_MAX_BYTES" for a row with a bound; "" for a fallback.
std::string thresholdSettingName(const AlgorithmDesc& a);

// The most threads per block that every kernel of `a` can launch with (register-bound), on the
// current device. Querying a kernel also loads its module: comm set-up queries every row, so that
// no launch of ours ever loads a module later. Under lazy loading (CUDA_MODULE_LOADING=LAZY, CUDA's
// default) a first launch waits for the device to drain, which is a deadlock when the device runs
// our kernel waiting for a peer whose kernel this thread has yet to launch.
int maxLaunchableThreads(Algo a);

// Launches `a`'s kernel for (dtype, op); cudaErrorInvalidValue when the row has none. `programmatic`:
// launch with programmatic stream serialization (compute capability 9.0+), so the kernel may start
// while the previous one on the stream finishes; the kernels wait for it themselves before
// touching memory.
cudaError_t launchAlgorithm(Algo a, DataType dtype, RedOp op, int ctas, int threads,
                            const DeviceArgs& args, bool programmatic, cudaStream_t stream);
// The launch behind it (and the point-to-point kernel's, collectives/p2p/p2p.cu): `fn` with
// `params`, one-dimensional grid and block, programmatic as above.
cudaError_t launchKernel(const void* fn, void** params, int ctas, int threads, bool programmatic,
                         cudaStream_t stream);

}  // namespace yali
