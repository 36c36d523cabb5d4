// scratch probe: do small cudaMallocs share an IPC block, and does block arithmetic find them?
// Usage: ipc_probe IMPORT_DEVICE   (exporter on device 0)
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <map>
#include <vector>

struct Rec {
  size_t bytes;
  uint64_t ptr, bufId, blockId, mapBase, mapSize, rangeStart, rangeSize;
  cudaIpcMemHandle_t h;
};
static const size_t kSizes[] = {4096, 4096, 65536, 65536, 4093 * 4 + 512, 524288, 524288, 524288,
                                1 << 20, 1 << 20, 2 << 20, 2 << 20, 3 << 20, 8 << 20};
constexpr int kN = sizeof(kSizes) / sizeof(kSizes[0]);

int main(int argc, char** argv) {
  int impDev = argc > 1 ? atoi(argv[1]) : 1;
  int p2c[2], c2p[2];
  if (pipe(p2c) || pipe(c2p)) return 1;
  pid_t pid = fork();
  if (pid == 0) {  // importer
    Rec r[kN];
    if (read(p2c[0], r, sizeof r) != (ssize_t)sizeof r) return 2;
    cudaSetDevice(impDev);
    std::map<uint64_t, uint64_t> blockBase;  // blockId -> importer base of the block
    for (int i = 0; i < kN; ++i) {
      void* m = nullptr;
      cudaError_t e = cudaIpcOpenMemHandle(&m, r[i].h, cudaIpcMemLazyEnablePeerAccess);
      uint64_t where = 0;
      const char* how;
      if (e == cudaSuccess) {
        where = (uint64_t)m;
        how = "opened";
        uint64_t base = where - (r[i].rangeStart - r[i].mapBase);
        if (!blockBase.count(r[i].blockId)) blockBase[r[i].blockId] = base;
        else if (blockBase[r[i].blockId] != base) how = "opened(BASE DIFFERS)";
      } else {
        cudaGetLastError();
        how = cudaGetErrorString(e);
        if (blockBase.count(r[i].blockId)) where = blockBase[r[i].blockId] + (r[i].rangeStart - r[i].mapBase);
      }
      unsigned char got[4] = {0, 0, 0, 0};
      if (where) {
        cudaMemcpy(got, (void*)where, 4, cudaMemcpyDefault);
        cudaMemcpy(got + 2, (void*)(where + r[i].bytes - 2), 2, cudaMemcpyDefault);
      }
      bool ok = where && got[0] == (i + 1) && got[1] == (i + 1) && got[2] == (i + 101) && got[3] == (i + 101);
      printf("imp %2d %8zu buf=%llu block=%llu mapBase=%llx mapSize=%llu off=%llu range=%llu : %s, data %s\n", i,
             r[i].bytes, (unsigned long long)r[i].bufId, (unsigned long long)r[i].blockId,
             (unsigned long long)r[i].mapBase, (unsigned long long)r[i].mapSize,
             (unsigned long long)(r[i].rangeStart - r[i].mapBase), (unsigned long long)r[i].rangeSize, how,
             where ? (ok ? "OK" : "WRONG") : "-");
    }
    char c = 1;
    write(c2p[1], &c, 1);
    return 0;
  }
  cudaSetDevice(0);
  Rec r[kN];
  for (int i = 0; i < kN; ++i) {
    void* p;
    cudaMalloc(&p, kSizes[i]);
    cudaMemset(p, i + 1, kSizes[i]);
    cudaMemset((char*)p + kSizes[i] - 2, i + 101, 2);
    r[i].bytes = kSizes[i];
    r[i].ptr = (uint64_t)p;
    CUpointer_attribute a[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
                               CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
                               CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    r[i].bufId = r[i].blockId = r[i].mapBase = r[i].mapSize = r[i].rangeStart = r[i].rangeSize = 0;
    void* d[] = {&r[i].bufId, &r[i].blockId, &r[i].mapBase, &r[i].mapSize, &r[i].rangeStart, &r[i].rangeSize};
    CUresult cr = cuPointerGetAttributes(6, a, d, (CUdeviceptr)p);
    cudaIpcGetMemHandle(&r[i].h, p);
    printf("exp %2d %8zu p=%llx cr=%d buf=%llu block=%llu mapBase=%llx mapSize=%llu rangeStart=%llx rangeSize=%llu\n",
           i, kSizes[i], (unsigned long long)p, (int)cr, (unsigned long long)r[i].bufId,
           (unsigned long long)r[i].blockId, (unsigned long long)r[i].mapBase, (unsigned long long)r[i].mapSize,
           (unsigned long long)r[i].rangeStart, (unsigned long long)r[i].rangeSize);
  }
  cudaDeviceSynchronize();
  fflush(stdout);
  write(p2c[1], r, sizeof r);
  char c;
  read(c2p[0], &c, 1);
  int st;
  waitpid(pid, &st, 0);
  return 0;
}
