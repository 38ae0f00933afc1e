// Observability end to end: a real Prometheus server scrapes a real cluster, and the
// counters it reports match the requests the test sent; /readyz follows worker health.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/child_process.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

class Prometheus {
 public:
  // Starts a Prometheus server scraping `targets` every second.
  static std::unique_ptr<Prometheus> Start(const std::vector<int>& target_ports) {
    auto p = std::unique_ptr<Prometheus>(new Prometheus());
    p->dir_ = ScratchDir("prometheus");
    std::string targets;
    for (int port : target_ports) absl::StrAppend(&targets, targets.empty() ? "" : ", ", "\"127.0.0.1:", port, "\"");
    std::ofstream(p->dir_ / "prometheus.yml")
        << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: tessera-coordinator\n    static_configs:\n"
        << "      - targets: [" << targets << "]\n";
    p->port_ = PickFreePort();
    p->child_ = std::make_unique<Child>(
        std::vector<std::string>{"/usr/bin/prometheus", absl::StrCat("--config.file=", (p->dir_ / "prometheus.yml").string()),
                                 absl::StrCat("--storage.tsdb.path=", (p->dir_ / "data").string()),
                                 absl::StrCat("--web.listen-address=127.0.0.1:", p->port_)},
        p->dir_ / "prometheus.log");
    if (!WaitFor([&] { return HttpGet(p->port_, "/-/ready").status == 200; }, std::chrono::seconds(60))) {
      ADD_FAILURE() << "Prometheus did not become ready on port " << p->port_ << ":\n" << p->child_->Log();
      return nullptr;
    }
    return p;
  }

  // The value of an instant query that returns one sample; nullopt when it returns none.
  std::optional<double> Query(const std::string& promql) {
    const HttpResponse r = HttpGet(port_, "/api/v1/query?query=" + UrlEncode(promql));
    if (r.status != 200) return std::nullopt;
    const auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("data") || !j["data"].contains("result")) return std::nullopt;
    const auto& result = j["data"]["result"];
    if (!result.is_array() || result.size() != 1) return std::nullopt;
    const auto& value = result[0]["value"];
    if (!value.is_array() || value.size() != 2 || !value[1].is_string()) return std::nullopt;
    return std::stod(value[1].get<std::string>());
  }

  std::string Log() const { return child_->Log(); }

 private:
  Prometheus() = default;
  std::filesystem::path dir_;
  int port_ = 0;
  std::unique_ptr<Child> child_;
};

TEST(MetricsTest, PrometheusCountsMatchTheRequestsSent) {
  TESSERA_REQUIRE_STORIES_MODEL();
  if (!std::filesystem::exists("/usr/bin/prometheus")) GTEST_SKIP() << "no /usr/bin/prometheus (Debian package prometheus)";
  const int metrics_port = PickFreePort();
  ClusterOptions options;
  options.coordinator_flags = {"--metrics-port", absl::StrCat(metrics_port), "--log-format", "json"};
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  auto prometheus = Prometheus::Start({metrics_port});
  ASSERT_NE(prometheus, nullptr);

  // Known prompts and lengths; ignore_eos makes every request generate exactly max_new_tokens.
  const std::vector<std::pair<std::vector<int32_t>, int>> requests = {
      {{1, 400, 401}, 3}, {{1, 12, 13, 14, 15}, 5}, {{1, 20}, 2}, {{1, 30, 31, 32}, 6}};
  int prompt_tokens = 0, generation_tokens = 0, inter_token_gaps = 0;
  for (const auto& [ids, max_new] : requests) {
    UnaryResult r = RunUnary(cluster->api(), GreedyIds(ids, max_new));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster->Logs();
    ASSERT_EQ(r.response.usage().completion_tokens(), static_cast<uint32_t>(max_new));
    prompt_tokens += static_cast<int>(r.response.usage().prompt_tokens());
    generation_tokens += max_new;
    inter_token_gaps += max_new - 1;
  }
  // One request the API refuses: no prompt at all.
  UnaryResult bad = RunUnary(cluster->api(), GreedyIds({}, 4));
  ASSERT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const double sent_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  // Wait for a scrape taken after the last answer; every metric of a request is recorded
  // before its answer is sent.
  ASSERT_TRUE(WaitFor([&] {
    auto t = prometheus->Query("max(timestamp(tessera_requests_total))");
    return t.has_value() && *t > sent_at + 0.01;
  }, std::chrono::seconds(60))) << prometheus->Log();

  const int n = static_cast<int>(requests.size());
  auto expect = [&](const std::string& promql, double want) {
    std::optional<double> got = prometheus->Query(promql);
    ASSERT_TRUE(got.has_value()) << promql << " returned no single sample";
    EXPECT_DOUBLE_EQ(*got, want) << promql;
  };
  expect("sum(tessera_requests_total)", n);
  expect("sum(tessera_requests_total{finish_reason=\"length\"})", n);
  expect("sum(tessera_prompt_tokens_total)", prompt_tokens);
  expect("sum(tessera_generation_tokens_total)", generation_tokens);
  expect("sum(tessera_rejected_requests_total{reason=\"invalid_argument\"})", 1);
  for (const char* h : {"tessera_time_to_first_token_seconds", "tessera_e2e_request_latency_seconds",
                        "tessera_request_queue_time_seconds", "tessera_request_prefill_time_seconds",
                        "tessera_request_decode_time_seconds", "tessera_request_prompt_tokens",
                        "tessera_request_generation_tokens", "tessera_time_per_output_token_seconds"}) {
    expect(absl::StrCat("sum(", h, "_count)"), n);
  }
  expect("sum(tessera_request_prompt_tokens_sum)", prompt_tokens);
  expect("sum(tessera_request_generation_tokens_sum)", generation_tokens);
  expect("sum(tessera_inter_token_latency_seconds_count)", inter_token_gaps);
  expect("sum(tessera_groups_complete)", 1);
  expect("sum(tessera_workers_live)", 1);
  expect("sum(tessera_num_requests_running)", 0);
  expect("tessera_config_info{tp=\"1\",replicas=\"1\",block_size=\"16\",model=\"stories260K\"}", 1);
  // Every token computed went through some step, the warm-up's included.
  std::optional<double> step_tokens = prometheus->Query("sum(tessera_tokens_per_step_sum)");
  ASSERT_TRUE(step_tokens.has_value());
  EXPECT_GE(*step_tokens, prompt_tokens + generation_tokens - n);

  // The request log: one JSON line per finished request.
  std::ifstream log(cluster->coordinator().log);
  std::string line;
  int logged = 0;
  while (std::getline(log, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || j.value("msg", "") != "request finished") continue;
    ++logged;
    EXPECT_EQ(j.value("finish_reason", ""), "length") << line;
    EXPECT_TRUE(j.contains("ttft_seconds") && j.contains("duration_seconds")) << line;
  }
  EXPECT_EQ(logged, n);
}

// The coordinator's cluster port, from its startup line.
int ClusterPortFromLog(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  if (std::regex_search(text, m, std::regex("workers register on [0-9.]+:([0-9]+)"))) return std::stoi(m[1]);
  return 0;
}

TEST(MetricsTest, ReadinessFollowsWorkerHealth) {
  TESSERA_REQUIRE_STORIES_MODEL();
  constexpr int kHeartbeatMs = 300;
  const int metrics_port = PickFreePort();
  ClusterOptions options;
  options.coordinator_flags = {"--metrics-port", absl::StrCat(metrics_port), "--heartbeat-ms",
                               absl::StrCat(kHeartbeatMs)};
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  EXPECT_EQ(HttpGet(metrics_port, "/healthz").status, 200);
  ASSERT_EQ(HttpGet(metrics_port, "/readyz").status, 200) << cluster->Logs();

  ASSERT_EQ(cluster->worker_pids().size(), 1u);
  cluster->Signal(cluster->worker_pids()[0], SIGKILL);
  // The idle replica is probed every heartbeat; the generous bound only keeps a broken
  // build from hanging the test.
  EXPECT_TRUE(WaitFor([&] { return HttpGet(metrics_port, "/readyz").status == 503; },
                      std::chrono::milliseconds(20 * kHeartbeatMs)))
      << cluster->Logs();
  EXPECT_TRUE(cluster->WaitForHealth(grpc::health::v1::HealthCheckResponse::NOT_SERVING, std::chrono::seconds(5)));
  EXPECT_EQ(HttpGet(metrics_port, "/healthz").status, 200) << "the coordinator itself is still alive";

  // A replacement worker registers and the group forms again.
  const int cluster_port = ClusterPortFromLog(cluster->coordinator().log);
  ASSERT_NE(cluster_port, 0) << cluster->Logs();
  const int worker_metrics_port = PickFreePort();
  Child worker({(BinaryDir() / "tessera-worker").string(), "--coordinator", absl::StrCat("127.0.0.1:", cluster_port),
                "--threads", "1", "--metrics-port", absl::StrCat(worker_metrics_port), "--insecure"},
               ScratchDir("replacement") / "worker.log");
  EXPECT_TRUE(WaitFor([&] { return HttpGet(metrics_port, "/readyz").status == 200; }, std::chrono::seconds(120)))
      << cluster->Logs() << worker.Log();
  EXPECT_TRUE(cluster->WaitForHealth(grpc::health::v1::HealthCheckResponse::SERVING, std::chrono::seconds(5)));
  EXPECT_EQ(HttpGet(worker_metrics_port, "/healthz").status, 200);

  UnaryResult r = RunUnary(cluster->api(), GreedyIds({1, 50, 51}, 3));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << worker.Log();

  // The new worker ran the warm-up (prefill) and the request's decode steps.
  const std::string metrics = HttpGet(worker_metrics_port, "/metrics").body;
  auto value = [&](const std::string& series) -> double {
    std::smatch m;
    const std::regex re("\\n" + std::regex_replace(series, std::regex(R"([{}"])"), R"(\$&)") + " ([0-9.e+-]+)");
    return std::regex_search(metrics, m, re) ? std::stod(m[1]) : -1;
  };
  EXPECT_GE(value("tessera_worker_step_duration_seconds_count{phase=\"prefill\"}"), 2) << metrics;
  EXPECT_GE(value("tessera_worker_step_duration_seconds_count{phase=\"decode\"}"), 2) << metrics;
  EXPECT_GT(value("tessera_worker_weight_bytes"), 0) << metrics;
  EXPECT_GT(value("tessera_worker_kv_cache_bytes"), 0) << metrics;
  // The CPU backend has no graphs: every forward pass runs eagerly, none replays.
  EXPECT_GE(value("tessera_worker_forward_passes_total{graph=\"eager\",step=\"decode\"}"), 2)
      << metrics;
  EXPECT_EQ(value("tessera_worker_forward_passes_total{graph=\"replayed\",step=\"decode\"}"), -1)
      << metrics;
  EXPECT_GT(value("tessera_process_cpu_seconds_total"), 0) << metrics;
}

}  // namespace
}  // namespace tessera::testing
