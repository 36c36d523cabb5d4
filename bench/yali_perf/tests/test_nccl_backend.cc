// yali-perf's NCCL backend (nccl_backend.cc) against a fake NCCL that keeps NCCL's rules for buffer
// registration and tear-down, so that they are checked on machines without a GPU or NCCL library:
//   - ncclCommWindowRegister inside a group fills in *win only at the group's ncclGroupEnd (NCCL
//     2.27+, dev_runtime.cc: the call queues a task holding the pointer; ncclCommWindowRegister's
//     documentation says so too); outside a group, at once.
//   - every window is deregistered (ncclCommWindowDeregister with the handle NCCL gave; a null
//     handle is a no-op there) before its comm is destroyed and before its memory is freed with
//     ncclMemFree. A window left registered is cleaned up inside ncclCommDestroy after NCCL has
//     freed its proxy state, which its cleanup of IPC registrations still uses (2.28.3,
//     init.cc commFree: ncclProxyDestroy, then ncclRegCleanup).
//   - likewise every ncclCommRegister handle (-R 1) is deregistered before the comm goes.
// The fake also stands in for the three CUDA runtime calls the backend makes (cudaSetDevice and
// the error names), so the test needs no GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend.h"
#include "perf_test_support.h"

// ---- The fake NCCL -------------------------------------------------------------------------------

struct ncclComm {
  int rank = 0;
  bool destroyed = false;
};

namespace {

struct PendingWindow {
  ncclComm_t comm;
  void* buffer;
  ncclWindow_t* out;
};

struct FakeNccl {
  int group_depth = 0;
  std::vector<PendingWindow> pending;      // registered inside the open group
  uintptr_t next_handle = 0x1000;
  std::map<ncclWindow_t, std::pair<ncclComm_t, void*>> live_windows;  // handle -> (comm, buffer)
  std::map<void*, ncclComm_t> live_registrations;                     // ncclCommRegister handles
  std::set<void*> allocations;                                        // ncclMemAlloc, not yet freed
  int null_window_deregistrations = 0;
  int unknown_window_deregistrations = 0;
  int windows_left_at_destroy = 0;      // live windows of a comm when it was destroyed
  int registrations_left_at_destroy = 0;
  int freed_while_in_window = 0;        // ncclMemFree of memory a live window still holds
  std::vector<std::unique_ptr<ncclComm>> comms;
};

FakeNccl* g_nccl = nullptr;

ncclComm_t NewComm(int rank) {
  g_nccl->comms.push_back(std::unique_ptr<ncclComm>(new ncclComm()));
  g_nccl->comms.back()->rank = rank;
  return g_nccl->comms.back().get();
}

ncclWindow_t NewWindow(ncclComm_t comm, void* buffer) {
  ncclWindow_t window = reinterpret_cast<ncclWindow_t>(g_nccl->next_handle);
  g_nccl->next_handle += 0x10;
  g_nccl->live_windows[window] = {comm, buffer};
  return window;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId();
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int rank) {
  *comm = NewComm(rank);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int, ncclUniqueId, int rank, ncclConfig_t*) {
  *comm = NewComm(rank);
  return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i) comms[i] = NewComm(i);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  for (const auto& entry : g_nccl->live_windows)
    if (entry.second.first == comm) ++g_nccl->windows_left_at_destroy;
  for (const auto& entry : g_nccl->live_registrations)
    if (entry.second == comm) ++g_nccl->registrations_left_at_destroy;
  comm->destroyed = true;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
const char* ncclGetErrorString(ncclResult_t) { return "fake error"; }
const char* ncclGetLastError(ncclComm_t) { return ""; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* async) {
  *async = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++g_nccl->group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (--g_nccl->group_depth > 0) return ncclSuccess;
  // NCCL fills in the handles of the group's window registrations now, through the pointers the
  // calls were given.
  for (const PendingWindow& p : g_nccl->pending) *p.out = NewWindow(p.comm, p.buffer);
  g_nccl->pending.clear();
  return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  *ptr = std::malloc(size);
  g_nccl->allocations.insert(*ptr);
  return ncclSuccess;
}
ncclResult_t ncclMemFree(void* ptr) {
  for (const auto& entry : g_nccl->live_windows)
    if (entry.second.second == ptr) ++g_nccl->freed_while_in_window;
  g_nccl->allocations.erase(ptr);
  std::free(ptr);
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  *handle = reinterpret_cast<void*>(g_nccl->next_handle);
  g_nccl->next_handle += 0x10;
  g_nccl->live_registrations[*handle] = comm;
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t, void* handle) {
  return g_nccl->live_registrations.erase(handle) == 1 ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t, ncclWindow_t* win, int) {
  if (g_nccl->group_depth > 0) {
    g_nccl->pending.push_back({comm, buff, win});  // *win is written at ncclGroupEnd
  } else {
    *win = NewWindow(comm, buff);
  }
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t win) {
  if (win == nullptr) {  // NCCL returns at once: nothing is deregistered
    ++g_nccl->null_window_deregistrations;
    return ncclSuccess;
  }
  if (g_nccl->live_windows.erase(win) != 1) ++g_nccl->unknown_window_deregistrations;
  return ncclSuccess;
}

// The collectives are never called here.
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
#if NCCL_VERSION_CODE >= 22800
ncclResult_t ncclGather(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclScatter(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclAlltoAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
#endif
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInternalError; }

// The CUDA runtime calls of the backend.
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* cudaGetErrorString(cudaError_t) { return "fake"; }

}  // extern "C"

// ---- The tests -----------------------------------------------------------------------------------

namespace {

using yali_perf::Backend;

std::unique_ptr<Backend> MakeBackend() {
  std::string reason;
  std::unique_ptr<Backend> backend = yali_perf::MakeNcclBackend(yali_perf::NcclOptions(), &reason);
  EXPECT(backend != nullptr);
  return backend;
}

// EndRun's order for one library (main.cc): deregister, destroy the comms, free the own buffers.
void TearDown(Backend& backend, const std::vector<std::vector<void*>>& buffers) {
  backend.DeregisterBuffers();
  backend.DestroyAll();
  for (size_t local = 0; local < buffers.size(); ++local)
    for (void* buffer : buffers[local]) backend.FreeOwnBuffer(static_cast<int>(local), buffer);
}

// -R 2 on `ncomms` local comms (1: one process per GPU; more: one process driving several GPUs),
// each with a send and a receive buffer of its own.
void WindowsAreDeregistered(int ncomms) {
  FakeNccl fake;
  g_nccl = &fake;
  std::unique_ptr<Backend> backend = MakeBackend();
  if (ncomms == 1) {
    backend->InitRank(std::string(sizeof(ncclUniqueId), '\0'), 4, 2, 0);
  } else {
    std::vector<int> devices;
    for (int i = 0; i < ncomms; ++i) devices.push_back(i);
    backend->InitAll(devices);
  }
  EXPECT(backend->WantsOwnBuffers(2));
  const size_t bytes = 1 << 16;
  std::vector<std::vector<void*>> buffers(ncomms);
  for (int local = 0; local < ncomms; ++local)
    for (int k = 0; k < 2; ++k) buffers[local].push_back(backend->AllocateOwnBuffer(local, bytes));
  backend->RegisterBuffers(buffers, bytes, 2);
  EXPECT(fake.live_windows.size() == static_cast<size_t>(2 * ncomms));

  backend->DeregisterBuffers();
  // Every window NCCL handed out was deregistered, with its own handle.
  EXPECT(fake.live_windows.empty());
  EXPECT(fake.null_window_deregistrations == 0);
  EXPECT(fake.unknown_window_deregistrations == 0);
  backend->DestroyAll();
  for (int local = 0; local < ncomms; ++local)
    for (void* buffer : buffers[local]) backend->FreeOwnBuffer(local, buffer);
  EXPECT(fake.windows_left_at_destroy == 0);
  EXPECT(fake.freed_while_in_window == 0);
  EXPECT(fake.allocations.empty());
  // A second deregistration (nothing registered) is a no-op.
  backend->DeregisterBuffers();
  EXPECT(fake.null_window_deregistrations == 0);
  g_nccl = nullptr;
}

// -R 1: ncclCommRegister outside a group, deregistered before the comms go.
void RegistrationsAreDeregistered() {
  FakeNccl fake;
  g_nccl = &fake;
  std::unique_ptr<Backend> backend = MakeBackend();
  backend->InitAll({0, 1});
  EXPECT(!backend->WantsOwnBuffers(1));
  int storage[4];
  std::vector<std::vector<void*>> buffers = {{&storage[0], &storage[1]}, {&storage[2], &storage[3]}};
  backend->RegisterBuffers(buffers, sizeof(int), 1);
  EXPECT(fake.live_registrations.size() == 4);
  TearDown(*backend, {});
  EXPECT(fake.live_registrations.empty());
  EXPECT(fake.registrations_left_at_destroy == 0);
  g_nccl = nullptr;
}

}  // namespace

int main() {
#if NCCL_VERSION_CODE >= 22700
  WindowsAreDeregistered(1);
  WindowsAreDeregistered(3);
#else
  std::printf("nccl.h %d has no symmetric windows: the -R 2 cases are not built\n", NCCL_VERSION_CODE);
#endif
  RegistrationsAreDeregistered();
  return yali_perf_test::Summary();
}
