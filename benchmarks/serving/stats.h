#ifndef TESSERA_BENCHMARKS_SERVING_STATS_H_
#define TESSERA_BENCHMARKS_SERVING_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::bench {

// The p-th percentile (p in [0, 100]) of `samples` by linear interpolation between the
// closest ranks: sort, take rank r = p / 100 * (n - 1), and interpolate between
// sorted[floor(r)] and sorted[ceil(r)]. This is numpy's default ("linear") method, so
// results compare directly with vLLM's benchmark_serving. 0 for an empty sample.
double Percentile(std::vector<double> samples, double p);

// Mean, median, tail percentiles, min and max of one metric (all zero when count == 0).
struct Summary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p95 = 0, p99 = 0, min = 0, max = 0;
};
Summary Summarize(const std::vector<double>& samples);

// What the client saw of one request. Times are seconds since the benchmark's start.
struct RequestRecord {
  bool ok = false;
  std::string status_code;       // gRPC status code name ("OK", "UNAVAILABLE", ...).
  std::string error_message;
  double send_time = 0;
  double first_token_time = -1;  // -1: no token arrived.
  double end_time = 0;
  // Arrival time of every stream message that carried tokens, and how many it carried.
  std::vector<double> chunk_times;
  std::vector<int> chunk_tokens;
  int64_t prompt_tokens = 0;     // From the server's usage (falls back to the sent length).
  int64_t output_tokens = 0;     // Tokens received.
  int64_t expected_output_tokens = 0;

  double Ttft() const { return first_token_time - send_time; }
  double E2e() const { return end_time - send_time; }
};

// Time per output token after the first: (e2e - ttft) / (output_tokens - 1). Undefined
// (returns -1) for fewer than two output tokens.
double Tpot(const RequestRecord& r);

// Inter-token latencies of one request: the gap between consecutive stream messages that
// carried tokens. A message carrying k > 1 tokens (several steps in one delta) contributes
// one gap, as in vLLM's benchmark, so ITL is per delivered chunk.
std::vector<double> InterTokenLatencies(const RequestRecord& r);

// Service-level objectives; a value <= 0 disables that objective.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

// Whether a request counts toward goodput: it succeeded, and met every enabled SLO. A
// request with one output token has no TPOT and cannot violate the TPOT objective.
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

// The aggregate over the measured requests (warm-up excluded).
struct Metrics {
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> failures_by_code;
  double duration_s = 0;  // First send to last completion.
  int64_t total_input_tokens = 0;   // Over completed requests.
  int64_t total_output_tokens = 0;  // Over completed requests.
  // Completed requests that returned another number of tokens than they asked for.
  int64_t output_len_mismatches = 0;
  double request_throughput = 0;        // Completed requests / s.
  double output_token_throughput = 0;   // Output tokens / s.
  double total_token_throughput = 0;    // (Input + output tokens) / s.
  int64_t good_requests = 0;
  double goodput = 0;                   // Requests meeting the SLO / s.
  // Milliseconds, over completed requests.
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
};
Metrics ComputeMetrics(const std::vector<RequestRecord>& records, const Slo& slo);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_STATS_H_
