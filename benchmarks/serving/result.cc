#include "benchmarks/serving/result.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

Json SummaryJson(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50}, {"p95", s.p95},
          {"p99", s.p99},     {"min", s.min},   {"max", s.max}};
}

Json ConditionsJson(const Conditions& c) {
  Json j;
  j["date"] = c.date;
  j["label"] = c.label;
  j["address"] = c.address;
  j["model"] = c.model;
  j["dtype"] = c.dtype;
  j["tp"] = c.tp;
  j["replicas"] = c.replicas;
  j["block_size"] = c.block_size;
  j["max_context"] = c.max_context;
  j["vocab_size"] = c.vocab_size;
  j["workload"] = c.workload;
  j["num_requests"] = c.num_requests;
  j["warmup_requests"] = c.warmup_requests;
  j["input_len"] = c.input_len;
  j["output_len"] = c.output_len;
  if (c.workload == "jsonl") j["dataset"] = c.dataset;
  if (c.workload == "shared-prefix") {
    j["shared_prefix"] = {{"num_prefixes", c.shared_prefix.num_prefixes},
                          {"suffixes_per_prefix", c.shared_prefix.suffixes_per_prefix},
                          {"prefix_len", c.shared_prefix.prefix_len},
                          {"suffix_len", c.shared_prefix.suffix_len}};
  }
  j["max_concurrency"] = c.max_concurrency;
  j["request_rate"] = c.request_rate;
  j["arrivals"] = c.request_rate > 0 ? (c.burstiness == 1 ? "poisson" : "gamma") : "all-at-once";
  j["burstiness"] = c.burstiness;
  j["seed"] = c.seed;
  j["temperature"] = c.temperature;
  if (!c.json_schema.empty()) j["json_schema"] = c.json_schema;
  j["slo_ttft_ms"] = c.slo.ttft_ms;
  j["slo_tpot_ms"] = c.slo.tpot_ms;
  j["machine"] = ToJson(c.machine);
  j["build"] = {{"build_type", c.build.build_type}, {"version", c.build.version}};
  return j;
}

}  // namespace

Json MetricsJson(const Metrics& m) {
  Json j;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["failures_by_code"] = Json::object();
  for (const auto& [code, count] : m.failures_by_code) j["failures_by_code"][code] = count;
  j["duration_s"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["output_len_mismatches"] = m.output_len_mismatches;
  j["request_throughput_rps"] = m.request_throughput;
  j["output_token_throughput_tps"] = m.output_token_throughput;
  j["total_token_throughput_tps"] = m.total_token_throughput;
  j["good_requests"] = m.good_requests;
  j["goodput_rps"] = m.goodput;
  j["ttft_ms"] = SummaryJson(m.ttft_ms);
  j["tpot_ms"] = SummaryJson(m.tpot_ms);
  j["itl_ms"] = SummaryJson(m.itl_ms);
  j["e2e_ms"] = SummaryJson(m.e2e_ms);
  j["definitions"] = {
      {"percentiles", "linear interpolation between closest ranks (numpy's default)"},
      {"tpot", "(e2e - ttft) / (output_tokens - 1), requests with >= 2 output tokens"},
      {"itl", "gap between consecutive stream messages that carry tokens"},
      {"latency_start", "when a sender thread sends the request (client-side queueing excluded)"},
      {"goodput", "completed requests meeting every enabled SLO, per second of duration"}};
  return j;
}

Json ResultJson(const Conditions& conditions, const Metrics& metrics,
                const std::vector<RequestRecord>* records) {
  Json j;
  j["schema"] = kResultSchema;
  j["conditions"] = ConditionsJson(conditions);
  j["metrics"] = MetricsJson(metrics);
  if (records != nullptr) {
    Json list = Json::array();
    for (const RequestRecord& r : *records) {
      list.push_back({{"ok", r.ok},
                      {"status", r.status_code},
                      {"error", r.error_message},
                      {"send_s", r.send_time},
                      {"ttft_ms", r.first_token_time >= 0 ? r.Ttft() * 1e3 : -1.0},
                      {"e2e_ms", r.E2e() * 1e3},
                      {"tpot_ms", Tpot(r) >= 0 ? Tpot(r) * 1e3 : -1.0},
                      {"prompt_tokens", r.prompt_tokens},
                      {"output_tokens", r.output_tokens}});
    }
    j["requests"] = std::move(list);
  }
  return j;
}

absl::Status WriteJsonFile(const std::filesystem::path& path, const Json& j) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path);
  out << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write result file ", path.string()));
  return absl::OkStatus();
}

std::string FormatSummary(const Conditions& c, const Metrics& m) {
  std::string s = absl::StrFormat(
      "============ tessera-bench result ============\n"
      "model %s (%s), tp %d, replicas %d; workload %s, %d requests (+%d warm-up)\n"
      "concurrency %s, rate %s\n",
      c.model, c.dtype, c.tp, c.replicas, c.workload, c.num_requests, c.warmup_requests,
      c.max_concurrency > 0 ? absl::StrCat(c.max_concurrency) : "unlimited",
      c.request_rate > 0 ? absl::StrFormat("%.3g req/s (burstiness %.3g)", c.request_rate, c.burstiness)
                         : "all at once");
  absl::StrAppendFormat(&s, "%-32s %d\n%-32s %d\n", "completed", m.completed, "failed", m.failed);
  for (const auto& [code, count] : m.failures_by_code) absl::StrAppendFormat(&s, "  %-30s %d\n", code, count);
  absl::StrAppendFormat(&s, "%-32s %.3f\n", "duration (s)", m.duration_s);
  absl::StrAppendFormat(&s, "%-32s %d / %d\n", "input / output tokens", m.total_input_tokens,
                        m.total_output_tokens);
  absl::StrAppendFormat(&s, "%-32s %.3f\n", "request throughput (req/s)", m.request_throughput);
  absl::StrAppendFormat(&s, "%-32s %.2f\n", "output token throughput (tok/s)", m.output_token_throughput);
  absl::StrAppendFormat(&s, "%-32s %.2f\n", "total token throughput (tok/s)", m.total_token_throughput);
  absl::StrAppendFormat(&s, "%-32s %.3f (%d requests)\n", "goodput (req/s)", m.goodput, m.good_requests);
  absl::StrAppendFormat(&s, "%-10s %10s %10s %10s %10s\n", "(ms)", "mean", "p50", "p95", "p99");
  for (const auto& [name, sum] : {std::pair<const char*, const Summary*>{"TTFT", &m.ttft_ms},
                                  {"TPOT", &m.tpot_ms}, {"ITL", &m.itl_ms}, {"E2E", &m.e2e_ms}}) {
    absl::StrAppendFormat(&s, "%-10s %10.2f %10.2f %10.2f %10.2f\n", name, sum->mean, sum->p50,
                          sum->p95, sum->p99);
  }
  return s;
}

}  // namespace tessera::bench
