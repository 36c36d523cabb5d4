// Every collective's patterns of pieces (core/pattern.h), run through a simulated exchange on the
// host: each rank's input bytes, moved exactly as the exchange kernels move them (sendTo,
// recvFrom, the offset masks; reducing collectives sum every rank's piece in rank order), must give
// NCCL's output on every rank, in place and out of place, for every root and world size. The
// kernels themselves are tested on the GPU (tests/gpu/cases_collectives.cc); this catches a wrong
// pattern in CI, where no GPU runs. Also checks the buffer extents and the in-place layouts, and runs
// the rooted two-shot algorithms (broadcast_twoshot, reduce_twoshot: fillTwoshot's arguments) through
// a model of the two-shot kernel's data movement, and the pull exchange (reducescatter_pull,
// reduce_pull: peerSrcByRankOf) through a model of its reads.
#include <stdint.h>
#include <string.h>

#include <string>
#include <vector>

#include "collectives/common/tile_split.h"
#include "core/pattern.h"
#include "harness.h"

using namespace yali;

namespace {

bool bit(uint32_t mask, int i) { return (mask >> i) & 1u; }
size_t srcOff(const DeviceArgs& a, int d) { return bit(a.srcByRank, d) ? d * a.pieceBytes : 0; }
size_t dstOff(const DeviceArgs& a, int s) { return bit(a.dstByRank, s) ? s * a.pieceBytes : 0; }

// Elements are uint32 (one per 4 bytes of a piece); rank r's input element i is a value unique to
// (r, i), so a piece from the wrong place or rank shows.
uint32_t input(int rank, size_t i) { return 0x1000000u * (rank + 1) + static_cast<uint32_t>(i); }

struct Case {
  Collective c;
  int n;
  int root;
  bool inPlace;
};

// One simulated rank's memory: one buffer that holds the input and the output where the in-place
// layout puts them, or two buffers.
struct SimRank {
  std::vector<uint32_t> mem;
  size_t send = 0, recv = 0;  // element offsets into mem
  Extents e{};
};

// Runs `k` through the patterns; returns the first problem, or "" when every rank's output is
// NCCL's.

std::string simulate(const Case& k, size_t elems) {
  const size_t piece = elems * 4;
  const bool reduces = collectiveShape(k.c).reduces;
  std::vector<SimRank> ranks(k.n);
  for (int r = 0; r < k.n; ++r) {
    SimRank& R = ranks[r];
    R.e = extentsOf(k.c, r, k.root, k.n);
    const size_t in = R.e.sendPieces * elems, out = R.e.recvPieces * elems;
    R.mem.assign(in + out + 4 * elems * k.n + 16, 0xDEADBEEFu);
    R.send = 0;
    R.recv = in + 8;
    if (k.inPlace && R.e.sendPieces > 0 && R.e.recvPieces > 0) {
      switch (k.c) {
        case Collective::kReduceScatter: R.recv = R.send + r * elems; break;
        case Collective::kAllGather: R.send = R.recv + r * elems; break;
        case Collective::kGather: if (r == k.root) R.send = R.recv + k.root * elems; break;
        case Collective::kScatter: if (r == k.root) R.recv = R.send + k.root * elems; break;
        case Collective::kAlltoAll: break;  // no in-place form
        default: R.recv = R.send; break;
      }
    }
    for (size_t i = 0; i < in; ++i) R.mem[R.send + i] = input(r, i);
  }
  // What NCCL leaves in each rank's output.
  std::vector<std::vector<uint32_t>> want(k.n);
  for (int r = 0; r < k.n; ++r) {
    const size_t out = ranks[r].e.recvPieces * elems;
    want[r].resize(out);
    for (size_t i = 0; i < out; ++i) {
      const size_t block = i / elems, j = i % elems;
      uint32_t sum = 0;
      switch (k.c) {
        case Collective::kReduceScatter:
          for (int s = 0; s < k.n; ++s) sum += input(s, r * elems + j);
          want[r][i] = sum;
          break;
        case Collective::kReduce:
          for (int s = 0; s < k.n; ++s) sum += input(s, j);
          want[r][i] = sum;
          break;
        case Collective::kAllGather:
        case Collective::kGather: want[r][i] = input(static_cast<int>(block), j); break;
        case Collective::kBroadcast: want[r][i] = input(k.root, j); break;
        case Collective::kScatter: want[r][i] = input(k.root, r * elems + j); break;
        case Collective::kAlltoAll: want[r][i] = input(static_cast<int>(block), r * elems + j); break;
        case Collective::kAllReduce: break;
      }
    }
  }
  // Each rank's pattern, as call.cc fills it for the kernels.
  std::vector<DeviceArgs> args(k.n);
  for (int r = 0; r < k.n; ++r) {
    SimRank& R = ranks[r];
    fillPattern(k.c, r, k.n, k.root, piece, reinterpret_cast<const char*>(R.mem.data() + R.send),
                reinterpret_cast<const char*>(R.mem.data() + R.recv), &args[r]);
    if (args[r].pieceBytes != piece) return "pieceBytes";
    if (args[r].arrive != (collectiveShape(k.c).rooted ? 1u : 0u)) return "arrive";
  }
  // Every piece a receiver expects must be sent to it, and the other way round.
  for (int s = 0; s < k.n; ++s)
    for (int d = 0; d < k.n; ++d)
      if (s != d && bit(args[s].sendTo, d) != bit(args[d].recvFrom, s))
        return "rank " + std::to_string(s) + " -> " + std::to_string(d) + ": sendTo and recvFrom disagree";
  // The exchange: first every piece is staged (as the kernels read every input before any output
  // is written at the same offsets), then each receiver stores or reduces.
  std::vector<std::vector<std::vector<uint32_t>>> staged(k.n, std::vector<std::vector<uint32_t>>(k.n));
  for (int s = 0; s < k.n; ++s)
    for (int d = 0; d < k.n; ++d)
      if (bit(args[s].sendTo, d)) {
        const uint32_t* from = ranks[s].mem.data() + ranks[s].send + srcOff(args[s], d) / 4;
        staged[d][s].assign(from, from + elems);
      }
  for (int d = 0; d < k.n; ++d) {
    uint32_t* out = ranks[d].mem.data() + ranks[d].recv;
    if (reduces) {
      if (args[d].recvFrom == 0) continue;
      for (size_t j = 0; j < elems; ++j) {
        uint32_t sum = 0;
        for (int s = 0; s < k.n; ++s) {
          if (staged[d][s].empty()) return "rank " + std::to_string(d) + " reduces without rank " + std::to_string(s);
          sum += staged[d][s][j];
        }
        out[dstOff(args[d], 0) / 4 + j] = sum;
      }
    } else {
      for (int s = 0; s < k.n; ++s)
        if (bit(args[d].recvFrom, s))
          for (size_t j = 0; j < elems; ++j) out[dstOff(args[d], s) / 4 + j] = staged[d][s][j];
    }
  }
  for (int r = 0; r < k.n; ++r) {
    const uint32_t* out = ranks[r].mem.data() + ranks[r].recv;
    for (size_t i = 0; i < want[r].size(); ++i)
      if (out[i] != want[r][i])
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": got " + std::to_string(out[i]) +
               ", want " + std::to_string(want[r][i]);
  }
  return "";
}

// The pull exchange (exchange.cuh: exchangePull; reducescatter_pull, reduce_pull) on the same
// memory: every rank whose recvFrom is not 0 reduces, element by element, every rank's input read
// at its own start plus (peerSrcByRankOf says so) our rank * piece, into its output at 0; the
// others write nothing. The ranks run one after the other (in rank order, or backwards), each
// element read from every source just before it is written (as a kernel thread does): an output
// that overlapped what a peer still reads would show as a wrong element.
std::string simulatePull(const Case& k, size_t elems, bool backwards) {
  const size_t piece = elems * 4;
  std::vector<SimRank> ranks(k.n);
  for (int r = 0; r < k.n; ++r) {
    SimRank& R = ranks[r];
    R.e = extentsOf(k.c, r, k.root, k.n);
    const size_t in = R.e.sendPieces * elems, out = R.e.recvPieces * elems;
    // Each rank's input at an offset of its own (the kernel learns the peers' at entry).
    R.mem.assign(r + in + out + 16, 0xDEADBEEFu);
    R.send = r;
    R.recv = R.send + in + 8;
    if (k.inPlace && out > 0)
      R.recv = k.c == Collective::kReduceScatter ? R.send + r * elems : R.send;  // NCCL's layouts
    for (size_t i = 0; i < in; ++i) R.mem[R.send + i] = input(r, i);
  }
  const std::vector<std::vector<uint32_t>> before = [&] {
    std::vector<std::vector<uint32_t>> m;
    for (const SimRank& R : ranks) m.push_back(R.mem);
    return m;
  }();
  const uint32_t bySrc = peerSrcByRankOf(k.c, k.root, k.n);
  std::vector<DeviceArgs> args(k.n);
  for (int r = 0; r < k.n; ++r)
    fillPattern(k.c, r, k.n, k.root, piece, reinterpret_cast<const char*>(ranks[r].mem.data() + ranks[r].send),
                reinterpret_cast<const char*>(ranks[r].mem.data() + ranks[r].recv), &args[r]);
  for (int i = 0; i < k.n; ++i) {
    const int d = backwards ? k.n - 1 - i : i;
    if (args[d].recvFrom == 0) continue;
    if (ranks[d].e.recvPieces != 1) return "rank " + std::to_string(d) + " reduces without an output of one piece";
    for (size_t j = 0; j < elems; ++j) {
      uint32_t sum = 0;
      for (int s = 0; s < k.n; ++s) {
        const size_t at = ranks[s].send + (bit(bySrc, s) ? d * elems : 0) + j;
        if (at >= ranks[s].send + ranks[s].e.sendPieces * elems)
          return "rank " + std::to_string(d) + " reads past rank " + std::to_string(s) + "'s input";
        sum += ranks[s].mem[at];
      }
      ranks[d].mem[ranks[d].recv + j] = sum;
    }
  }
  for (int r = 0; r < k.n; ++r) {
    const SimRank& R = ranks[r];
    const bool reduces = k.c == Collective::kReduceScatter || r == k.root;
    if ((args[r].recvFrom != 0) != reduces) return "rank " + std::to_string(r) + ": recvFrom";
    for (size_t i = 0; i < R.mem.size(); ++i) {
      const bool isOut = reduces && i >= R.recv && i < R.recv + elems;
      uint32_t want = before[r][i];
      if (isOut) {
        want = 0;
        for (int s = 0; s < k.n; ++s)
          want += input(s, (k.c == Collective::kReduceScatter ? r * elems : 0) + (i - R.recv));
      }
      if (R.mem[i] != want)
        return "rank " + std::to_string(r) + " word " + std::to_string(i) + ": got " + std::to_string(R.mem[i]) +
               ", want " + std::to_string(want) + (isOut ? " (its output)" : " (not its output: must not change)");
    }
  }
  return "";
}

}  // namespace

TEST(pattern_every_collective_gives_nccls_output) {
  int cases = 0;
  for (int c = 1; c < kNumCollectives; ++c) {  // every collective but AllReduce
    const Collective coll = static_cast<Collective>(c);
    if (coll == Collective::kAlltoAllv) continue;  // its counts, on the device, make its pattern
    for (int n = 1; n <= kMaxRanks; ++n) {
      for (int root = 0; root < (collectiveShape(coll).rooted ? n : 1); ++root) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          for (size_t elems : {size_t(1), size_t(3), size_t(8)}) {
            const std::string problem = simulate({coll, n, root, inPlace == 1}, elems);
            CHECK_MSG(problem.empty(), "%s n=%d root=%d %s elems=%zu: %s", collectiveName(coll), n, root,
                      inPlace ? "in place" : "out of place", elems, problem.c_str());
            ++cases;
          }
        }
      }
    }
  }
  CHECK(cases > 500);
}

// The pull exchange's two collectives (reducescatter_pull, reduce_pull), every world size and root,
// in place and not, the ranks in either order: NCCL's output on the ranks that have one, nothing
// written anywhere else (Reduce's non-roots, the inputs ReduceScatter keeps in place).
TEST(pattern_pull_exchange_gives_nccls_output) {
  int cases = 0;
  for (Collective coll : {Collective::kReduceScatter, Collective::kReduce}) {
    for (int n = 1; n <= kMaxRanks; ++n) {
      for (int root = 0; root < (coll == Collective::kReduce ? n : 1); ++root) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          for (size_t elems : {size_t(1), size_t(3), size_t(8)}) {
            for (bool backwards : {false, true}) {
              const std::string problem = simulatePull({coll, n, root, inPlace == 1}, elems, backwards);
              CHECK_MSG(problem.empty(), "%s n=%d root=%d %s elems=%zu%s: %s", collectiveName(coll), n, root,
                        inPlace ? "in place" : "out of place", elems, backwards ? " backwards" : "",
                        problem.c_str());
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases > 100);
  // Reduce reads every input from its start (one piece each); ReduceScatter's piece `rank` of each.
  CHECK(peerSrcByRankOf(Collective::kReduce, 2, 4) == 0);
  CHECK(peerSrcByRankOf(Collective::kReduceScatter, 0, 4) == 0xFu);
  CHECK(peerSrcByRankOf(Collective::kReduceScatter, 0, 1) == 0);
  CHECK(peerSrcByRankOf(Collective::kScatter, 2, 4) == 0x4u);
}

// The direct exchanges write our piece at peerDstOffset in the receiver's output: it must be where
// the receiver itself would put our piece (its dstOffset for us).
TEST(pattern_direct_offsets_match_the_receivers) {
  for (Collective c : {Collective::kAllGather, Collective::kBroadcast, Collective::kScatter, Collective::kAlltoAll,
                       Collective::kGather}) {
    for (int n = 2; n <= kMaxRanks; ++n) {
      for (int root = 0; root < n; ++root) {
        std::vector<DeviceArgs> a(n);
        static char send[1], recv[1];  // distinct: out of place
        for (int r = 0; r < n; ++r) fillPattern(c, r, n, root, 64, send, recv + 0 * r, &a[r]);
        for (int s = 0; s < n; ++s)
          for (int d = 0; d < n; ++d)
            if (s != d && bit(a[s].sendTo, d)) {
              const size_t sent = bit(a[s].peerDstByRank, d) ? s * a[s].pieceBytes : 0;
              CHECK_MSG(sent == dstOff(a[d], s), "%s n=%d root=%d: rank %d writes at %zu of rank %d, which puts it at %zu",
                        collectiveName(c), n, root, s, sent, d, dstOff(a[d], s));
            }
      }
    }
  }
}

TEST(pattern_extents_and_in_place_layouts) {
  // Unused buffers: a non-root's output of Reduce and Gather, its input of Broadcast and Scatter.
  CHECK(extentsOf(Collective::kReduce, 1, 0, 4).recvPieces == 0);
  CHECK(extentsOf(Collective::kGather, 1, 0, 4).recvPieces == 0);
  CHECK(extentsOf(Collective::kGather, 0, 0, 4).recvPieces == 4);
  CHECK(extentsOf(Collective::kScatter, 2, 0, 4).sendPieces == 0);
  CHECK(extentsOf(Collective::kBroadcast, 2, 0, 4).sendPieces == 0);
  CHECK(extentsOf(Collective::kAlltoAll, 2, 0, 4).sendPieces == 4 && extentsOf(Collective::kAlltoAll, 2, 0, 4).recvPieces == 4);
  static char buf[1024];
  CHECK(inPlaceLayout(Collective::kReduceScatter, 2, 0, 16, buf, buf + 32));
  CHECK(!inPlaceLayout(Collective::kReduceScatter, 2, 0, 16, buf, buf + 16));
  CHECK(inPlaceLayout(Collective::kAllGather, 3, 0, 16, buf + 48, buf));
  CHECK(inPlaceLayout(Collective::kGather, 1, 1, 16, buf + 16, buf));
  CHECK(!inPlaceLayout(Collective::kGather, 0, 1, 16, buf + 16, buf));  // only the root has the layout
  CHECK(inPlaceLayout(Collective::kScatter, 2, 2, 16, buf, buf + 32));
  CHECK(!inPlaceLayout(Collective::kAlltoAll, 0, 0, 16, buf, buf));
  CHECK(inPlaceLayout(Collective::kBroadcast, 0, 0, 16, buf, buf));
}

// ---- The two-shot kernel's rooted shapes ---------------------------------------------------------
//
// A model of what allreduce/twoshot.cuh (twoshot_push, Gather::kByWrites) moves for each shape, run
// on fillTwoshot's arguments: the same tiles and shards (tile_split.h) over `slotBytes` slots, each
// tile's pushes into the owners' staging, each owner's reduction (Broadcast: a copy of the root's
// piece) into its output and the gather areas, then every copy-out, tile by tile. That order is
// one the kernel's flags allow on every rank (a rank's push(k) reads tile k of its input before its
// pull(k) writes tile k of its output; tiles do not overlap), so the in-place layouts are covered.
// It also checks what the kernel relies on: every staging and gather area read was written in
// the same tile by the rank the kernel expects, no shard exceeds its slot, Broadcast's non-roots
// never read their input, Reduce's non-roots have no output and write none. The flag protocol is
// twoshot_push's, unchanged (twoshot.cuh: every rank publishes and waits for every flag).
namespace {

enum class ShapeModel { kAllReduce, kReduce, kBroadcast };

// Elements of the call are uint32 (input(r, i) as above); Broadcast's kernel works on bytes.
std::string simulateTwoshot(ShapeModel shape, int n, int root, bool inPlace, size_t count, size_t slotBytes) {
  const Collective c = shape == ShapeModel::kReduce      ? Collective::kReduce
                       : shape == ShapeModel::kBroadcast ? Collective::kBroadcast
                                                         : Collective::kAllReduce;
  const size_t elem = 4;
  struct Rank {
    std::vector<uint8_t> mem;
    size_t send = 0, recv = 0;  // byte offsets into mem
    bool hasSend = false, hasRecv = false;
    DeviceArgs a{};
  };
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    Rank& R = ranks[r];
    const Extents e = extentsOf(c, r, root, n);
    R.hasSend = e.sendPieces > 0;
    R.hasRecv = e.recvPieces > 0;
    const size_t bytes = count * elem;
    R.mem.assign(2 * bytes + 64, 0xA5);
    R.send = 0;
    R.recv = inPlace ? 0 : bytes + 32;  // NCCL's in-place layout for all three: sendbuff == recvbuff
    if (R.hasSend)
      for (size_t i = 0; i < count; ++i) {
        const uint32_t v = input(r, i);
        memcpy(&R.mem[R.send + i * elem], &v, elem);
      }
    R.a.send = R.hasSend ? R.mem.data() + R.send : nullptr;  // NCCL: not significant, may be NULL
    R.a.recv = R.mem.data() + R.recv;
    R.a.rank = r;
    R.a.nranks = n;
    if (shape == ShapeModel::kAllReduce) {
      R.a.count = count;
    } else {
      fillTwoshot(c, r, root, count, elem, &R.a);
    }
    if (R.a.root != (shape == ShapeModel::kAllReduce ? 0 : root)) return "root";
    if ((R.a.recv != nullptr) != (shape != ShapeModel::kReduce || r == root)) return "recv null exactly on Reduce's non-roots";
  }
  // The kernel's element: bytes for Broadcast (byte-wise), the call's elements otherwise.
  const size_t kes = shape == ShapeModel::kBroadcast ? 1 : elem;
  const size_t kcount = ranks[0].a.count;
  if (kcount * kes != count * elem) return "count: " + std::to_string(kcount) + " kernel elements";
  for (const Rank& R : ranks)
    if (R.a.count != kcount) return "the ranks disagree on count (their tiles would differ)";
  const size_t slotElems = slotBytes / kes;
  const size_t tileElems = slotElems * n;
  const size_t tiles = (kcount + tileElems - 1) / tileElems;
  // staging[d][s], gather[d][s]: rank d's areas for sender / owner s, with the tile that wrote them.
  struct Area {
    std::vector<uint8_t> bytes;
    size_t tile = SIZE_MAX;
  };
  std::vector<std::vector<Area>> staging(n, std::vector<Area>(n)), gather(n, std::vector<Area>(n));
  auto inputAt = [&](int r, size_t e, size_t len, std::vector<uint8_t>* out) -> std::string {
    const Rank& R = ranks[r];
    if (R.a.send == nullptr) return "rank " + std::to_string(r) + " reads its input, which it does not have";
    const uint8_t* from = static_cast<const uint8_t*>(R.a.send) + e * kes;
    out->assign(from, from + len * kes);
    return "";
  };
  auto outputAt = [&](int r, size_t e, const std::vector<uint8_t>& v) -> std::string {
    Rank& R = ranks[r];
    if (R.a.recv == nullptr) return "rank " + std::to_string(r) + " writes an output it does not have";
    // An empty tile's data() may be null, which memcpy must not be given even for 0 bytes (UBSan).
    if (!v.empty()) memcpy(static_cast<uint8_t*>(R.a.recv) + e * kes, v.data(), v.size());
    return "";
  };
  for (size_t t = 0; t < tiles; ++t) {
    const TileSplit st = tileSplit(t, tileElems, kcount, n, kes);
    for (int d = 0; d < n; ++d)
      if (st.length(d) * kes > slotBytes) return "a shard exceeds its slot";
    // push(t): every rank's part of shard d into d's staging (Broadcast: the root's only).
    for (int s = 0; s < n; ++s) {
      if (shape == ShapeModel::kBroadcast && s != root) continue;
      for (int d = 0; d < n; ++d) {
        if (d == s) continue;
        Area& to = staging[d][s];
        std::string err = inputAt(s, st.start + st.begin(d), st.length(d), &to.bytes);
        if (!err.empty()) return err;
        to.tile = t;
      }
    }
    // reduce(t): each owner's shard, in rank order (Broadcast: the root's piece).
    std::vector<std::vector<uint8_t>> reduced(n);
    for (int d = 0; d < n; ++d) {
      std::vector<std::vector<uint8_t>> src;
      for (int s = 0; s < n; ++s) {
        if (shape == ShapeModel::kBroadcast && s != root) continue;
        std::vector<uint8_t> piece;
        if (s == d) {
          std::string err = inputAt(d, st.start + st.begin(d), st.length(d), &piece);
          if (!err.empty()) return err;
        } else {
          if (staging[d][s].tile != t)
            return "tile " + std::to_string(t) + ": rank " + std::to_string(d) + " reads staging of rank " +
                   std::to_string(s) + ", which did not push it";
          piece = staging[d][s].bytes;
        }
        src.push_back(piece);
      }
      std::vector<uint8_t>& v = reduced[d];
      v = src[0];
      if (shape != ShapeModel::kBroadcast) {
        for (size_t i = 0; i + elem <= v.size(); i += elem) {
          uint32_t sum = 0;
          for (const auto& p : src) {
            uint32_t x;
            memcpy(&x, &p[i], elem);
            sum += x;
          }
          memcpy(&v[i], &sum, elem);
        }
      }
    }
    for (int d = 0; d < n; ++d) {
      const std::vector<uint8_t>& v = reduced[d];
      if (shape == ShapeModel::kReduce) {
        if (d == root) {
          std::string err = outputAt(d, st.start + st.begin(d), v);
          if (!err.empty()) return err;
        } else {
          gather[root][d] = {v, t};
        }
        continue;
      }
      std::string err = outputAt(d, st.start + st.begin(d), v);
      if (!err.empty()) return err;
      for (int p = 0; p < n; ++p)
        if (p != d) gather[p][d] = {v, t};
    }
    // pull(t): copy every other owner's shard out of our gather area (Reduce: the root only).
    for (int r = 0; r < n; ++r) {
      if (shape == ShapeModel::kReduce && r != root) continue;
      for (int s = 0; s < n; ++s) {
        if (s == r) continue;
        if (gather[r][s].tile != t)
          return "tile " + std::to_string(t) + ": rank " + std::to_string(r) + " copies out owner " +
                 std::to_string(s) + "'s shard, which it did not store";
        std::string err = outputAt(r, st.start + st.begin(s), gather[r][s].bytes);
        if (!err.empty()) return err;
      }
    }
  }
  // NCCL's outputs; the inputs unchanged out of place; nothing written where a rank has no output.
  for (int r = 0; r < n; ++r) {
    const Rank& R = ranks[r];
    for (size_t i = 0; i < count; ++i) {
      uint32_t want = 0;
      if (shape == ShapeModel::kBroadcast) {
        want = input(root, i);
      } else {
        for (int s = 0; s < n; ++s) want += input(s, i);
      }
      if (R.hasRecv) {
        uint32_t got;
        memcpy(&got, &R.mem[R.recv + i * elem], elem);
        if (got != want)
          return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": got " + std::to_string(got) +
                 ", want " + std::to_string(want);
      }
      if (R.hasSend && !inPlace) {
        uint32_t in;
        memcpy(&in, &R.mem[R.send + i * elem], elem);
        if (in != input(r, i)) return "rank " + std::to_string(r) + "'s input changed at element " + std::to_string(i);
      }
    }
    if (!R.hasRecv && !inPlace)
      for (size_t b = R.recv; b < R.recv + count * elem; ++b)
        if (R.mem[b] != 0xA5) return "rank " + std::to_string(r) + " without an output had its recvbuff written";
  }
  return "";
}

}  // namespace

// broadcast_twoshot and reduce_twoshot for every world size, every root, in place and out of
// place, counts that nranks does not divide (remainders: short and empty shards in the last tile)
// and counts of several tiles; AllReduce (twoshot_push) through the same model as its reference.
TEST(pattern_rooted_twoshot_gives_nccls_output) {
  int cases = 0;
  for (ShapeModel shape : {ShapeModel::kBroadcast, ShapeModel::kReduce, ShapeModel::kAllReduce}) {
    const char* name = shape == ShapeModel::kBroadcast ? "broadcast_twoshot"
                       : shape == ShapeModel::kReduce  ? "reduce_twoshot"
                                                       : "twoshot_push";
    for (int n = 1; n <= kMaxRanks; ++n) {
      for (int root = 0; root < (shape == ShapeModel::kAllReduce ? 1 : n); ++root) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          for (size_t count : {size_t(1), size_t(3), size_t(7), size_t(64), size_t(65), size_t(1001), size_t(4099)}) {
            for (size_t slot : {size_t(256), size_t(1024)}) {
              const std::string problem = simulateTwoshot(shape, n, root, inPlace == 1, count, slot);
              CHECK_MSG(problem.empty(), "%s n=%d root=%d %s count=%zu slot=%zu: %s", name, n, root,
                        inPlace ? "in place" : "out of place", count, slot, problem.c_str());
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases > 2000);
}
