// Summary statistics of per-iteration times. Host-only.
#ifndef YALI_PERF_SAMPLE_STATS_H_
#define YALI_PERF_SAMPLE_STATS_H_

#include <cstddef>
#include <vector>

namespace yali_perf {

struct SampleStats {
  double mean = 0, std = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0;
  size_t n = 0;
};

// Percentiles interpolate linearly between the two nearest ranks of the sorted samples (numpy's
// default); std is the sample standard deviation (n - 1 in the denominator; 0 for one sample).
SampleStats ComputeStats(std::vector<double> samples);

// The q-quantile (0 <= q <= 1) of already sorted samples, interpolated as above.
double SortedQuantile(const std::vector<double>& sorted, double q);

}  // namespace yali_perf

#endif  // YALI_PERF_SAMPLE_STATS_H_
