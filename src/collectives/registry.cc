#include "collectives/registry.h"

#include <cctype>
#include <iterator>

#include "collectives/kernels.h"

namespace yali {
namespace {

constexpr Collective kAR = Collective::kAllReduce;

// What every kernel launch can report (device.cuh: runLaunch's admission and the epoch rebase).
constexpr uint32_t kLaunchPhases =
    phaseBit(kPhaseAdmission) | phaseBit(kPhaseRebaseArrive) | phaseBit(kPhaseRebaseClear);
// The staged exchanges' launch covenant (exchange.cuh: awaitArrivals); alltoallv has its own.
constexpr uint32_t kArrivalPhase = phaseBit(kPhaseExchangeArrive);
// alltoallv's counts (exchange/alltoallv.cu): their exchange, checks and verdict.
constexpr uint32_t kCountsPhases =
    phaseBit(kPhaseCountsExchange) | phaseBit(kPhaseCountsNegative) | phaseBit(kPhaseCountsCapacity) |
    phaseBit(kPhaseCountsSendExtent) | phaseBit(kPhaseCountsMismatch) | phaseBit(kPhaseCountsRecvExtent) |
    phaseBit(kPhaseCountsShape) | phaseBit(kPhaseCountsVerdict);

// By Family value. Regions in our window and in peers' (read from the kernels; see device_state.h
// for what each holds); a row's own additions are in its row below.
constexpr FamilyNeeds kFamilyNeeds[] = {
    // kOneshotLL (allreduce/oneshot_ll.cuh): packets into every peer's LL area, read from ours.
    {kRegionLL, kLaunchPhases | phaseBit(kPhaseLLRecv), 0, 0},
    // kOneshotPull (allreduce/oneshot_pull.cuh): copy-in, push flags, reads of peers' copy-in.
    {kRegionCopyIn | kRegionPushFlags, kLaunchPhases | phaseBit(kPhasePullWait), 0, 0},
    // kTwoshot (allreduce/twoshot.cuh): pieces into peers' staging with push flags, result flags
    // for the reduced shards; then by Gather: twoshot reads the peers' result areas, twoshot_push
    // and the rooted shapes write the peers' gather areas, twoshot_direct enters with directFlags.
    {kRegionStaging | kRegionPushFlags | kRegionResultFlags,
     kLaunchPhases | phaseBit(kPhasePushWait) | phaseBit(kPhaseResultWait),
     kRegionResult | kRegionGather | kRegionDirectFlags, phaseBit(kPhaseTwoshotEnter)},
    // kExchangeLL (exchange.cuh: exchangeLL): LL packets, arrival flags.
    {kRegionLL | kRegionArriveFlags,
     kLaunchPhases | phaseBit(kPhaseExchangeLL) | phaseBit(kPhaseExchangeArrive), 0, 0},
    // kExchangeStaged (exchange.cuh: exchangeStaged; exchange/alltoallv.cu): staging with push
    // flags and result flags as credits, arrival flags (alltoallv: its count verdicts); alltoallv
    // adds its count packets.
    {kRegionStaging | kRegionPushFlags | kRegionResultFlags | kRegionArriveFlags,
     kLaunchPhases | phaseBit(kPhaseExchangePieces) | phaseBit(kPhaseExchangeCredit), kRegionCounts,
     kArrivalPhase | kCountsPhases},
    // kExchangeDirect (exchange.cuh: exchangeDirect): the enter, leave and offset planes of
    // directFlags; the data goes into registered outputs, outside the window.
    {kRegionDirectFlags, kLaunchPhases | phaseBit(kPhaseDirectEnter) | phaseBit(kPhaseDirectLeave), 0, 0},
    // kExchangePull (exchange.cuh: exchangePull): the same planes of directFlags (the offsets are
    // the inputs'); the data is read from registered inputs, outside the window.
    {kRegionDirectFlags, kLaunchPhases | phaseBit(kPhaseDirectEnter) | phaseBit(kPhaseDirectLeave), 0, 0},
    // kCopyEngine (copy_engine/copy_engine.cc: the host's memory operations on ceFlags, ours and
    // the peers'; no kernel, so no launch phases: its watch reports these two).
    {kRegionCeFlags, phaseBit(kPhaseCopyEngineReady) | phaseBit(kPhaseCopyEngineDone), 0, 0},
};
static_assert(std::size(kFamilyNeeds) == static_cast<int>(Family::kCopyEngine) + 1, "one entry per Family");

// Every algorithm, in Algo order; within a collective in the selector's order of preference: the
// algorithms for registered outputs first, then those bounded from above (small messages), then
// those bounded from below, then the fallback.
constexpr AlgorithmDesc kAlgorithms[] = {
    // ---- AllReduce (allreduce/) ----
    {Algo::kTwoshotDirect, "twoshot_direct", kAR, Family::kTwoshot, Bound::kFrom, "twoshot_direct_min", true, false,
     twoshotDirectKernelFor,
     "two-shot whose owners store the reduced shards straight into every rank's registered output",
     kRegionDirectFlags, phaseBit(kPhaseTwoshotEnter)},
    {Algo::kOneshotLL, "oneshot_ll", kAR, Family::kOneshotLL, Bound::kUpTo, "ll_max", false, false, oneshotLLKernelFor,
     "one-shot by LL packets: every rank sends its whole input to every rank, one step, no barrier"},
    {Algo::kOneshotPull, "oneshot_pull", kAR, Family::kOneshotPull, Bound::kUpTo, "oneshot_pull_max", false, false,
     oneshotPullKernelFor, "one-shot by copy-in, one flag exchange and NVLink reads"},
    {Algo::kTwoshotPush, "twoshot_push", kAR, Family::kTwoshot, Bound::kFrom, "twoshot_push_min", false, false,
     twoshotPushKernelFor, "two-shot (reduce-scatter, all-gather) whose every NVLink transfer is a write",
     kRegionGather},
    {Algo::kTwoshot, "twoshot", kAR, Family::kTwoshot, Bound::kFallback, nullptr, false, false, twoshotKernelFor,
     "two-shot (reduce-scatter, all-gather) gathering by NVLink reads",
     kRegionResult},
    // ---- ReduceScatter ----
    {Algo::kReduceScatterPull, "reducescatter_pull", Collective::kReduceScatter, Family::kExchangePull,
     Bound::kFrom, "reducescatter_pull_min", false, true, exchangePullReduceKernelFor,
     "each rank reduces its block straight from every rank's registered input (NVLink reads, no staging); "
     "off by default until measured on several GPUs"},
    {Algo::kReduceScatterLL, "reducescatter_ll", Collective::kReduceScatter, Family::kExchangeLL, Bound::kUpTo,
     "reducescatter_ll_max", false, false, exchangeLLReduceKernelFor,
     "each rank's block for every receiver as LL packets; each receiver reduces in rank order"},
    {Algo::kReduceScatterStaged, "reducescatter_staged", Collective::kReduceScatter, Family::kExchangeStaged,
     Bound::kFallback, nullptr, false, false, exchangeStagedReduceKernelFor,
     "each block pipelined through the receiver's staging, reduced there in rank order",
     0, kArrivalPhase},
    // ---- AllGather ----
    {Algo::kAllGatherCopyEngine, "allgather_ce", Collective::kAllGather, Family::kCopyEngine, Bound::kFrom,
     "allgather_ce_min", false, true, nullptr,
     "no SM: the copy engines pull every peer's input into our output (inputs registered on every rank)"},
    {Algo::kAllGatherDirect, "allgather_direct", Collective::kAllGather, Family::kExchangeDirect, Bound::kFrom,
     "allgather_direct_min", true, false, exchangeDirectCopyKernelFor,
     "each rank writes its input straight into every rank's registered output"},
    {Algo::kAllGatherLL, "allgather_ll", Collective::kAllGather, Family::kExchangeLL, Bound::kUpTo,
     "allgather_ll_max", false, false, exchangeLLCopyKernelFor, "each rank's input to every rank as LL packets"},
    {Algo::kAllGatherStaged, "allgather_staged", Collective::kAllGather, Family::kExchangeStaged,
     Bound::kFallback, nullptr, false, false, exchangeStagedCopyKernelFor,
     "each rank's input pipelined through every receiver's staging",
     0, kArrivalPhase},
    // ---- Broadcast ----
    {Algo::kBroadcastCopyEngine, "broadcast_ce", Collective::kBroadcast, Family::kCopyEngine, Bound::kFrom,
     "broadcast_ce_min", false, true, nullptr,
     "no SM: the copy engines pull the root's input into every output (inputs registered on every rank)"},
    {Algo::kBroadcastDirect, "broadcast_direct", Collective::kBroadcast, Family::kExchangeDirect, Bound::kFrom,
     "broadcast_direct_min", true, false, exchangeDirectCopyKernelFor,
     "the root writes straight into every rank's registered output"},
    {Algo::kBroadcastLL, "broadcast_ll", Collective::kBroadcast, Family::kExchangeLL, Bound::kUpTo,
     "broadcast_ll_max", false, false, exchangeLLCopyKernelFor, "the root's input to every rank as LL packets"},
    {Algo::kBroadcastTwoshot, "broadcast_twoshot", Collective::kBroadcast, Family::kTwoshot, Bound::kFrom,
     "broadcast_twoshot_min", false, false, broadcastTwoshotKernelFor,
     "two-shot from the root: scatter of the root's shards to their owners, then all-gather (twoshot_push's "
     "pipeline); off by default until measured on several GPUs",
     kRegionGather},
    {Algo::kBroadcastStaged, "broadcast_staged", Collective::kBroadcast, Family::kExchangeStaged,
     Bound::kFallback, nullptr, false, false, exchangeStagedCopyKernelFor,
     "the root's input pipelined through every receiver's staging",
     0, kArrivalPhase},
    // ---- Reduce ----
    {Algo::kReducePull, "reduce_pull", Collective::kReduce, Family::kExchangePull, Bound::kFrom, "reduce_pull_min",
     false, true, exchangePullReduceKernelFor,
     "the root reduces the whole message straight from every rank's registered input (NVLink reads, no "
     "staging); off by default until measured on several GPUs"},
    {Algo::kReduceLL, "reduce_ll", Collective::kReduce, Family::kExchangeLL, Bound::kUpTo, "reduce_ll_max", false, false,
     exchangeLLReduceKernelFor, "every rank's input to the root as LL packets, reduced there in rank order"},
    {Algo::kReduceTwoshot, "reduce_twoshot", Collective::kReduce, Family::kTwoshot, Bound::kFrom,
     "reduce_twoshot_min", false, false, reduceTwoshotKernelFor,
     "two-shot to the root: reduce-scatter in rank order, then a gather of the reduced shards (twoshot_push's "
     "pipeline); off by default until measured on several GPUs",
     kRegionGather},
    {Algo::kReduceStaged, "reduce_staged", Collective::kReduce, Family::kExchangeStaged, Bound::kFallback,
     nullptr, false, false, exchangeStagedReduceKernelFor,
     "every rank's input pipelined through the root's staging, reduced there in rank order",
     0, kArrivalPhase},
    // ---- Gather ----
    {Algo::kGatherCopyEngine, "gather_ce", Collective::kGather, Family::kCopyEngine, Bound::kFrom,
     "gather_ce_min", false, true, nullptr,
     "no SM: the copy engines pull every rank's input into the root's output (inputs registered on every rank)"},
    {Algo::kGatherLL, "gather_ll", Collective::kGather, Family::kExchangeLL, Bound::kUpTo, "gather_ll_max", false, false,
     exchangeLLCopyKernelFor, "every rank's input to the root as LL packets"},
    {Algo::kGatherStaged, "gather_staged", Collective::kGather, Family::kExchangeStaged, Bound::kFallback,
     nullptr, false, false, exchangeStagedCopyKernelFor, "every rank's input pipelined through the root's staging",
     0, kArrivalPhase},
    // ---- Scatter ----
    {Algo::kScatterCopyEngine, "scatter_ce", Collective::kScatter, Family::kCopyEngine, Bound::kFrom,
     "scatter_ce_min", false, true, nullptr,
     "no SM: the copy engines pull each rank's block of the root's input (inputs registered on every rank)"},
    {Algo::kScatterDirect, "scatter_direct", Collective::kScatter, Family::kExchangeDirect, Bound::kFrom,
     "scatter_direct_min", true, false, exchangeDirectCopyKernelFor,
     "the root writes each block straight into its rank's registered output"},
    {Algo::kScatterLL, "scatter_ll", Collective::kScatter, Family::kExchangeLL, Bound::kUpTo, "scatter_ll_max",
     false, false, exchangeLLCopyKernelFor, "the root's block for every rank as LL packets"},
    {Algo::kScatterStaged, "scatter_staged", Collective::kScatter, Family::kExchangeStaged, Bound::kFallback,
     nullptr, false, false, exchangeStagedCopyKernelFor, "the root's blocks pipelined through every receiver's staging",
     0, kArrivalPhase},
    // ---- AlltoAll ----
    {Algo::kAlltoAllCopyEngine, "alltoall_ce", Collective::kAlltoAll, Family::kCopyEngine, Bound::kFrom,
     "alltoall_ce_min", false, true, nullptr,
     "no SM: the copy engines pull our block of every peer's input (inputs registered on every rank)"},
    {Algo::kAlltoAllDirect, "alltoall_direct", Collective::kAlltoAll, Family::kExchangeDirect, Bound::kFrom,
     "alltoall_direct_min", true, false, exchangeDirectCopyKernelFor,
     "each rank writes each block straight into its receiver's registered output"},
    {Algo::kAlltoAllLL, "alltoall_ll", Collective::kAlltoAll, Family::kExchangeLL, Bound::kUpTo, "alltoall_ll_max",
     false, false, exchangeLLCopyKernelFor, "each block to its receiver as LL packets"},
    {Algo::kAlltoAllStaged, "alltoall_staged", Collective::kAlltoAll, Family::kExchangeStaged, Bound::kFallback,
     nullptr, false, false, exchangeStagedCopyKernelFor, "each block pipelined through its receiver's staging",
     0, kArrivalPhase},
    // ---- AlltoAllv (every form: host counts, device counts, expert dispatch and combine) ----
    {Algo::kAlltoAllvStaged, "alltoallv_staged", Collective::kAlltoAllv, Family::kExchangeStaged,
     Bound::kFallback, nullptr, false, false, alltoallvKernelFor,
     "counts exchanged as LL packets, then each rank's rows for every receiver pipelined through its "
     "staging and placed by the counts",
     kRegionCounts, kCountsPhases},
};
static_assert(std::size(kAlgorithms) == kNumAlgos, "one row per Algo value");

constexpr bool rowsInAlgoOrder() {
  for (int i = 0; i < kNumAlgos; ++i)
    if (static_cast<int>(kAlgorithms[i].id) != i) return false;
  return true;
}
static_assert(rowsInAlgoOrder(), "kAlgorithms is in Algo order");

}  // namespace

const AlgorithmDesc& algorithm(Algo a) { return kAlgorithms[static_cast<int>(a)]; }

const AlgorithmDesc* algorithms(int* count) {
  *count = kNumAlgos;
  return kAlgorithms;
}

const FamilyNeeds& familyNeeds(Family f) { return kFamilyNeeds[static_cast<int>(f)]; }

uint32_t algoRegions(Algo a) {
  const AlgorithmDesc& row = algorithm(a);
  return kAlwaysRegions | familyNeeds(row.family).regions | row.extraRegions;
}

uint32_t algoPhases(Algo a) {
  const AlgorithmDesc& row = algorithm(a);
  return familyNeeds(row.family).phases | row.extraPhases;
}

std::string regionNames(uint32_t regions) {
  static const char* const kNames[] = {"ceFlags", "pushFlags", "resultFlags", "directFlags", "arriveFlags", "ll",
                                       "counts",  "staging",   "result",      "gather",      "copyIn",      "local",
                                       "p2p"};
  static_assert(std::size(kNames) == 13 && kAllRegions == (1u << 13) - 1, "a name per Region");
  std::string out;
  for (int i = 0; i < 13; ++i)
    if (regions & (1u << i)) out += (out.empty() ? "" : ", ") + std::string(kNames[i]);
  return out;
}

const char* algoName(Algo a) {
  const int i = static_cast<int>(a);
  return i >= 0 && i < kNumAlgos ? kAlgorithms[i].name : "unknown";
}

bool algoFromName(const std::string& name, Algo* out) {
  for (const AlgorithmDesc& a : kAlgorithms) {
    if (name == a.name) {
      *out = a.id;
      return true;
    }
  }
  return false;
}

std::string algoNameList() {
  std::string list;
  for (const AlgorithmDesc& a : kAlgorithms) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

std::string thresholdSettingName(const AlgorithmDesc& a) {
  if (a.bound == Bound::kFallback) return "";
  std::string upper = "YALI_";
  for (const char* c = a.name; *c; ++c) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return upper + (a.bound == Bound::kUpTo ? "_MAX_BYTES" : "_MIN_BYTES");
}

std::string algorithmsMarkdownTable() {
  std::string out = "| Algorithm | Collective | Taken when | What it does |\n| --- | --- | --- | --- |\n";
  for (const AlgorithmDesc& a : kAlgorithms) {
    std::string when;
    switch (a.bound) {
      case Bound::kUpTo: when = "up to `" + thresholdSettingName(a) + "`"; break;
      case Bound::kFrom: when = "from `" + thresholdSettingName(a) + "`"; break;
      case Bound::kFallback: when = "otherwise"; break;
    }
    if (a.needsRegisteredRecv) when += ", output registered on every rank";
    if (a.needsRegisteredSend) when += ", input registered on every rank (off by default)";
    out += "| `" + std::string(a.name) + "` | " + collectiveName(a.collective) + " | " + when + " | " + a.summary + " |\n";
  }
  return out;
}

int maxLaunchableThreads(Algo a) {
  const AlgorithmDesc& row = algorithm(a);
  int limit = 1024;
  if (row.kernel == nullptr) return limit;  // the copy-engine rows launch no kernel
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int op = 0; op < kNumRedOps; ++op) {
      KernelFn fn = row.kernel(static_cast<DataType>(t), static_cast<RedOp>(op));
      cudaFuncAttributes attr;
      if (fn != nullptr && cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(fn)) == cudaSuccess)
        limit = attr.maxThreadsPerBlock < limit ? attr.maxThreadsPerBlock : limit;
    }
  }
  cudaGetLastError();
  return limit / 32 * 32;
}

cudaError_t launchAlgorithm(Algo a, DataType dtype, RedOp op, int ctas, int threads, const DeviceArgs& args,
                            bool programmatic, cudaStream_t stream) {
  if (algorithm(a).kernel == nullptr) return cudaErrorInvalidValue;
  const KernelFn fn = algorithm(a).kernel(dtype, op);
  if (fn == nullptr) return cudaErrorInvalidValue;
  DeviceArgs copy = args;
  void* params[] = {&copy};
  return launchKernel(reinterpret_cast<const void*>(fn), params, ctas, threads, programmatic, stream);
}

cudaError_t launchKernel(const void* fn, void** params, int ctas, int threads, bool programmatic,
                         cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(threads);
  config.stream = stream;
  // Programmatic stream serialization (Hopper and newer): see waitForPriorGrids() in device.cuh.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelExC(&config, fn, params);
}

const char* waitPhaseName(int phase) {
  switch (phase) {
    case kPhaseAdmission: return "launch admission (a peer had failed)";
    case kPhaseLLRecv: return "one-shot LL: a peer's packets";
    case kPhasePushWait: return "two-shot: the peers' pieces";
    case kPhaseResultWait: return "two-shot: the peers' reduced shards";
    case kPhasePullWait: return "oneshot_pull: the peers' copy-in";
    case kPhaseTwoshotEnter: return "twoshot_direct: entry handshake";
    case kPhaseExchangeLL: return "exchange (LL): a sender's packets";
    case kPhaseExchangePieces: return "exchange (staged): a sender's pieces";
    case kPhaseExchangeCredit: return "exchange (staged): a receiver's credit";
    case kPhaseExchangeArrive: return "exchange: a peer's start of the launch";
    case kPhaseDirectEnter: return "exchange (direct): entry handshake";
    case kPhaseDirectLeave: return "exchange (direct): the peers' writes";
    case kPhaseCopyEngineReady: return "copy engines: a peer's word that its input is ready";
    case kPhaseCopyEngineDone: return "copy engines: a peer's word that it has read our input";
    case kPhaseRebaseArrive: return "epoch rebase: arrival";
    case kPhaseRebaseClear: return "epoch rebase: clearing";
    case kPhaseCountsExchange: return "alltoallv: a sender's counts";
    case kPhaseCountsNegative: return "alltoallv count check: a count or displacement below 0";
    case kPhaseCountsCapacity: return "alltoallv count check: the rows received exceed the capacity";
    case kPhaseCountsSendExtent: return "alltoallv count check: rows to send past the end of sendbuff";
    case kPhaseCountsMismatch: return "alltoallv count check: recvcounts differ from the peers' sendcounts";
    case kPhaseCountsRecvExtent: return "alltoallv count check: rows received past the end of recvbuff";
    case kPhaseCountsVerdict: return "alltoallv: a peer's word that its count checks passed";
    case kPhaseP2PSlot: return "point-to-point: the sender's next slot";
    case kPhaseP2PCredit: return "point-to-point: the receiver's credit for a slot";
    case kPhaseP2PBytes: return "point-to-point check: the matched yaliSend and yaliRecv move different bytes";
    case kPhaseCountsShape:
      return "alltoallv count check: the ranks disagree on the row width (datatype), the experts per rank or the "
             "direction";
    default: return "unknown wait";
  }
}

}  // namespace yali
