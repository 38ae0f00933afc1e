#include "benchmarks/serving/stats.h"

#include "gtest/gtest.h"

namespace tessera::bench {
namespace {

TEST(PercentileTest, InterpolatesLinearlyBetweenClosestRanks) {
  // numpy.percentile([1, 2, 3, 4], q) with the default linear method.
  const std::vector<double> v = {4, 1, 3, 2};  // Unsorted on purpose.
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 3.85);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4.0);
}

TEST(PercentileTest, OneToHundred) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 95.05);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99.01);
}

TEST(PercentileTest, EmptyAndSingle) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 99), 7);
}

TEST(SummarizeTest, MeanMinMax) {
  const Summary s = Summarize({10, 20, 30, 40, 50});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.p50, 30);
  EXPECT_DOUBLE_EQ(s.p95, 48);
  EXPECT_DOUBLE_EQ(s.min, 10);
  EXPECT_DOUBLE_EQ(s.max, 50);
  EXPECT_EQ(Summarize({}).count, 0);
}

// A request sent at t=1 whose tokens arrive at the given times, one token each.
RequestRecord Streamed(std::vector<double> token_times, double end) {
  RequestRecord r;
  r.ok = true;
  r.status_code = "OK";
  r.send_time = 1.0;
  r.first_token_time = token_times.empty() ? -1 : token_times.front();
  r.chunk_times = token_times;
  r.chunk_tokens.assign(token_times.size(), 1);
  r.output_tokens = static_cast<int64_t>(token_times.size());
  r.expected_output_tokens = r.output_tokens;
  r.prompt_tokens = 8;
  r.end_time = end;
  return r;
}

TEST(TpotTest, IsDecodeTimeOverTokensAfterTheFirst) {
  // TTFT 0.5 s, e2e 2.0 s, 4 tokens: (2.0 - 0.5) / 3.
  const RequestRecord r = Streamed({1.5, 2.0, 2.5, 3.0}, 3.0);
  EXPECT_DOUBLE_EQ(r.Ttft(), 0.5);
  EXPECT_DOUBLE_EQ(r.E2e(), 2.0);
  EXPECT_DOUBLE_EQ(Tpot(r), 0.5);
}

TEST(TpotTest, UndefinedForOneToken) {
  EXPECT_LT(Tpot(Streamed({1.5}, 1.5)), 0);
}

TEST(InterTokenLatencyTest, GapsBetweenTokenMessages) {
  RequestRecord r = Streamed({1.5, 1.6, 1.8, 2.1}, 2.1);
  const std::vector<double> itl = InterTokenLatencies(r);
  ASSERT_EQ(itl.size(), 3u);
  EXPECT_NEAR(itl[0], 0.1, 1e-12);
  EXPECT_NEAR(itl[1], 0.2, 1e-12);
  EXPECT_NEAR(itl[2], 0.3, 1e-12);
  // A message with several tokens is one gap; TPOT still divides by every token.
  r.chunk_tokens = {1, 1, 3};
  r.chunk_times = {1.5, 1.6, 2.1};
  r.output_tokens = 5;
  EXPECT_EQ(InterTokenLatencies(r).size(), 2u);
  EXPECT_DOUBLE_EQ(Tpot(r), (2.1 - 1.0 - 0.5) / 4);
}

TEST(GoodputTest, CountsOnlyRequestsMeetingEverySlo) {
  std::vector<RequestRecord> records = {
      Streamed({1.1, 1.2, 1.3}, 1.3),   // TTFT 100 ms, TPOT 100 ms: good.
      Streamed({1.5, 1.6, 1.7}, 1.7),   // TTFT 500 ms: misses the TTFT objective.
      Streamed({1.1, 1.6, 2.1}, 2.1),   // TPOT 500 ms: misses the TPOT objective.
      Streamed({1.1}, 1.1),             // One token: no TPOT to miss.
  };
  RequestRecord failed;
  failed.ok = false;
  failed.status_code = "UNAVAILABLE";
  failed.send_time = 1.0;
  failed.end_time = 1.05;
  records.push_back(failed);
  const Slo slo{.ttft_ms = 200, .tpot_ms = 200};
  EXPECT_TRUE(MeetsSlo(records[0], slo));
  EXPECT_FALSE(MeetsSlo(records[1], slo));
  EXPECT_FALSE(MeetsSlo(records[2], slo));
  EXPECT_TRUE(MeetsSlo(records[3], slo));
  EXPECT_FALSE(MeetsSlo(records[4], slo));
  const Metrics m = ComputeMetrics(records, slo);
  EXPECT_EQ(m.good_requests, 2);
  EXPECT_EQ(m.completed, 4);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.failures_by_code.at("UNAVAILABLE"), 1);
  // Without objectives every completed request is good.
  EXPECT_EQ(ComputeMetrics(records, Slo{}).good_requests, 4);
}

TEST(ComputeMetricsTest, ThroughputOverFirstSendToLastEnd) {
  std::vector<RequestRecord> records = {Streamed({1.5, 2.0, 2.5, 3.0}, 3.0),
                                        Streamed({1.5, 2.0}, 2.0)};
  records[1].send_time = 1.5;
  records[1].first_token_time = 1.5 + 0.25;
  records[1].chunk_times = {1.75, 2.0};
  const Metrics m = ComputeMetrics(records, Slo{});
  EXPECT_DOUBLE_EQ(m.duration_s, 2.0);  // 1.0 .. 3.0
  EXPECT_EQ(m.total_output_tokens, 6);
  EXPECT_EQ(m.total_input_tokens, 16);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_token_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 11.0);
  EXPECT_EQ(m.ttft_ms.count, 2);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 375);
  EXPECT_EQ(m.tpot_ms.count, 2);
  EXPECT_EQ(m.itl_ms.count, 4);  // 3 gaps + 1 gap
  EXPECT_EQ(m.output_len_mismatches, 0);
  records[0].expected_output_tokens = 8;
  EXPECT_EQ(ComputeMetrics(records, Slo{}).output_len_mismatches, 1);
}

}  // namespace
}  // namespace tessera::bench
