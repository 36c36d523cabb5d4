// Input generator and float64 reference checker (see data.h for the formulas).
#include "data.h"
#include "data_elem.h"

#include <cstring>

namespace yt {

size_t dtypeSize(yaliDataType_t dt) {
  switch (dt) {
    case yaliFloat32: return 4;
    case yaliFloat16: return 2;
    case yaliBfloat16: return 2;
  }
  return 0;
}

const char* dtypeName(yaliDataType_t dt) {
  switch (dt) {
    case yaliFloat32: return "fp32";
    case yaliFloat16: return "fp16";
    case yaliBfloat16: return "bf16";
  }
  return "dtype?";
}

const char* opName(yaliRedOp_t op) {
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
  uint64_t s = seedDev != nullptr ? combineSeed(*seedDev, seed) : seed;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    storeValue(buf, i, genValue(s, rank, i, dt, op), dt);
  }
}

__global__ void verifyKernel(const void* out, size_t count, int dt, int op, int nranks,
                             uint64_t seed, const void* in, int inRank, double uOut, double tiny,
                             VerifyResult* res) {
  unsigned long long bad = 0, nan = 0, badInput = 0, hash = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < count;
       i += (uint64_t)gridDim.x * blockDim.x) {
    ElementCheck c = checkElement(out, i, dt, op, nranks, seed, uOut, tiny);
    hash += mix64(mix64(i) ^ c.bits);
    if (!c.ok) {
      ++bad;
      if (c.isNan) ++nan;
      atomicMin(&res->firstBad, (unsigned long long)i);
      unsigned slot = atomicAdd(&res->nrec, 1u);
      if (slot < VerifyResult::kRecords) {
        res->rec[slot].index = i;
        res->rec[slot].got = c.got;
        res->rec[slot].expected = c.ref;
        res->rec[slot].tol = c.tol;
      }
    }
    if (in != nullptr) {
      uint32_t inBits;
      (void)loadValue(in, i, dt, &inBits);
      if (inBits != valueBits(genValue(seed, inRank, i, dt, op), dt)) ++badInput;
    }
  }
  if (bad) atomicAdd(&res->nbad, bad);
  if (nan) atomicAdd(&res->nnan, nan);
  if (badInput) atomicAdd(&res->nbadInput, badInput);
  atomicAdd(&res->hash, hash);
}

}  // namespace

cudaError_t launchGenerate(void* buf, size_t count, yaliDataType_t dt, yaliRedOp_t op, int rank,
                           uint64_t seed, const uint64_t* seedDev, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  generateKernel<<<blocksFor(count), kThreads, 0, stream>>>(buf, count, (int)dt, (int)op, rank,
                                                           seed, seedDev);
  return cudaGetLastError();
}

cudaError_t verifyOutput(const void* out, size_t count, yaliDataType_t dt, yaliRedOp_t op,
                         int nranks, uint64_t seed, const void* in, int inRank,
                         VerifyResult* scratch, VerifyResult* result, cudaStream_t stream) {
  VerifyResult init;
  std::memset(&init, 0, sizeof init);
  init.firstBad = ~0ull;
  double uOut, tiny;
  dtypeTolerances((int)dt, &uOut, &tiny);
  // The init struct lives on this stack frame: copy synchronously with respect to the host by
  // synchronizing before returning (below), so the async copy's source stays valid.
  cudaError_t e = cudaMemcpyAsync(scratch, &init, sizeof init, cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) return e;
  if (count > 0) {
    verifyKernel<<<blocksFor(count), kThreads, 0, stream>>>(out, count, (int)dt, (int)op, nranks,
                                                           seed, in, inRank, uOut, tiny, scratch);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
      cudaStreamSynchronize(stream);
      return e;
    }
  }
  e = cudaMemcpyAsync(result, scratch, sizeof *result, cudaMemcpyDeviceToHost, stream);
  cudaError_t s = cudaStreamSynchronize(stream);
  return e != cudaSuccess ? e : s;
}

}  // namespace yt
