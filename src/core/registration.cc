#include "core/registration.h"

#include <cuda.h>  // CUresult, CUdeviceptr and the attribute names: the driver is reached through the runtime
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/comm.h"
#include "core/error.h"
#include "core/ipc_imports.h"
#include "core/reaper.h"

namespace yali {

namespace {

using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes, or nullptr where the driver lacks it.
GetAttributes pointerAttributes() {
  static GetAttributes getAttributes = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      fn = nullptr;
    cudaGetLastError();
    return reinterpret_cast<GetAttributes>(fn);
  }();
  return getAttributes;
}

}  // namespace

bool queryAllocation(const void* p, AllocationInfo* out, std::string* error) {
  const GetAttributes getAttributes = pointerAttributes();
  if (getAttributes == nullptr) {
    *error = "the CUDA driver has no cuPointerGetAttributes";
    return false;
  }
  // One driver call for all of them (about 0.1 us on an H100, 2026-11-24). Booleans are written as
  // one byte: the words start at zero.
  unsigned memoryType = 0, managed = 0, legacyIpc = 0;
  int ordinal = -1;
  unsigned long long bufferId = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* data[] = {&memoryType, &managed, &ordinal, &bufferId, &start, &size, &legacyIpc};
  const CUresult r = getAttributes(sizeof(attrs) / sizeof(attrs[0]), attrs, data,
                                   reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS || memoryType == 0 || bufferId == 0) {
    *error = "it is not CUDA memory (never allocated by CUDA, or already freed)";
    return false;
  }
  out->managed = managed != 0;
  out->device = memoryType == CU_MEMORYTYPE_DEVICE || out->managed;
  out->deviceOrdinal = ordinal;
  out->bufferId = bufferId;
  out->start = static_cast<uint64_t>(start);
  out->size = size;
  out->legacyIpc = legacyIpc != 0;
  return true;
}

IpcImports& IpcImports::process() {
  static IpcImports* table = new IpcImports(Ops{
      [](void** mapped, const cudaIpcMemHandle_t& handle, int device, std::string* error) {
        ScopedDevice onDevice(device);
        const cudaError_t e = cudaIpcOpenMemHandle(mapped, handle, cudaIpcMemLazyEnablePeerAccess);
        if (e == cudaSuccess) return e;
        cudaGetLastError();
        *error = std::string("cudaIpcOpenMemHandle failed: ") + cudaGetErrorString(e);
        return e;
      },
      // On the reaper: cudaIpcCloseMemHandle waits for every kernel on the device (reaper.h).
      [](void* mapped, int device) {
        cudaSetDevice(device);
        cudaIpcCloseMemHandle(mapped);
        cudaGetLastError();
      },
      // What the open mapped, as the driver reports it: the mapping's base (MAPPING_BASE_ADDR, the
      // block's first byte) must be where the peer's offset puts it; the bytes it makes readable
      // are the range the driver knows the pointer by (RANGE_START_ADDR, RANGE_SIZE).
      [](const void* mapped, int device, uint64_t offset, uint64_t* first, uint64_t* bytes, std::string* error) {
        ScopedDevice onDevice(device);
        CUdeviceptr base = 0, start = 0;
        size_t size = 0;
        CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                       CU_POINTER_ATTRIBUTE_RANGE_SIZE};
        void* data[] = {&base, &start, &size};
        const GetAttributes getAttributes = pointerAttributes();
        if (getAttributes == nullptr ||
            getAttributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(mapped)) != CUDA_SUCCESS || base == 0 ||
            start < base || size == 0) {
          cudaGetLastError();
          *error = "cuPointerGetAttributes could not tell the mapping's extent";
          return false;
        }
        const uint64_t blockBase = reinterpret_cast<uint64_t>(mapped) - offset;
        if (static_cast<uint64_t>(base) != blockBase) {
          *error = "the mapping starts " + std::to_string(static_cast<int64_t>(static_cast<uint64_t>(base) - blockBase)) +
                   " bytes from where the peer's offsets put the block";
          return false;
        }
        *first = static_cast<uint64_t>(start - base);
        *bytes = size;
        return true;
      },
      // Closes wait for every kernel on the device: a lane of their own (reaper.h). None starts
      // while a copy-engine call is in flight (CloseGate): the job is tried again later, its entry
      // stays Idle, and an import may take it again meanwhile.
      [](std::function<bool()> job) {
        Reaper::post(
            [job = std::move(job)] {
              if (!CloseGate::enterClose()) return false;
              const bool done = job();
              CloseGate::leaveClose();
              return done;
            },
            Reaper::Lane::kIpcClose);
      }});
  return *table;
}

namespace {

// The allocation that holds `reg`'s buffer and its CUDA IPC handle: registrations accept only
// memory that CUDA IPC can share (cudaMalloc's), in both modes, so that a buffer registers the
// same way whichever way the comm was made (in single-process mode peer access covers it).
bool shareableAllocation(Registration* reg, AllocationInfo* info, cudaIpcMemHandle_t* handle,
                         std::string* why) {
  if (!queryAllocation(reg->base, info, why)) return false;
  const uint64_t offset = reinterpret_cast<uint64_t>(reg->base) - info->start;
  if (reg->bytes > info->size - offset) {
    *why = "it runs " + std::to_string(reg->bytes - (info->size - offset)) +
           " bytes past the end of its CUDA allocation";
    return false;
  }
  reg->bufferId = info->bufferId;
  cudaError_t e = cudaIpcGetMemHandle(handle, reinterpret_cast<void*>(info->start));
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  *why = std::string("CUDA IPC cannot share it (cudaIpcGetMemHandle: ") + cudaGetErrorString(e) +
         "); register memory from cudaMalloc";
  return false;
}

// The physical block that CUDA IPC shares for the allocation starting at `alloc.start`
// (ipc_imports.h): its id, and where the allocation starts in it; id 0 where the driver names no
// block (then the allocation never borrows a sibling's mapping).
void blockOf(const AllocationInfo& alloc, uint64_t* blockId, uint64_t* offsetInBlock) {
  unsigned long long id = 0;
  CUdeviceptr mappingBase = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR};
  void* data[] = {&id, &mappingBase};
  const GetAttributes getAttributes = pointerAttributes();
  if (getAttributes != nullptr &&
      getAttributes(2, attrs, data, static_cast<CUdeviceptr>(alloc.start)) == CUDA_SUCCESS && id != 0 &&
      mappingBase != 0 && static_cast<uint64_t>(mappingBase) <= alloc.start) {
    *blockId = id;
    *offsetInBlock = alloc.start - static_cast<uint64_t>(mappingBase);
    return;
  }
  cudaGetLastError();
  *blockId = 0;
  *offsetInBlock = 0;
}

// What each rank tells the others about one registration (one process per GPU).
struct RegisterInfo {
  int32_t ok;           // 0: this rank could not register (its own error says why)
  int32_t pad;
  uint64_t allocation;  // the allocation holding the buffer, as an address in the sender's process
  uint64_t bufferId;    // its CUDA buffer id in the sender's process
  uint64_t offset;      // the buffer's offset in it
  uint64_t blockId;     // the physical block that holds the allocation (blockOf), and where the
  uint64_t blockOffset; // allocation starts in it (ipc_imports.h: across devices CUDA IPC maps blocks)
  uint64_t bytes;
  uint64_t allocationBytes;   // the allocation's size (ipc_imports.h: an open is refused while any of it is mapped)
  cudaIpcMemHandle_t handle;  // of the allocation
};

// Rank `peer`'s allocation mapped here, shared with every other registration of it in this process
// (ipc_imports.h: CUDA maps an allocation, across devices its whole block, once per device).
std::shared_ptr<void> importPeer(yaliComm* comm, int peer, const RegisterInfo& info, std::string* error,
                                 std::vector<uint64_t>* splits) {
  const IpcImports::Key key{comm->device, comm->pids[peer], info.bufferId};
  std::string why;
  const IpcImports::Block block{info.blockId, info.blockOffset, info.offset + info.bytes, info.offset,
                                info.allocationBytes};
  std::shared_ptr<void> mapped =
      IpcImports::process().import(key, block, info.handle, comm->settings.timeoutMs, &why, &comm->cancel, splits);
  if (!mapped) *error = "mapping rank " + std::to_string(peer) + "'s buffer: " + why;
  return mapped;
}

void dropImports(Registration* reg) {
  for (auto& imp : reg->imports) imp.reset();
  for (auto& cuts : reg->mappingSplits) cuts.clear();
}

// One process per GPU: exchange the allocation handles through the bootstrap, map every peer's,
// and agree that every rank succeeded (otherwise all undo), so that the ranks never disagree on
// whether registration k exists.
yaliResult_t registerAcrossProcesses(yaliComm* comm, Registration* reg, const char* call) {
  const int n = comm->nranks;
  std::vector<RegisterInfo> info(n);
  RegisterInfo& mine = info[comm->rank];
  memset(&mine, 0, sizeof(mine));
  mine.bytes = reg->bytes;
  std::string localError;
  AllocationInfo alloc;
  if (shareableAllocation(reg, &alloc, &mine.handle, &localError)) {
    mine.ok = 1;
    mine.allocation = alloc.start;
    mine.bufferId = alloc.bufferId;
    mine.offset = reinterpret_cast<uint64_t>(reg->base) - alloc.start;
    mine.allocationBytes = alloc.size;
    blockOf(alloc, &mine.blockId, &mine.blockOffset);
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
  std::vector<uint64_t> splits;
  for (int p = 0; p < n && mapError.empty(); ++p) {
    if (p == comm->rank) {
      reg->peerBase[p] = reg->base;
    } else if (comm->pids[p] == comm->pids[comm->rank]) {
      // Same process (a thread per GPU): its address is ours; peer access is on since set-up.
      reg->peerBase[p] = reinterpret_cast<char*>(info[p].allocation + info[p].offset);
    } else if (std::shared_ptr<void> mapped = importPeer(comm, p, info[p], &mapError, &splits)) {
      reg->peerBase[p] = static_cast<char*>(mapped.get()) + info[p].offset;
      // Where the buffer passes from one sibling's mapping to the next (a borrow), from its start.
      for (uint64_t cut : splits)
        if (cut > info[p].offset) reg->mappingSplits[p].push_back(cut - info[p].offset);
      reg->imports[p] = std::move(mapped);
    }
  }
  std::vector<int32_t> mapped(n, 0);
  mapped[comm->rank] = mapError.empty() ? 1 : 0;
  r = comm->bootstrap->allGather(mapped.data(), sizeof(int32_t), &err);
  if (r != yaliSuccess) {
    dropImports(reg);
    return fail(r, comm, "%s: agreeing on the registration: %s", call, err.c_str());
  }
  for (int p = 0; p < n; ++p) {
    if (mapped[p]) continue;
    dropImports(reg);
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
  AllocationInfo alloc;
  std::string why;
  cudaIpcMemHandle_t handle;
  if (!shareableAllocation(reg, &alloc, &handle, &why)) {
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

// Calls waiting in an open group that use `reg`, counting in single-process mode the other comms'
// parts of the same registration too: a queued call on comm k writes through comm j's buffer (its
// peerBase[j]), which deregistering j's part unmaps. Lock order: comm->mutex, then the group's.
int queuedUsesOf(yaliComm* comm, const Registration* reg) {
  int uses = reg->queuedUses->load();
  if (comm->group) {
    GroupRegistrations& group = comm->group->registrations;
    std::lock_guard<std::mutex> lock(group.mutex);
    auto it = group.byId.find(reg->id);
    if (it != group.byId.end())
      for (const Registration* part : it->second)
        if (part != nullptr && part != reg) uses += part->queuedUses->load();
  }
  return uses;
}

void unlink(yaliComm* comm, Registration* reg) {
  reg->usable = false;
  if (comm->group) leaveGroup(comm, reg);
  dropImports(reg);
}

}  // namespace

yaliResult_t registerBuffer(yaliComm* comm, void* buff, size_t size, void** handle, const char* call) {
  if (size > UINTPTR_MAX - reinterpret_cast<uintptr_t>(buff))
    return fail(yaliInvalidArgument, comm, "%s: buff=%p plus size=%zu runs past the end of the address space",
                call, buff, size);
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
  std::lock_guard<std::mutex> lock(comm->mutex);  // collectives read `live`
  comm->registrations.live.push_back(std::move(reg));
  return yaliSuccess;
}

yaliResult_t deregisterBuffer(yaliComm* comm, void* handle, const char* call) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  auto& live = comm->registrations.live;
  auto find = [&] {
    return std::find_if(live.begin(), live.end(), [&](const auto& reg) { return reg.get() == handle; });
  };
  if (find() == live.end())
    return fail(yaliInvalidArgument, comm,
                "%s: handle=%p is not a live registration of this comm (from yaliCommRegister, not yet "
                "deregistered)",
                call, handle);
  Registration* reg = find()->get();
  if (const int uses = queuedUsesOf(comm, reg); uses > 0)
    return fail(yaliInvalidUsage, comm,
                "%s: handle=%p is used by %d call(s) waiting in an open group (yaliGroupStart): they "
                "launch through its peer mappings at yaliGroupEnd; end the group first",
                call, handle, uses);
  reg->usable = false;  // later calls on this comm take the staged path
  const EagerMark launches = comm->eagerIssued;
  lock.unlock();
  ScopedDevice onDevice(comm->device);
  yaliResult_t result = yaliSuccess;
  const int64_t deadline = nowMs() + comm->settings.timeoutMs;
  // Our calls that use the buffer end before the caller may free it (other threads' calls go on
  // meanwhile, on the staged path). Peers' kernels that still write into our memory write into the
  // allocation they mapped, which CUDA keeps until they unmap it.
  if (!waitForEagerLaunches(comm, launches, deadline))
    result = comm->cancel.load()
                 ? fail(yaliInvalidUsage, comm,
                        "%s: yaliCommAbort was called from another thread while this call waited for the "
                        "comm's calls",
                        call)
                 : fail(yaliTimeout, comm,
                        "%s: the comm's calls had not finished after YALI_TIMEOUT_MS=%lld ms; the buffer may "
                        "still be in use",
                        call, static_cast<long long>(comm->settings.timeoutMs));
  lock.lock();
  if (!comm->res) return fail(yaliInvalidUsage, comm, "%s: the comm was aborted meanwhile", call);
  if (reg->captured && !comm->cancel.load()) {
    // A CUDA graph captured a call on this buffer: replays of such calls must fail from now on
    // instead of touching it (device.cuh: LaunchInfo::tag). Wait for the new value to land, so that
    // an eager call issued after this one never sees the old. Not when an abort waits for this call
    // (cancel): the abort closes the comm on the device, which refuses every replay anyway, and
    // this write could wait up to YALI_TIMEOUT_MS for the device.
    ++comm->regEpoch;
    HostStatus* status = comm->res->hostStatus.get();
    status->regEpochWord = comm->regEpoch;
    std::string err;
    if (!writeDeviceWords(comm, &comm->res->local->regEpoch, &status->regEpochWord,
                          sizeof(status->regEpochWord), deadline + 1000, &err) &&
        result == yaliSuccess)
      result = fail(yaliUnhandledCudaError, comm, "%s: %s", call, err.c_str());
  }
  unlink(comm, reg);
  live.erase(find());
  return result;
}

void releaseRegistrations(yaliComm* comm) {
  for (auto& reg : comm->registrations.live) unlink(comm, reg.get());
  comm->registrations.live.clear();
}

RegisteredSpan findRegistered(const yaliComm* comm, const void* p, size_t bytes, uint64_t bufferId) {
  const char* c = static_cast<const char*>(p);
  for (const auto& reg : comm->registrations.live) {
    if (c < reg->base || bytes > reg->bytes || static_cast<size_t>(c - reg->base) > reg->bytes - bytes)
      continue;
    if (reg->bufferId != bufferId) return {reg.get(), static_cast<size_t>(c - reg->base), true};
    if (reg->usable) return {reg.get(), static_cast<size_t>(c - reg->base), false};
  }
  return {};
}

}  // namespace yali
