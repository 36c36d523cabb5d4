#include "core/shared_memory.h"

#include <cuda.h>  // types and enums only: the driver is reached through the runtime's entry points
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/driver_entry.h"

namespace yali {
namespace {

// The driver functions, looked up once through the runtime (libyali links only the runtime).
struct Driver {
  CUresult (*getGranularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*addressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*exportHandle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long) = nullptr;
  CUresult (*importHandle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  bool ok = false;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    x.ok = lookUpDriver("cuMemGetAllocationGranularity", &x.getGranularity) && lookUpDriver("cuMemCreate", &x.create) &&
           lookUpDriver("cuMemAddressReserve", &x.reserve) && lookUpDriver("cuMemMap", &x.map) &&
           lookUpDriver("cuMemSetAccess", &x.setAccess) && lookUpDriver("cuMemUnmap", &x.unmap) &&
           lookUpDriver("cuMemRelease", &x.release) && lookUpDriver("cuMemAddressFree", &x.addressFree) &&
           lookUpDriver("cuMemExportToShareableHandle", &x.exportHandle) &&
           lookUpDriver("cuMemImportFromShareableHandle", &x.importHandle);
    return x;
  }();
  return d;
}

CUmemAllocationProp propertiesFor(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

bool check(CUresult r, const char* what, std::string* error) {
  if (r == CUDA_SUCCESS) return true;
  *error = std::string(what) + " failed (CUresult " + std::to_string(static_cast<int>(r)) + ")";
  return false;
}

// Maps `handle` at a fresh address range of `bytes` and lets `device` read and write it.
bool mapHandle(SharedMemory* m, unsigned long long* address, size_t bytes, unsigned long long handle,
               int device, bool* reserved, bool* mapped, std::string* error) {
  const Driver& d = driver();
  CUdeviceptr va = 0;
  if (!check(d.reserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve", error)) return false;
  *address = va;
  *reserved = true;
  if (!check(d.map(va, bytes, 0, handle, 0), "cuMemMap", error)) return false;
  *mapped = true;
  return m->grantAccess(device, error);
}

bool roundedSize(int device, size_t bytes, size_t* out, std::string* error) {
  const Driver& d = driver();
  if (!d.ok) {
    *error = "the CUDA driver lacks the virtual memory management API (cuMem*)";
    return false;
  }
  size_t granularity = 0;
  const CUmemAllocationProp prop = propertiesFor(device);
  if (!check(d.getGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
             "cuMemGetAllocationGranularity", error))
    return false;
  *out = (bytes + granularity - 1) / granularity * granularity;
  return true;
}

}  // namespace

std::unique_ptr<SharedMemory> SharedMemory::allocate(int device, size_t bytes, std::string* error) {
  std::unique_ptr<SharedMemory> m(new SharedMemory());
  if (!roundedSize(device, bytes, &m->size_, error)) return nullptr;
  const CUmemAllocationProp prop = propertiesFor(device);
  CUmemGenericAllocationHandle handle = 0;
  if (!check(driver().create(&handle, m->size_, &prop, 0), "cuMemCreate", error)) return nullptr;
  m->handle_ = handle;
  m->haveHandle_ = true;
  if (!mapHandle(m.get(), &m->address_, m->size_, handle, device, &m->reserved_, &m->mapped_, error))
    return nullptr;
  return m;
}

std::unique_ptr<SharedMemory> SharedMemory::import(int fd, size_t bytes, int device, std::string* error) {
  std::unique_ptr<SharedMemory> m(new SharedMemory());
  if (!roundedSize(device, bytes, &m->size_, error)) return nullptr;
  CUmemGenericAllocationHandle handle = 0;
  if (!check(driver().importHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             "cuMemImportFromShareableHandle", error))
    return nullptr;
  m->handle_ = handle;
  m->haveHandle_ = true;
  if (!mapHandle(m.get(), &m->address_, m->size_, handle, device, &m->reserved_, &m->mapped_, error))
    return nullptr;
  return m;
}

SharedMemory::~SharedMemory() {
  const Driver& d = driver();
  if (mapped_) d.unmap(address_, size_);
  if (haveHandle_) d.release(handle_);
  if (reserved_) d.addressFree(address_, size_);
}

bool SharedMemory::grantAccess(int device, std::string* error) {
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return check(driver().setAccess(address_, size_, &access, 1), "cuMemSetAccess", error);
}

int SharedMemory::exportFd(std::string* error) const {
  int fd = -1;
  if (!check(driver().exportHandle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             "cuMemExportToShareableHandle", error))
    return -1;
  return fd;
}

}  // namespace yali
