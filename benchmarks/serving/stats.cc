#include "benchmarks/serving/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::bench {

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (samples[hi] - samples[lo]) * (rank - static_cast<double>(lo));
}

Summary Summarize(const std::vector<double>& samples) {
  Summary s;
  if (samples.empty()) return s;
  s.count = static_cast<int64_t>(samples.size());
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(samples.size());
  s.p50 = Percentile(samples, 50);
  s.p95 = Percentile(samples, 95);
  s.p99 = Percentile(samples, 99);
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  return s;
}

double Tpot(const RequestRecord& r) {
  if (r.output_tokens < 2 || r.first_token_time < 0) return -1;
  return (r.E2e() - r.Ttft()) / static_cast<double>(r.output_tokens - 1);
}

std::vector<double> InterTokenLatencies(const RequestRecord& r) {
  std::vector<double> gaps;
  for (size_t i = 1; i < r.chunk_times.size(); ++i) {
    gaps.push_back(r.chunk_times[i] - r.chunk_times[i - 1]);
  }
  return gaps;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms > 0 && (r.first_token_time < 0 || r.Ttft() * 1e3 > slo.ttft_ms)) return false;
  if (slo.tpot_ms > 0) {
    const double tpot = Tpot(r);
    if (tpot >= 0 && tpot * 1e3 > slo.tpot_ms) return false;
  }
  return true;
}

Metrics ComputeMetrics(const std::vector<RequestRecord>& records, const Slo& slo) {
  Metrics m;
  std::vector<double> ttft, tpot, itl, e2e;
  double first_send = std::numeric_limits<double>::infinity(), last_end = 0;
  for (const RequestRecord& r : records) {
    first_send = std::min(first_send, r.send_time);
    last_end = std::max(last_end, r.end_time);
    if (!r.ok) {
      ++m.failed;
      ++m.failures_by_code[r.status_code];
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    if (r.expected_output_tokens > 0 && r.output_tokens != r.expected_output_tokens) {
      ++m.output_len_mismatches;
    }
    if (r.first_token_time >= 0) ttft.push_back(r.Ttft() * 1e3);
    if (const double t = Tpot(r); t >= 0) tpot.push_back(t * 1e3);
    for (double gap : InterTokenLatencies(r)) itl.push_back(gap * 1e3);
    e2e.push_back(r.E2e() * 1e3);
    if (MeetsSlo(r, slo)) ++m.good_requests;
  }
  if (!records.empty()) m.duration_s = std::max(0.0, last_end - first_send);
  if (m.duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / m.duration_s;
    m.output_token_throughput = static_cast<double>(m.total_output_tokens) / m.duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / m.duration_s;
    m.goodput = static_cast<double>(m.good_requests) / m.duration_s;
  }
  m.ttft_ms = Summarize(ttft);
  m.tpot_ms = Summarize(tpot);
  m.itl_ms = Summarize(itl);
  m.e2e_ms = Summarize(e2e);
  return m;
}

}  // namespace tessera::bench
