// Session 21's placement probe (docs/PERF.md "Session 21"): does oneshot_pull's access pattern (a
// copy-in into a window, then a bf16 sum of two windows into an output; 33 blocks of 512 threads
// per "rank", two ranks on two streams of one GPU, captured in a graph) run slower on cuMem (VMM)
// memory, which YALI's windows use since the trust work, than on cudaMalloc memory, which the base
// f690fab used? Run 1 had the first four kinds only (no 1 GB-aligned window, no pool); run 2 is
// this file.
// Build: nvcc -O3 -arch=sm_90 -o placement_probe placement_probe.cu -lcuda
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define CD(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { printf("%s:%d CUresult %d\n", __FILE__, __LINE__, (int)e); exit(1); } } while (0)

static CUmemGenericAllocationHandle lastHandle;
static void* mapAgain(CUmemGenericAllocationHandle h, size_t bytes) {  // export as fd, import, map at a new VA
  int fd = -1;
  CD(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemGenericAllocationHandle h2;
  CD(cuMemImportFromShareableHandle(&h2, (void*)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va;
  CD(cuMemAddressReserve(&va, bytes, 0, 0, 0));
  CD(cuMemMap(va, bytes, 0, h2, 0));
  CUmemAccessDesc a = {};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CD(cuMemSetAccess(va, bytes, &a, 1));
  return reinterpret_cast<void*>(va);
}
static size_t gAlign = 0;
static void* vmmAlloc(size_t bytes, bool fdHandle) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (fdHandle) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  CD(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  bytes = (bytes + g - 1) / g * g;
  CUmemGenericAllocationHandle h;
  CD(cuMemCreate(&h, bytes, &prop, 0));
  lastHandle = h;
  CUdeviceptr va;
  CD(cuMemAddressReserve(&va, bytes, gAlign, 0, 0));
  CD(cuMemMap(va, bytes, 0, h, 0));
  CUmemAccessDesc a = {};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CD(cuMemSetAccess(va, bytes, &a, 1));
  return reinterpret_cast<void*>(va);
}

__global__ void copyIn(uint4* dst, const uint4* src, size_t vecs) {
  size_t per = (vecs + gridDim.x - 1) / gridDim.x;
  size_t b = blockIdx.x * per, e = min(b + per, vecs);
  for (size_t i = b + threadIdx.x; i < e; i += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) if (i + u * blockDim.x < e) v[u] = __ldcg(src + i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < 4; ++u) if (i + u * blockDim.x < e) dst[i + u * blockDim.x] = v[u];
  }
}

__global__ void pull2(uint4* out, const uint4* a, const uint4* b, size_t vecs) {
  size_t per = (vecs + gridDim.x - 1) / gridDim.x;
  size_t s = blockIdx.x * per, e = min(s + per, vecs);
  for (size_t i = s + threadIdx.x; i < e; i += 4 * blockDim.x) {
    uint4 r[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (i + u * blockDim.x < e) {
        uint4 x = __ldcg(a + i + u * blockDim.x), y = __ldcg(b + i + u * blockDim.x);
        const __nv_bfloat16* xp = reinterpret_cast<const __nv_bfloat16*>(&x);
        const __nv_bfloat16* yp = reinterpret_cast<const __nv_bfloat16*>(&y);
        __nv_bfloat16* rp = reinterpret_cast<__nv_bfloat16*>(&r[u]);
#pragma unroll
        for (int k = 0; k < 8; ++k) rp[k] = __float2bfloat16_rn(__bfloat162float(xp[k]) + __bfloat162float(yp[k]));
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) if (i + u * blockDim.x < e) out[i + u * blockDim.x] = r[u];
  }
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  const size_t kMax = 8u << 20;
  const int K = 6;
  const char* kinds[K] = {"cudaMalloc", "vmm", "vmm+fd", "vmm+fd+remap", "vmm+fd+al1G", "pool+fd"};
  cudaStream_t st[2];
  for (auto& s : st) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *in[2], *out[2];
  for (int r = 0; r < 2; ++r) { CK(cudaMalloc(&in[r], kMax)); CK(cudaMalloc(&out[r], kMax)); CK(cudaMemset(in[r], 0, kMax)); }
  // win[k][r]: rank r's window; src[k][r][s]: where rank r reads rank s's window
  void* win[K][2];
  void* src[K][2][2];
  cudaMemPoolProps pp = {};
  pp.allocType = cudaMemAllocationTypePinned;
  pp.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  pp.location.type = cudaMemLocationTypeDevice;
  pp.location.id = 0;
  cudaMemPool_t pool;
  CK(cudaMemPoolCreate(&pool, &pp));
  for (int r = 0; r < 2; ++r) {
    CK(cudaMalloc(&win[0][r], 2 * kMax));
    win[1][r] = vmmAlloc(2 * kMax, false);
    win[2][r] = vmmAlloc(2 * kMax, true);
    win[3][r] = win[2][r];
    void* again = mapAgain(lastHandle, 2 * kMax);
    gAlign = size_t(1) << 30;
    win[4][r] = vmmAlloc(2 * kMax, true);
    gAlign = 0;
    CK(cudaMallocFromPoolAsync(&win[5][r], 2 * kMax, pool, st[0]));
    CK(cudaStreamSynchronize(st[0]));
    for (int k = 0; k < K; ++k) {
      CK(cudaMemset(win[k][r], 0, 2 * kMax));
      for (int q = 0; q < 2; ++q) src[k][q][r] = win[k][r];
    }
    src[3][1 - r][r] = again;  // the other rank reads ours through a second mapping
  }
  for (int k = 0; k < K; ++k)
    printf("# %-14s win0 %p win1 %p (win0 mod 2M %zu, mod 32M %zu)\n", kinds[k], win[k][0], win[k][1],
           (size_t)win[k][0] % (2u << 20), (size_t)win[k][0] % (32u << 20));
  cudaEvent_t e0, e1, f[2];
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (auto& x : f) CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  printf("%-12s %10s %10s\n", "memory", "bytes", "us/iter");
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t bytes : {size_t(1) << 20, size_t(4) << 20}) {
      for (int k = 0; k < K; ++k) {
        const size_t vecs = bytes / 16;
        const int iters = 2000;
        // one graph: per iteration, both ranks copy in (concurrently), join, both ranks pull
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st[0], cudaStreamCaptureModeThreadLocal));
        for (int it = 0; it < iters; ++it) {
          const size_t par = (it & 1) * kMax;
          CK(cudaEventRecord(f[0], st[0]));
          CK(cudaStreamWaitEvent(st[1], f[0]));
          for (int r = 0; r < 2; ++r)
            copyIn<<<33, 512, 0, st[r]>>>(reinterpret_cast<uint4*>((char*)win[k][r] + par), (const uint4*)in[r], vecs);
          CK(cudaEventRecord(f[1], st[1]));
          CK(cudaStreamWaitEvent(st[0], f[1]));
          CK(cudaEventRecord(f[0], st[0]));
          CK(cudaStreamWaitEvent(st[1], f[0]));
          for (int r = 0; r < 2; ++r)
            pull2<<<33, 512, 0, st[r]>>>((uint4*)out[r], (const uint4*)((char*)src[k][r][0] + par),
                                          (const uint4*)((char*)src[k][r][1] + par), vecs);
          CK(cudaEventRecord(f[1], st[1]));
          CK(cudaStreamWaitEvent(st[0], f[1]));
        }
        CK(cudaStreamEndCapture(st[0], &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, st[0]));
        CK(cudaStreamSynchronize(st[0]));
        CK(cudaEventRecord(e0, st[0]));
        CK(cudaGraphLaunch(ge, st[0]));
        CK(cudaEventRecord(e1, st[0]));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("%-14s %10zu %10.2f\n", kinds[k], bytes, ms * 1000 / iters);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
    }
  }
  return 0;
}
