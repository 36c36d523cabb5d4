// The communicator: one rank's view of a group of GPUs, the memory it shares with them and the
// state its kernels keep between launches.
//
// Lifetime. What a kernel may touch (the window with the rank-private state, the peers' windows as
// mapped here, and the host-mapped status) is one DeviceResources, shared by the comm and by every
// CUDA graph that captured one of its calls (enqueue.cc: a CUDA user object holds a reference).
// yaliCommDestroy and yaliCommAbort close the comm (LocalState::closed: launches still queued and
// graph replays then touch nothing but the comm's own state words); when the last holder lets go,
// the reaper (reaper.h) releases the resources once the comm's queued launches have ended, with
// calls that never wait for the device (shared_memory.h). Peers' memory stays valid for us while
// we map it (each mapping holds the physical memory), and same-process peers' windows are held by
// reference (DeviceResources::peerWindowRefs).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/common/device_state.h"
#include "core/bootstrap.h"
#include "core/env.h"
#include "core/registration.h"
#include "core/shared_memory.h"
#include "core/window_layout.h"
#include "tuning/selector.h"
#include "yali/yali.h"

namespace yali {

struct CopyEngineState;  // collectives/copy_engine/copy_engine.cc

// What a comm's eager launches (outside CUDA graphs) have issued so far, as the host counts it at
// each launch (enqueue.cc: launchNow), and thus what eagerLaunchesEnded must see ended:
//   kernelBlocks   every block of every eager kernel launch (gridDim.x each): each counts itself
//                  into LocalState::eagerBlocksEnded as it ends (device.cuh: exitLaunch), whatever
//                  its admission, so the launches have ended once that count reaches this;
//   copyEngineSeq  the eagerSeq of the last eager copy-engine call (0: none), which ends when
//                  HostStatus::eagerDone (the copy engines' watch) reaches it;
//   lastSeq        the last eager launch's number (DeviceArgs::eagerSeq), kernel or copy engines:
//                  HostStatus::eagerDone >= lastSeq means that the last launch was a copy-engine
//                  call and has ended, and with it (the comm's launches run in order) every one.
// A launch that fails to be issued (an error from the launch, a copy-engine call that fails while
// being queued) counts in none of them.
struct EagerMark {
  uint64_t kernelBlocks = 0;
  uint64_t copyEngineSeq = 0;
  uint64_t lastSeq = 0;
};

// Everything a kernel of one comm may touch, and the raw pointers DeviceArgs carries. Released on
// the reaper once the comm's last eager launch has ended (eagerLaunchesEnded of eagerIssued:
// a launch still queued when the comm closed reads its state words before it finds the comm
// closed); makeDeviceResources' deleter sees to that.
struct DeviceResources {
  int device = -1;
  std::shared_ptr<SharedMemory> window;        // this rank's window (LocalState at layout.local)
  std::vector<std::shared_ptr<SharedMemory>> peerWindowRefs;  // same-process peers' windows, used
                                                              // by address: held, not mapped
  std::vector<std::unique_ptr<SharedMemory>> peerImports;     // other processes' windows, mapped
  std::shared_ptr<HostStatus> hostStatus;      // pinned, mapped: the host's view
  HostStatus* hostStatusDev = nullptr;         // the device's alias of it
  LocalState* local = nullptr;                 // in our window
  char* peerWindows[kMaxRanks] = {};           // every rank's window as mapped here; [rank] == ours
  EagerMark eagerIssued;                       // the comm's eager launches when it ended
  // Recorded on the comm's control stream when it ends: its copies into our window
  // (writeDeviceWords) may still be queued there, left by a timeout; the release waits for it.
  cudaEvent_t controlDone = nullptr;
  // The comm's order across contexts (yaliComm::everCaptured): here, not in the comm, because the
  // graphs that captured its calls wait for it and record it at every replay, also after the comm
  // was destroyed; they hold these resources (enqueue.cc: holdForGraph).
  cudaEvent_t serial = nullptr;
  // How the host reads LocalState::eagerBlocksEnded (eagerLaunchesEnded): a copy of it into
  // HostStatus::eagerBlocksEndedRead on a stream of its own, which carries nothing else (idle: the
  // read has landed). One read in flight at a time (probeMutex: a deregistration's wait and the
  // release may ask).
  std::mutex probeMutex;
  cudaStream_t probe = nullptr;
  bool probeInFlight = false;
  // The eager launches whose stores have had kStoreDrainUs to land (waitForEagerLaunches): a later
  // wait for no more launches than these does not sleep again.
  std::atomic<uint64_t> eagerDrained{0};
};

std::shared_ptr<DeviceResources> makeDeviceResources();

// Whether the comm's eager launches up to `mark` have ended: the copy engines' count
// (HostStatus::eagerDone, the host's own) has reached mark.lastSeq, or the kernels' count of ended
// blocks (LocalState::eagerBlocksEnded, read by a copy: issued if none is in flight, false until it
// lands) has reached mark.kernelBlocks and the copy engines' count mark.copyEngineSeq; or the
// context is dead. Never blocks on the device.
bool eagerLaunchesEnded(DeviceResources* r, const EagerMark& mark);

// Comms created together by yaliCommInitAll: they collect their registrations here.
struct ProcessGroup {
  GroupRegistrations registrations;
};

}  // namespace yali

// One rank's communicator. API calls reach it through its handle (handles.h); `mutex` serializes
// them, so calls from several threads on one comm cannot corrupt its host state.
struct yaliComm {
  int rank = 0;
  int nranks = 0;
  int device = 0;
  int smMajor = 0;
  // Point-to-point: the rings per ordered pair that transfers use (chunk i on ring i % p2pChannels):
  // layout.p2pChannels, or fewer where ranks share a GPU (applyGpuSharing: every lane of a launch
  // must be resident at once). The same on every rank.
  int p2pChannels = 0;
  // The comm's place in a group's launch order (enqueue.cc: endGroupLevel): the same on every rank
  // of the comm, different between comms (the unique id's public token; yaliCommInitAll's comms, all
  // in one process, draw one at random). NCCL's groups order their comms by their hash likewise, so
  // ranks that make a group's calls on several comms in different orders still launch them alike.
  uint64_t groupKey = 0;
  yali::Settings settings;
  yali::Selector selector;
  yali::WindowLayout layout{};
  uint32_t windowRegions = 0;  // the Region bits `layout` holds (enqueue refuses an algorithm needing more)
  std::shared_ptr<yali::DeviceResources> res;  // null once the comm is destroyed or aborted
  // The host-mapped status, also held by res: kept until the comm object goes, so that calls that
  // only read it (yaliCommGetAsyncError) need not take `mutex`.
  std::shared_ptr<yali::HostStatus> status;
  yali::RegistrationTable registrations;      // yaliCommRegister
  std::vector<int32_t> pids;                  // every rank's process id (verified at set-up)

  std::unique_ptr<yali::Bootstrap> bootstrap;     // one process per GPU
  std::shared_ptr<yali::ProcessGroup> group;      // yaliCommInitAll

  // A non-blocking stream of the comm's own, for the host's writes into device state
  // (writeDeviceWords: closing the comm, the registration epoch, a peer's remoteFailure word): it
  // never waits for the caller's streams or for other libraries' work.
  cudaStream_t control = nullptr;

  std::mutex mutex;                   // held by every API call on the comm (but while a
                                      // registration call waits for peers or for launches)
  std::mutex registrationMutex;       // yaliCommRegister/Deregister, held across their exchanges
                                      // and waits; taken before `mutex`, also by destroy and abort
  std::atomic<bool> cancel{false};    // yaliCommAbort: blocked bootstrap exchanges give up now
  uint64_t launches = 0;              // every launch (for error reports)
  yali::EagerMark eagerIssued;        // launches outside CUDA graphs (DeviceArgs::eagerSeq), and
                                      // their blocks (what destroy and deregister wait for)
  unsigned long long capturedBy = 0;  // the stream capture whose graph holds a reference to res
  uint32_t regEpoch = 0;              // the host's copy of LocalState::regEpoch

  // The order of the comm's launches across streams (enqueue.cc: orderAfterLastLaunch). The
  // device-side epoch needs a comm's launches to run one after another in the order they were
  // issued; NCCL gives its users that order whatever streams they use, and torch relies on it.
  // One record per context: the eager launches, and the launches of the latest stream capture.
  // Eager launches keep their order across the captures made between them (a captured call does
  // not make the next eager one forget the eager one before it).
  struct LaunchOrder {
    cudaEvent_t event = nullptr;    // marks the last launch, once the context used two streams
    bool eventEveryLaunch = false;  // set at the context's first change of stream
    bool have = false;              // a launch of the context was made
    cudaStream_t stream = nullptr;  // the stream of its last launch
    uint64_t thread = 0;            // the thread that made it (threadToken; cudaStreamPerThread: a stream per thread)
    bool marked = false;            // `event` was recorded right after it
    unsigned long long context = 0; // the capture's id (captureOrder); 0 for eagerOrder
    // captureOrder: the capture's record of DeviceResources::serial, a node of its graph beside the
    // comm's kernels (enqueue.cc: addSerialRecordNode), null before one; `recordAfter`, the nodes it
    // follows (the comm's newest launch). A leaf: it moves behind each new launch of the capture.
    cudaGraphNode_t serialRecord = nullptr;
    std::vector<cudaGraphNode_t> recordAfter;
  };
  LaunchOrder eagerOrder;
  LaunchOrder captureOrder;  // started afresh by each new capture
  // Order across contexts (enqueue.cc: waitAcrossContexts, recordAcrossContexts), from the comm's
  // first captured call on: every launch waits for DeviceResources::serial and records it after
  // itself, eagerly or, inside a capture, as the graph's own event nodes (recorded and waited for
  // at each replay), so that a graph's replay and the comm's other calls run in the order the host
  // issued them, as NCCL's do. Off with YALI_GRAPH_MIXING=0 (Settings::graphMixing).
  bool everCaptured = false;

  // The copy-engine algorithms (copy_engine.h): whether the driver offers what they need, and
  // their streams, events and watch, made at the comm's first *_ce call.
  bool copyEngineOk = false;
  std::shared_ptr<yali::CopyEngineState> copyEngine;
  // yaliCommWatchFailureWord's word, or null: passed to every launch (DeviceArgs::failureWatch);
  // while set, no copy-engine algorithm is chosen (they launch no kernel that could read it).
  const uint64_t* failureWatch = nullptr;

  void setLastError(const std::string& msg) {
    std::lock_guard<std::mutex> lock(errorMutex);
    lastError = msg;
  }
  std::string getLastError() {
    std::lock_guard<std::mutex> lock(errorMutex);
    return lastError;
  }
  void setHostNote(const std::string& note) {
    std::lock_guard<std::mutex> lock(errorMutex);
    hostNote = note;
  }
  std::string getHostNote() {
    std::lock_guard<std::mutex> lock(errorMutex);
    return hostNote;
  }
  std::mutex errorMutex;
  std::string lastError;
  std::string hostNote;  // what the host knows of a device failure it provoked (a call on freed
                         // registered memory), for its message

  ~yaliComm();
};

namespace yali {

yaliResult_t commInitRank(yaliComm_t* out, int nranks, const UniqueIdFields& id, int rank,
                          const Settings& settings);
yaliResult_t commInitAll(yaliComm_t* comms, int ndev, const int* devlist, const Settings& settings);
// Both end the comm's life; `handle` is retired. Callers hold comm->mutex.
yaliResult_t commDestroy(yaliComm* comm, yaliComm_t handle);
yaliResult_t commAbort(yaliComm* comm, yaliComm_t handle);

// Asynchronous failure seen by the device (timeout, abort, a peer's failure), as a result code;
// yaliSuccess if none. Reads host-mapped memory; never synchronizes; needs no lock.
yaliResult_t commAsyncError(const yaliComm* comm);
// The same, as the message yaliGetLastError gives for it.
std::string commAsyncErrorText(yaliComm* comm);

// Waits until the comm's eager launches up to `mark` (a copy of yaliComm::eagerIssued) have ended
// on the device (eagerLaunchesEnded) and their stores have had kStoreDrainUs to land, or until
// `deadlineMs` (nowMs()) passes, or until the comm is cancelled. True when they have ended. Needs
// no lock. While an IPC close waits for the device no read is issued (CloseGate), so such a wait
// lasts at least as long as that close, up to the deadline.
bool waitForEagerLaunches(yaliComm* comm, const EagerMark& mark, int64_t deadlineMs);

// Writes `bytes` from pinned `src` to device address `dst` on the comm's control stream and waits
// for the copy, at most until `deadlineMs`. False (with *error) if it failed or did not finish.
bool writeDeviceWords(yaliComm* comm, void* dst, const void* src, size_t bytes, int64_t deadlineMs,
                      std::string* error);

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
