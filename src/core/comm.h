// The communicator: one rank's view of a group of GPUs, the memory it shares with them and the
// state its kernels keep between launches.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/allreduce/launch.h"
#include "collectives/common/device_state.h"
#include "core/bootstrap.h"
#include "core/env.h"
#include "core/registration.h"
#include "tuning/selector.h"
#include "yali/yali.h"

namespace yali {

// Comms created together by yaliCommInitAll share one owner of their windows (a window may be freed
// only when every comm that maps it is gone) and collect their registrations here.
struct ProcessGroup {
  std::vector<int> devices;
  std::vector<char*> windows;
  GroupRegistrations registrations;
  ~ProcessGroup();
};

enum class CommState { kActive, kDestroyed, kAborted };

}  // namespace yali

// Handles are never freed: a destroyed or aborted comm stays behind as a tombstone (a few hundred
// bytes) so that a later call with the stale handle gets yaliInvalidUsage, not a crash.
struct yaliComm {
  yali::CommState state = yali::CommState::kActive;
  int rank = 0;
  int nranks = 0;
  int device = 0;
  int smMajor = 0;
  yali::Settings settings;
  yali::Selector selector;

  // Shared memory: this rank's window and every rank's window as mapped here.
  char* window = nullptr;
  yali::WindowLayout layout{};
  char* peerWindows[yali::kMaxRanks] = {};
  bool peerMappedByIpc[yali::kMaxRanks] = {};  // close with cudaIpcCloseMemHandle on tear-down

  yali::RegistrationTable registrations;      // yaliCommRegister
  yali::CopyEngineStreams ceStreams;           // copy_engine's side streams (none if it is off)

  yali::LocalState* local = nullptr;          // device memory, rank-private
  yali::HostStatus* hostStatus = nullptr;     // host-mapped; the host's view
  yali::HostStatus* hostStatusDev = nullptr;  // the device's alias of it
  uint64_t launches = 0;

  // Buffers already checked by cudaPointerGetAttributes (device memory of this GPU): training
  // loops pass the same few buffers every call, and the query costs more than a launch's
  // bookkeeping. Round-robin replacement.
  static constexpr int kValidatedBuffers = 8;
  const void* validatedBuffers[kValidatedBuffers] = {};
  int nextValidatedSlot = 0;

  std::unique_ptr<yali::Bootstrap> bootstrap;     // one process per GPU
  std::shared_ptr<yali::ProcessGroup> group;      // yaliCommInitAll

  void setLastError(const std::string& msg) {
    std::lock_guard<std::mutex> lock(errorMutex);
    lastError = msg;
  }
  std::string getLastError() {
    std::lock_guard<std::mutex> lock(errorMutex);
    return lastError;
  }
  std::mutex errorMutex;
  std::string lastError;
  std::string lastErrorReturned;  // keeps yaliGetLastError's pointer valid until the next call
};

namespace yali {

WindowLayout computeLayout(int nranks, const Settings& s);

// Registry of every handle ever returned (live and tombstones).
void registerComm(yaliComm* comm);
bool isKnownComm(const yaliComm* comm);

yaliResult_t commInitRank(yaliComm_t* out, int nranks, const UniqueIdFields& id, int rank,
                          const Settings& settings);
yaliResult_t commInitAll(yaliComm_t* comms, int ndev, const int* devlist, const Settings& settings);
yaliResult_t commDestroy(yaliComm* comm);
yaliResult_t commAbort(yaliComm* comm);

// Asynchronous failure seen by the device (timeout, abort), as a result code; yaliSuccess if none.
// Reads host-mapped memory; never synchronizes.
yaliResult_t commAsyncError(yaliComm* comm);

// DeviceArgs for a launch, with everything but the per-call fields filled.
DeviceArgs baseDeviceArgs(const yaliComm* comm);

// Runs `fn` with the comm's device current, restoring the caller's device afterwards.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace yali
