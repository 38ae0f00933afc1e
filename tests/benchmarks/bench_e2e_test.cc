// tessera-bench and tessera-roofline, run as a user runs them: the load generator against a
// real local cluster serving stories260K, the roofline report on the same model.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

Json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string Bin(const std::string& name) { return (testing::BinaryDir() / name).string(); }

// `count` samples; with `max_count`, anywhere in [count, max_count].
void ExpectSaneSummary(const Json& s, const std::string& name, int64_t count,
                       int64_t max_count = -1) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(s.is_object());
  if (max_count < 0) {
    EXPECT_EQ(s["count"], count);
  } else {
    EXPECT_GE(s["count"].get<int64_t>(), count);
    EXPECT_LE(s["count"].get<int64_t>(), max_count);
  }
  for (const char* key : {"mean", "p50", "p95", "p99", "min", "max"}) {
    ASSERT_TRUE(s[key].is_number()) << key;
    EXPECT_GT(s[key].get<double>(), 0) << key;
  }
  EXPECT_LE(s["min"].get<double>(), s["p50"].get<double>());
  EXPECT_LE(s["p50"].get<double>(), s["p95"].get<double>());
  EXPECT_LE(s["p95"].get<double>(), s["p99"].get<double>());
  EXPECT_LE(s["p99"].get<double>(), s["max"].get<double>());
}

class BenchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    dir_ = testing::ScratchDir("bench");
    testing::ClusterOptions o;
    o.model_dir = testing::StoriesModelDir();
    o.log_dir = dir_ / "logs";
    auto cluster = testing::Cluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  std::filesystem::path dir_;
  std::unique_ptr<testing::Cluster> cluster_;
};

TEST_F(BenchE2eTest, FixedWorkloadWritesACompleteResult) {
  const auto out = dir_ / "fixed.json";
  const auto r = testing::RunCommand(Bin("tessera-bench") + " --address " + cluster_->address() +
                                     " --num-requests 8 --input-len 12 --output-len 6 --warmup 2"
                                     " --max-concurrency 4 --seed 3 --slo-ttft-ms 60000"
                                     " --slo-tpot-ms 60000 --no-progress --save-requests --label e2e"
                                     " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output << cluster_->Logs();
  EXPECT_NE(r.output.find("tessera-bench result"), std::string::npos) << r.output;
  const Json j = ReadJson(out);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["schema"], "tessera-bench/v1");

  const Json& c = j["conditions"];
  EXPECT_EQ(c["model"], "stories260K") << c.dump();
  for (const char* key : {"dtype", "date", "address", "workload", "arrivals"}) {
    ASSERT_TRUE(c[key].is_string()) << key;
    EXPECT_FALSE(c[key].get<std::string>().empty()) << key;
  }
  EXPECT_EQ(c["tp"], 1);
  EXPECT_EQ(c["replicas"], 1);
  EXPECT_EQ(c["workload"], "fixed");
  EXPECT_EQ(c["input_len"], 12);
  EXPECT_EQ(c["output_len"], 6);
  EXPECT_EQ(c["num_requests"], 8);
  EXPECT_EQ(c["warmup_requests"], 2);
  EXPECT_EQ(c["max_concurrency"], 4);
  EXPECT_EQ(c["request_rate"], 0);
  EXPECT_EQ(c["arrivals"], "all-at-once");
  EXPECT_EQ(c["label"], "e2e");
  EXPECT_GT(c["block_size"].get<int>(), 0);
  EXPECT_TRUE(c["machine"]["cpu_model"].is_string());
  EXPECT_GT(c["machine"]["logical_cores"].get<int>(), 0);
  EXPECT_GT(c["machine"]["memory_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(c["machine"]["gpus"].is_array());
  EXPECT_FALSE(c["build"]["build_type"].get<std::string>().empty());
  EXPECT_FALSE(c["build"]["version"].get<std::string>().empty());

  const Json& m = j["metrics"];
  EXPECT_EQ(m["completed"], 8) << m.dump();
  EXPECT_EQ(m["failed"], 0);
  EXPECT_TRUE(m["failures_by_code"].empty());
  EXPECT_EQ(m["total_output_tokens"], 8 * 6);
  EXPECT_EQ(m["total_input_tokens"], 8 * 12);
  EXPECT_EQ(m["output_len_mismatches"], 0);
  EXPECT_EQ(m["good_requests"], 8);
  EXPECT_GT(m["duration_s"].get<double>(), 0);
  for (const char* key : {"request_throughput_rps", "output_token_throughput_tps",
                          "total_token_throughput_tps", "goodput_rps"}) {
    EXPECT_GT(m[key].get<double>(), 0) << key;
  }
  EXPECT_NEAR(m["output_token_throughput_tps"].get<double>(),
              48 / m["duration_s"].get<double>(), 1e-6);
  ExpectSaneSummary(m["ttft_ms"], "ttft", 8);
  ExpectSaneSummary(m["tpot_ms"], "tpot", 8);
  ExpectSaneSummary(m["e2e_ms"], "e2e", 8);
  // ITL is the gap between stream messages. The server sends one token per message while
  // the client keeps up, and coalesces what queued behind a slow write into one message,
  // so 6 tokens make at most 5 gaps per request (and, all in one message, none).
  ExpectSaneSummary(m["itl_ms"], "itl", 1, 8 * 5);
  EXPECT_LT(m["ttft_ms"]["p50"].get<double>(), m["e2e_ms"]["p50"].get<double>());

  ASSERT_EQ(j["requests"].size(), 8u);
  for (const Json& req : j["requests"]) {
    EXPECT_EQ(req["status"], "OK");
    EXPECT_EQ(req["output_tokens"], 6);
    EXPECT_EQ(req["prompt_tokens"], 12);
  }
}

TEST_F(BenchE2eTest, JsonlWorkloadAtAPoissonRate) {
  const auto dataset = dir_ / "prompts.jsonl";
  std::ofstream(dataset) << "{\"prompt\": \"Once upon a time\", \"output_len\": 4}\n"
                         << "{\"prompt\": [1, 20, 30, 40, 50], \"output_len\": 3}\n";
  const auto out = dir_ / "jsonl.json";
  const auto r = testing::RunCommand(Bin("tessera-bench") + " --address " + cluster_->address() +
                                     " --workload jsonl --dataset " + dataset.string() +
                                     " --num-requests 6 --warmup 0 --request-rate 50 --burstiness 1"
                                     " --no-progress --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output << cluster_->Logs();
  const Json j = ReadJson(out);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["conditions"]["arrivals"], "poisson");
  EXPECT_EQ(j["conditions"]["request_rate"], 50);
  EXPECT_EQ(j["conditions"]["dataset"], dataset.string());
  EXPECT_EQ(j["metrics"]["completed"], 6);
  EXPECT_EQ(j["metrics"]["failed"], 0);
  // Lines cycle: 3 x (4 + 3) output tokens.
  EXPECT_EQ(j["metrics"]["total_output_tokens"], 21);
}

TEST(BenchCliTest, RejectsBadFlagsAndPrintsHelp) {
  auto help = testing::RunCommand(Bin("tessera-bench") + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--max-concurrency"), std::string::npos);
  EXPECT_NE(help.output.find("--slo-ttft-ms"), std::string::npos);
  EXPECT_NE(testing::RunCommand(Bin("tessera-bench") + " --burstiness 0 2>&1").exit_code, 0);
  // Nothing listens there: a clear error after the wait, not a hang.
  const auto none = testing::RunCommand(Bin("tessera-bench") +
                                        " --address 127.0.0.1:1 --wait-ready-s 1 2>&1");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("SERVING"), std::string::npos) << none.output;
}

TEST(RooflineE2eTest, ReportsAFractionForStories) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = testing::ScratchDir("roofline");
  const auto out = dir / "roofline.json";
  const auto r = testing::RunCommand(Bin("tessera-roofline") + " --model " +
                                     testing::StoriesModelDir().string() +
                                     " --batch 2 --tokens 64 --steps 3 --warmup-steps 1 --threads 1"
                                     " --bandwidth-mib 64 --bandwidth-reps 2 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("roofline fraction"), std::string::npos) << r.output;
  const Json j = ReadJson(out);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["conditions"]["batch"], 2);
  EXPECT_EQ(j["conditions"]["context_tokens"], 64);
  EXPECT_GT(j["bandwidth"]["best_bytes_per_second"].get<double>(), 0);
  // stories260K: 5 layers, 4 KV heads of 8 dims; K and V in float for 2 x 64 tokens.
  EXPECT_EQ(j["traffic_bytes"]["kv_read"], 2 * 64 * 5 * 2 * 4 * 8 * 4);
  EXPECT_GT(j["theoretical_step_s"].get<double>(), 0);
  EXPECT_EQ(j["measured_step_s"]["samples"].size(), 3u);
  EXPECT_GT(j["roofline_fraction"].get<double>(), 0);
  EXPECT_FALSE(j["breakdown"].empty());
}

}  // namespace
}  // namespace tessera
