// Test data for the GPU suite: inputs generated on the device from a counter-based hash, and
// device-side checkers that recompute every rank's input and the expected output, for all twelve
// element types and for every collective's layout.
//
// Every input element is a pure function of (seed, rank, index, dtype, op), so every rank can
// regenerate every other rank's input and check its own output without communication. The values
// are exactly representable in the dtype:
//   floating types, sum/avg/max/min: k / 2^23 for a random 24-bit k (fp64: k / 2^52 for a random
//                    53-bit k), i.e. uniform in [-1, 1), rounded to the dtype. For fp8, one element
//                    in 8 is scaled to three quarters of the type's largest finite value, so that
//                    sums of two or more ranks overflow it (the result must saturate: 448 for E4M3,
//                    57344 for E5M2, never NaN or inf).
//   floating types, prod: a random sign times a magnitude in [0.5, 2), so a product of up to 8 stays
//                    in [2^-8, 2^8], inside every type's range.
//   integer types:   random bits of the type's width (sums and products wrap, max/min see both signs);
//                    odd values for prod, so that products do not collapse to 0 modulo 2^width.
//   kMoveOp (data that collectives only move: AllGather, Broadcast, Gather, Scatter, AlltoAll):
//                    random bits of the width, every pattern but all-ones (the poison): NaNs with
//                    payloads, infinities, subnormals and -0 included. Checked bit for bit.
//
// Reductions are checked two ways (yali.h's contract):
//  1. Against a reference: integers exactly (two's complement wrap); floating types against a float64
//     reference accumulated in rank order, within (u = unit roundoff)
//       sum:  |out - ref| <= (n * a + 2 * u_out) * sum|x| + tiny_out
//       avg:  |out - ref| <= ((n + 1) * a + 2 * u_out) * sum|x| / n + tiny_out
//       prod: |out - ref| <= ((n + 1) * a + 2 * u_out) * |ref| + tiny_out
//       max/min: out == ref exactly.
//     a = 2^-23 (twice fp32's unit roundoff: fp16, bf16, fp8 and fp32 accumulate in fp32) or 2^-52
//     (fp64 accumulates in fp64); u_out = 2^-24 fp32, 2^-11 fp16, 2^-8 bf16, 2^-4 fp8 E4M3, 2^-3
//     fp8 E5M2, 2^-53 fp64; tiny_out is the type's smallest subnormal. fp8 references are clamped to
//     the largest finite value (saturation). A NaN is always wrong.
//  2. Against the accumulation model the header documents, bit for bit (sum, prod, max, min): the
//     accumulator (fp32; fp64 for fp64) starts from rank 0's element and takes ranks 1..n-1 in
//     order, then rounds once to the type (round to nearest even; fp8 saturating to finite). A
//     reduction that accumulates in the element type, in another order, or rounds twice fails this
//     even where the tolerance would let it pass. avg is checked against the reference only (the
//     header says "divided by the number of ranks", which one multiplication by 1/n would bend by an
//     ulp).
#ifndef YALI_TESTS_GPU_DATA_H_
#define YALI_TESTS_GPU_DATA_H_

#include <cuda_runtime.h>
#include <yali/yali.h>

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define YT_HD __host__ __device__
#else
#define YT_HD
#endif

namespace yt {

// Every element type, in yaliDataType_t order.
inline constexpr yaliDataType_t kEveryDtype[] = {
    yaliInt8,    yaliUint8,   yaliInt32,    yaliUint32,     yaliInt64,     yaliUint64,
    yaliFloat16, yaliFloat32, yaliFloat64,  yaliBfloat16,   yaliFloat8e4m3, yaliFloat8e5m2};
inline constexpr yaliRedOp_t kEveryOp[] = {yaliSum, yaliProd, yaliMax, yaliMin, yaliAvg};

// The "op" of data that is only moved (see above). Not a yaliRedOp_t the library accepts.
inline constexpr yaliRedOp_t kMoveOp = static_cast<yaliRedOp_t>(0x100);

size_t dtypeSize(yaliDataType_t dt);  // 0 for a value that is no type
const char* dtypeName(yaliDataType_t dt);
const char* opName(yaliRedOp_t op);

YT_HD inline bool dtypeIsFloat(int dt) {
  return dt == yaliFloat16 || dt == yaliFloat32 || dt == yaliFloat64 || dt == yaliBfloat16 ||
         dt == yaliFloat8e4m3 || dt == yaliFloat8e5m2;
}
YT_HD inline bool dtypeIsSigned(int dt) { return dt == yaliInt8 || dt == yaliInt32 || dt == yaliInt64; }
// A reduction the library must accept for this type (avg only for the floating types).
inline bool opValidFor(yaliRedOp_t op, yaliDataType_t dt) {
  return (int)op >= 0 && (int)op < (int)yaliNumOps && (op != yaliAvg || dtypeIsFloat(dt));
}

// splitmix64's finalizer: a bijection on 64-bit words with good avalanche.
YT_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The seed of one input set from a base seed (for graphs: the value the host writes to the device
// between replays) and a salt (which of the captured calls).
YT_HD inline uint64_t combineSeed(uint64_t base, uint64_t salt) {
  return mix64(base ^ mix64(salt + 0x632BE59BD9B4E019ull));
}

// Writes rank `rank`'s input elements 0..count-1 for `seed` into buf[0..count). With seedDev !=
// nullptr the seed is combineSeed(*seedDev, seed) read on the device when the kernel runs (so a
// captured graph can be replayed with new data). `op` selects the value distribution (kMoveOp:
// raw bits). Asynchronous on `stream`.
cudaError_t launchGenerate(void* buf, size_t count, yaliDataType_t dt, yaliRedOp_t op, int rank,
                           uint64_t seed, const uint64_t* seedDev, cudaStream_t stream);

// One thread that keeps `stream` busy for `ms` milliseconds of the GPU's global timer (a stand-in
// for a producer still running when a later call is issued). Asynchronous.
cudaError_t launchDelay(double ms, cudaStream_t stream);

// What a checker found. Lives in device memory while the checker runs.
struct VerifyResult {
  static constexpr int kRecords = 8;
  unsigned long long nbad;       // output elements wrong (NaN and model deviations included)
  unsigned long long nnan;       // of those, NaN
  unsigned long long firstBad;   // lowest wrong index (~0 when none)
  unsigned long long hash;       // order-independent hash of the output bytes (identity check)
  unsigned long long nbadInput;  // elements of the send buffer that changed (when checked)
  unsigned int nrec;             // records written (may exceed kRecords; only kRecords kept)
  unsigned int pad;
  // Why an element is wrong.
  enum Why : int {
    kOk = 0,
    kTolerance = 1,  // floating: NaN, or outside the float64 reference's tolerance
    kModel = 2,      // floating: within tolerance, but not the bits of the accumulation model
    kInteger = 3,    // integer reduction: not the exact wrapped value
    kMoved = 4,      // moved data: not the source element's bits
    kByte = 5,       // byte check: a byte that does not hold the expected value
  };
  struct Record {
    unsigned long long index;  // element index (byte offset for byte checks)
    double got, expected, tol;  // expected: the model's value (tol 0) for kModel
    unsigned long long gotBits, wantBits;
    int why;
    int pad;
  } rec[kRecords];
  unsigned long long nmodel;         // of nbad: within tolerance but off the accumulation model
  unsigned long long firstBadInput;  // lowest changed input index (~0 when none)
};

// Checks out[0..count) against the reduction (op) of `nranks` ranks' inputs for `seed` (AllReduce's
// layout); with in != nullptr also checks that in[0..count) still holds rank `inRank`'s input (the
// library must not write the send buffer). `scratch` is a device VerifyResult. Enqueues on
// `stream`, synchronizes it, and copies the result to *result. Returns the first CUDA error.
cudaError_t verifyOutput(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                         int nranks, uint64_t seed, const void* in, int inRank,
                         VerifyResult* scratch, VerifyResult* result, cudaStream_t stream);

// ---- Every collective's layout ---------------------------------------------------------------------

// Where output element i of one rank comes from.
//   op a reduction: the reduction over ranks 0..n-1 of input element inBase + i
//                   (AllReduce and Reduce: inBase 0; ReduceScatter on rank k: k * recvcount).
//   op == kMoveOp:  input element srcChunk * block + (i % block) of rank
//                   (srcRank >= 0 ? srcRank : i / block)
//                   (AllGather, Gather: srcRank -1, srcChunk 0; Broadcast: srcRank root, srcChunk 0;
//                    Scatter on rank k: srcRank root, srcChunk k; AlltoAll on rank k: srcRank -1,
//                    srcChunk k).
struct OutputMap {
  unsigned long long inBase = 0;
  unsigned long long block = 1;
  int srcRank = -1;
  unsigned long long srcChunk = 0;
};

// Sets *scratch to "nothing found" (firstBad ~0, counts 0). Asynchronous.
cudaError_t enqueueReset(VerifyResult* scratch, cudaStream_t stream);

// The checks below add to *scratch (reset it first); nothing waits. Read *scratch after the stream
// has been synchronized (copy it to the host).
//
// out[0..count) against `map` for `nranks` ranks' inputs for `seed`; adds to nbad/nnan/nmodel,
// records, and the hash.
cudaError_t enqueueVerifyMapped(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                                int nranks, uint64_t seed, const OutputMap& map,
                                VerifyResult* scratch, cudaStream_t stream);
// in[0..count) still holds rank `rank`'s input elements first..first+count-1 for (seed, op); adds to
// nbadInput and firstBadInput.
cudaError_t enqueueVerifyInput(const void* in, size_t count, size_t first, yaliDataType_t dt,
                               yaliRedOp_t op, int rank, uint64_t seed, VerifyResult* scratch,
                               cudaStream_t stream);

// Byte ranges left out of a byte check (at most kMaxSkips).
struct ByteSkips {
  static constexpr int kMaxSkips = 6;
  int n = 0;
  unsigned long long begin[kMaxSkips], end[kMaxSkips];  // offsets from the checked base
};
// Every byte of base[0..bytes) outside `skips` equals `value`; adds the bytes that do not to nbad
// (firstBad: the lowest such offset; records: offset and byte). For guard regions and untouched
// outputs, on the device (no copy of the allocation to the host).
cudaError_t enqueueCheckBytes(const void* base, size_t bytes, unsigned char value,
                              const ByteSkips& skips, VerifyResult* scratch, cudaStream_t stream);

}  // namespace yt

#endif  // YALI_TESTS_GPU_DATA_H_
