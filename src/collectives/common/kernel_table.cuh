// Kernel tables: every (data type, op) instantiation of one reducing kernel, built from the type and
// op lists of vocabulary.h (no hand-counted rows). A kernel family is a struct with
//   template <typename T, RedOp kOp> static KernelFn get();
// returning its instantiation; pairs that opSupports() refuses (avg on integers) stay null.
#pragma once

#include <array>
#include <utility>

#include "collectives/common/device.cuh"
#include "collectives/registry.h"

namespace yali {

template <typename Family, int kIndex>
constexpr KernelFn kernelTableEntry() {
  constexpr DataType kType = static_cast<DataType>(kIndex / kNumRedOps);
  constexpr RedOp kOp = static_cast<RedOp>(kIndex % kNumRedOps);
  if constexpr (!opSupports(kOp, kType)) {
    return nullptr;
  } else {
    return Family::template get<typename TypeOf<kType>::T, kOp>();
  }
}

template <typename Family, int... kIndex>
constexpr std::array<KernelFn, kNumDataTypes * kNumRedOps> makeKernelTable(std::integer_sequence<int, kIndex...>) {
  return {kernelTableEntry<Family, kIndex>()...};
}

// Index: type * kNumRedOps + op.
template <typename Family>
const std::array<KernelFn, kNumDataTypes * kNumRedOps>& kernelTable() {
  static const auto table =
      makeKernelTable<Family>(std::make_integer_sequence<int, kNumDataTypes * kNumRedOps>());
  return table;
}

template <typename Family>
KernelFn lookupKernel(DataType t, RedOp op) {
  const int ti = static_cast<int>(t), oi = static_cast<int>(op);
  if (ti < 0 || ti >= kNumDataTypes || oi < 0 || oi >= kNumRedOps) return nullptr;
  return kernelTable<Family>()[ti * kNumRedOps + oi];
}

}  // namespace yali
