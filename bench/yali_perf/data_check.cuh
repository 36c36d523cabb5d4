// The values behind yali-perf's #wrong, as pure functions shared by the kernels (collectives.cu)
// and a host test (tests/test_data_check.cu): every rank's input element as a function of (seed,
// rank, index), and whether an output element is what the collective should have produced
// (reductions recomputed in float64 with a tolerance, or exactly for integers; data movement bit
// for bit). __host__ __device__ throughout, so that the same code is exercised without a GPU.
#ifndef YALI_PERF_DATA_CHECK_CUH_
#define YALI_PERF_DATA_CHECK_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives.h"
#include "perf_args.h"

namespace yali_perf {
namespace check {

// ---- Element types ------------------------------------------------------------------------------

// Floating types: how the reference rounds into the type, and the constants of the tolerance.
// FromDouble rounds through fp32 for the types that YALI accumulates in fp32, as the library
// rounds its accumulator into the element type (yali.h); fp64 is kept as is.
template <typename T>
struct Element;

template <>
struct Element<float> {
  static constexpr bool kFloating = true;
  __host__ __device__ static float FromDouble(double v) { return static_cast<float>(v); }
  __host__ __device__ static double ToDouble(float v) { return v; }
  static constexpr double kEpsilon = 1.0 / (1 << 23);
  static constexpr double kSmallestSubnormal = 1.40129846e-45;  // 2^-149
};

template <>
struct Element<double> {
  static constexpr bool kFloating = true;
  __host__ __device__ static double FromDouble(double v) { return v; }
  __host__ __device__ static double ToDouble(double v) { return v; }
  static constexpr double kEpsilon = 1.0 / 4503599627370496.0;  // 2^-52
  static constexpr double kSmallestSubnormal = 4.9406564584124654e-324;  // 2^-1074
};

template <>
struct Element<__half> {
  static constexpr bool kFloating = true;
  __host__ __device__ static __half FromDouble(double v) { return __float2half_rn(static_cast<float>(v)); }
  __host__ __device__ static double ToDouble(__half v) { return __half2float(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 10);
  static constexpr double kSmallestSubnormal = 5.9604644775390625e-08;  // 2^-24
};

template <>
struct Element<__nv_bfloat16> {
  static constexpr bool kFloating = true;
  __host__ __device__ static __nv_bfloat16 FromDouble(double v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
  __host__ __device__ static double ToDouble(__nv_bfloat16 v) { return __bfloat162float(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 7);
  static constexpr double kSmallestSubnormal = 9.18354961579912e-41;  // 2^-133
};

// fp8: rounded to nearest, saturating to the largest finite value, as YALI stores fp8 results
// (__NV_SATFINITE, yali.h). The inputs stay far from the largest value (448 for E4M3, 57344 for
// E5M2): sums of nranks values in [-1, 1), products in [0.25, 2.72] (FloatInput).
template <>
struct Element<__nv_fp8_e4m3> {
  static constexpr bool kFloating = true;
  __host__ __device__ static __nv_fp8_e4m3 FromDouble(double v) {
    __nv_fp8_e4m3 out;
    out.__x = __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, __NV_E4M3);
    return out;
  }
  __host__ __device__ static double ToDouble(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 3);            // 3 mantissa bits
  static constexpr double kSmallestSubnormal = 1.0 / (1 << 9);  // 2^-9
};

template <>
struct Element<__nv_fp8_e5m2> {
  static constexpr bool kFloating = true;
  __host__ __device__ static __nv_fp8_e5m2 FromDouble(double v) {
    __nv_fp8_e5m2 out;
    out.__x = __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, __NV_E5M2);
    return out;
  }
  __host__ __device__ static double ToDouble(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
  static constexpr double kEpsilon = 1.0 / (1 << 2);             // 2 mantissa bits
  static constexpr double kSmallestSubnormal = 1.0 / (1 << 16);  // 2^-16
};

// Integer types: reductions are exact, in the type's own width, with two's-complement
// wrap-around for sum and prod (computed on the unsigned type of the same width, where
// wrap-around is defined).
template <typename T>
struct IntegerElement {
  static constexpr bool kFloating = false;
  using Unsigned = typename std::make_unsigned<T>::type;
};
template <> struct Element<int8_t> : IntegerElement<int8_t> {};
template <> struct Element<uint8_t> : IntegerElement<uint8_t> {};
template <> struct Element<int32_t> : IntegerElement<int32_t> {};
template <> struct Element<uint32_t> : IntegerElement<uint32_t> {};
template <> struct Element<int64_t> : IntegerElement<int64_t> {};
template <> struct Element<uint64_t> : IntegerElement<uint64_t> {};

// The bits of an element, for the exact comparisons of data movement.
template <size_t kBytes> struct BitsOfSize;
template <> struct BitsOfSize<1> { using Type = uint8_t; };
template <> struct BitsOfSize<2> { using Type = uint16_t; };
template <> struct BitsOfSize<4> { using Type = uint32_t; };
template <> struct BitsOfSize<8> { using Type = uint64_t; };

template <typename T>
__host__ __device__ inline typename BitsOfSize<sizeof(T)>::Type BitsOf(const T& value) {
  typename BitsOfSize<sizeof(T)>::Type bits;
  memcpy(&bits, &value, sizeof(T));
  return bits;
}

// Calls f(T*) with a null pointer of the element type of `dtype`.
template <typename F>
void DispatchType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat: return f(static_cast<float*>(nullptr));
    case DType::kHalf: return f(static_cast<__half*>(nullptr));
    case DType::kBfloat16: return f(static_cast<__nv_bfloat16*>(nullptr));
    case DType::kDouble: return f(static_cast<double*>(nullptr));
    case DType::kF8e4m3: return f(static_cast<__nv_fp8_e4m3*>(nullptr));
    case DType::kF8e5m2: return f(static_cast<__nv_fp8_e5m2*>(nullptr));
    case DType::kInt8: return f(static_cast<int8_t*>(nullptr));
    case DType::kUint8: return f(static_cast<uint8_t*>(nullptr));
    case DType::kInt32: return f(static_cast<int32_t*>(nullptr));
    case DType::kUint32: return f(static_cast<uint32_t*>(nullptr));
    case DType::kInt64: return f(static_cast<int64_t*>(nullptr));
    case DType::kUint64: return f(static_cast<uint64_t*>(nullptr));
  }
}

// ---- Deterministic inputs -----------------------------------------------------------------------

// SplitMix64's finalizer: a bijective 64-bit mix, so distinct counters give independent-looking
// values.
__host__ __device__ inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__host__ __device__ inline uint64_t InputHash(uint64_t seed, int rank, size_t index) {
  return Mix64(seed ^ Mix64((static_cast<uint64_t>(rank) << 48) ^ index));
}

// A floating input before rounding to the element type. Sum, avg, max and min get uniform values
// in [-1, 1): signs cancel, so a wrong rank order or a missing rank shows. Prod gets magnitudes in
// [1 - d, 1 + d) with random signs, d = 1/4 up to 4 ranks and 1/nranks beyond, so that a product
// over any number of ranks stays within [(1 - d)^n, (1 + d)^n], inside [0.25, 2.72]: no overflow
// or underflow into subnormals in fp16, bf16 or fp8.
__host__ __device__ inline double FloatInput(uint64_t hash, int op, int nranks) {
  double unit = static_cast<double>(hash >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  if (op == static_cast<int>(RedOp::kProd)) {
    const double spread = nranks > 4 ? 1.0 / nranks : 0.25;
    double magnitude = 1.0 - spread + 2.0 * spread * unit;
    return (hash & 1) ? -magnitude : magnitude;
  }
  return 2.0 * unit - 1.0;
}

// An integer input: random bits over the whole width, so that sums wrap around. Prod gets odd
// values: a product of odd numbers is odd, so it never collapses to 0 modulo 2^bits however many
// ranks multiply (random even factors would make most products 0 in int8 with 8 ranks). No input
// is all ones (the poison pattern, PoisonBuffer), so a missed write in a data-moving collective
// always shows; flipping bit 1 keeps an odd value odd.
template <typename T>
__host__ __device__ inline T IntegerInput(uint64_t hash, int op) {
  using U = typename Element<T>::Unsigned;
  U bits = static_cast<U>(hash);
  if (op == static_cast<int>(RedOp::kProd)) bits |= 1;
  if (bits == static_cast<U>(~U(0))) bits ^= 2;
  return static_cast<T>(bits);
}

// Input element `index` of `rank`, as stored in the buffer.
template <typename T>
__host__ __device__ inline T StoredInput(uint64_t seed, int rank, size_t index, int op, int nranks) {
  const uint64_t hash = InputHash(seed, rank, index);
  if constexpr (Element<T>::kFloating) {
    return Element<T>::FromDouble(FloatInput(hash, op, nranks));
  } else {
    return IntegerInput<T>(hash, op);
  }
}

struct CheckArgs {
  int coll;
  int op;
  int rank;
  int nranks;
  int root;
  size_t block;  // the count passed to the call: every per-rank block has this many elements
  uint64_t seed;
  double accumulation_eps;
};

// The float64 reference adds its own rounding per step (unit roundoff of fp64, counted as a full
// epsilon); it matters only for fp64 data.
constexpr double kReferenceEpsilon = 1.0 / 4503599627370496.0;  // 2^-52

// A floating reduction's element `index` over every rank's regenerated input, in float64, and the
// tolerance for a library that adds relative error `accumulation_eps` per reduction step:
//   |out - ref| <= nranks * (accumulation_eps + reference epsilon) * magnitude
//                  + eps_out * max(|out|, |ref|) + smallest subnormal
// with magnitude = sum_r |x_r| for sum (/ nranks for avg), |prod_r x_r| for prod; max and min are
// exact (no arithmetic happens). The first term bounds the accumulation (each step's rounding is
// relative to a partial result, at most the magnitude); the second, one unit in the last place of
// the result, covers the final rounding into the element type of both the output and the
// reference (half a unit each), relative to the result itself rather than to the magnitude, so
// that it stays tight under cancellation: fp8 E4M3 (3 mantissa bits) rounded once is within 1/8 of
// the result, and a missing rank's contribution still shows at 8 ranks and more. The smallest
// subnormal is the spacing near 0, where the relative bounds vanish.
template <typename T>
__host__ __device__ inline bool FloatReductionOk(T out, size_t index, const CheckArgs& a) {
  const double scale = a.nranks * (a.accumulation_eps + kReferenceEpsilon);
  const bool prod = a.op == static_cast<int>(RedOp::kProd);
  const bool max = a.op == static_cast<int>(RedOp::kMax);
  const bool min = a.op == static_cast<int>(RedOp::kMin);
  double result = prod ? 1.0 : 0.0;
  double magnitude = 0.0;
  for (int r = 0; r < a.nranks; ++r) {
    double x = Element<T>::ToDouble(StoredInput<T>(a.seed, r, index, a.op, a.nranks));
    if (prod) {
      result *= x;
    } else if (max) {
      result = r == 0 ? x : fmax(result, x);
    } else if (min) {
      result = r == 0 ? x : fmin(result, x);
    } else {
      result += x;
      magnitude += fabs(x);
    }
  }
  if (a.op == static_cast<int>(RedOp::kAvg)) {
    result /= a.nranks;
    magnitude /= a.nranks;
  }
  if (prod) magnitude = fabs(result);
  // Rounded as the library must round its accumulator into the element type.
  const double reference = Element<T>::ToDouble(Element<T>::FromDouble(result));
  const double got = Element<T>::ToDouble(out);
  if (max || min) return got == reference;
  // `got == reference` first: two equal infinities have a NaN difference. NaN compares false
  // everywhere, so it is wrong.
  return got == reference ||
         fabs(got - reference) <= scale * magnitude +
                                      Element<T>::kEpsilon * fmax(fabs(got), fabs(reference)) +
                                      Element<T>::kSmallestSubnormal;
}

// An integer reduction's element `index`, exactly.
template <typename T>
__host__ __device__ inline bool IntegerReductionOk(T out, size_t index, const CheckArgs& a) {
  using U = typename Element<T>::Unsigned;
  U accumulator = a.op == static_cast<int>(RedOp::kProd) ? U(1) : U(0);
  T best = T(0);
  for (int r = 0; r < a.nranks; ++r) {
    const T x = StoredInput<T>(a.seed, r, index, a.op, a.nranks);
    switch (a.op) {
      case static_cast<int>(RedOp::kProd): accumulator = static_cast<U>(accumulator * static_cast<U>(x)); break;
      case static_cast<int>(RedOp::kMax): best = (r == 0 || x > best) ? x : best; break;
      case static_cast<int>(RedOp::kMin): best = (r == 0 || x < best) ? x : best; break;
      default: accumulator = static_cast<U>(accumulator + static_cast<U>(x)); break;
    }
  }
  const bool ordered = a.op == static_cast<int>(RedOp::kMax) || a.op == static_cast<int>(RedOp::kMin);
  const T expected = ordered ? best : static_cast<T>(accumulator);
  return out == expected;
}

// Where output element `i` of a data-moving collective comes from: rank *source's input element
// *index.
__host__ __device__ inline void SourceOf(const CheckArgs& a, size_t i, int* source, size_t* index) {
  switch (a.coll) {
    case static_cast<int>(CollId::kAllGather):
    case static_cast<int>(CollId::kGather):
      // Block s of the output is rank s's input.
      *source = static_cast<int>(i / a.block);
      *index = i % a.block;
      return;
    case static_cast<int>(CollId::kScatter):
      // This rank's block of the root's input.
      *source = a.root;
      *index = static_cast<size_t>(a.rank) * a.block + i;
      return;
    case static_cast<int>(CollId::kAlltoAll):
      // Block s of the output is block `rank` of rank s's input.
      *source = static_cast<int>(i / a.block);
      *index = static_cast<size_t>(a.rank) * a.block + i % a.block;
      return;
    case static_cast<int>(CollId::kSendRecv):
      // What the previous rank sent: its whole input (nccl-tests' expected buffer is rank-1's).
      *source = (a.rank - 1 + a.nranks) % a.nranks;
      *index = i;
      return;
    default:  // broadcast: the root's input
      *source = a.root;
      *index = i;
      return;
  }
}

__host__ __device__ inline bool Reduces(int coll) {
  return coll == static_cast<int>(CollId::kAllReduce) ||
         coll == static_cast<int>(CollId::kReduceScatter) ||
         coll == static_cast<int>(CollId::kReduce) || coll == static_cast<int>(CollId::kRsAg);
}

inline CheckArgs CheckArgsFor(const DataSpec& spec) {
  CheckArgs args;
  args.coll = static_cast<int>(spec.coll);
  args.op = static_cast<int>(spec.op);
  args.rank = spec.rank;
  args.nranks = spec.nranks;
  args.root = spec.root;
  args.block = spec.count;
  args.seed = spec.seed;
  args.accumulation_eps = spec.accumulation_eps;
  return args;
}

// Whether output element `i` of this rank is right.
template <typename T>
__host__ __device__ inline bool OutputElementOk(T out, size_t i, const CheckArgs& a) {
  if (Reduces(a.coll)) {
    // ReduceScatter's output is block `rank` of the reduction.
    const size_t index =
        i + (a.coll == static_cast<int>(CollId::kReduceScatter) ? static_cast<size_t>(a.rank) * a.block
                                                                : 0);
    if constexpr (Element<T>::kFloating) {
      return FloatReductionOk<T>(out, index, a);
    } else {
      return IntegerReductionOk<T>(out, index, a);
    }
  }
  int source = 0;
  size_t index = 0;
  SourceOf(a, i, &source, &index);
  return BitsOf(out) == BitsOf(StoredInput<T>(a.seed, source, index, a.op, a.nranks));
}

// ---- AlltoAllv rows (alltoallv_plan.h) ----------------------------------------------------------

// All-ones bytes: the poison (PoisonBuffer), NaN in every floating type and never an input.
template <typename T>
__host__ __device__ inline T AllOnes() {
  const typename BitsOfSize<sizeof(T)>::Type bits = ~typename BitsOfSize<sizeof(T)>::Type(0);
  T value;
  memcpy(&value, &bits, sizeof(T));
  return value;
}

// Element `column` of the row with id `id` (alltoallv_plan.h: RowId): its sender's input (the
// data-moving collectives' values, StoredInput) at (the row's place among its sender's rows) *
// hidden + column, so that no two elements of the case share a position.
template <typename T>
__host__ __device__ inline T AlltoAllvElement(const AlltoAllvRows& rows, int64_t id,
                                              size_t column) {
  const uint64_t row = static_cast<uint64_t>(id);
  const int source = static_cast<int>(row / rows.rows_per_rank);
  const size_t index = (row % rows.rows_per_rank) * rows.hidden + column;
  return StoredInput<T>(rows.seed, source, index, static_cast<int>(RedOp::kSum), 1);
}

// What a position of an output must hold: the row's element, or the poison where no row belongs
// (id < 0: kNoRow). Bit for bit.
template <typename T>
__host__ __device__ inline T AlltoAllvExpected(const AlltoAllvRows& rows, int64_t id,
                                               size_t column) {
  return id < 0 ? AllOnes<T>() : AlltoAllvElement<T>(rows, id, column);
}

}  // namespace check
}  // namespace yali_perf

#endif  // YALI_PERF_DATA_CHECK_CUH_
