// The process's table of peer allocations mapped by CUDA IPC (core/ipc_imports.h), against a fake
// driver that keeps CUDA's rule: an allocation is mapped at most once per device at a time; a
// second open before the first mapping is closed fails with "resource already mapped". Closes are
// deferred (posted jobs, run when the test says, as the reaper runs them later).
//
// Before IpcImports each comm kept its own map, so a second comm's registration of an allocation,
// or a registration made while an earlier one's close was still queued, opened it a second time:
// case two_comms_share_one_mapping and reimport_before_the_close_reuses_it fail that way. The unit
// the fake maps is a block, as CUDA's is (several small cudaMallocs may share one): case
// allocations_of_one_block_share_its_mapping fails when entries are keyed by allocation.
#include <stdint.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/ipc_imports.h"
#include "harness.h"

using namespace yali;

namespace {

// A fake handle names the exporting process, the block and where its allocation starts in the
// block (a real one identifies them too).
cudaIpcMemHandle_t handleOf(const IpcImports::Key& k, uint64_t offsetInBlock = 0) {
  cudaIpcMemHandle_t h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.reserved, &k.peerPid, sizeof k.peerPid);
  std::memcpy(h.reserved + 8, &k.blockId, sizeof k.blockId);
  std::memcpy(h.reserved + 16, &offsetInBlock, sizeof offsetInBlock);
  return h;
}

// CUDA's rule, and counts. Thread-safe: a close may run on another thread.
struct FakeDriver {
  std::mutex mutex;
  std::set<std::tuple<int, int64_t, uint64_t>> mapped;  // (device, process, block) open now
  // [i]: what the i-th open mapped: the block at 0x100000 (i + 1), returned as the opening
  // allocation's address in it
  std::vector<std::tuple<int, int64_t, uint64_t>> keys;
  std::vector<uintptr_t> returned;  // [i]: what the i-th open returned (a close must pass it back)
  int opens = 0, closes = 0;
  std::vector<std::function<bool()>> posted;  // deferred closes, run by runPosted()
  std::function<void()> duringClose;          // called inside close (blocks it, in one case)

  static std::tuple<int, int64_t, uint64_t> keyOf(const cudaIpcMemHandle_t& h, int device) {
    int64_t pid;
    uint64_t id;
    std::memcpy(&pid, h.reserved, sizeof pid);
    std::memcpy(&id, h.reserved + 8, sizeof id);
    return {device, pid, id};
  }
  static uint64_t offsetOf(const cudaIpcMemHandle_t& h) {
    uint64_t off;
    std::memcpy(&off, h.reserved + 16, sizeof off);
    return off;
  }
  static uintptr_t blockBase(size_t i) { return 0x100000 * (i + 1); }
  IpcImports::Ops ops() {
    return IpcImports::Ops{
        [this](void** out, const cudaIpcMemHandle_t& h, int device, std::string* error) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!mapped.insert(keyOf(h, device)).second) {
            *error = "cudaIpcOpenMemHandle failed: resource already mapped";
            return false;
          }
          ++opens;
          keys.push_back(keyOf(h, device));
          returned.push_back(blockBase(keys.size() - 1) + offsetOf(h));
          *out = reinterpret_cast<void*>(returned.back());
          return true;
        },
        [this](void* m, int device) {
          if (duringClose) duringClose();
          std::lock_guard<std::mutex> lock(mutex);
          const size_t i = reinterpret_cast<uintptr_t>(m) / 0x100000 - 1;
          CHECK(reinterpret_cast<uintptr_t>(m) == returned.at(i));  // what the open returned, exactly
          const auto& k = keys.at(i);
          CHECK_EQ(std::get<0>(k), device);
          mapped.erase(k);
          ++closes;
        },
        [this](std::function<bool()> job) {
          std::lock_guard<std::mutex> lock(mutex);
          posted.push_back(std::move(job));
        }};
  }
  void runPosted() {
    std::vector<std::function<bool()>> jobs;
    {
      std::lock_guard<std::mutex> lock(mutex);
      jobs.swap(posted);
    }
    for (auto& j : jobs) CHECK(j());
  }
};

const IpcImports::Key kA{0, 1234, 7};

}  // namespace

TEST(two_comms_share_one_mapping) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> first = t.import(kA, handleOf(kA), 0, 1000, &err);   // comm 1's registration
  std::shared_ptr<void> second = t.import(kA, handleOf(kA), 0, 1000, &err);  // comm 2's, same allocation
  CHECK_MSG(first && second, "%s", err.c_str());
  CHECK(first.get() == second.get());
  CHECK_EQ(drv.opens, 1);
  first.reset();
  drv.runPosted();  // nothing posted while the second holds it
  CHECK_EQ(drv.closes, 0);
  second.reset();
  CHECK_EQ(drv.closes, 0);  // deferred
  drv.runPosted();
  CHECK_EQ(drv.closes, 1);
  CHECK_EQ(t.entries(), 0u);
}

TEST(reimport_before_the_close_reuses_it) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> m = t.import(kA, handleOf(kA), 0, 1000, &err);
  void* where = m.get();
  m.reset();  // close posted, not run
  m = t.import(kA, handleOf(kA), 0, 1000, &err);
  CHECK_MSG(m != nullptr, "%s", err.c_str());
  CHECK(m.get() == where);
  CHECK_EQ(drv.opens, 1);
  drv.runPosted();  // the stale close finds the entry live again and leaves it
  CHECK_EQ(drv.closes, 0);
  m.reset();
  m = t.import(kA, handleOf(kA), 0, 1000, &err);  // again: Idle, with a newer close posted
  m.reset();
  drv.runPosted();  // two closes posted; only the newest acts
  CHECK_EQ(drv.closes, 1);
  CHECK_EQ(t.entries(), 0u);
  m = t.import(kA, handleOf(kA), 0, 1000, &err);  // closed: a fresh open
  CHECK(m != nullptr);
  CHECK_EQ(drv.opens, 2);
}

TEST(separate_devices_processes_and_allocations_map_separately) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::vector<std::shared_ptr<void>> held;
  for (const IpcImports::Key& k : {kA, IpcImports::Key{1, 1234, 7}, IpcImports::Key{0, 999, 7},
                                   IpcImports::Key{0, 1234, 8}}) {
    held.push_back(t.import(k, handleOf(k), 0, 1000, &err));
    CHECK_MSG(held.back() != nullptr, "%s", err.c_str());
  }
  CHECK_EQ(drv.opens, 4);
  CHECK_EQ(t.entries(), 4u);
}

TEST(a_failed_open_leaves_no_entry) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  drv.mapped.insert(FakeDriver::keyOf(handleOf(kA), kA.device));  // mapped behind the table's back
  std::shared_ptr<void> m = t.import(kA, handleOf(kA), 0, 1000, &err);
  CHECK(m == nullptr);
  CHECK_MSG(err.find("resource already mapped") != std::string::npos, "%s", err.c_str());
  CHECK_EQ(t.entries(), 0u);
  drv.mapped.clear();
  err.clear();
  m = t.import(kA, handleOf(kA), 0, 1000, &err);
  CHECK_MSG(m != nullptr, "%s", err.c_str());
}

TEST(an_import_waits_for_a_close_in_progress) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::mutex gate;
  std::condition_variable cv;
  bool closing = false, letGo = false;
  drv.duringClose = [&] {
    std::unique_lock<std::mutex> lock(gate);
    closing = true;
    cv.notify_all();
    cv.wait(lock, [&] { return letGo; });
  };
  std::shared_ptr<void> m = t.import(kA, handleOf(kA), 0, 1000, &err);
  m.reset();
  std::thread reaper([&] { drv.runPosted(); });
  {
    std::unique_lock<std::mutex> lock(gate);
    cv.wait(lock, [&] { return closing; });
  }
  // Closing: an import with a short timeout gives up, naming the close.
  m = t.import(kA, handleOf(kA), 0, 50, &err);
  CHECK(m == nullptr);
  CHECK_MSG(err.find("unmapping") != std::string::npos, "%s", err.c_str());
  // One with time to spare waits for the close, then opens anew.
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(gate);
    letGo = true;
    cv.notify_all();
  });
  err.clear();
  m = t.import(kA, handleOf(kA), 0, 5000, &err);
  release.join();
  reaper.join();
  CHECK_MSG(m != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK_EQ(drv.closes, 1);
}

// Two allocations of one block (small cudaMallocs), each registered: the second reuses the block's
// mapping and lies at its own offset in it, whichever allocation opened it; one close, with the
// pointer the open returned.
TEST(allocations_of_one_block_share_its_mapping) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  const uint64_t offX = 0x200, offY = 0x8000;
  std::shared_ptr<void> x = t.import(kA, handleOf(kA, offX), offX, 1000, &err);
  CHECK_MSG(x != nullptr, "%s", err.c_str());
  std::shared_ptr<void> y = t.import(kA, handleOf(kA, offY), offY, 1000, &err);
  CHECK_MSG(y != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 1);
  CHECK(reinterpret_cast<uintptr_t>(x.get()) == FakeDriver::blockBase(0));  // the block's first byte
  CHECK(x.get() == y.get());
  x.reset();
  y.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 1);
  // Opened by the later allocation this time: still the block's first byte.
  y = t.import(kA, handleOf(kA, offY), offY, 1000, &err);
  x = t.import(kA, handleOf(kA, offX), offX, 1000, &err);
  CHECK_MSG(x && y, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK(reinterpret_cast<uintptr_t>(y.get()) == FakeDriver::blockBase(1));
  CHECK(x.get() == y.get());
}
