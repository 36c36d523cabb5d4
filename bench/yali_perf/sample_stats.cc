#include "sample_stats.h"

#include <algorithm>
#include <cmath>

namespace yali_perf {

double SortedQuantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  double position = q * static_cast<double>(sorted.size() - 1);
  size_t below = static_cast<size_t>(std::floor(position));
  size_t above = std::min(below + 1, sorted.size() - 1);
  double fraction = position - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

SampleStats ComputeStats(std::vector<double> samples) {
  SampleStats stats;
  stats.n = samples.size();
  if (samples.empty()) return stats;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double value : samples) sum += value;
  stats.mean = sum / static_cast<double>(samples.size());
  double squares = 0;
  for (double value : samples) squares += (value - stats.mean) * (value - stats.mean);
  stats.std = samples.size() > 1 ? std::sqrt(squares / static_cast<double>(samples.size() - 1)) : 0;
  stats.min = samples.front();
  stats.max = samples.back();
  stats.p50 = SortedQuantile(samples, 0.50);
  stats.p90 = SortedQuantile(samples, 0.90);
  stats.p95 = SortedQuantile(samples, 0.95);
  stats.p99 = SortedQuantile(samples, 0.99);
  return stats;
}

}  // namespace yali_perf
