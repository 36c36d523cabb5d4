// Memory that peers map (a comm's window): allocated with CUDA's virtual memory management (cuMem*)
// and shared as POSIX file descriptors, which the bootstrap passes over its socket (SCM_RIGHTS).
//
// Why not cudaMalloc and CUDA IPC: releasing those (cudaFree, cudaIpcCloseMemHandle, and
// cudaFreeHost for pinned memory) waits for every kernel on the device, and while it waits it
// blocks every other CUDA call of the process, launches and copies of other threads included
// (measured on an H100, 2026-11-24, with another stream's kernel spinning: cudaFree and
// cudaIpcCloseMemHandle did not return until it ended, and meanwhile another thread's launch,
// cudaMemcpyAsync, cudaStreamCreate and cudaMalloc did not return either). cuMemUnmap,
// cuMemRelease and cuMemAddressFree returned in under a millisecond. So a comm's end never waits
// for other libraries' kernels and never holds up the rest of the process.
//
// Lifetime: physical memory lives until its last handle and its last mapping are gone, in every
// process (each import holds its own handle), so a peer that still maps our window after we
// released it writes into memory that still exists, never into a later allocation of ours. The
// caller releases a mapping only once no kernel of its own can touch it (comm.h: DeviceResources).
#pragma once

#include <stddef.h>

#include <memory>
#include <string>

namespace yali {

class SharedMemory {
 public:
  // New memory of at least `bytes` on `device`, mapped here and accessible from `device`.
  static std::unique_ptr<SharedMemory> allocate(int device, size_t bytes, std::string* error);
  // A peer's memory of `bytes` from the descriptor it exported (exportFd), mapped here and
  // accessible from `device`. The caller still closes `fd`.
  static std::unique_ptr<SharedMemory> import(int fd, size_t bytes, int device, std::string* error);
  // Unmaps, releases the handle and frees the address range: never waits for the device.
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  // Lets `device`, another GPU of this process, access this mapping (a peer of the same process
  // uses our address directly).
  bool grantAccess(int device, std::string* error);
  // A new descriptor for peers to import; the caller closes it. -1 on failure.
  int exportFd(std::string* error) const;

  char* data() const { return reinterpret_cast<char*>(address_); }
  size_t size() const { return size_; }

 private:
  SharedMemory() = default;
  unsigned long long address_ = 0;  // CUdeviceptr
  size_t size_ = 0;                 // rounded up to the allocation granularity
  unsigned long long handle_ = 0;   // CUmemGenericAllocationHandle
  bool mapped_ = false;
  bool reserved_ = false;
  bool haveHandle_ = false;
};

}  // namespace yali
