// The selector for the exchanges (every collective but AllReduce), asked about one piece: the bytes
// one rank sends to one receiver. Small pieces go as LL packets (within YALI_LL_BUFFER_BYTES), large
// ones through staging, and registered outputs from the direct threshold get the *_direct row where
// the collective has one. Needs no GPU.
#include <set>
#include <string>
#include <vector>

#include "internal_support.h"

using namespace yali;
using namespace yali_internal_test;

namespace {

// An exchange's rows.
struct ExchangeRows {
  Collective c;
  const AlgorithmDesc* ll;
  const AlgorithmDesc* staged;
  const AlgorithmDesc* direct;  // null where the collective has none
  const char* name() const { return collectiveName(c); }
};

std::vector<ExchangeRows> exchanges() {
  std::vector<ExchangeRows> out;
  for (int c = 0; c < kNumCollectives; ++c) {
    // AllReduce is no exchange; AlltoAllv's pattern comes from its counts on the device (one
    // algorithm, exchange/alltoallv.cu), tested on the GPU.
    if (collectiveAt(c) == Collective::kAllReduce || collectiveAt(c) == Collective::kAlltoAllv) continue;
    ExchangeRows x{collectiveAt(c), rowOf(collectiveAt(c), Family::kExchangeLL), &fallbackOf(collectiveAt(c)),
                   rowOf(collectiveAt(c), Family::kExchangeDirect)};
    REQUIRE(x.ll != nullptr && x.staged->family == Family::kExchangeStaged);
    out.push_back(x);
  }
  REQUIRE(out.size() == size_t(kNumCollectives - 2));
  return out;
}

Algo pick(const Selector& sel, const ExchangeRows& x, size_t bytes, bool registered) {
  return sel.choose(x.c, bytes, registered).algo;
}

#define CHECK_PICK(sel, x, bytes, registered, row)                                                          \
  do {                                                                                                      \
    const Algo got_ = pick(sel, x, bytes, registered);                                                      \
    CHECK_MSG(got_ == (row)->id, "%s, %zu bytes%s: %s, expected %s", (x).name(), static_cast<size_t>(bytes), \
              (registered) ? " registered" : "", algoName(got_), (row)->name);                              \
  } while (0)

}  // namespace

// The default table at 2, 3, 4 and 8 ranks: LL up to its threshold, staged above; registered outputs
// direct from its threshold; the thresholds the table gives are what the selector uses.
TEST(exchange_default_choice_by_piece_size) {
  const Settings s = defaultSettings();
  for (int n : {2, 3, 4, 8}) {
    const Selector sel = makeSelector(s, n);
    for (const ExchangeRows& x : exchanges()) {
      const size_t llMax = static_cast<size_t>(sel.entry().thresholds[idx(x.ll->id)]);
      REQUIRE(llMax > 0 && llMax <= static_cast<size_t>(s.llBufferBytes));
      for (size_t bytes : {size_t(0), size_t(1), size_t(8), size_t(4096), llMax - 1, llMax}) {
        CHECK_PICK(sel, x, bytes, false, x.ll);
        if (x.direct == nullptr) CHECK_PICK(sel, x, bytes, true, x.ll);
      }
      for (size_t bytes : {llMax + 1, size_t(1) << 20, size_t(1) << 30, SIZE_MAX}) {
        CHECK_PICK(sel, x, bytes, false, x.staged);
        if (x.direct == nullptr) CHECK_PICK(sel, x, bytes, true, x.staged);
      }
      if (x.direct != nullptr) {
        const size_t directMin = static_cast<size_t>(sel.entry().thresholds[idx(x.direct->id)]);
        REQUIRE(directMin > llMax + 1);
        CHECK_PICK(sel, x, 1, true, x.ll);
        CHECK_PICK(sel, x, llMax, true, x.ll);
        CHECK_PICK(sel, x, llMax + 1, true, x.staged);
        CHECK_PICK(sel, x, directMin - 1, true, x.staged);
        CHECK_PICK(sel, x, directMin, true, x.direct);
        CHECK_PICK(sel, x, size_t(1) << 30, true, x.direct);
        CHECK_PICK(sel, x, SIZE_MAX, true, x.direct);
        CHECK_PICK(sel, x, directMin, false, x.staged);
      }
    }
  }
}

// The built-in LL thresholds as measured (selector.cc, docs/PERF.md "Session 44"): at 2 ranks every
// exchange sends pieces up to 512 KB as LL packets (on 2 H200s 7.3-8.6 us in graphs at a 512 KB piece
// against staged's 10.2-11.0), at 3 ranks and more up to 256 KB (not measured: the crossover falls
// as 1/(n-1)). Until Session 44 every world size had 256 KB, and a 512 KB piece at 2 ranks went staged.
TEST(exchange_ll_max_by_world_size) {
  const Settings s = defaultSettings();
  for (int n : {2, 3, 4, 5, 8}) {
    const Selector sel = makeSelector(s, n);
    const size_t expected = n == 2 ? size_t(512) << 10 : size_t(256) << 10;
    for (const ExchangeRows& x : exchanges()) {
      CHECK_EQ(static_cast<size_t>(sel.entry().thresholds[idx(x.ll->id)]), expected);
      CHECK_PICK(sel, x, expected, false, x.ll);
      CHECK_PICK(sel, x, expected + 1, false, x.staged);
      CHECK_PICK(sel, x, size_t(384) << 10, false, n == 2 ? x.ll : x.staged);
    }
  }
}

// LL takes pieces within YALI_LL_BUFFER_BYTES only, whatever its threshold; each collective's
// thresholds steer that collective alone.
TEST(exchange_ll_within_its_buffer) {
  const Settings small = settingsWith({{"YALI_LL_BUFFER_BYTES", "65536"}});
  const Selector sel = makeSelector(small, 4);
  for (const ExchangeRows& x : exchanges()) {
    REQUIRE(sel.entry().thresholds[idx(x.ll->id)] > 65536);
    CHECK_PICK(sel, x, 65536, false, x.ll);
    CHECK_PICK(sel, x, 65537, false, x.staged);
  }
  for (const ExchangeRows& x : exchanges()) {
    const std::string var = thresholdSettingName(*x.ll);
    // -1: every piece that fits the buffer.
    const Selector always = makeSelector(settingsWith({{var, "-1"}}), 2);
    const size_t buffer = static_cast<size_t>(defaultSettings().llBufferBytes);
    CHECK_PICK(always, x, buffer, false, x.ll);
    CHECK_PICK(always, x, buffer + 1, false, x.staged);
    const Selector alwaysSmall = makeSelector(settingsWith({{var, "-1"}, {"YALI_LL_BUFFER_BYTES", "4096"}}), 2);
    CHECK_PICK(alwaysSmall, x, 4096, false, x.ll);
    CHECK_PICK(alwaysSmall, x, 4097, false, x.staged);
    // Bytes.
    const Selector bytes = makeSelector(settingsWith({{var, "1000"}}), 2);
    CHECK_PICK(bytes, x, 1000, false, x.ll);
    CHECK_PICK(bytes, x, 1001, false, x.staged);
    // 0: never, and no other collective notices.
    const Selector never = makeSelector(settingsWith({{var, "0"}}), 2);
    CHECK_PICK(never, x, 1, false, x.staged);
    for (const ExchangeRows& y : exchanges())
      if (y.c != x.c) CHECK_PICK(never, y, 1, false, y.ll);
    CHECK(chooseAR(never, 16).algo == Algo::kOneshotLL);
  }
  // AllReduce's LL threshold leaves the exchanges alone, and the other way round.
  const Selector noOneshot = makeSelector(settingsWith({{"YALI_ONESHOT_LL_MAX_BYTES", "0"}}), 2);
  for (const ExchangeRows& x : exchanges()) CHECK_PICK(noOneshot, x, 16, false, x.ll);
}

// The *_direct rows: registered outputs from their threshold (-1: every size, before LL; 0:
// never); outputs that are not registered never get them.
TEST(exchange_direct_for_registered_outputs) {
  for (const ExchangeRows& x : exchanges()) {
    if (x.direct == nullptr) continue;
    const std::string var = thresholdSettingName(*x.direct);
    const Selector always = makeSelector(settingsWith({{var, "-1"}}), 2);
    CHECK_PICK(always, x, 0, true, x.direct);
    CHECK_PICK(always, x, 1, true, x.direct);
    CHECK_PICK(always, x, 1, false, x.ll);
    CHECK_PICK(always, x, size_t(1) << 30, false, x.staged);
    const Selector never = makeSelector(settingsWith({{var, "0"}}), 2);
    CHECK_PICK(never, x, size_t(1) << 30, true, x.staged);
    const Selector bytes = makeSelector(settingsWith({{var, "5000"}}), 2);
    CHECK_PICK(bytes, x, 4999, true, x.ll);
    CHECK_PICK(bytes, x, 5000, true, x.direct);
    for (const ExchangeRows& y : exchanges())
      if (y.c != x.c && y.direct != nullptr) CHECK_PICK(bytes, y, 5000, true, y.ll);
  }
}

// YALI_ALGO for an exchange: taken where its buffer allows, else the staged fallback; a forced
// *_direct on an output that is not registered gets the automatic choice. Another collective's
// forced algorithm changes nothing here.
TEST(exchange_forced_algorithms) {
  for (const ExchangeRows& x : exchanges()) {
    const Selector ll = makeSelector(forced(x.ll->name), 2);
    CHECK_PICK(ll, x, 1, false, x.ll);
    CHECK_PICK(ll, x, size_t(1) << 20, false, x.ll);  // past the table's threshold, within the buffer
    CHECK_PICK(ll, x, (size_t(1) << 20) + 1, false, x.staged);
    CHECK_PICK(ll, x, size_t(1) << 30, true, x.staged);
    const Selector staged = makeSelector(forced(x.staged->name), 2);
    for (size_t bytes : {size_t(0), size_t(1), size_t(1) << 30, SIZE_MAX})
      for (bool registered : {false, true}) CHECK_PICK(staged, x, bytes, registered, x.staged);
    if (x.direct != nullptr) {
      const Selector direct = makeSelector(forced(x.direct->name), 2);
      CHECK_PICK(direct, x, 1, true, x.direct);
      CHECK_PICK(direct, x, SIZE_MAX, true, x.direct);
      CHECK_PICK(direct, x, 1, false, x.ll);
      CHECK_PICK(direct, x, size_t(1) << 30, false, x.staged);
    }
    const Selector other = makeSelector(forced("twoshot"), 2);
    CHECK_PICK(other, x, 1, false, x.ll);
  }
}

// Geometry: LL within ll_ctas and ll_threads; staged pipelines of one block each (no teams), slots
// of 256-byte multiples from the minimum slot, all within staging, covering the piece in one step
// where staging and the maximum slot allow; the frugal cap from frugal_min of bytes moved (nranks
// pieces) up; YALI_MAX_CTAS and small staging honoured.
TEST(exchange_geometry) {
  const Settings s = defaultSettings();
  // n = 2, 4 MB staging, 8 KB..128 KB slots, 64 blocks below 64 MB moved, 32 from it.
  const Selector two = makeSelector(s, 2);
  const Selector stagedTwo = makeSelector(forced("allgather_staged"), 2);
  struct Case {
    size_t bytes;
    int ctas;
    size_t slot;
  };
  for (const Case& k : {Case{size_t(1) << 20, 64, size_t(16) << 10}, Case{size_t(16) << 20, 64, size_t(64) << 10},
                        Case{(size_t(32) << 20) - 256, 64, size_t(64) << 10}, Case{size_t(32) << 20, 32, size_t(128) << 10},
                        Case{size_t(1) << 30, 32, size_t(128) << 10}, Case{size_t(300) << 10, 37, 8448 /* 300 KB / 37 in 256-byte units */},
                        Case{100, 1, size_t(8) << 10}}) {
    const AlgoChoice c = stagedTwo.choose(Collective::kAllGather, k.bytes, false);
    CHECK(c.algo == Algo::kAllGatherStaged);
    CHECK_MSG(c.ctas == k.ctas && c.slotBytes == k.slot && c.teams == 1, "%zu bytes: %d blocks of %zu-byte slots",
              k.bytes, c.ctas, c.slotBytes);
  }
  // Direct: the two-shot caps by bytes moved (the old AllReduce direct's rule).
  const TuningEntry e = builtinTuning(9, 2);
  CHECK_EQ(two.choose(Collective::kAlltoAll, size_t(1) << 30, true).ctas, e.frugalMaxCtas);
  CHECK_EQ(two.choose(Collective::kAlltoAll, size_t(16) << 20, true).ctas, e.twoshotMaxCtas);
  CHECK_EQ(two.choose(Collective::kAlltoAll, size_t(16) << 20, true).slotBytes, 0);
  // LL.
  const AlgoChoice ll = two.choose(Collective::kReduce, 256 << 10, false);
  CHECK(ll.algo == Algo::kReduceLL);
  CHECK_EQ(ll.ctas, std::min<int64_t>(e.llMaxCtas, (256 << 10) / 8 / e.llThreads));
  CHECK_EQ(ll.threads, e.llThreads);
  CHECK_EQ(ll.slotBytes, 0);
  CHECK_EQ(two.choose(Collective::kReduce, 8, false).ctas, 1);
  // Small staging: 64 KB holds 8 minimum slots.
  const Selector tight = makeSelector(settingsWith({{"YALI_STAGING_BYTES", "65536"}}), 2);
  for (int c = 1; c < kNumCollectives; ++c) {
    const AlgoChoice ch = tight.choose(collectiveAt(c), size_t(1) << 30, false);
    CHECK_EQ(ch.ctas, 8);
    CHECK_EQ(ch.slotBytes, size_t(8) << 10);
  }
  // Sweep: world sizes, staging, block caps, every exchange, registered or not.
  for (int n = 2; n <= kMaxRanks; ++n) {
    for (const char* staging : {"65536", "100000", "4194304", "16777216"}) {
      for (const char* maxCtas : {"0", "1", "7", "64"}) {
        const Settings st = settingsWith({{"YALI_STAGING_BYTES", staging}, {"YALI_MAX_CTAS", maxCtas}});
        const Selector sel = makeSelector(st, n);
        const TuningEntry& t = sel.entry();
        for (const ExchangeRows& x : exchanges()) {
          for (size_t bytes = 1; bytes != 0 && bytes <= (size_t(1) << 40); bytes = bytes * 3 + 7) {
            for (bool registered : {false, true}) {
              const AlgoChoice c = sel.choose(x.c, bytes, registered);
              std::string why;
              CHECK_MSG(choiceFits(c, bytes, sel.limits(), &why), "n=%d staging=%s: %s", n, staging, why.c_str());
              CHECK_EQ(c.teams, 1);
              const bool frugal = bytes * n >= static_cast<size_t>(t.frugalMinBytes);
              const int64_t cap = frugal ? t.frugalMaxCtas : t.twoshotMaxCtas;
              const Family f = algorithm(c.algo).family;
              if (f == Family::kExchangeLL) {
                CHECK(c.ctas <= t.llMaxCtas && c.threads == t.llThreads && c.slotBytes == 0);
              } else if (f == Family::kExchangeDirect) {
                CHECK_MSG(c.ctas <= cap && c.slotBytes == 0, "n=%d %s %zu: %d blocks", n, x.name(), bytes, c.ctas);
              } else {
                REQUIRE(f == Family::kExchangeStaged);
                const size_t stagingBytes = static_cast<size_t>(st.stagingBytes);
                CHECK_MSG(c.ctas <= cap, "n=%d %s %zu: %d blocks", n, x.name(), bytes, c.ctas);
                CHECK(c.slotBytes >= std::min<size_t>(t.twoshotMinSlotBytes, stagingBytes / 256 * 256));
                // One step per pipeline where the slots may grow that far.
                const size_t slotCap = std::min<size_t>(t.twoshotMaxSlotBytes, stagingBytes / c.ctas / 256 * 256);
                CHECK_MSG(static_cast<size_t>(c.ctas) * c.slotBytes >= bytes || c.slotBytes >= slotCap,
                          "n=%d %s %zu: %d blocks of %zu-byte slots", n, x.name(), bytes, c.ctas, c.slotBytes);
              }
            }
          }
        }
      }
    }
  }
}
