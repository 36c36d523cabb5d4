#include "core/registration.h"

#include <cuda.h>  // CUresult and CUdeviceptr only: the driver is reached through the runtime
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/comm.h"
#include "core/error.h"

namespace yali {
namespace {

// The CUDA allocation that holds [p, p + bytes): its base and size, by cuMemGetAddressRange
// (reached through cudaGetDriverEntryPointByVersion, so libyali links only the runtime).
bool allocationOf(const void* p, size_t bytes, uint64_t* base, std::string* error) {
  using GetRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetRange getRange = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<GetRange>(fn);
  }();
  if (getRange == nullptr) {
    cudaGetLastError();
    *error = "the CUDA driver has no cuMemGetAddressRange";
    return false;
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  if (getRange(&start, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
    *error = "it is not inside a CUDA allocation";
    return false;
  }
  const uint64_t end = static_cast<uint64_t>(start) + size;
  if (reinterpret_cast<uint64_t>(p) + bytes > end) {
    *error = "it runs " + std::to_string(reinterpret_cast<uint64_t>(p) + bytes - end) +
             " bytes past the end of its CUDA allocation";
    return false;
  }
  *base = static_cast<uint64_t>(start);
  return true;
}

// The allocation that holds `reg`'s buffer and its CUDA IPC handle: registrations accept only
// memory that CUDA IPC can share (cudaMalloc's), in both modes, so that a buffer registers the
// same way whichever way the comm was made (in single-process mode peer access covers it).
bool shareableAllocation(const Registration* reg, uint64_t* allocation, cudaIpcMemHandle_t* handle,
                         std::string* why) {
  if (!allocationOf(reg->base, reg->bytes, allocation, why)) return false;
  cudaError_t e = cudaIpcGetMemHandle(handle, reinterpret_cast<void*>(*allocation));
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  *why = std::string("CUDA IPC cannot share it (cudaIpcGetMemHandle: ") + cudaGetErrorString(e) +
         "); register memory from cudaMalloc";
  return false;
}

// What each rank tells the others about one registration (one process per GPU).
struct RegisterInfo {
  int32_t pid;
  int32_t ok;           // 0: this rank could not register (its own error says why)
  uint64_t allocation;  // the allocation holding the buffer, as an address in the sender's process
  uint64_t offset;      // the buffer's offset in it
  uint64_t bytes;
  cudaIpcMemHandle_t handle;  // of the allocation
};

char* importPeer(yaliComm* comm, int peer, const RegisterInfo& info, std::string* error) {
  PeerImport& imp = comm->registrations.imports[{peer, info.allocation}];
  if (imp.users == 0) {
    void* mapped = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&mapped, info.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      comm->registrations.imports.erase({peer, info.allocation});
      *error = "mapping rank " + std::to_string(peer) + "'s buffer (cudaIpcOpenMemHandle) failed: " +
               cudaGetErrorString(e);
      return nullptr;
    }
    imp.mapped = static_cast<char*>(mapped);
  }
  ++imp.users;
  return imp.mapped + info.offset;
}

// Undoes importPeer for every peer that `reg` maps by IPC.
void releaseImports(yaliComm* comm, Registration* reg) {
  for (int p = 0; p < comm->nranks; ++p) {
    if (reg->importKey[p] == 0) continue;
    auto it = comm->registrations.imports.find({p, reg->importKey[p]});
    if (it != comm->registrations.imports.end() && --it->second.users == 0) {
      cudaIpcCloseMemHandle(it->second.mapped);
      comm->registrations.imports.erase(it);
    }
    reg->importKey[p] = 0;
  }
  cudaGetLastError();
}

// One process per GPU: exchange the allocation handles through the bootstrap, map every peer's,
// and agree that every rank succeeded (otherwise all undo), so that the ranks never disagree on
// whether registration k exists.
yaliResult_t registerAcrossProcesses(yaliComm* comm, Registration* reg, const char* call) {
  const int n = comm->nranks;
  std::vector<RegisterInfo> info(n);
  RegisterInfo& mine = info[comm->rank];
  memset(&mine, 0, sizeof(mine));
  mine.pid = getpid();
  mine.bytes = reg->bytes;
  std::string localError;
  uint64_t allocation = 0;
  if (shareableAllocation(reg, &allocation, &mine.handle, &localError)) {
    mine.ok = 1;
    mine.allocation = allocation;
    mine.offset = reinterpret_cast<uint64_t>(reg->base) - allocation;
  }
  std::string err;
  yaliResult_t r = comm->bootstrap->allGather(info.data(), sizeof(RegisterInfo), &err);
  if (r != yaliSuccess) return fail(r, comm, "%s: exchanging the registration: %s", call, err.c_str());
  if (!mine.ok)
    return fail(yaliInvalidArgument, comm, "%s: buff=%p (size %zu) cannot be registered: %s", call,
                static_cast<void*>(reg->base), reg->bytes, localError.c_str());
  for (int p = 0; p < n; ++p) {
    if (!info[p].ok)
      return fail(yaliRemoteError, comm, "%s: rank %d could not register its buffer (its own error says why)",
                  call, p);
    if (info[p].bytes != mine.bytes)
      return fail(yaliInvalidUsage, comm,
                  "%s: rank %d registered %llu bytes and this rank (%d) %zu; every rank must pass the "
                  "same size",
                  call, p, static_cast<unsigned long long>(info[p].bytes), comm->rank, reg->bytes);
  }
  // Map every peer's allocation, then agree that every rank managed to.
  std::string mapError;
  for (int p = 0; p < n && mapError.empty(); ++p) {
    if (p == comm->rank) {
      reg->peerBase[p] = reg->base;
    } else if (info[p].pid == mine.pid) {
      // Same process (a thread per GPU): its address is ours; peer access is on since set-up.
      reg->peerBase[p] = reinterpret_cast<char*>(info[p].allocation + info[p].offset);
    } else if (char* mapped = importPeer(comm, p, info[p], &mapError)) {
      reg->peerBase[p] = mapped;
      reg->importKey[p] = info[p].allocation;
    }
  }
  std::vector<int32_t> mapped(n, 0);
  mapped[comm->rank] = mapError.empty() ? 1 : 0;
  r = comm->bootstrap->allGather(mapped.data(), sizeof(int32_t), &err);
  if (r != yaliSuccess) {
    releaseImports(comm, reg);
    return fail(r, comm, "%s: agreeing on the registration: %s", call, err.c_str());
  }
  for (int p = 0; p < n; ++p) {
    if (mapped[p]) continue;
    releaseImports(comm, reg);
    if (p == comm->rank) return fail(yaliUnhandledCudaError, comm, "%s: %s", call, mapError.c_str());
    return fail(yaliRemoteError, comm, "%s: rank %d could not map the peers' buffers (its own error says why)",
                call, p);
  }
  reg->usable = true;
  return yaliSuccess;
}

// Single-process mode: record this comm's part; the last comm of the group to register the k-th
// buffer completes every comm's registration k.
yaliResult_t registerInGroup(yaliComm* comm, Registration* reg, const char* call) {
  uint64_t allocation = 0;
  std::string why;
  cudaIpcMemHandle_t handle;
  if (!shareableAllocation(reg, &allocation, &handle, &why)) {
    // Across processes every rank would fail this registration together; here the other comms
    // may already hold their parts of it, so this comm's number is spent (its next registration
    // pairs with their next).
    ++comm->registrations.nextId;
    return fail(yaliInvalidArgument, comm, "%s: buff=%p (size %zu) cannot be registered: %s", call,
                static_cast<void*>(reg->base), reg->bytes, why.c_str());
  }
  GroupRegistrations& group = comm->group->registrations;
  std::lock_guard<std::mutex> lock(group.mutex);
  std::vector<Registration*>& parts = group.byId[reg->id];
  parts.resize(comm->nranks, nullptr);
  for (int p = 0; p < comm->nranks; ++p) {
    if (parts[p] == nullptr || parts[p]->bytes == reg->bytes) continue;
    // The comms that registered part reg->id before this one hold it (never usable now): as
    // above, this comm's number is spent.
    ++comm->registrations.nextId;
    return fail(yaliInvalidUsage, comm,
                "%s: comm of rank %d registered %zu bytes as its registration %u, this one (rank %d) "
                "%zu; every comm must pass the same size",
                call, p, parts[p]->bytes, reg->id, comm->rank, reg->bytes);
  }
  parts[comm->rank] = reg;
  if (std::count(parts.begin(), parts.end(), nullptr) == 0) {
    for (Registration* part : parts) {
      for (int p = 0; p < comm->nranks; ++p) part->peerBase[p] = parts[p]->base;
      part->usable = true;
    }
  }
  return yaliSuccess;
}

// Single-process mode: this comm's registration `reg` goes away, and with it every comm's
// registration of that id stops being usable (so no comm takes the direct path alone).
void leaveGroup(yaliComm* comm, Registration* reg) {
  GroupRegistrations& group = comm->group->registrations;
  std::lock_guard<std::mutex> lock(group.mutex);
  auto it = group.byId.find(reg->id);
  if (it == group.byId.end()) return;
  for (Registration* part : it->second)
    if (part != nullptr) part->usable = false;
  it->second[comm->rank] = nullptr;
  if (std::count(it->second.begin(), it->second.end(), nullptr) == comm->nranks) group.byId.erase(it);
}

}  // namespace

yaliResult_t registerBuffer(yaliComm* comm, void* buff, size_t size, void** handle, const char* call) {
  ScopedDevice onDevice(comm->device);
  if (onDevice.status() != cudaSuccess)
    return fail(yaliUnhandledCudaError, comm, "%s: cudaSetDevice(%d) failed", call, comm->device);
  auto reg = std::make_unique<Registration>();
  reg->id = comm->registrations.nextId;
  reg->base = static_cast<char*>(buff);
  reg->bytes = size;
  yaliResult_t r = comm->group ? registerInGroup(comm, reg.get(), call)
                               : registerAcrossProcesses(comm, reg.get(), call);
  if (r != yaliSuccess) return r;
  ++comm->registrations.nextId;
  logInfo("rank %d: registered %zu bytes at %p as registration %u", comm->rank, size, buff, reg->id);
  *handle = reg.get();
  comm->registrations.live.push_back(std::move(reg));
  return yaliSuccess;
}

yaliResult_t deregisterBuffer(yaliComm* comm, void* handle, const char* call) {
  auto& live = comm->registrations.live;
  auto it = std::find_if(live.begin(), live.end(), [&](const auto& reg) { return reg.get() == handle; });
  if (it == live.end())
    return fail(yaliInvalidArgument, comm,
                "%s: handle=%p is not a live registration of this comm (from yaliCommRegister, not yet "
                "deregistered)",
                call, handle);
  Registration* reg = it->get();
  reg->usable = false;  // later calls on this comm take the staged path
  ScopedDevice onDevice(comm->device);
  yaliResult_t result = yaliSuccess;
  // Our kernels that touch peers' buffers end (a stuck wait ends at YALI_TIMEOUT_MS) ...
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    result = fail(yaliUnhandledCudaError, comm, "%s: waiting for the comm's work: %s", call,
                  cudaGetErrorString(e));
  if (comm->group) {
    leaveGroup(comm, reg);
  } else {
    // ... and so do the peers' that touch ours, before anyone unmaps or the caller frees.
    std::string err;
    yaliResult_t r = comm->bootstrap->barrier(&err);
    if (r != yaliSuccess && result == yaliSuccess)
      result = fail(r, comm, "%s: waiting for peers to deregister: %s", call, err.c_str());
    releaseImports(comm, reg);
  }
  live.erase(it);
  return result;
}

void releaseRegistrations(yaliComm* comm) {
  for (auto& reg : comm->registrations.live) {
    reg->usable = false;
    if (comm->group) leaveGroup(comm, reg.get());
    else releaseImports(comm, reg.get());
  }
  comm->registrations.live.clear();
}

RegisteredSpan findRegistered(const yaliComm* comm, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (const auto& reg : comm->registrations.live) {
    if (reg->usable && c >= reg->base && c + bytes <= reg->base + reg->bytes)
      return {reg.get(), static_cast<size_t>(c - reg->base)};
  }
  return {};
}

}  // namespace yali
