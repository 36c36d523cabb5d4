// Host test of yali-perf's #wrong logic (data_check.cuh), with no GPU: for every collective, type
// and op, each rank's output is computed as the libraries compute it -- YALI's contract (yali.h:
// rank order, fp32 accumulation for the 16- and 8-bit floats, one rounding, integer wrap-around)
// and an NCCL-like ring (partial results rounded to the element type at every step, in a rotated
// order, avg as a premultiplied sum) -- and must pass the check; outputs that are wrong (never
// written, a missing rank, blocks from the wrong rank) must not. Prints "N passed, N failed".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "coll_shape.h"
#include "data_check.cuh"

using namespace yali_perf;
using namespace yali_perf::check;

namespace {

int g_passed = 0;
int g_failed = 0;

void Expect(bool condition, const std::string& what) {
  if (condition) {
    ++g_passed;
  } else {
    ++g_failed;
    if (g_failed <= 50) std::printf("FAIL: %s\n", what.c_str());
  }
}

template <typename T>
double AsDouble(T v) {
  if constexpr (Element<T>::kFloating) {
    return Element<T>::ToDouble(v);
  } else {
    return static_cast<double>(v);
  }
}

double Apply(int op, double a, double x) {
  switch (op) {
    case 1: return a * x;
    case 2: return std::max(a, x);
    case 3: return std::min(a, x);
    default: return a + x;
  }
}

// YALI (yali.h): rank order 0..n-1; fp64 in fp64, the other floats in fp32; one rounding into T;
// integers in their own width, wrapping.
template <typename T>
T YaliReduce(const std::vector<std::vector<T>>& in, size_t j, int op, int n) {
  if constexpr (std::is_same<T, double>::value) {
    double acc = in[0][j];
    for (int r = 1; r < n; ++r) acc = Apply(op, acc, in[r][j]);
    return op == 4 ? acc / n : acc;
  } else if constexpr (Element<T>::kFloating) {
    float acc = static_cast<float>(AsDouble(in[0][j]));
    for (int r = 1; r < n; ++r)
      acc = static_cast<float>(Apply(op, acc, static_cast<float>(AsDouble(in[r][j]))));
    if (op == 4) acc /= static_cast<float>(n);
    return Element<T>::FromDouble(acc);
  } else {
    using U = typename Element<T>::Unsigned;
    U acc = static_cast<U>(in[0][j]);
    T best = in[0][j];
    for (int r = 1; r < n; ++r) {
      const T x = in[r][j];
      if (op == 1) acc = static_cast<U>(acc * static_cast<U>(x));
      else if (op == 2) best = std::max(best, x);
      else if (op == 3) best = std::min(best, x);
      else acc = static_cast<U>(acc + static_cast<U>(x));
    }
    return (op == 2 || op == 3) ? best : static_cast<T>(acc);
  }
}

// An NCCL-like ring: starts at rank `start`, rounds every partial result into T; avg multiplies
// each input by 1/n (rounded to T) and sums.
template <typename T>
T RingReduce(const std::vector<std::vector<T>>& in, size_t j, int op, int n, int start) {
  if constexpr (Element<T>::kFloating) {
    auto load = [&](int r) {
      double x = AsDouble(in[r][j]);
      return op == 4 ? AsDouble(Element<T>::FromDouble(x * (1.0 / n))) : x;
    };
    T acc = Element<T>::FromDouble(load(start % n));
    for (int k = 1; k < n; ++k)
      acc = Element<T>::FromDouble(Apply(op == 4 ? 0 : op, AsDouble(acc), load((start + k) % n)));
    return acc;
  } else {
    return YaliReduce(in, j, op, n);  // integer arithmetic does not depend on the order
  }
}

enum class Library { kYali, kRing };

template <typename T>
void CheckCase(CollId coll, DType dtype, int op, int n, int root, size_t requested, Library lib) {
  const CollShape shape = ShapeFor(coll, requested, sizeof(T), n);
  const uint64_t seed = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(coll) << 40) ^
                        (static_cast<uint64_t>(op) << 32) ^ (static_cast<uint64_t>(n) << 16) ^
                        static_cast<uint64_t>(root);
  std::vector<std::vector<T>> in(n, std::vector<T>(shape.send_count));
  for (int r = 0; r < n; ++r)
    for (size_t j = 0; j < shape.send_count; ++j) in[r][j] = StoredInput<T>(seed, r, j, op, n);
  const size_t block = shape.count;
  const std::string label = std::string(CollName(coll)) + " " + DTypeName(dtype) + " op " +
                            std::to_string(op) + " n " + std::to_string(n) + " root " +
                            std::to_string(root) + " " + std::to_string(requested) + " B " +
                            (lib == Library::kYali ? "yali" : "ring");
  for (int rank = 0; rank < n; ++rank) {
    const size_t elements = OutputCount(coll, shape, rank, root, n);
    auto reduce = [&](size_t j) {
      return lib == Library::kYali ? YaliReduce(in, j, op, n)
                                   : RingReduce(in, j, op, n, static_cast<int>(j % n) + rank);
    };
    std::vector<T> out(elements);
    for (size_t i = 0; i < elements; ++i) {
      switch (coll) {
        case CollId::kAllReduce:
        case CollId::kReduce:
        case CollId::kRsAg: out[i] = reduce(i); break;
        case CollId::kReduceScatter: out[i] = reduce(rank * block + i); break;
        case CollId::kAllGather:
        case CollId::kGather: out[i] = in[i / block][i % block]; break;
        case CollId::kBroadcast: out[i] = in[root][i]; break;
        case CollId::kScatter: out[i] = in[root][rank * block + i]; break;
        case CollId::kAlltoAll: out[i] = in[i / block][rank * block + i % block]; break;
        // nccl-tests' sendrecv: what rank-1 sent, its whole input.
        case CollId::kSendRecv: out[i] = in[(rank - 1 + n) % n][i]; break;
      }
    }
    DataSpec spec;
    spec.coll = coll;
    spec.dtype = dtype;
    spec.op = static_cast<RedOp>(op);
    spec.count = shape.count;
    spec.seed = seed;
    spec.rank = rank;
    spec.nranks = n;
    spec.root = root;
    // The backends' AccumulationEpsilon.
    spec.accumulation_eps =
        lib == Library::kRing
            ? DTypeEpsilon(dtype)
            : (dtype == DType::kDouble ? DTypeEpsilon(dtype)
                                       : (IsFloating(dtype) ? DTypeEpsilon(DType::kFloat) : 0.0));
    const CheckArgs args = CheckArgsFor(spec);
    auto count_wrong = [&](const std::vector<T>& values) {
      size_t wrong = 0;
      for (size_t i = 0; i < values.size(); ++i) wrong += !OutputElementOk<T>(values[i], i, args);
      return wrong;
    };
    const size_t wrong = count_wrong(out);
    Expect(wrong == 0, label + " rank " + std::to_string(rank) + ": " + std::to_string(wrong) +
                           " of " + std::to_string(elements) + " correct elements flagged");
    if (lib != Library::kYali || elements == 0) continue;

    // Never written: the poison (all-ones bytes) is NaN for floats, and no input of a data-moving
    // collective; a reduction of integers may produce it by chance.
    std::vector<T> poisoned(elements);
    std::memset(static_cast<void*>(poisoned.data()), 0xff, elements * sizeof(T));
    const bool moves = !CollReduces(coll);
    const size_t unwritten = count_wrong(poisoned);
    Expect(moves || Element<T>::kFloating ? unwritten == elements : unwritten >= elements * 9 / 10,
           label + ": poison seen as wrong in " + std::to_string(unwritten) + " of " +
               std::to_string(elements));

    // Data from the wrong rank.
    if (moves) {
      std::vector<T> bad(elements);
      for (size_t i = 0; i < elements; ++i) {
        const int other = (root + 1) % n;
        switch (coll) {
          case CollId::kBroadcast: bad[i] = in[other][i]; break;
          case CollId::kScatter: bad[i] = in[other][rank * block + i]; break;
          case CollId::kAlltoAll: bad[i] = in[(i / block + 1) % n][rank * block + i % block]; break;
          case CollId::kSendRecv: bad[i] = in[rank][i]; break;  // its own input, not rank-1's
          default: bad[i] = in[(i / block + 1) % n][i % block]; break;
        }
      }
      // Random 1-byte values match by chance; fp8 values in [-1, 1) more often.
      const size_t flagged = count_wrong(bad);
      Expect(flagged >= elements / 2, label + ": data from the wrong rank flagged in " +
                                          std::to_string(flagged) + " of " +
                                          std::to_string(elements));
      // The ring reversed (received from rank+1, which is rank-1 only at n = 2).
      if (coll == CollId::kSendRecv && n > 2) {
        for (size_t i = 0; i < elements; ++i) bad[i] = in[(rank + 1) % n][i];
        const size_t reversed = count_wrong(bad);
        Expect(reversed >= elements / 2, label + ": data from rank+1 flagged in " +
                                             std::to_string(reversed) + " of " +
                                             std::to_string(elements));
      }
    }

    // A sum that lost one rank: flagged for most elements, fp8 included (the tolerance is
    // relative to the result, not to the sum of magnitudes).
    if constexpr (Element<T>::kFloating) {
      if (!moves && op == 0 && n >= 2) {
        std::vector<T> missing(elements);
        for (size_t i = 0; i < elements; ++i) {
          const size_t j = i + (coll == CollId::kReduceScatter ? rank * block : 0);
          double partial = 0;
          for (int r = 0; r + 1 < n; ++r) partial += AsDouble(in[r][j]);
          missing[i] = Element<T>::FromDouble(partial);
        }
        const size_t flagged = count_wrong(missing);
        // E5M2 has 2 mantissa bits: one value in [-1, 1) of 8 is often within its spacing.
        const size_t needed = dtype == DType::kF8e5m2 ? elements / 3 : elements * 2 / 3;
        Expect(flagged >= needed, label + ": a missing rank flagged in " + std::to_string(flagged) +
                                      " of " + std::to_string(elements));
      }
    }
  }
}

void TestEveryCollective() {
  for (CollId coll : AllCollectives())
    for (DType dtype : AllDTypes())
      for (int op = 0; op < 5; ++op) {
        if (!CollReduces(coll) && op > 0) continue;  // data movement runs once, as sum's data
        if (op == 4 && !IsFloating(dtype)) continue;  // avg: floating types only
        for (int n : {2, 3, 8}) {
          const std::vector<int> roots =
              CollHasRoot(coll) ? std::vector<int>{0, n - 1} : std::vector<int>{0};
          for (int root : roots)
            for (size_t bytes : {size_t(0), size_t(1000), size_t(4096)})
              for (Library lib : {Library::kYali, Library::kRing})
                DispatchType(dtype, [&](auto* tag) {
                  using T = std::remove_pointer_t<decltype(tag)>;
                  CheckCase<T>(coll, dtype, op, n, root, bytes, lib);
                });
        }
      }
}

void TestInputRanges() {
  // Integer prod: odd inputs, so a product over many ranks is never 0 (mod 2^8).
  size_t zeros = 0;
  for (size_t j = 0; j < 4096; ++j) {
    uint8_t product = 1;
    for (int r = 0; r < 8; ++r)
      product = static_cast<uint8_t>(product * static_cast<uint8_t>(StoredInput<int8_t>(7, r, j, 1, 8)));
    zeros += product == 0;
  }
  Expect(zeros == 0, "int8 prod over 8 ranks: " + std::to_string(zeros) + " zeros");
  // No integer input is the poison pattern.
  size_t all_ones = 0;
  for (size_t j = 0; j < 100000; ++j)
    all_ones += StoredInput<uint8_t>(11, 0, j, 0, 2) == 0xff;
  Expect(all_ones == 0, "uint8 inputs equal to 0xff: " + std::to_string(all_ones));
  // fp8 prod stays in range (no saturation at E4M3's 448, no subnormals) at any world size.
  double low = 1e300, high = 0;
  for (int n : {2, 4, 8, 64, 512})
    for (size_t j = 0; j < 2048; ++j) {
      double product = 1;
      for (int r = 0; r < n; ++r) product *= AsDouble(StoredInput<__nv_fp8_e4m3>(5, r, j, 1, n));
      low = std::min(low, std::fabs(product));
      high = std::max(high, std::fabs(product));
    }
  Expect(low > 1.0 / 64 && high < 448, "fp8 E4M3 products within [2^-6, 448]: [" +
                                           std::to_string(low) + ", " + std::to_string(high) + "]");
  // fp8 sums over 8 ranks of [-1, 1) values are far from saturation too.
  Expect(AsDouble(Element<__nv_fp8_e4m3>::FromDouble(1000.0)) == 448.0,
         "fp8 E4M3 saturates to 448 (as YALI's __NV_SATFINITE)");
}

}  // namespace

int main() {
  TestInputRanges();
  TestEveryCollective();
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
