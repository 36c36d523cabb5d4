// Test data for the GPU suite: inputs generated on the device from a counter-based hash, and a
// device-side checker that recomputes the float64 reference of all ranks' inputs.
//
// Every input element is a pure function of (seed, rank, index, dtype, op), so every rank can
// regenerate every other rank's input and check its own output without communication. The values
// are exactly representable in the dtype (generated in float, rounded to the dtype; the reference
// uses the rounded values):
//   sum/avg/max/min: k / 2^23 for a random 24-bit k, i.e. uniform in [-1, 1);
//   prod:            a random sign times a magnitude in [0.5, 2), so a product of up to 8 stays in
//                    [2^-8, 2^8], inside fp16's normal range.
// The reference is accumulated in float64 in rank order 0..n-1. Tolerances (u = unit roundoff):
//   sum:  |out - ref| <= (n * 2^-23 + 2 * u_out) * sum|x| + tiny_out
//   avg:  |out - ref| <= ((n + 1) * 2^-23 + 2 * u_out) * sum|x| / n + tiny_out
//   prod: |out - ref| <= ((n + 1) * 2^-23 + 2 * u_out) * |ref| + tiny_out
//   max/min: out == ref exactly (the extreme of representable values is representable).
// with u_out = 2^-24 (fp32), 2^-11 (fp16), 2^-8 (bf16), and tiny_out the dtype's smallest
// subnormal. A NaN is always wrong. fp16/bf16 accumulate in fp32 (the header says so): n * 2^-23 is
// twice the fp32 accumulation bound, and 2 * u_out twice the final rounding.
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

size_t dtypeSize(yaliDataType_t dt);
const char* dtypeName(yaliDataType_t dt);
const char* opName(yaliRedOp_t op);

// splitmix64's finalizer: a bijection on 64-bit words with good avalanche.
YT_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The seed of one input set from a base seed (for graphs: the value the host writes to the device
// between replays) and a salt (which of the captured allreduces).
YT_HD inline uint64_t combineSeed(uint64_t base, uint64_t salt) {
  return mix64(base ^ mix64(salt + 0x632BE59BD9B4E019ull));
}

// Writes rank `rank`'s input for `seed` into buf[0..count). With seedDev != nullptr the seed is
// combineSeed(*seedDev, seed) read on the device when the kernel runs (so a captured graph can be
// replayed with new data). Asynchronous on `stream`.
cudaError_t launchGenerate(void* buf, size_t count, yaliDataType_t dt, yaliRedOp_t op, int rank,
                           uint64_t seed, const uint64_t* seedDev, cudaStream_t stream);

// What the checker found. Lives in device memory while the checker runs.
struct VerifyResult {
  static constexpr int kRecords = 8;
  unsigned long long nbad;       // output elements outside tolerance (NaN included)
  unsigned long long nnan;       // of those, NaN
  unsigned long long firstBad;   // lowest wrong index (~0 when none)
  unsigned long long hash;       // order-independent hash of the output bytes (identity check)
  unsigned long long nbadInput;  // elements of the send buffer that changed (when checked)
  unsigned int nrec;             // records written (may exceed kRecords; only kRecords kept)
  unsigned int pad;
  struct Record {
    unsigned long long index;
    double got, expected, tol;
  } rec[kRecords];
};

// Checks out[0..count) against the reference of `nranks` ranks' inputs for `seed`; with in !=
// nullptr also checks that in[0..count) still holds rank `inRank`'s input (the library must not
// write the send buffer). `scratch` is a device VerifyResult. Enqueues on `stream`, synchronizes it,
// and copies the result to *result. Returns the first CUDA error.
cudaError_t verifyOutput(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                         int nranks, uint64_t seed, const void* in, int inRank,
                         VerifyResult* scratch, VerifyResult* result, cudaStream_t stream);
}  // namespace yt

#endif  // YALI_TESTS_GPU_DATA_H_
