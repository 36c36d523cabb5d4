// Element-level functions of the test data (see data.h): the generator's bits of one input element,
// raw loads and stores of every width, conversions between the twelve types and double, and the
// checks of one output element (reduced, or moved). Host-and-device, so that device kernels and any
// host-side tool agree bit for bit; only device code uses them today.
#ifndef YALI_TESTS_GPU_DATA_ELEM_H_
#define YALI_TESTS_GPU_DATA_ELEM_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "data.h"

namespace yt {

// ---- Widths and raw bits -------------------------------------------------------------------------

YT_HD inline int elemBytes(int dt) {
  switch (dt) {
    case yaliInt8:
    case yaliUint8:
    case yaliFloat8e4m3:
    case yaliFloat8e5m2: return 1;
    case yaliFloat16:
    case yaliBfloat16: return 2;
    case yaliInt32:
    case yaliUint32:
    case yaliFloat32: return 4;
    case yaliInt64:
    case yaliUint64:
    case yaliFloat64: return 8;
  }
  return 0;
}

YT_HD inline uint64_t widthMask(int dt) {
  const int b = elemBytes(dt);
  return b >= 8 ? ~0ull : ((1ull << (8 * b)) - 1);
}

YT_HD inline bool isFp8(int dt) { return dt == yaliFloat8e4m3 || dt == yaliFloat8e5m2; }

YT_HD inline uint64_t loadBits(const void* buf, uint64_t i, int dt) {
  switch (elemBytes(dt)) {
    case 1: return static_cast<const uint8_t*>(buf)[i];
    case 2: return static_cast<const uint16_t*>(buf)[i];
    case 4: return static_cast<const uint32_t*>(buf)[i];
    default: return static_cast<const uint64_t*>(buf)[i];
  }
}

YT_HD inline void storeBits(void* buf, uint64_t i, uint64_t bits, int dt) {
  switch (elemBytes(dt)) {
    case 1: static_cast<uint8_t*>(buf)[i] = (uint8_t)bits; break;
    case 2: static_cast<uint16_t*>(buf)[i] = (uint16_t)bits; break;
    case 4: static_cast<uint32_t*>(buf)[i] = (uint32_t)bits; break;
    default: static_cast<uint64_t*>(buf)[i] = bits; break;
  }
}

// Two's complement value of the low `bytes` bytes.
YT_HD inline int64_t signExtend(uint64_t bits, int dt) {
  const int shift = 64 - 8 * elemBytes(dt);
  return (int64_t)(bits << shift) >> shift;
}

YT_HD inline uint64_t floatBits(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}
YT_HD inline uint64_t doubleBits(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

YT_HD inline __nv_fp8_interpretation_t fp8Kind(int dt) {
  return dt == yaliFloat8e4m3 ? __NV_E4M3 : __NV_E5M2;
}

// Largest finite value of an fp8 type (the saturation bound).
YT_HD inline float fp8Max(int dt) { return dt == yaliFloat8e4m3 ? 448.0f : 57344.0f; }

// A float rounded to a type of fp32 precision or less: to nearest even, fp8 saturating to finite
// (yali.h's rule for results; also how inputs are made).
YT_HD inline uint64_t encodeFromFloat(float v, int dt) {
  switch (dt) {
    case yaliFloat16: return __half_as_ushort(__float2half_rn(v));
    case yaliBfloat16: return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    case yaliFloat8e4m3:
    case yaliFloat8e5m2: return (uint64_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fp8Kind(dt));
    default: return floatBits(v);
  }
}

// The value of a floating element's bits (exact: every type here fits in double).
YT_HD inline double decodeFloat(uint64_t bits, int dt) {
  switch (dt) {
    case yaliFloat16: {
      __half_raw r;
      r.x = (unsigned short)bits;
      return (double)__half2float(__half(r));
    }
    case yaliBfloat16: {
      __nv_bfloat16_raw r;
      r.x = (unsigned short)bits;
      return (double)__bfloat162float(__nv_bfloat16(r));
    }
    case yaliFloat8e4m3:
    case yaliFloat8e5m2: {
      __half_raw r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)bits, fp8Kind(dt));
      return (double)__half2float(__half(r));
    }
    case yaliFloat64: {
      double d;
      memcpy(&d, &bits, sizeof d);
      return d;
    }
    default: {
      const uint32_t u = (uint32_t)bits;
      float f;
      memcpy(&f, &u, sizeof f);
      return (double)f;
    }
  }
}

// Any element as a double, for messages (integers of 64 bits lose their low bits there; the
// records carry the raw bits too).
YT_HD inline double decodeAny(uint64_t bits, int dt) {
  if (dtypeIsFloat(dt)) return decodeFloat(bits, dt);
  if (dtypeIsSigned(dt)) return (double)signExtend(bits, dt);
  return (double)(bits & widthMask(dt));
}

// ---- The generator ---------------------------------------------------------------------------------

// Input element `i` of rank `rank`, as the type's bits (data.h says what values).
YT_HD inline uint64_t genBits(uint64_t seed, int rank, uint64_t i, int dt, int op) {
  const uint64_t h = mix64(seed ^ (((uint64_t)rank << 56) | i));
  const uint64_t mask = widthMask(dt);
  if (op == (int)kMoveOp) {
    uint64_t b = h & mask;
    if (b == mask) b ^= 1;  // never the poison: an element left unwritten must not pass
    return b;
  }
  if (!dtypeIsFloat(dt)) {
    uint64_t b = h & mask;
    if (op == yaliProd) b |= 1;
    return b;
  }
  if (dt == yaliFloat64) {
    double v;
    if (op == yaliProd) {
      // (2^51 + 3m) / 2^52 with m < 2^51: exact in double (numerator < 2^53), in [0.5, 2).
      const uint64_t m = (h >> 13) & ((1ull << 51) - 1);
      const double mag = (double)((1ull << 51) + 3 * m) * 0x1p-52;
      v = (h & 1) ? -mag : mag;
    } else {
      v = ((double)(int64_t)(h >> 11) - 0x1p52) * 0x1p-52;  // 53 bits: [-1, 1), exact
    }
    return doubleBits(v);
  }
  float v;
  if (op == yaliProd) {
    // (2^22 + 3m) / 2^23 with m < 2^22: exact in fp32 (numerator < 2^24), in [0.5, 2).
    const uint32_t m = (uint32_t)(h >> 42);
    const float mag = (float)((1u << 22) + 3u * m) * 0x1p-23f;
    v = (h & 1) ? -mag : mag;
  } else {
    v = ((float)(int64_t)(h >> 40) - 8388608.0f) * (1.0f / 8388608.0f);  // 24 bits: [-1, 1)
    // fp8: one element in 8 near the top of the range, so that sums saturate.
    if (isFp8(dt) && ((h >> 8) & 7) == 0) v *= 0.75f * fp8Max(dt);
  }
  return encodeFromFloat(v, dt);
}

// ---- Checks of one output element ----------------------------------------------------------------

struct ElementCheck {
  bool ok, isNan;
  int why;  // VerifyResult::Why
  double got, ref, tol;
  uint64_t bits, want;  // the output's bits; the expected bits (model, exact value, or source)
};

// Unit roundoff and smallest subnormal of the output type; the accumulation's error term.
YT_HD inline void dtypeTolerances(int dt, double* uOut, double* tiny, double* acc) {
  *acc = 0x1p-23;  // twice fp32's unit roundoff: every type but fp64 accumulates in fp32
  switch (dt) {
    case yaliFloat16: *uOut = 0x1p-11; *tiny = 0x1p-24; break;
    case yaliBfloat16: *uOut = 0x1p-8; *tiny = 0x1p-133; break;
    case yaliFloat8e4m3: *uOut = 0x1p-4; *tiny = 0x1p-9; break;
    case yaliFloat8e5m2: *uOut = 0x1p-3; *tiny = 0x1p-16; break;
    case yaliFloat64: *uOut = 0x1p-53; *tiny = 0x1p-1074; *acc = 0x1p-52; break;
    default: *uOut = 0x1p-24; *tiny = 0x1p-149; break;
  }
}

// Output element `outIndex` (already loaded: `bits`) against the reduction over ranks 0..n-1 of
// input element `inIndex`.
YT_HD inline ElementCheck checkReduced(uint64_t bits, uint64_t inIndex, int dt, int op, int nranks,
                                       uint64_t seed) {
  ElementCheck c;
  c.bits = bits;
  c.isNan = false;
  c.tol = 0.0;
  if (!dtypeIsFloat(dt)) {
    // Exact: accumulate in 64 bits and keep the low bits, which is wrap-around in the type's width
    // for sum and prod; max and min compare as the type does (signed or not).
    const uint64_t mask = widthMask(dt);
    uint64_t acc = genBits(seed, 0, inIndex, dt, op);
    for (int r = 1; r < nranks; ++r) {
      const uint64_t x = genBits(seed, r, inIndex, dt, op);
      switch (op) {
        case yaliSum: acc += x; break;
        case yaliProd: acc *= x; break;
        case yaliMax:
          if (dtypeIsSigned(dt) ? signExtend(x, dt) > signExtend(acc, dt) : x > acc) acc = x;
          break;
        case yaliMin:
          if (dtypeIsSigned(dt) ? signExtend(x, dt) < signExtend(acc, dt) : x < acc) acc = x;
          break;
        default: break;
      }
    }
    acc &= mask;
    c.want = acc;
    c.got = decodeAny(bits, dt);
    c.ref = decodeAny(acc, dt);
    c.ok = (bits & mask) == acc;
    c.why = c.ok ? VerifyResult::kOk : VerifyResult::kInteger;
    c.isNan = !c.ok && (bits & mask) == mask;  // counted as "still the poison"
    return c;
  }

  // Floating: the float64 reference (in rank order) and the accumulation model side by side.
  double uOut, tiny, accErr;
  dtypeTolerances(dt, &uOut, &tiny, &accErr);
  double ref = 0.0, sumAbs = 0.0;
  float m32 = 0.0f;
  double m64 = 0.0;
  for (int r = 0; r < nranks; ++r) {
    const uint64_t xb = genBits(seed, r, inIndex, dt, op);
    const double x = decodeFloat(xb, dt);
    const float xf = (float)x;  // exact: every type but fp64 fits in fp32
    switch (op) {
      case yaliProd:
        ref = r == 0 ? x : ref * x;
        m32 = r == 0 ? xf : m32 * xf;
        m64 = r == 0 ? x : m64 * x;
        break;
      case yaliMax:
        ref = r == 0 ? x : fmax(ref, x);
        m32 = r == 0 ? xf : fmaxf(m32, xf);
        m64 = r == 0 ? x : fmax(m64, x);
        break;
      case yaliMin:
        ref = r == 0 ? x : fmin(ref, x);
        m32 = r == 0 ? xf : fminf(m32, xf);
        m64 = r == 0 ? x : fmin(m64, x);
        break;
      default:
        ref += x;
        sumAbs += fabs(x);
        m32 = r == 0 ? xf : m32 + xf;
        m64 = r == 0 ? x : m64 + x;
        break;
    }
  }
  switch (op) {
    case yaliSum: c.tol = (nranks * accErr + 2.0 * uOut) * sumAbs + tiny; break;
    case yaliAvg:
      ref /= nranks;
      c.tol = ((nranks + 1) * accErr + 2.0 * uOut) * sumAbs / nranks + tiny;
      break;
    case yaliProd: c.tol = ((nranks + 1) * accErr + 2.0 * uOut) * fabs(ref) + tiny; break;
    default: c.tol = 0.0; break;
  }
  if (isFp8(dt)) {  // saturation to the largest finite value
    const double top = (double)fp8Max(dt);
    ref = ref > top ? top : ref < -top ? -top : ref;
  }
  c.want = dt == yaliFloat64 ? doubleBits(m64) : encodeFromFloat(m32, dt);
  c.got = decodeFloat(bits, dt);
  c.ref = ref;
  c.isNan = c.got != c.got;
  const bool inTol = !c.isNan && fabs(c.got - ref) <= c.tol;
  const bool onModel = op == yaliAvg || bits == c.want;
  c.ok = inTol && onModel;
  if (!inTol) {
    c.why = VerifyResult::kTolerance;
  } else if (!onModel) {
    c.why = VerifyResult::kModel;
    c.ref = decodeFloat(c.want, dt);  // the record shows the model's value, tolerance 0
    c.tol = 0.0;
  } else {
    c.why = VerifyResult::kOk;
  }
  return c;
}

// Output element `i` of a moved layout (OutputMap with kMoveOp): the source element's bits.
YT_HD inline ElementCheck checkMoved(uint64_t bits, uint64_t i, int dt, int nranks, uint64_t seed,
                                     uint64_t block, int srcRank, uint64_t srcChunk) {
  ElementCheck c;
  const uint64_t blk = i / block, within = i % block;
  const int src = srcRank >= 0 ? srcRank : (int)blk;
  c.bits = bits;
  c.want = (src < nranks) ? genBits(seed, src, srcChunk * block + within, dt, (int)kMoveOp) : ~0ull;
  c.ok = bits == c.want;
  c.why = c.ok ? VerifyResult::kOk : VerifyResult::kMoved;
  c.got = decodeAny(bits, dt);
  c.ref = decodeAny(c.want, dt);
  // NaN patterns are legitimate moved data; the poison (all-ones) never is (genBits): counted as
  // "still the poison", an element never written.
  c.isNan = !c.ok && bits == widthMask(dt);
  c.tol = 0.0;
  return c;
}

}  // namespace yt

#endif  // YALI_TESTS_GPU_DATA_ELEM_H_
