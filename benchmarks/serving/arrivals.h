#ifndef TESSERA_BENCHMARKS_SERVING_ARRIVALS_H_
#define TESSERA_BENCHMARKS_SERVING_ARRIVALS_H_

#include <cstdint>
#include <random>
#include <vector>

namespace tessera::bench {

// When requests are sent. Inter-arrival times are gamma distributed with shape
// `burstiness` and mean 1 / rate: burstiness 1 is a Poisson process (exponential gaps),
// below 1 burstier, above 1 more regular (the variance is 1 / (rate^2 * burstiness)).
// A rate <= 0 or infinite sends every request at once.
struct ArrivalOptions {
  double rate = 0;        // Requests per second.
  double burstiness = 1;  // Gamma shape, > 0.
  uint64_t seed = 0;
};

class ArrivalProcess {
 public:
  explicit ArrivalProcess(const ArrivalOptions& options);

  bool all_at_once() const { return all_at_once_; }
  // Seconds until the next request (0 when all at once).
  double NextInterval();

 private:
  bool all_at_once_;
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gamma_;
};

// Send times, seconds after the start, of `n` requests: the first at 0, then cumulative
// intervals. The same options give the same times.
std::vector<double> ArrivalTimes(int n, const ArrivalOptions& options);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_ARRIVALS_H_
