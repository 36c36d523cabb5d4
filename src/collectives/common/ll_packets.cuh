// LL packets, shared by one-shot AllReduce and the *_ll exchanges (exchange.cuh).
//
// LL packet (16 bytes, written with one st.volatile.v4): { data0, flag, data1, flag }, 8 bytes of
// payload. The flag is the launch epoch (at most kEpochLimit, so it fits 32 bits and no two
// launches of a round share it; the rebase clears the packets between rounds). A reader polls a
// packet until both flags equal the current epoch: each 8-byte half {data, flag} is written by one
// 8-byte-atomic piece of the 16-byte store, so a half whose flag matches carries this epoch's
// data. No separate "data ready" flag is needed.
#pragma once

#include "collectives/common/device.cuh"

namespace yali {


// Reads the 8 payload bytes of packet `p` (elements [p*k, p*k+k) with k = 8/sizeof(T)) from `src`,
// zero-padding past `count`. Uses one 8-byte load when the packet is whole and aligned.
template <typename T>
__device__ __forceinline__ uint2 loadPayload8(const T* src, size_t p, size_t count) {
  constexpr size_t k = 8 / sizeof(T);
  const size_t first = p * k;
  if (first + k <= count && (reinterpret_cast<uintptr_t>(src + first) & 7) == 0) {
    return *reinterpret_cast<const uint2*>(src + first);
  }
  uint2 v = make_uint2(0, 0);
  T* e = reinterpret_cast<T*>(&v);
  for (size_t i = 0; i < k && first + i < count; ++i) e[i] = src[first + i];
  return v;
}

template <typename T>
__device__ __forceinline__ void storePayload8(T* dst, size_t p, size_t count, uint2 v) {
  constexpr size_t k = 8 / sizeof(T);
  const size_t first = p * k;
  if (first + k <= count && (reinterpret_cast<uintptr_t>(dst + first) & 7) == 0) {
    *reinterpret_cast<uint2*>(dst + first) = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
  for (size_t i = 0; i < k && first + i < count; ++i) dst[first + i] = e[i];
}

// Running accumulator (ElemTraits<T>::Acc) over the 8-byte payloads of one packet position, fed in rank order.
template <typename T, RedOp kOp>
struct PayloadAccumulator {
  static constexpr int k = 8 / sizeof(T);
  typename ElemTraits<T>::Acc acc[k];
  __device__ __forceinline__ void start(uint2 v) {
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < k; ++e) acc[e] = ElemTraits<T>::toAcc(x[e]);
  }
  __device__ __forceinline__ void add(uint2 v) {
    const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < k; ++e) acc[e] = Reducer<kOp>::combine(acc[e], ElemTraits<T>::toAcc(x[e]));
  }
  __device__ __forceinline__ uint2 result(int nranks) const {
    uint2 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < k; ++e) o[e] = ElemTraits<T>::fromAcc(Reducer<kOp>::finish(acc[e], nranks));
    return out;
  }
};


__device__ __forceinline__ uint4 makePacket(uint2 payload, uint32_t flag) {
  return make_uint4(payload.x, flag, payload.y, flag);
}

// Waits until packet `src` carries `flag` in both halves; false when the wait failed.
__device__ __forceinline__ bool waitPacket(const uint4* src, uint32_t flag, WaitGuard& guard, int phase,
                                           uint2* payload) {
  uint4 v = loadVolatile16(src);
  while (v.y != flag || v.w != flag) {
    if (!guard.keepWaiting(phase)) return false;
    v = loadVolatile16(src);
  }
  *payload = make_uint2(v.x, v.z);
  return true;
}

}  // namespace yali
