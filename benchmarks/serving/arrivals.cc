#include "benchmarks/serving/arrivals.h"

#include <cmath>

namespace tessera::bench {

ArrivalProcess::ArrivalProcess(const ArrivalOptions& options)
    : all_at_once_(!(options.rate > 0) || std::isinf(options.rate) || !(options.burstiness > 0)),
      rng_(options.seed),
      // Shape k and scale 1 / (rate * k) keep the mean gap at 1 / rate for every k.
      gamma_(all_at_once_ ? 1.0 : options.burstiness,
             all_at_once_ ? 1.0 : 1.0 / (options.rate * options.burstiness)) {}

double ArrivalProcess::NextInterval() { return all_at_once_ ? 0.0 : gamma_(rng_); }

std::vector<double> ArrivalTimes(int n, const ArrivalOptions& options) {
  ArrivalProcess process(options);
  std::vector<double> times;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    times.push_back(t);
    t += process.NextInterval();
  }
  return times;
}

}  // namespace tessera::bench
