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
//   - NCCL runs on ncclMemAlloc's memory in every -R mode (its registration takes no cudaMalloc
//     memory).
// And -C sendrecv's calls: nccl-tests' ncclGroupStart, ncclSend to rank+1, ncclRecv from rank-1,
// ncclGroupEnd, nested in the harness's group; a refused ncclSend or ncclRecv (NCCL then launches
// none of the group's calls, and the outermost ncclGroupEnd returns the refusal) is a refusal.
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

// One ncclSend or ncclRecv, as the fake saw it.
struct P2PCall {
  bool send;
  const void* buffer;
  size_t count;
  ncclDataType_t type;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
  int group_depth;  // at the call
};

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
  std::vector<P2PCall> p2p;                    // every ncclSend and ncclRecv, in call order
  ncclResult_t refuse_send = ncclSuccess;      // what ncclSend returns (and records as the error)
  ncclResult_t refuse_recv = ncclSuccess;
  ncclResult_t group_error = ncclSuccess;      // the open group's first error (NCCL's ncclGroupError)
  int launched_groups = 0;                     // outermost ncclGroupEnd calls that launched
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
  // As NCCL: a call refused inside the group fails the outermost end, which launches nothing.
  if (g_nccl->group_error != ncclSuccess) {
    const ncclResult_t error = g_nccl->group_error;
    g_nccl->group_error = ncclSuccess;
    return error;
  }
  ++g_nccl->launched_groups;
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
ncclResult_t ncclSend(const void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  g_nccl->p2p.push_back({true, buffer, count, type, peer, comm, stream, g_nccl->group_depth});
  if (g_nccl->refuse_send != ncclSuccess && g_nccl->group_depth > 0)
    g_nccl->group_error = g_nccl->refuse_send;
  return g_nccl->refuse_send;
}
ncclResult_t ncclRecv(void* buffer, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  g_nccl->p2p.push_back({false, buffer, count, type, peer, comm, stream, g_nccl->group_depth});
  if (g_nccl->refuse_recv != ncclSuccess && g_nccl->group_depth > 0)
    g_nccl->group_error = g_nccl->refuse_recv;
  return g_nccl->refuse_recv;
}

// The CUDA runtime calls of the backend.
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* cudaGetErrorString(cudaError_t) { return "fake"; }

}  // extern "C"

// ---- The tests -----------------------------------------------------------------------------------

namespace {

using yali_perf::Backend;
using yali_perf_test::Expect;

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

// -R 0 and 1 as -R 2: NCCL runs on memory from ncclMemAlloc, as nccl-tests gives it, since its
// registration (of captured buffers in graphs, and ncclCommRegister's) takes no cudaMalloc memory.
// Until Session 43 it ran on the shared cudaMalloc buffers under -R 0 and 1 (WantsOwnBuffers was
// false there), and its send/recv in graphs copied through its FIFOs.
void NcclRunsOnItsOwnMemoryInEveryMode() {
  FakeNccl fake;
  g_nccl = &fake;
  std::unique_ptr<Backend> backend = MakeBackend();
  backend->InitAll({0, 1});
  for (int mode = 0; mode <= 2; ++mode) EXPECT(backend->WantsOwnBuffers(mode));
  void* buffer = backend->AllocateOwnBuffer(0, 1 << 16);
  EXPECT(fake.allocations.count(buffer) == 1);  // ncclMemAlloc's
  TearDown(*backend, {{buffer}});
  EXPECT(fake.allocations.empty());
  g_nccl = nullptr;
}

// --nccl-memory shared: NCCL on the shared cudaMalloc buffers under -R 0 and 1 (what PyTorch's
// default allocator hands it); -R 2's windows still take its own.
void NcclSharesTheBuffersWhenAsked() {
  FakeNccl fake;
  g_nccl = &fake;
  yali_perf::NcclOptions options;
  options.own_memory = false;
  std::string reason;
  std::unique_ptr<Backend> backend = yali_perf::MakeNcclBackend(options, &reason);
  EXPECT(backend != nullptr);
  if (backend == nullptr) return;
  backend->InitAll({0, 1});
  EXPECT(!backend->WantsOwnBuffers(0));
  EXPECT(!backend->WantsOwnBuffers(1));
  EXPECT(backend->WantsOwnBuffers(2));
  TearDown(*backend, {});
  g_nccl = nullptr;
}

// -R 1: ncclCommRegister outside a group on NCCL's own buffers, deregistered before the comms
// go, the buffers freed after.
void RegistrationsAreDeregistered() {
  FakeNccl fake;
  g_nccl = &fake;
  std::unique_ptr<Backend> backend = MakeBackend();
  backend->InitAll({0, 1});
  EXPECT(backend->WantsOwnBuffers(1));
  std::vector<std::vector<void*>> buffers(2);
  for (int local = 0; local < 2; ++local)
    for (int k = 0; k < 2; ++k) buffers[local].push_back(backend->AllocateOwnBuffer(local, 1 << 16));
  backend->RegisterBuffers(buffers, 1 << 16, 1);
  EXPECT(fake.live_registrations.size() == 4);
  TearDown(*backend, buffers);
  EXPECT(fake.live_registrations.empty());
  EXPECT(fake.registrations_left_at_destroy == 0);
  EXPECT(fake.allocations.empty());
  g_nccl = nullptr;
}

// -C sendrecv (collectives.cu fills the peers: to rank+1, from rank-1): one group of an ncclSend
// and an ncclRecv per call, as nccl-tests' SendRecvRunColl, inside the harness's group
// (IssueGrouped) across the local comms.
void SendRecvIsOneGroup() {
  FakeNccl fake;
  g_nccl = &fake;
  std::unique_ptr<Backend> backend = MakeBackend();
  backend->InitAll({0, 1, 2});
  float storage[3][2][8];
  auto call_of = [&](int rank) {
    yali_perf::LibraryCall call;
    call.kind = yali_perf::CollId::kSendRecv;
    call.send = storage[rank][0];
    call.recv = storage[rank][1];
    call.count = 8;
    call.dtype = yali_perf::DType::kBfloat16;
    call.send_peer = (rank + 1) % 3;
    call.recv_peer = (rank + 2) % 3;
    return call;
  };
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x5eed);
  std::string refusal;
  backend->GroupStart();
  for (int rank = 0; rank < 3; ++rank)
    Expect(backend->Issue(rank, call_of(rank), stream, &refusal),
           "sendrecv issued on local comm " + std::to_string(rank), __LINE__);
  EXPECT(fake.group_depth == 1);  // each call's own group closed, the harness's still open
  backend->GroupEnd();
  EXPECT(fake.group_depth == 0 && fake.launched_groups == 1);
  EXPECT(fake.p2p.size() == 6);
  for (size_t k = 0; k < fake.p2p.size() && fake.p2p.size() == 6; ++k) {
    const P2PCall& c = fake.p2p[k];
    const int rank = static_cast<int>(k / 2);
    const bool send = k % 2 == 0;  // nccl-tests' order: the send, then the receive
    Expect(c.send == send && c.count == 8 && c.type == ncclBfloat16 && c.stream == stream &&
               c.comm == fake.comms[rank].get() && c.group_depth == 2 &&
               c.peer == (send ? (rank + 1) % 3 : (rank + 2) % 3) &&
               c.buffer == (send ? static_cast<const void*>(storage[rank][0])
                                 : static_cast<const void*>(storage[rank][1])),
           "call " + std::to_string(k) + " of the sendrecv group", __LINE__);
  }

  // Outside the harness's group the call's own group is the outermost and launches.
  fake.p2p.clear();
  EXPECT(backend->Issue(1, call_of(1), stream, &refusal));
  EXPECT(fake.group_depth == 0 && fake.launched_groups == 2 && fake.p2p.size() == 2 &&
         fake.p2p[0].group_depth == 1);

  // A refused send: a refusal naming ncclSend, the receive not made, the groups closed, nothing
  // launched (and no fatal error from the harness's ncclGroupEnd, which returns the refusal).
  fake.p2p.clear();
  fake.refuse_send = ncclInvalidArgument;
  refusal.clear();
  backend->GroupStart();
  EXPECT(!backend->Issue(0, call_of(0), stream, &refusal));
  backend->GroupEnd();
  EXPECT(refusal.find("ncclSend(count 8, bfloat16, to rank 1, from rank 2, local comm 0)") !=
         std::string::npos);
  EXPECT(fake.p2p.size() == 1 && fake.p2p[0].send);
  EXPECT(fake.group_depth == 0 && fake.launched_groups == 2);

  // A refused receive: likewise, naming ncclRecv (NCCL drops the accepted send with the group).
  fake.p2p.clear();
  fake.refuse_send = ncclSuccess;
  fake.refuse_recv = ncclInvalidArgument;
  refusal.clear();
  backend->GroupStart();
  EXPECT(!backend->Issue(2, call_of(2), stream, &refusal));
  backend->GroupEnd();
  EXPECT(refusal.find("ncclRecv(count 8, bfloat16, to rank 0, from rank 1, local comm 2)") !=
         std::string::npos);
  EXPECT(fake.p2p.size() == 2 && fake.group_depth == 0 && fake.launched_groups == 2);

  // The precheck accepts it (NCCL has no dry run; bfloat16 is in every NCCL this builds against).
  EXPECT(backend->Precheck(0, call_of(0), &refusal));
  EXPECT(!backend->Describe(0, call_of(0)).known);
  backend->DestroyAll();
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
  NcclRunsOnItsOwnMemoryInEveryMode();
  NcclSharesTheBuffersWhenAsked();
  RegistrationsAreDeregistered();
  SendRecvIsOneGroup();
  return yali_perf_test::Summary();
}
