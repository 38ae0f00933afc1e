#include "benchmarks/serving/client_loop.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace tessera::bench {
namespace {

// A fake server: each request "streams" `output_len` tokens, 1 ms apart.
RequestRecord FakeSend(const RequestSpec& spec, int index, const std::function<double()>& now,
                       std::atomic<int>* in_flight, std::atomic<int>* peak) {
  const int current = ++*in_flight;
  int seen = peak->load();
  while (current > seen && !peak->compare_exchange_weak(seen, current)) {}
  RequestRecord r;
  r.send_time = now();
  r.expected_output_tokens = spec.output_len;
  for (int i = 0; i < spec.output_len; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double t = now();
    if (r.first_token_time < 0) r.first_token_time = t;
    r.chunk_times.push_back(t);
    r.chunk_tokens.push_back(1);
    ++r.output_tokens;
  }
  r.end_time = now();
  r.ok = index % 5 != 4;  // Every fifth request fails.
  r.status_code = r.ok ? "OK" : "RESOURCE_EXHAUSTED";
  --*in_flight;
  return r;
}

TEST(ClientLoopTest, RespectsTheConcurrencyCapAndKeepsOrder) {
  std::vector<RequestSpec> specs(20);
  for (size_t i = 0; i < specs.size(); ++i) specs[i].output_len = 1 + static_cast<int>(i % 3);
  std::atomic<int> in_flight{0}, peak{0};
  int last_done = 0, last_failed = 0;
  LoopOptions o;
  o.max_concurrency = 3;
  o.on_done = [&](int done, int failed) {
    EXPECT_EQ(done, last_done + 1);
    last_done = done;
    last_failed = failed;
  };
  const std::vector<RequestRecord> records = RunRequests(specs, o, [&](const RequestSpec& s, int i, const auto& now) {
    return FakeSend(s, i, now, &in_flight, &peak);
  });
  ASSERT_EQ(records.size(), 20u);
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(last_done, 20);
  EXPECT_EQ(last_failed, 4);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].output_tokens, specs[i].output_len) << i;  // Record i is request i.
  }
  const Metrics m = ComputeMetrics(records, Slo{});
  EXPECT_EQ(m.completed, 16);
  EXPECT_EQ(m.failures_by_code.at("RESOURCE_EXHAUSTED"), 4);
}

TEST(ClientLoopTest, WithoutACapAllRequestsRunTogether) {
  std::vector<RequestSpec> specs(8);
  for (auto& s : specs) s.output_len = 30;
  std::atomic<int> in_flight{0}, peak{0};
  RunRequests(specs, LoopOptions{}, [&](const RequestSpec& s, int i, const auto& now) {
    return FakeSend(s, i, now, &in_flight, &peak);
  });
  // 30 ms per request: the eight overlap unless the loop serialises them.
  EXPECT_GT(peak.load(), 1);
}

TEST(ClientLoopTest, SendsNoEarlierThanTheArrivalTimes) {
  std::vector<RequestSpec> specs(10);
  LoopOptions o;
  o.arrivals = {.rate = 200, .burstiness = 1, .seed = 9};
  const std::vector<double> arrivals = ArrivalTimes(10, o.arrivals);
  std::atomic<int> in_flight{0}, peak{0};
  const std::vector<RequestRecord> records = RunRequests(specs, o, [&](const RequestSpec& s, int i, const auto& now) {
    return FakeSend(s, i, now, &in_flight, &peak);
  });
  for (size_t i = 0; i < records.size(); ++i) EXPECT_GE(records[i].send_time, arrivals[i]) << i;
}

}  // namespace
}  // namespace tessera::bench
