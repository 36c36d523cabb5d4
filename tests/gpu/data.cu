// Input generator and the device-side checkers (see data.h for the formulas).
#include "data.h"
#include "data_elem.h"

#include <cstring>

namespace yt {

size_t dtypeSize(yaliDataType_t dt) { return (size_t)elemBytes((int)dt); }

const char* dtypeName(yaliDataType_t dt) {
  switch (dt) {
    case yaliInt8: return "int8";
    case yaliUint8: return "uint8";
    case yaliInt32: return "int32";
    case yaliUint32: return "uint32";
    case yaliInt64: return "int64";
    case yaliUint64: return "uint64";
    case yaliFloat16: return "fp16";
    case yaliFloat32: return "fp32";
    case yaliFloat64: return "fp64";
    case yaliBfloat16: return "bf16";
    case yaliFloat8e4m3: return "fp8e4m3";
    case yaliFloat8e5m2: return "fp8e5m2";
    default: return "dtype?";
  }
}

const char* opName(yaliRedOp_t op) {
  if (op == kMoveOp) return "move";
  switch (op) {
    case yaliSum: return "sum";
    case yaliProd: return "prod";
    case yaliMax: return "max";
    case yaliMin: return "min";
    case yaliAvg: return "avg";
    default: return "op?";
  }
}

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

unsigned blocksFor(size_t count) {
  size_t b = (count + kThreads - 1) / kThreads;
  if (b > kMaxBlocks) b = kMaxBlocks;
  if (b == 0) b = 1;
  return (unsigned)b;
}

__global__ void generateKernel(void* buf, size_t count, int dt, int op, int rank, uint64_t seed,
                               const uint64_t* seedDev) {
  const uint64_t s = seedDev != nullptr ? combineSeed(*seedDev, seed) : seed;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    storeBits(buf, i, genBits(s, rank, i, dt, op), dt);
  }
}

__global__ void resetKernel(VerifyResult* res) {
  // Field by field: the struct is the host's layout, and a memset could not set firstBad to ~0.
  res->nbad = 0;
  res->nnan = 0;
  res->firstBad = ~0ull;
  res->hash = 0;
  res->nbadInput = 0;
  res->nrec = 0;
  res->pad = 0;
  res->nmodel = 0;
  res->firstBadInput = ~0ull;
}

__device__ void record(VerifyResult* res, uint64_t index, const ElementCheck& c) {
  atomicMin(&res->firstBad, (unsigned long long)index);
  const unsigned slot = atomicAdd(&res->nrec, 1u);
  if (slot < VerifyResult::kRecords) {
    VerifyResult::Record& r = res->rec[slot];
    r.index = index;
    r.got = c.got;
    r.expected = c.ref;
    r.tol = c.tol;
    r.gotBits = c.bits;
    r.wantBits = c.want;
    r.why = c.why;
    r.pad = 0;
  }
}

// mode 0: reduced (inBase); mode 1: moved (block, srcRank, srcChunk).
__global__ void verifyKernel(const void* out, size_t count, int dt, int op, int nranks,
                             uint64_t seed, OutputMap map, const void* in, int inRank,
                             VerifyResult* res) {
  unsigned long long bad = 0, nan = 0, model = 0, badInput = 0, hash = 0;
  const bool moved = op == (int)kMoveOp;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t bits = loadBits(out, i, dt);
    const ElementCheck c = moved ? checkMoved(bits, i, dt, nranks, seed, map.block, map.srcRank, map.srcChunk)
                                 : checkReduced(bits, map.inBase + i, dt, op, nranks, seed);
    hash += mix64(mix64(i) ^ bits);
    if (!c.ok) {
      ++bad;
      if (c.isNan) ++nan;
      if (c.why == VerifyResult::kModel) ++model;
      record(res, i, c);
    }
    if (in != nullptr && loadBits(in, i, dt) != genBits(seed, inRank, i, dt, op)) {
      ++badInput;
      atomicMin(&res->firstBadInput, (unsigned long long)i);
    }
  }
  if (bad) atomicAdd(&res->nbad, bad);
  if (nan) atomicAdd(&res->nnan, nan);
  if (model) atomicAdd(&res->nmodel, model);
  if (badInput) atomicAdd(&res->nbadInput, badInput);
  atomicAdd(&res->hash, hash);
}

__global__ void inputKernel(const void* in, size_t count, uint64_t first, int dt, int op, int rank,
                            uint64_t seed, VerifyResult* res) {
  unsigned long long badInput = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    if (loadBits(in, i, dt) != genBits(seed, rank, first + i, dt, op)) {
      ++badInput;
      atomicMin(&res->firstBadInput, (unsigned long long)(first + i));
    }
  }
  if (badInput) atomicAdd(&res->nbadInput, badInput);
}

__device__ inline bool skipped(const ByteSkips& s, uint64_t off) {
  for (int k = 0; k < s.n; ++k) {
    if (off >= s.begin[k] && off < s.end[k]) return true;
  }
  return false;
}

// Each thread takes 16-byte pieces: one vector load where the piece is aligned and overlaps no
// skipped range (nearly everywhere), bytes one by one elsewhere.
__global__ void bytesKernel(const unsigned char* base, size_t bytes, unsigned char value, ByteSkips skips,
                            VerifyResult* res) {
  unsigned long long bad = 0;
  const uint64_t pieces = (bytes + 15) / 16;
  const uint64_t misalign = (uint64_t)(uintptr_t)base & 15;
  const uint32_t word = 0x01010101u * value;
  for (uint64_t p = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; p < pieces;
       p += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t b0 = p * 16, b1 = b0 + 16 <= bytes ? b0 + 16 : bytes;
    bool touches = false;
    for (int k = 0; k < skips.n; ++k) touches |= skips.begin[k] < b1 && b0 < skips.end[k];
    if (misalign == 0 && b1 - b0 == 16 && !touches) {
      const uint4 v = *reinterpret_cast<const uint4*>(base + b0);
      if (v.x == word && v.y == word && v.z == word && v.w == word) continue;
    }
    for (uint64_t o = b0; o < b1; ++o) {
      if (skipped(skips, o) || base[o] == value) continue;
      ++bad;
      ElementCheck c;
      c.got = base[o];
      c.ref = value;
      c.tol = 0;
      c.bits = base[o];
      c.want = value;
      c.why = VerifyResult::kByte;
      record(res, o, c);
    }
  }
  if (bad) atomicAdd(&res->nbad, bad);
}

}  // namespace

cudaError_t launchGenerate(void* buf, size_t count, yaliDataType_t dt, yaliRedOp_t op, int rank,
                           uint64_t seed, const uint64_t* seedDev, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  generateKernel<<<blocksFor(count), kThreads, 0, stream>>>(buf, count, (int)dt, (int)op, rank,
                                                           seed, seedDev);
  return cudaGetLastError();
}

namespace {
__global__ void delayKernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
}  // namespace

cudaError_t launchDelay(double ms, cudaStream_t stream) {
  delayKernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(ms * 1e6));
  return cudaGetLastError();
}

cudaError_t enqueueReset(VerifyResult* scratch, cudaStream_t stream) {
  resetKernel<<<1, 1, 0, stream>>>(scratch);
  return cudaGetLastError();
}

cudaError_t enqueueVerifyMapped(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                                int nranks, uint64_t seed, const OutputMap& map,
                                VerifyResult* scratch, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  OutputMap m = map;
  if (m.block == 0) m.block = 1;
  verifyKernel<<<blocksFor(count), kThreads, 0, stream>>>(out, count, (int)dt, (int)op, nranks,
                                                         seed, m, nullptr, 0, scratch);
  return cudaGetLastError();
}

cudaError_t enqueueVerifyInput(const void* in, size_t count, size_t first, yaliDataType_t dt,
                               yaliRedOp_t op, int rank, uint64_t seed, VerifyResult* scratch,
                               cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  inputKernel<<<blocksFor(count), kThreads, 0, stream>>>(in, count, first, (int)dt, (int)op, rank,
                                                        seed, scratch);
  return cudaGetLastError();
}

cudaError_t enqueueCheckBytes(const void* base, size_t bytes, unsigned char value,
                              const ByteSkips& skips, VerifyResult* scratch, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  bytesKernel<<<blocksFor((bytes + 15) / 16), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(base), bytes, value, skips, scratch);
  return cudaGetLastError();
}

cudaError_t verifyOutput(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                         int nranks, uint64_t seed, const void* in, int inRank,
                         VerifyResult* scratch, VerifyResult* result, cudaStream_t stream) {
  cudaError_t e = enqueueReset(scratch, stream);
  if (e != cudaSuccess) return e;
  if (count > 0) {
    verifyKernel<<<blocksFor(count), kThreads, 0, stream>>>(out, count, (int)dt, (int)op, nranks,
                                                           seed, OutputMap(), in, inRank, scratch);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
      cudaStreamSynchronize(stream);
      return e;
    }
  }
  // Pageable destination: the copy returns once the data is in *result.
  e = cudaMemcpyAsync(result, scratch, sizeof *result, cudaMemcpyDeviceToHost, stream);
  cudaError_t s = cudaStreamSynchronize(stream);
  return e != cudaSuccess ? e : s;
}

}  // namespace yt
