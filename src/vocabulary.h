// The words every layer of YALI shares: data types, reduction ops, collectives and the limits that
// size the window and the kernels. Host and device code include it; it includes nothing of ours, so
// no two modules meet through each other's headers.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define YALI_HOST_DEVICE __host__ __device__
#else
#define YALI_HOST_DEVICE
#endif

namespace yali {

// ---- Limits ----------------------------------------------------------------------------------------
constexpr int kMaxRanks = 8;
constexpr int kMaxCtas = 64;
// Two-shot may split a block into teams that run independent pipelines (block_ops.cuh: Team); the
// flag arrays hold one row per pipeline.
constexpr int kMaxTeamsPerBlock = 2;
constexpr int kMaxPipelines = kMaxCtas * kMaxTeamsPerBlock;

// YALI_TIMEOUT_MS, the bound on every wait for a peer, in milliseconds: its default and its largest
// value, for libyali's settings table (core/env.cc) and for libyali-nccl, which reads the same
// setting for its set-up rounds (nccl_abi/env.cc).
constexpr long long kDefaultTimeoutMs = 120000;
constexpr long long kMaxTimeoutMs = 86400000;

// Launch epochs run 1, 2, ..., kEpochLimit, then start again at 1 (device.cuh: rebaseEpochs). The
// limit keeps every epoch-stamped value unique over a round: an LL packet's 32-bit flag is the
// epoch itself, and flagValue(epoch, step) keeps the epoch in its upper 32 bits.
constexpr uint64_t kEpochLimit = 0xFFFFFFFFull;

// AlltoAllv's expert form (yali.h: YALI_MAX_LOCAL_EXPERTS, YALI_MAX_EXPERTS): the window holds one
// count packet per (sender, local expert) and parity, and each block keeps every (peer, local
// expert) chunk's place in shared memory (exchange/alltoallv.cuh).
constexpr int kMaxLocalExperts = 512;
constexpr int kMaxExperts = 1024;  // nranks * local experts
// AlltoAllv: the largest count (rows) and displacement a call may give. Counts travel to the peers
// in 40-bit fields of the count packets, all ones meaning "invalid" (collectives/exchange/
// alltoallv.cu); rows are at least a byte, and no GPU holds a terabyte.
constexpr long long kMaxVarRows = (1LL << 40) - 2;

// Point-to-point (yali.h: yaliSend, yaliRecv; collectives/p2p/p2p.cu): each ordered pair of ranks
// has up to kMaxP2PChannels rings (YALI_P2P_CHANNELS) of kP2PSlots slots in the receiver's window;
// a group's point-to-point calls on one comm run as one launch of at most kMaxP2POps calls
// (YALI_MAX_P2P_OPS): the kernel's parameters carry them (32 bytes each), and 960 is what fits
// beside the frame and the lanes in CUDA's 32,764 bytes of parameters (p2p.cu asserts it). One
// launch, not several: ranks cut a longer group at different calls, and launches that follow one
// another on a stream could then wait on each other across ranks.
constexpr int kMaxP2PChannels = 32;
constexpr int kP2PSlots = 4;
constexpr int kMaxP2POps = 960;

// ---- Data types: NCCL's values (yali.h's yaliDataType_t), so a cast is the conversion ------------
enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFp8E4M3 = 10,
  kFp8E5M2 = 11,
};
constexpr int kNumDataTypes = 12;

YALI_HOST_DEVICE constexpr bool validDataType(int t) { return t >= 0 && t < kNumDataTypes; }

YALI_HOST_DEVICE constexpr size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFp8E4M3:
    case DataType::kFp8E5M2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

YALI_HOST_DEVICE constexpr bool isFloatingType(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16 || t == DataType::kFp8E4M3 || t == DataType::kFp8E5M2;
}

const char* dataTypeName(DataType t);  // "int8", ..., "fp8_e5m2"

// ---- Reduction ops: yaliRedOp_t's values ------------------------------------------------------------
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
constexpr int kNumRedOps = 5;

// Avg divides by the number of ranks, which only the floating types can represent.
YALI_HOST_DEVICE constexpr bool opSupports(RedOp op, DataType t) { return op != RedOp::kAvg || isFloatingType(t); }

const char* redOpName(RedOp op);  // "sum", "prod", "max", "min", "avg"

// ---- Collectives: yaliCollective_t's values ---------------------------------------------------------
enum class Collective : int {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kGather = 5,
  kScatter = 6,
  kAlltoAll = 7,
  kAlltoAllv = 8,  // every uneven form: host counts, device counts, expert dispatch and combine
};
constexpr int kNumCollectives = 9;

const char* collectiveName(Collective c);  // "allreduce", "reducescatter", ...

// What a collective's call looks like, for the one argument-checking path (core/call.cc).
struct CollectiveShape {
  bool reduces;  // takes an op
  bool rooted;   // takes a root
};
YALI_HOST_DEVICE constexpr CollectiveShape collectiveShape(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter: return {true, false};
    case Collective::kReduce: return {true, true};
    case Collective::kBroadcast:
    case Collective::kGather:
    case Collective::kScatter: return {false, true};
    case Collective::kAllGather:
    case Collective::kAlltoAll:
    case Collective::kAlltoAllv: return {false, false};
  }
  return {false, false};
}

}  // namespace yali
