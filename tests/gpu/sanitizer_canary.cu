// A planted out-of-bounds write, run under compute-sanitizer before the suite (scripts/gpu_check.sh,
// stage sanitize): memcheck must report it, or a clean report on the suite proves nothing.
#include <cstdio>

#include <cuda_runtime.h>

__global__ void writeOnePastTheEnd(int* p, int n) { p[n] = 1; }  // the bug, on purpose

int main() {
  const int n = 1000;  // 4000 bytes: not a multiple of the allocation granularity
  int* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(int)) != cudaSuccess) return 2;
  writeOnePastTheEnd<<<1, 1>>>(p, n);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("canary kernel finished: %s\n", cudaGetErrorString(e));
  cudaFree(p);
  return 0;
}
