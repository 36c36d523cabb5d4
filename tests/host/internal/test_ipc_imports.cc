// The process's table of peer allocations mapped by CUDA IPC (core/ipc_imports.h), against a fake
// driver that keeps CUDA's rule: an allocation is mapped at most once per device at a time; a
// second open before the first mapping is closed fails with "resource already mapped". Closes are
// deferred (posted jobs, run when the test says, as the reaper runs them later).
//
// Before IpcImports each comm kept its own map, so a second comm's registration of an allocation,
// or a registration made while an earlier one's close was still queued, opened it a second time:
// case two_comms_share_one_mapping and reimport_before_the_close_reuses_it fail that way. The fake
// maps whole blocks when told to, as CUDA does across devices (several small cudaMallocs may share
// one): case a_sibling_in_a_mapped_block_borrows_its_mapping fails when the table does not borrow.
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
#include "core/reaper.h"
#include "harness.h"

using namespace yali;

namespace {

// A fake handle names the exporting process, the allocation, its block, where it starts in the
// block and its size (0: kAllocBytes) (a real one identifies them too).
struct FakeAlloc {
  int64_t pid;
  uint64_t bufferId, blockId, offset, size;
};
cudaIpcMemHandle_t handleOf(const FakeAlloc& a) {
  cudaIpcMemHandle_t h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.reserved, &a, sizeof a);
  return h;
}
cudaIpcMemHandle_t handleOf(const IpcImports::Key& k) { return handleOf(FakeAlloc{k.peerPid, k.bufferId, 0, 0, 0}); }

// CUDA's rule, and counts. Thread-safe: a close may run on another thread. Three drivers:
// - default: each allocation maps alone, at an address of its own (CUDA on the memory's own device);
// - wholeBlocks: an open maps the allocation's whole block, so a sibling's open fails as already
//   mapped;
// - rangesInBlock: every open of a block's allocations maps at the same place in the block's one
//   address range, only the allocation's own bytes, and an open overlapping bytes mapped already
//   fails as already mapped (CUDA across devices, as YALI_DEBUG logs showed it on 2 H200s,
//   2026-11-29: a peer's new allocation over freed siblings that this process still mapped).
struct FakeDriver {
  bool wholeBlocks = false;
  bool rangesInBlock = false;
  static constexpr uintptr_t kBlockBytes = 0x80000, kAllocBytes = 0x1000;
  struct Opened {
    std::tuple<int, int64_t, uint64_t> key;  // (device, process, allocation or block)
    FakeAlloc alloc;
    int device;
    uintptr_t returned;  // what the open returned (a close must pass it back)
    uintptr_t base;      // its block's first byte as mapped
    bool open;
  };
  std::mutex mutex;
  std::set<std::tuple<int, int64_t, uint64_t>> mapped;  // default and wholeBlocks: what is open now
  std::vector<Opened> opened;
  int opens = 0, closes = 0;
  std::vector<std::function<bool()>> posted;  // deferred closes, run by runPosted()
  std::function<void()> duringClose;          // called inside close (blocks it, in one case)
  bool extentFromBlockStart = false;          // extent: report the block's start as the range's (a
                                              // range that does not hold the allocation's first byte
                                              // when it lies further in)

  static FakeAlloc allocOf(const cudaIpcMemHandle_t& h) {
    FakeAlloc a;
    std::memcpy(&a, h.reserved, sizeof a);
    if (a.size == 0) a.size = kAllocBytes;
    return a;
  }
  std::tuple<int, int64_t, uint64_t> keyOf(const FakeAlloc& a, int device) const {
    return {device, a.pid, wholeBlocks && a.blockId != 0 ? a.blockId : a.bufferId};
  }
  // The i-th open's block, where the mapping is one per open; rangesInBlock: the block's own.
  static uintptr_t blockBase(size_t i) { return 0x100000 * (i + 1); }
  static uintptr_t rangeBase(int device, int64_t pid, uint64_t blockId) {
    return 0x40000000 + 0x100000 * blockId + 0x10000000 * static_cast<uintptr_t>(device) +
           0x40000000000 * static_cast<uintptr_t>(pid % 64);
  }
  Opened* find(uintptr_t returned) {
    for (Opened& o : opened)
      if (o.open && o.returned == returned) return &o;
    return nullptr;
  }
  IpcImports::Ops ops() {
    return IpcImports::Ops{
        [this](void** out, const cudaIpcMemHandle_t& h, int device, std::string* error) {
          std::lock_guard<std::mutex> lock(mutex);
          const FakeAlloc a = allocOf(h);
          bool refused = false;
          if (rangesInBlock) {
            for (const Opened& o : opened)
              refused |= o.open && o.device == device && o.alloc.pid == a.pid &&
                         (o.alloc.bufferId == a.bufferId ||
                          (o.alloc.blockId == a.blockId && o.alloc.offset < a.offset + a.size &&
                           a.offset < o.alloc.offset + o.alloc.size));
          } else {
            refused = !mapped.insert(keyOf(a, device)).second;
          }
          if (refused) {
            *error = "cudaIpcOpenMemHandle failed: resource already mapped";
            return cudaErrorAlreadyMapped;
          }
          ++opens;
          const uintptr_t base = rangesInBlock ? rangeBase(device, a.pid, a.blockId) : blockBase(opened.size());
          opened.push_back(Opened{keyOf(a, device), a, device, base + a.offset, base, true});
          *out = reinterpret_cast<void*>(opened.back().returned);
          return cudaSuccess;
        },
        [this](void* m, int device) {
          if (duringClose) duringClose();
          std::lock_guard<std::mutex> lock(mutex);
          Opened* o = find(reinterpret_cast<uintptr_t>(m));  // what an open returned, exactly
          CHECK(o != nullptr);
          if (o == nullptr) return;
          CHECK_EQ(o->device, device);
          o->open = false;
          if (!rangesInBlock) mapped.erase(o->key);
          ++closes;
        },
        [this](const void* m, int, uint64_t offset, uint64_t* first, uint64_t* bytes, std::string* error) {
          // The open's mapping: its whole block when wholeBlocks, else the allocation's own bytes.
          std::lock_guard<std::mutex> lock(mutex);
          const Opened* o = find(reinterpret_cast<uintptr_t>(m));
          CHECK(o != nullptr);
          if (o == nullptr) return false;
          if (reinterpret_cast<uintptr_t>(m) - offset != o->base) {
            *error = "the mapping starts elsewhere";
            return false;
          }
          *first = wholeBlocks || extentFromBlockStart ? 0 : o->alloc.offset;
          *bytes = wholeBlocks ? kBlockBytes : o->alloc.size;
          return true;
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

// Two allocations of one block of process 1234, as small cudaMallocs are.
const FakeAlloc kX{1234, 7, 50, 0x200, 0}, kY{1234, 8, 50, 0x8000, 0};

// A registration's import of `a`: its own key, block and offset, 0x1000 bytes of it used.
std::shared_ptr<void> importAlloc(IpcImports& t, const FakeAlloc& a, std::string* err, int64_t timeoutMs = 1000) {
  return t.import({0, a.pid, a.bufferId}, {a.blockId, a.offset, 0x1000}, handleOf(a), timeoutMs, err);
}

// A point where one thread (a close, an open) stops until the test lets it go.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool reached = false, open = false;
  void stopHere() {
    std::unique_lock<std::mutex> lock(mutex);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void waitUntilReached() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return reached; });
  }
  void letGo() {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    cv.notify_all();
  }
  // letGo() after 50 ms, from a thread of its own (joined by the caller).
  std::thread letGoSoon() {
    return std::thread([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      letGo();
    });
  }
};

}  // namespace

TEST(two_comms_share_one_mapping) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> first = t.import(kA, {}, handleOf(kA), 1000, &err);   // comm 1's registration
  std::shared_ptr<void> second = t.import(kA, {}, handleOf(kA), 1000, &err);  // comm 2's, same allocation
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
  std::shared_ptr<void> m = t.import(kA, {}, handleOf(kA), 1000, &err);
  void* where = m.get();
  m.reset();  // close posted, not run
  m = t.import(kA, {}, handleOf(kA), 1000, &err);
  CHECK_MSG(m != nullptr, "%s", err.c_str());
  CHECK(m.get() == where);
  CHECK_EQ(drv.opens, 1);
  drv.runPosted();  // the stale close finds the entry live again and leaves it
  CHECK_EQ(drv.closes, 0);
  m.reset();
  m = t.import(kA, {}, handleOf(kA), 1000, &err);  // again: Idle, with a newer close posted
  m.reset();
  drv.runPosted();  // two closes posted; only the newest acts
  CHECK_EQ(drv.closes, 1);
  CHECK_EQ(t.entries(), 0u);
  m = t.import(kA, {}, handleOf(kA), 1000, &err);  // closed: a fresh open
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
    held.push_back(t.import(k, {}, handleOf(k), 1000, &err));
    CHECK_MSG(held.back() != nullptr, "%s", err.c_str());
  }
  CHECK_EQ(drv.opens, 4);
  CHECK_EQ(t.entries(), 4u);
}

TEST(a_failed_open_leaves_no_entry) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  drv.mapped.insert(drv.keyOf(FakeDriver::allocOf(handleOf(kA)), kA.device));  // mapped behind the table's back
  std::shared_ptr<void> m = t.import(kA, {}, handleOf(kA), 1000, &err);
  CHECK(m == nullptr);
  CHECK_MSG(err.find("resource already mapped") != std::string::npos, "%s", err.c_str());
  CHECK_EQ(t.entries(), 0u);
  drv.mapped.clear();
  err.clear();
  m = t.import(kA, {}, handleOf(kA), 1000, &err);
  CHECK_MSG(m != nullptr, "%s", err.c_str());
}

// kA imported and released, its close running on `reaper` (returned) and held at `close` until
// the caller lets it go: an import of kA meanwhile finds it Closing.
std::thread startStuckClose(FakeDriver& drv, IpcImports& t, Gate& close) {
  std::string err;
  drv.duringClose = [&close] { close.stopHere(); };
  std::shared_ptr<void> m = t.import(kA, {}, handleOf(kA), 1000, &err);
  m.reset();
  std::thread reaper([&drv] { drv.runPosted(); });
  close.waitUntilReached();
  return reaper;
}

TEST(an_import_waits_for_a_close_in_progress) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  Gate close;
  std::thread reaper = startStuckClose(drv, t, close);
  std::shared_ptr<void> m;
  // Closing: an import with a short timeout gives up, naming the close.
  m = t.import(kA, {}, handleOf(kA), 50, &err);
  CHECK(m == nullptr);
  CHECK_MSG(err.find("unmapping") != std::string::npos, "%s", err.c_str());
  // One with time to spare waits for the close, then opens anew.
  std::thread release = close.letGoSoon();
  err.clear();
  m = t.import(kA, {}, handleOf(kA), 5000, &err);
  release.join();
  reaper.join();
  CHECK_MSG(m != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK_EQ(drv.closes, 1);
}

// An import waiting for a close in progress gives up within about 100 ms of its comm's abort (the
// cancel flag), not at its timeout: yaliCommAbort waits for the registration this import belongs
// to. Before, the wait ignored the flag and held the abort for up to YALI_TIMEOUT_MS (found by a
// review).
TEST(an_import_waiting_for_a_close_gives_up_on_abort) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  Gate close;
  std::thread reaper = startStuckClose(drv, t, close);
  std::shared_ptr<void> m;
  std::atomic<bool> cancel{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  m = t.import(kA, {}, handleOf(kA), 10000, &err, &cancel);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  aborter.join();
  CHECK(m == nullptr);
  CHECK_MSG(err.find("yaliCommAbort") != std::string::npos, "%s", err.c_str());
  CHECK_MSG(ms >= 200 && ms < 1000, "the import gave up after %lld ms (abort at 200 ms, timeout 10 s)",
            static_cast<long long>(ms));
  std::thread release = close.letGoSoon();
  release.join();
  reaper.join();
}

// Two allocations of one block (small cudaMallocs) across devices: the second one's open is
// refused as already mapped, so it borrows the first one's mapping, at its own offset in the
// block; the block stays mapped while either holds it, and closes once, with the pointer the open
// returned. Later the sibling may open the block itself.
TEST(a_sibling_in_a_mapped_block_borrows_its_mapping) {
  FakeDriver drv;
  drv.wholeBlocks = true;
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> mx = importAlloc(t, kX, &err);
  CHECK_MSG(mx != nullptr, "%s", err.c_str());
  std::shared_ptr<void> my = importAlloc(t, kY, &err);
  CHECK_MSG(my != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 1);
  CHECK(reinterpret_cast<uintptr_t>(mx.get()) == FakeDriver::blockBase(0) + kX.offset);
  CHECK(reinterpret_cast<uintptr_t>(my.get()) == FakeDriver::blockBase(0) + kY.offset);
  CHECK_EQ(t.entries(), 1u);
  mx.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 0);  // y still holds the block
  my.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 1);
  CHECK_EQ(t.entries(), 0u);
  // y opens the block itself now; x borrows from it.
  my = importAlloc(t, kY, &err);
  mx = importAlloc(t, kX, &err);
  CHECK_MSG(mx && my, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK(reinterpret_cast<uintptr_t>(my.get()) == FakeDriver::blockBase(1) + kY.offset);
  CHECK(reinterpret_cast<uintptr_t>(mx.get()) == FakeDriver::blockBase(1) + kX.offset);
  // A sibling whose bytes run past what the open mapping spans is refused, not lent.
  const FakeAlloc w{1234, 10, 50, 0x7F000, 0};
  std::shared_ptr<void> mw = t.import({0, w.pid, w.bufferId}, {w.blockId, w.offset, 0x2000}, handleOf(w), 1000, &err);
  CHECK(mw == nullptr);
  CHECK_MSG(err.find("not span it") != std::string::npos, "%s", err.c_str());
  CHECK_EQ(t.entries(), 1u);
  // Without a block id (a driver that names none) nothing is borrowed: the refusal stands.
  const FakeAlloc z{1234, 9, 50, 0x10000, 0};
  std::shared_ptr<void> mz = t.import({0, z.pid, z.bufferId}, {}, handleOf(z), 1000, &err);
  CHECK(mz == nullptr);
  CHECK_MSG(err.find("already mapped") != std::string::npos, "%s", err.c_str());
}

// On the memory's own device each allocation of a block maps alone: nothing is borrowed.
TEST(allocations_of_one_block_open_alone_where_the_driver_allows) {
  FakeDriver drv;
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> mx = importAlloc(t, kX, &err);
  std::shared_ptr<void> my = importAlloc(t, kY, &err);
  CHECK_MSG(mx && my, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK_EQ(t.entries(), 2u);
}

// The lender's close ends between the sibling's refused open and its look at the table (the
// refusal is then stale): the sibling opens the block itself instead of failing. Failed before
// the table counted closes (review of 8cee88a).
TEST(a_refusal_made_stale_by_a_close_is_retried) {
  FakeDriver drv;
  drv.wholeBlocks = true;
  IpcImports::Ops ops = drv.ops();
  Gate refused;
  auto inner = ops.open;
  ops.open = [&](void** out, const cudaIpcMemHandle_t& h, int device, std::string* error) {
    const cudaError_t e = inner(out, h, device, error);
    if (e == cudaErrorAlreadyMapped) refused.stopHere();
    return e;
  };
  IpcImports t(ops);
  std::string err, yerr;
  std::shared_ptr<void> mx = importAlloc(t, kX, &err);
  CHECK(mx != nullptr);
  mx.reset();  // Idle, its close posted
  std::shared_ptr<void> my;
  std::thread importer([&] { my = importAlloc(t, kY, &yerr, 5000); });
  refused.waitUntilReached();
  drv.runPosted();  // x's close runs and ends while y's refused open has not looked yet
  refused.letGo();
  importer.join();
  CHECK_MSG(my != nullptr, "%s", yerr.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK(reinterpret_cast<uintptr_t>(my.get()) == FakeDriver::blockBase(1) + kY.offset);
}

// A borrow revives an Idle lender whose mapping lies within the borrower's allocation (the peer
// freed an allocation and made one over the same bytes, before our close ran): its posted close
// then leaves it, and it closes once, after the borrower lets go.
TEST(a_borrow_revives_an_idle_lender) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  std::string err;
  const FakeAlloc old{1234, 100, 110, 0x1000, 0x1000}, again{1234, 101, 110, 0x1000, 0x1800};
  std::shared_ptr<void> mo = t.import({0, old.pid, old.bufferId}, {old.blockId, old.offset, old.size}, handleOf(old), 1000, &err);
  CHECK(mo != nullptr);
  mo.reset();  // Idle, its close posted
  std::shared_ptr<void> ma =
      t.import({0, again.pid, again.bufferId}, {again.blockId, again.offset, 0x1000, 0, again.size}, handleOf(again), 1000, &err);
  CHECK_MSG(ma != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 1);
  drv.runPosted();
  CHECK_EQ(drv.closes, 0);
  ma.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 1);
  CHECK_EQ(t.entries(), 0u);
}

// An Idle sibling whose mapping reaches past the allocation is not revived: the import waits for
// its close and opens the allocation itself, so that the mapping does not stay open under the
// allocation's neighbour. The sequence of a YALI_DEBUG log on 2 H200s (2026-11-29, coll_copy_engine
// --quick, multi mode, offsets in block 73 of the peer): a 536576-byte buffer S at +1310720,
// deregistered (our close posted, not run); the peer frees it and allocates B1 (524288 bytes) at
// the same place and B2 (77824 bytes) right after B1, over S's last 12288 bytes. Before, B1
// borrowed S's mapping (Live again), and B2's open was refused with nothing to lend its other
// bytes ("do not span it"). With wholeBlocks (a driver that maps the whole block) the Idle block
// is waited for as well.
TEST(an_idle_sibling_reaching_past_the_allocation_is_waited_for_not_revived) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  std::string err, b1err;
  const FakeAlloc s{1234, 1433, 73, 1310720, 536576}, b1{1234, 1489, 73, 1310720, 524288},
      b2{1234, 1502, 73, 1835008, 77824};
  auto imp = [&](const FakeAlloc& a, std::string* e, int64_t timeoutMs = 5000) {
    return t.import({0, a.pid, a.bufferId}, {a.blockId, a.offset, a.size, 0, a.size}, handleOf(a), timeoutMs, e);
  };
  std::shared_ptr<void> ms = imp(s, &err);
  CHECK(ms != nullptr);
  ms.reset();  // Idle
  std::shared_ptr<void> m1;
  std::thread importer([&] { m1 = imp(b1, &b1err); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(m1 == nullptr);  // still waiting for S's close
  drv.runPosted();
  importer.join();
  CHECK_MSG(m1 != nullptr, "%s", b1err.c_str());
  CHECK_EQ(drv.opens, 2);  // B1 opened itself
  CHECK_EQ(drv.closes, 1);
  std::shared_ptr<void> m2 = imp(b2, &err);
  CHECK_MSG(m2 != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 3);
  CHECK(reinterpret_cast<uintptr_t>(m2.get()) == FakeDriver::rangeBase(0, 1234, 73) + b2.offset);
  // wholeBlocks: x's Idle mapping spans the whole block, past y: y waits for its close, then opens.
  FakeDriver whole;
  whole.wholeBlocks = true;
  IpcImports u(whole.ops());
  std::shared_ptr<void> mx = importAlloc(u, kX, &err);
  CHECK(mx != nullptr);
  mx.reset();
  std::shared_ptr<void> my;
  std::string yerr;
  std::thread second([&] { my = importAlloc(u, kY, &yerr, 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  whole.runPosted();
  second.join();
  CHECK_MSG(my != nullptr, "%s", yerr.c_str());
  CHECK_EQ(whole.opens, 2);
  CHECK_EQ(whole.closes, 1);
}

// A sibling whose block is closing waits for the close, then opens the block itself.
TEST(a_sibling_waits_for_its_blocks_close) {
  FakeDriver drv;
  drv.wholeBlocks = true;
  Gate close;
  drv.duringClose = [&] { close.stopHere(); };
  IpcImports t(drv.ops());
  std::string err;
  std::shared_ptr<void> mx = importAlloc(t, kX, &err);
  mx.reset();
  std::thread reaper([&] { drv.runPosted(); });
  close.waitUntilReached();
  std::thread release = close.letGoSoon();
  std::shared_ptr<void> my = importAlloc(t, kY, &err, 5000);
  release.join();
  reaper.join();
  CHECK_MSG(my != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 2);
}

// Offsets that do not match the driver's mapping (the lender's block offset wrong) refuse the
// borrow instead of lending a wrong address.
TEST(a_borrow_with_offsets_the_mapping_contradicts_is_refused) {
  FakeDriver drv;
  drv.wholeBlocks = true;
  IpcImports t(drv.ops());
  std::string err;
  // x's handle puts it at 0x200 in the block; the table is told 0x300.
  std::shared_ptr<void> mx = t.import({0, kX.pid, kX.bufferId}, {kX.blockId, 0x300, 0x1000}, handleOf(kX), 1000, &err);
  CHECK(mx != nullptr);
  std::shared_ptr<void> my = importAlloc(t, kY, &err);
  CHECK(my == nullptr);
  CHECK_MSG(err.find("starts elsewhere") != std::string::npos, "%s", err.c_str());
}

// Across devices every allocation of a block maps at the block's one place, each with its own
// bytes, and an open over bytes mapped already is refused (rangesInBlock). A peer's new allocation
// B lying over two siblings that this process still maps (S1, S2: memory the peer freed and
// allocated again) borrows both: it holds both, so that neither closes while B is used, and learns
// where S1's mapping gives way to S2's. Before, B borrowed the block's first open mapping alone (S1,
// or any sibling at all) and held only it: S2 could close under B (seen 2026-11-29 on 2 H200s: a
// copy engine's source spanning siblings' mappings refused as an invalid argument).
TEST(a_buffer_over_several_open_siblings_borrows_them_all) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  const FakeAlloc s1{1234, 20, 60, 0x1000, 0x1000}, s2{1234, 21, 60, 0x2000, 0x1000}, far{1234, 23, 60, 0x9000, 0},
      b{1234, 22, 60, 0x1800, 0x1000};
  std::string err;
  std::shared_ptr<void> m1 = t.import({0, s1.pid, s1.bufferId}, {s1.blockId, s1.offset, s1.size}, handleOf(s1), 1000, &err);
  std::shared_ptr<void> m2 = t.import({0, s2.pid, s2.bufferId}, {s2.blockId, s2.offset, s2.size}, handleOf(s2), 1000, &err);
  std::shared_ptr<void> mf = t.import({0, far.pid, far.bufferId}, {far.blockId, far.offset, 0x1000}, handleOf(far), 1000, &err);
  CHECK_MSG(m1 && m2 && mf, "%s", err.c_str());
  CHECK_EQ(drv.opens, 3);
  std::vector<uint64_t> splits;
  std::shared_ptr<void> mb =
      t.import({0, b.pid, b.bufferId}, {b.blockId, b.offset, b.size}, handleOf(b), 1000, &err, nullptr, &splits);
  CHECK_MSG(mb != nullptr, "%s", err.c_str());
  CHECK_EQ(drv.opens, 3);  // refused, borrowed
  CHECK(reinterpret_cast<uintptr_t>(mb.get()) == FakeDriver::rangeBase(0, 1234, 60) + b.offset);
  CHECK_EQ(splits.size(), 1u);
  if (!splits.empty()) CHECK_EQ(splits[0], 0x800u);  // S2's mapping from 0x2000 = B + 0x800
  // The siblings' own holders let go: none closes while B holds them; the far one (not lent) does.
  m1.reset();
  m2.reset();
  mf.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 1);
  mb.reset();
  drv.runPosted();
  CHECK_EQ(drv.closes, 3);
  CHECK_EQ(t.entries(), 0u);
  // An allocation inside one sibling's bytes borrows that one alone, with no split.
  m1 = t.import({0, s1.pid, s1.bufferId}, {s1.blockId, s1.offset, s1.size}, handleOf(s1), 1000, &err);
  const FakeAlloc inner{1234, 24, 60, 0x1200, 0x400};
  mb = t.import({0, inner.pid, inner.bufferId}, {inner.blockId, inner.offset, inner.size}, handleOf(inner), 1000, &err,
                nullptr, &splits);
  CHECK_MSG(mb != nullptr, "%s", err.c_str());
  CHECK(splits.empty());
  CHECK(reinterpret_cast<uintptr_t>(mb.get()) == FakeDriver::rangeBase(0, 1234, 60) + inner.offset);
}

// B over bytes that open siblings cover only in part: refused while the sibling is held by another
// import (the rest of B cannot be mapped: nothing lends it), and once the sibling is only Idle (its
// close posted), B waits for that close and then opens itself. Before, B borrowed the partial
// sibling and lent bytes that nothing in this process mapped.
TEST(a_buffer_partly_over_an_open_sibling_waits_for_its_close_or_is_refused) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  const FakeAlloc s1{1234, 30, 61, 0x1000, 0x1000}, b{1234, 31, 61, 0x1800, 0x1000};
  std::string err;
  std::shared_ptr<void> m1 = t.import({0, s1.pid, s1.bufferId}, {s1.blockId, s1.offset, s1.size}, handleOf(s1), 1000, &err);
  CHECK(m1 != nullptr);
  std::shared_ptr<void> mb = t.import({0, b.pid, b.bufferId}, {b.blockId, b.offset, b.size}, handleOf(b), 1000, &err);
  CHECK(mb == nullptr);
  CHECK_MSG(err.find("not span it") != std::string::npos, "%s", err.c_str());
  m1.reset();  // Idle: its close posted, not run
  std::string berr;
  std::thread importer([&] {
    mb = t.import({0, b.pid, b.bufferId}, {b.blockId, b.offset, b.size}, handleOf(b), 5000, &berr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  drv.runPosted();  // S1's close: B's bytes are free to map
  importer.join();
  CHECK_MSG(mb != nullptr, "%s", berr.c_str());
  CHECK_EQ(drv.opens, 2);
  CHECK_EQ(drv.closes, 1);
}

// From a review of the borrow chains: (1) a sibling held by another import in the way refuses at
// once, even beside an Idle one (waiting for the Idle one's close could never help: before, the
// import waited until its deadline and failed with a timeout); (2) a borrow need cover only the
// bytes the caller touches (Block::touchFrom), not the allocation's head; (3) nothing to touch is
// refused, not read from an empty chain; (4) a driver range that does not hold the mapping's first
// byte is not trusted (such a sibling lends nothing).
TEST(borrow_chain_review_cases) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  std::string err;
  auto imp = [&](const FakeAlloc& a, uint64_t touchFrom, uint64_t bytes, int64_t timeoutMs = 2000) {
    return t.import({0, a.pid, a.bufferId}, {a.blockId, a.offset, bytes, touchFrom}, handleOf(a), timeoutMs, &err);
  };
  // (1) S1 Live at +0x1000, S2 Idle at +0x2000 (its close posted, not run), B over both and beyond.
  const FakeAlloc s1{1234, 40, 70, 0x1000, 0x1000}, s2{1234, 41, 70, 0x2000, 0x1000}, b{1234, 42, 70, 0x1800, 0x2000};
  std::shared_ptr<void> m1 = imp(s1, 0, s1.size), m2 = imp(s2, 0, s2.size);
  CHECK(m1 && m2);
  m2.reset();
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<void> mb = imp(b, 0, b.size, 5000);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(mb == nullptr);
  CHECK_MSG(err.find("not span it") != std::string::npos, "%s", err.c_str());
  CHECK_MSG(ms < 1000, "refused after %.0f ms", ms);
  // (2) C at +0x800 whose buffer starts 0x800 into it (at +0x1000): S1 alone covers the buffer.
  const FakeAlloc c{1234, 43, 70, 0x800, 0x1800};
  std::vector<uint64_t> splits;
  std::shared_ptr<void> mc = t.import({0, c.pid, c.bufferId}, {c.blockId, c.offset, 0x800 + 0x800, 0x800}, handleOf(c),
                                      1000, &err, nullptr, &splits);
  CHECK_MSG(mc != nullptr, "%s", err.c_str());
  CHECK(splits.empty());
  CHECK(reinterpret_cast<uintptr_t>(mc.get()) == FakeDriver::rangeBase(0, 1234, 70) + c.offset);
  // (3) nothing touched
  const FakeAlloc d{1234, 44, 70, 0x1400, 0x100};
  CHECK(imp(d, 0x10, 0x10) == nullptr);
  CHECK_MSG(err.find("nothing of it") != std::string::npos, "%s", err.c_str());
  // (4) a sibling whose driver range starts before the mapping's first byte lends nothing.
  FakeDriver odd;
  odd.rangesInBlock = true;
  odd.extentFromBlockStart = true;
  IpcImports u(odd.ops());
  std::shared_ptr<void> n1 = u.import({0, s1.pid, s1.bufferId}, {s1.blockId, s1.offset, s1.size}, handleOf(s1), 1000, &err);
  CHECK(n1 != nullptr);
  const FakeAlloc e{1234, 45, 70, 0x1200, 0x200};
  CHECK(u.import({0, e.pid, e.bufferId}, {e.blockId, e.offset, e.size}, handleOf(e), 1000, &err) == nullptr);
  CHECK_MSG(err.find("could not be measured") != std::string::npos, "%s", err.c_str());
}

// From the second review (947e076): the driver refuses an open while any byte of the allocation is
// mapped, so what is in the way is judged over the whole allocation (Block::size), not only the
// bytes the caller touches; and a sibling whose extent is not known yet (Opening) counts with its
// whole allocation. Both failed on 947e076 with "no open mapping of its block covers it" where a
// wait for the sibling's close (the first) or open (the second) succeeds.
TEST(a_buffer_waits_for_an_idle_sibling_over_its_allocations_head) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports t(drv.ops());
  std::string err;
  const FakeAlloc s0{1234, 80, 90, 0x800, 0x800}, c{1234, 81, 90, 0xC00, 0x1800};
  std::shared_ptr<void> m0 = t.import({0, s0.pid, s0.bufferId}, {s0.blockId, s0.offset, s0.size}, handleOf(s0), 1000, &err);
  CHECK(m0 != nullptr);
  m0.reset();  // Idle, its close posted
  std::shared_ptr<void> mc;
  std::string cerr;
  std::thread importer([&] {
    // C's buffer starts 0x800 into it, past s0's bytes; its head [0xC00, 0x1000) is s0's.
    mc = t.import({0, c.pid, c.bufferId}, {c.blockId, c.offset, 0x1000, 0x800, c.size}, handleOf(c), 5000, &cerr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  drv.runPosted();
  importer.join();
  CHECK_MSG(mc != nullptr, "%s", cerr.c_str());
}

TEST(a_buffer_waits_for_an_opening_sibling_over_it) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  IpcImports::Ops ops = drv.ops();
  Gate opened;
  std::atomic<int> calls{0};
  auto inner = ops.open;
  ops.open = [&](void** out, const cudaIpcMemHandle_t& h, int device, std::string* error) {
    const cudaError_t e = inner(out, h, device, error);
    if (calls++ == 0) opened.stopHere();  // S opened in the driver, still Opening in the table
    return e;
  };
  IpcImports t(ops);
  // S's registration touches only its tail; B lies in S's head.
  const FakeAlloc s{1234, 82, 91, 0x1000, 0x2000}, b{1234, 83, 91, 0x1200, 0x400};
  std::string serr, berr;
  std::shared_ptr<void> ms, mb;
  std::thread first([&] {
    ms = t.import({0, s.pid, s.bufferId}, {s.blockId, s.offset, 0x2000, 0x1800, s.size}, handleOf(s), 5000, &serr);
  });
  opened.waitUntilReached();
  std::thread release = opened.letGoSoon();
  mb = t.import({0, b.pid, b.bufferId}, {b.blockId, b.offset, b.size, 0, b.size}, handleOf(b), 5000, &berr);
  release.join();
  first.join();
  CHECK_MSG(ms != nullptr, "%s", serr.c_str());
  CHECK_MSG(mb != nullptr, "%s", berr.c_str());
  CHECK_EQ(drv.opens, 1);  // B borrowed S's mapping
}

// From the third review (f0be115): with a sibling held (Live) over the allocation's tail, a sibling
// closing over its head is no reason to wait: once closed, the held one still refuses the open and
// lends nothing to the touched bytes. f0be115 waited until the deadline and blamed the close.
TEST(a_held_sibling_in_the_way_refuses_at_once_beside_a_closing_one) {
  FakeDriver drv;
  drv.rangesInBlock = true;
  Gate close;
  drv.duringClose = [&] { close.stopHere(); };
  IpcImports t(drv.ops());
  std::string err;
  const FakeAlloc head{1234, 95, 96, 0x1000, 0x800}, tail{1234, 96, 96, 0x3800, 0x800}, c{1234, 97, 96, 0x1000, 0x3000};
  std::shared_ptr<void> mh = t.import({0, head.pid, head.bufferId}, {head.blockId, head.offset, head.size}, handleOf(head), 1000, &err);
  std::shared_ptr<void> mt = t.import({0, tail.pid, tail.bufferId}, {tail.blockId, tail.offset, tail.size}, handleOf(tail), 1000, &err);
  CHECK(mh && mt);
  mh.reset();
  std::thread reaper([&] { drv.runPosted(); });
  close.waitUntilReached();  // head is Closing
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<void> mc = t.import({0, c.pid, c.bufferId}, {c.blockId, c.offset, 0x2000, 0x1000, c.size}, handleOf(c), 1500, &err);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  close.letGo();
  reaper.join();
  CHECK(mc == nullptr);
  CHECK_MSG(ms < 1000, "refused after %.0f ms: %s", ms, err.c_str());
  CHECK_MSG(err.find("not span it") != std::string::npos, "%s", err.c_str());
}

// The reaper's lanes (reaper.h): an IPC close that blocks (cudaIpcCloseMemHandle waits for every
// kernel on the device, behind another library's possibly forever) holds up neither the releases
// nor the copy-engine watches, which run on the other lane. Before, one thread ran every job: a
// blocked close stopped every watch in the process, so copy-engine waits were no longer bounded
// (found by a review).
TEST(reaper_a_blocked_ipc_close_holds_up_no_release) {
  std::atomic<bool> letGo{false};
  const uint64_t close = Reaper::post(
      [&] {
        while (!letGo) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // blocks, as the driver would
        return true;
      },
      Reaper::Lane::kIpcClose);
  CHECK(Reaper::lastPostedHere(Reaper::Lane::kIpcClose) == close);
  std::atomic<int> runs{0};
  const uint64_t release = Reaper::post([&] { return ++runs >= 3; });  // done on its third pass
  CHECK(Reaper::lastPostedHere() == release && release != close);
  CHECK_MSG(Reaper::waitFor(release, nowMs() + 2000), "a release waited behind a blocked IPC close");
  CHECK(!Reaper::waitFor(close, nowMs() + 20));
  letGo = true;
  CHECK(Reaper::waitFor(close, nowMs() + 2000));
}

// CloseGate (ipc_imports.h): an IPC close and a copy-engine call of the process never overlap. A
// close backs off while a call is counted; a call waits for a close in progress before it queues
// anything, and gives up, counted out, at its deadline. (The hang it prevents: coll_copy_engine
// part 5 in multi mode, a close started while an aborted comm's call waited, Session 24.)
TEST(close_gate_a_close_backs_off_while_a_copy_engine_call_is_counted) {
  const std::atomic<bool> notCancelled{false};
  CHECK(CloseGate::enterCall(nowMs() + 1000, notCancelled));
  CHECK(!CloseGate::enterClose());
  CHECK(!CloseGate::enterClose());  // again at the job's next try
  CloseGate::leaveCall();
  CHECK_EQ(CloseGate::callsInFlight(), 0);
  CHECK(CloseGate::enterClose());
  CloseGate::leaveClose();
}

TEST(close_gate_a_copy_engine_call_waits_for_a_close_in_progress) {
  CHECK(CloseGate::enterClose());
  const int64_t t0 = nowMs();
  std::thread closing([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CloseGate::leaveClose();
  });
  const std::atomic<bool> notCancelled{false};
  const bool entered = CloseGate::enterCall(nowMs() + 5000, notCancelled);
  const int64_t waited = nowMs() - t0;
  closing.join();
  CHECK(entered);
  CHECK_MSG(waited >= 90, "the call went on %lld ms into a close of 100 ms", static_cast<long long>(waited));
  CHECK_EQ(CloseGate::callsInFlight(), 1);
  CloseGate::leaveCall();
}

TEST(close_gate_a_copy_engine_call_gives_up_at_its_deadline) {
  CHECK(CloseGate::enterClose());
  const int64_t t0 = nowMs();
  const std::atomic<bool> notCancelled{false};
  CHECK(!CloseGate::enterCall(t0 + 50, notCancelled));
  CHECK(nowMs() - t0 < 2000);
  CHECK_EQ(CloseGate::callsInFlight(), 0);  // not counted: no close waits for it
  CloseGate::leaveClose();
  CHECK(CloseGate::enterClose());  // nothing left counted
  CloseGate::leaveClose();
}

// yaliCommAbort sets the comm's cancel flag while the call waits (under the comm's mutex, which the
// abort then takes): the call gives up at once, not at its deadline (found by a review).
TEST(close_gate_a_copy_engine_call_gives_up_on_its_comms_abort) {
  CHECK(CloseGate::enterClose());
  std::atomic<bool> cancel{false};
  std::thread aborting([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel = true;
  });
  const int64_t t0 = nowMs();
  const bool entered = CloseGate::enterCall(t0 + 20000, cancel);
  const int64_t waited = nowMs() - t0;
  aborting.join();
  CHECK(!entered);
  CHECK_MSG(waited < 5000, "the call waited %lld ms after its comm's abort", static_cast<long long>(waited));
  CHECK_EQ(CloseGate::callsInFlight(), 0);
  CloseGate::leaveClose();
}
