// Example 1: one process drives every visible GPU.
//
//   yaliCommInitAll -> one comm per GPU; a loop issues yaliAllReduce on each GPU's stream from
//   this one thread, inside yaliGroupStart/yaliGroupEnd (NCCL's rule for one thread driving several
//   GPUs: the kernels launch at yaliGroupEnd, all of them before the thread does anything else);
//   the result is checked on the host.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "yali/yali.h"

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)
#define CHECK_YALI(x, comm)                                                                \
  do {                                                                                     \
    yaliResult_t r = (x);                                                                  \
    if (r != yaliSuccess) {                                                                \
      fprintf(stderr, "%s: %s (%s)\n", #x, yaliGetErrorString(r), yaliGetLastError(comm)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int main() {
  int ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 2) {
    printf("SKIP: needs 2 or more GPUs (found %d)\n", ngpus);
    return 0;
  }
  if (ngpus > 8) ngpus = 8;
  const size_t count = (1 << 20) + 3;  // any count works; odd on purpose

  std::vector<yaliComm_t> comms(ngpus);
  CHECK_YALI(yaliCommInitAll(comms.data(), ngpus, nullptr), nullptr);

  std::vector<float*> buf(ngpus);
  std::vector<cudaStream_t> streams(ngpus);
  std::vector<float> host(count);
  for (int g = 0; g < ngpus; ++g) {
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaStreamCreate(&streams[g]));
    CHECK_CUDA(cudaMalloc(&buf[g], count * sizeof(float)));
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(g + 1) + (i % 7);
    CHECK_CUDA(cudaMemcpy(buf[g], host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }

  // In place: sendbuff == recvbuff. One thread, one call per GPU, grouped.
  CHECK_YALI(yaliGroupStart(), nullptr);
  for (int g = 0; g < ngpus; ++g)
    CHECK_YALI(yaliAllReduce(buf[g], buf[g], count, yaliFloat32, yaliSum, comms[g], streams[g]), comms[g]);
  CHECK_YALI(yaliGroupEnd(), nullptr);
  for (int g = 0; g < ngpus; ++g) {
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaStreamSynchronize(streams[g]));
  }

  // Expected: sum over g of (g + 1 + i % 7), exact in fp32 for these small integers.
  size_t wrong = 0;
  for (int g = 0; g < ngpus; ++g) {
    CHECK_CUDA(cudaMemcpy(host.data(), buf[g], count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      float expected = ngpus * (ngpus + 1) / 2.0f + ngpus * static_cast<float>(i % 7);
      if (host[i] != expected) ++wrong;
    }
  }
  for (int g = 0; g < ngpus; ++g) {
    CHECK_YALI(yaliCommDestroy(comms[g]), nullptr);
    cudaSetDevice(g);
    cudaFree(buf[g]);
    cudaStreamDestroy(streams[g]);
  }
  printf("%s: AllReduce of %zu floats on %d GPUs, %zu wrong\n", wrong ? "FAIL" : "PASS", count, ngpus,
         wrong);
  return wrong ? 1 : 0;
}
