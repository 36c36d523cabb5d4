// Element-level functions of the test data (see data.h): the generator's value of one input
// element, loads and stores of the three dtypes, and the check of one output element against the
// float64 reference. Host-and-device, so the device kernels and any host-side tool agree bit for bit.
#ifndef YALI_TESTS_GPU_DATA_ELEM_H_
#define YALI_TESTS_GPU_DATA_ELEM_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "data.h"

namespace yt {

// Rounds v to the dtype and back (exact for every value the dtype holds).
YT_HD inline float roundToDtype(float v, int dt) {
  if (dt == yaliFloat16) return __half2float(__float2half_rn(v));
  if (dt == yaliBfloat16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

// Input element `i` of rank `rank` (already rounded to the dtype).
YT_HD inline float genValue(uint64_t seed, int rank, uint64_t i, int dt, int op) {
  uint64_t h = mix64(seed ^ (((uint64_t)rank << 56) | i));
  float v;
  if (op == yaliProd) {
    float frac = (float)(h >> 41) * (1.0f / 8388608.0f);  // 23 bits: [0, 1)
    float mag = 0.5f + 1.5f * frac;                       // [0.5, 2)
    v = (h & 1) ? -mag : mag;
  } else {
    v = ((float)(int64_t)(h >> 40) - 8388608.0f) * (1.0f / 8388608.0f);  // 24 bits: [-1, 1)
  }
  return roundToDtype(v, dt);
}

YT_HD inline void storeValue(void* buf, uint64_t i, float v, int dt) {
  if (dt == yaliFloat16) {
    static_cast<__half*>(buf)[i] = __float2half_rn(v);
  } else if (dt == yaliBfloat16) {
    static_cast<__nv_bfloat16*>(buf)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(buf)[i] = v;
  }
}

// The element as a double, and its raw bits (for hashing and bitwise comparison).
YT_HD inline double loadValue(const void* buf, uint64_t i, int dt, uint32_t* bits) {
  if (dt == yaliFloat16) {
    __half h = static_cast<const __half*>(buf)[i];
    *bits = static_cast<const uint16_t*>(buf)[i];
    return (double)__half2float(h);
  }
  if (dt == yaliBfloat16) {
    __nv_bfloat16 b = static_cast<const __nv_bfloat16*>(buf)[i];
    *bits = static_cast<const uint16_t*>(buf)[i];
    return (double)__bfloat162float(b);
  }
  *bits = static_cast<const uint32_t*>(buf)[i];
  return (double)static_cast<const float*>(buf)[i];
}

YT_HD inline uint32_t valueBits(float v, int dt) {
  if (dt == yaliFloat16) return __half_as_ushort(__float2half_rn(v));
  if (dt == yaliBfloat16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// One output element checked against the reference of `nranks` ranks' inputs.
struct ElementCheck {
  bool ok, isNan;
  double got, ref, tol;
  uint32_t bits;
};

YT_HD inline ElementCheck checkElement(const void* out, uint64_t i, int dt, int op, int nranks,
                                       uint64_t seed, double uOut, double tiny) {
  const double kAcc = 1.0 / 8388608.0;  // 2^-23: twice fp32's unit roundoff
  double ref = 0.0, sumAbs = 0.0;
  for (int r = 0; r < nranks; ++r) {
    double x = (double)genValue(seed, r, i, dt, op);
    switch (op) {
      case yaliProd: ref = r == 0 ? x : ref * x; break;
      case yaliMax: ref = r == 0 ? x : fmax(ref, x); break;
      case yaliMin: ref = r == 0 ? x : fmin(ref, x); break;
      default: ref += x; sumAbs += fabs(x); break;
    }
  }
  double tol;
  switch (op) {
    case yaliSum: tol = (nranks * kAcc + 2.0 * uOut) * sumAbs + tiny; break;
    case yaliAvg:
      ref /= nranks;
      tol = ((nranks + 1) * kAcc + 2.0 * uOut) * sumAbs / nranks + tiny;
      break;
    case yaliProd: tol = ((nranks + 1) * kAcc + 2.0 * uOut) * fabs(ref) + tiny; break;
    default: tol = 0.0; break;
  }
  ElementCheck c;
  c.got = loadValue(out, i, dt, &c.bits);
  c.ref = ref;
  c.tol = tol;
  c.isNan = c.got != c.got;
  c.ok = !c.isNan && fabs(c.got - ref) <= tol;
  return c;
}

// Unit roundoff and smallest subnormal of the output dtype.
inline void dtypeTolerances(int dt, double* uOut, double* tiny) {
  *uOut = 0x1p-24;
  *tiny = 0x1p-149;
  if (dt == yaliFloat16) {
    *uOut = 0x1p-11;
    *tiny = 0x1p-24;
  } else if (dt == yaliBfloat16) {
    *uOut = 0x1p-8;
    *tiny = 0x1p-133;
  }
}

}  // namespace yt

#endif  // YALI_TESTS_GPU_DATA_ELEM_H_
