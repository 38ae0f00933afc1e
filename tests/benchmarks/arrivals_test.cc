#include "benchmarks/serving/arrivals.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tessera::bench {
namespace {

struct Moments {
  double mean = 0, variance = 0;
};

Moments IntervalMoments(const ArrivalOptions& options, int n) {
  ArrivalProcess p(options);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = p.NextInterval();
    sum += x;
    sum_sq += x * x;
  }
  Moments m;
  m.mean = sum / n;
  m.variance = sum_sq / n - m.mean * m.mean;
  return m;
}

TEST(ArrivalsTest, PoissonMeanRateAndVariance) {
  // Exponential gaps with rate 4/s: mean 0.25 s, variance 1/16.
  const Moments m = IntervalMoments({.rate = 4, .burstiness = 1, .seed = 1}, 200000);
  EXPECT_NEAR(m.mean, 0.25, 0.25 * 0.02);
  EXPECT_NEAR(m.variance, 1.0 / 16, (1.0 / 16) * 0.05);
}

TEST(ArrivalsTest, GammaKeepsTheMeanAndScalesTheVariance) {
  for (double k : {0.25, 0.5, 2.0, 8.0}) {
    const Moments m = IntervalMoments({.rate = 10, .burstiness = k, .seed = 2}, 200000);
    EXPECT_NEAR(m.mean, 0.1, 0.1 * 0.03) << "burstiness " << k;
    const double variance = 1.0 / (100 * k);
    EXPECT_NEAR(m.variance, variance, variance * 0.08) << "burstiness " << k;
  }
}

TEST(ArrivalsTest, BurstinessOneHasPoissonVariance) {
  // Gamma with shape 1 is the exponential: variance = mean^2.
  const Moments m = IntervalMoments({.rate = 2, .burstiness = 1, .seed = 3}, 200000);
  EXPECT_NEAR(m.variance, m.mean * m.mean, m.mean * m.mean * 0.05);
}

TEST(ArrivalsTest, FixedSeedIsReproducible) {
  const ArrivalOptions o{.rate = 5, .burstiness = 0.7, .seed = 42};
  EXPECT_EQ(ArrivalTimes(100, o), ArrivalTimes(100, o));
  ArrivalOptions other = o;
  other.seed = 43;
  EXPECT_NE(ArrivalTimes(100, o), ArrivalTimes(100, other));
}

TEST(ArrivalsTest, TimesStartAtZeroAndIncrease) {
  const std::vector<double> t = ArrivalTimes(50, {.rate = 3, .burstiness = 1, .seed = 4});
  ASSERT_EQ(t.size(), 50u);
  EXPECT_EQ(t[0], 0);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
}

TEST(ArrivalsTest, ZeroOrInfiniteRateSendsAllAtOnce) {
  for (double rate : {0.0, static_cast<double>(INFINITY)}) {
    ArrivalProcess p({.rate = rate, .burstiness = 1, .seed = 5});
    EXPECT_TRUE(p.all_at_once());
    for (double t : ArrivalTimes(10, {.rate = rate, .burstiness = 1, .seed = 5})) EXPECT_EQ(t, 0);
  }
}

}  // namespace
}  // namespace tessera::bench
