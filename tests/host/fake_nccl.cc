// A stand-in for libnccl.so.2 in libyali-nccl's host tests (test_nccl_abi.cc), which point
// YALI_NCCL_LIBRARY at it: a few of NCCL's functions, each noting what it received, so that a test
// can see what libyali-nccl forwarded. It lacks most of NCCL on purpose (ncclSend, for one), to
// exercise the forward of a function the loaded NCCL does not have.
//
// Its communicators have one rank: libyali-nccl then never starts its YALI set-up (which needs a
// GPU), and every call is NCCL's.
#include <stdint.h>
#include <string.h>

#include <nccl.h>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct FakeComm {
  uint64_t magic = 0x4d4d4f43454b4146ull;  // not libyali-nccl's, as NCCL's own is not
  int rank = 0;
  int nranks = 1;
};

FakeComm* makeComm(int nranks, int rank) {
  FakeComm* c = new FakeComm;
  c->rank = rank;
  c->nranks = nranks;
  return c;
}

}  // namespace

// What the last call received: its name, its communicator, the handle it was given (for
// deregistration) and the group depth. Read by the test through dlsym.
extern "C" {
__attribute__((visibility("default"))) const char* fakeLastCall = "";
__attribute__((visibility("default"))) void* fakeLastComm = nullptr;
__attribute__((visibility("default"))) void* fakeLastHandle = nullptr;
__attribute__((visibility("default"))) int fakeGroupDepth = 0;
__attribute__((visibility("default"))) int fakeVersion = NCCL_VERSION_CODE;
// The handle ncclCommRegister gives out.
__attribute__((visibility("default"))) char fakeRegistrationToken = 0;
}

namespace {

ncclResult_t note(const char* call, const void* comm) {
  fakeLastCall = call;
  fakeLastComm = const_cast<void*>(comm);
  return comm != nullptr ? ncclSuccess : ncclInvalidArgument;
}

const FakeComm* fake(ncclComm_t comm) { return reinterpret_cast<const FakeComm*>(comm); }

}  // namespace

FAKE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  *version = fakeVersion;
  return ncclSuccess;
}

FAKE_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "fake: no error" : "fake: error";
}

FAKE_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  note("ncclGetLastError", comm);
  return "fake: last error";
}

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 7, sizeof(*id));
  fakeLastCall = "ncclGetUniqueId";
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  *comm = reinterpret_cast<ncclComm_t>(makeComm(nranks, rank));
  return note("ncclCommInitRank", *comm);
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                                ncclConfig_t*) {
  *comm = reinterpret_cast<ncclComm_t>(makeComm(nranks, rank));
  return note("ncclCommInitRankConfig", *comm);
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  note("ncclCommDestroy", comm);
  delete reinterpret_cast<FakeComm*>(comm);
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = fake(comm)->nranks;
  return note("ncclCommCount", comm);
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = fake(comm)->rank;
  return note("ncclCommUserRank", comm);
}

FAKE_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  *device = 0;
  return note("ncclCommCuDevice", comm);
}

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  *asyncError = ncclSuccess;
  return note("ncclCommGetAsyncError", comm);
}

FAKE_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t comm) { return note("ncclRedOpDestroy", comm); }

FAKE_EXPORT ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm,
                                       cudaStream_t) {
  return note("ncclAllReduce", comm);
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm,
                                       cudaStream_t) {
  return note("ncclBroadcast", comm);
}

FAKE_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  *handle = &fakeRegistrationToken;
  return note("ncclCommRegister", comm);
}

FAKE_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  fakeLastHandle = handle;
  return note("ncclCommDeregister", comm);
}

FAKE_EXPORT ncclResult_t ncclGroupStart() {
  ++fakeGroupDepth;
  fakeLastCall = "ncclGroupStart";
  return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd() {
  --fakeGroupDepth;
  fakeLastCall = "ncclGroupEnd";
  return ncclSuccess;
}
