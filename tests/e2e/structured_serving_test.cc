// Structured outputs end to end over gRPC on stories260K (a SentencePiece vocabulary):
// constrained output holds to its grammar through preemption (the worker replays the
// output into a fresh matcher) and through speculative decoding (proposals outside the
// grammar are rejected), greedy output staying exactly what it is without either; a bad
// constraint is INVALID_ARGUMENT naming the field.
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

// Lowercase words only (no capitals, digits or punctuation, which the model would
// otherwise write), long enough that every request runs well past the KV cache share.
constexpr char kWordsGrammar[] = "root ::= [a-z] [a-z ]{400,800} \".\"\n";
const std::regex kWords("[a-z][a-z ]{400,800}\\.");

v1::GenerateRequest Constrained(const std::string& prompt, int max_new_tokens) {
  v1::GenerateRequest r = GreedyText(prompt, max_new_tokens, /*ignore_eos=*/false);
  r.mutable_constraint()->set_grammar(kWordsGrammar);
  return r;
}

const std::vector<std::string>& Prompts() {
  static const auto* prompts = new std::vector<std::string>{
      "Once upon a time, there was a little girl named Lily.",
      "Tom and his dog went to the park. They saw a big tree.",
      "The sun was shining. Anna wanted to play outside with her ball.",
      "One day, a cat found a box. The cat was very curious.",
      "Sam had a red car. He liked to drive it fast.",
      "Mia and Ben were friends. They liked to share toys.",
      "A bird sat on a branch and sang a song.",
      "There was a big bear who loved honey.",
  };
  return *prompts;
}

// The text is in the grammar: complete (it ended on an end token) or a prefix of it.
void ExpectInGrammar(const UnaryResult& r, const std::string& label) {
  ASSERT_TRUE(r.status.ok()) << label << ": " << r.status.error_message();
  const std::string& text = r.response.text();
  if (r.response.finish_reason() == v1::FINISH_REASON_EOS) {
    EXPECT_TRUE(std::regex_match(text, kWords)) << label << ": " << text;
  } else {
    EXPECT_EQ(r.response.finish_reason(), v1::FINISH_REASON_LENGTH) << label;
    EXPECT_TRUE(std::regex_match(text, std::regex("[a-z][a-z ]*"))) << label << ": " << text;
  }
}

std::vector<UnaryResult> RunTogether(Cluster& cluster, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<std::future<UnaryResult>> futures;
  for (const auto& r : requests) {
    futures.push_back(std::async(std::launch::async, [&cluster, r] { return RunUnary(cluster.api(), r); }));
  }
  std::vector<UnaryResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

TEST(StructuredServingTest, PreemptedSequencesResumeInTheirGrammar) {
  TESSERA_REQUIRE_STORIES_MODEL();
  ClusterOptions options;
  options.kv_memory_mb = 1;  // About 50 blocks: far too few for 8 requests of ~15 blocks.
  auto cluster = StartStories(/*tp=*/1, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  std::vector<v1::GenerateRequest> requests;
  for (const std::string& p : Prompts()) requests.push_back(Constrained(p, 240));
  std::vector<UnaryResult> alone;
  for (size_t i = 0; i < requests.size(); ++i) {
    alone.push_back(RunUnary(cluster->api(), requests[i]));
    ExpectInGrammar(alone.back(), "alone " + std::to_string(i));
  }
  const std::vector<UnaryResult> together = RunTogether(*cluster, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ExpectInGrammar(together[i], "together " + std::to_string(i));
    EXPECT_EQ(together[i].ids(), alone[i].ids()) << "request " << i;
  }
  // The test means something only if sequences were preempted and replayed.
  const std::string metrics = HttpGet(cluster->metrics_port(), "/metrics").body;
  double preemptions = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("tessera_preemptions_total", 0) == 0) {
      preemptions += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  EXPECT_GT(preemptions, 0) << metrics;
  std::printf("preemptions: %.0f\n", preemptions);
}

TEST(StructuredServingTest, SpeculationKeepsConstrainedGreedyOutput) {
  TESSERA_REQUIRE_STORIES_MODEL();
  std::vector<v1::GenerateRequest> requests;
  for (const std::string& p : Prompts()) requests.push_back(Constrained(p, 80));
  std::vector<std::vector<int32_t>> plain;
  {
    ClusterOptions options;
    options.kv_memory_mb = 16;
    auto cluster = StartStories(1, 1, options);
    ASSERT_NE(cluster, nullptr);
    for (const UnaryResult& r : RunTogether(*cluster, requests)) {
      ExpectInGrammar(r, "plain");
      plain.push_back(r.ids());
    }
  }
  // Prompt lookup proposes continuations copied from the prompt, capitals and
  // punctuation included: the grammar's mask rejects those at verification.
  ClusterOptions options;
  options.kv_memory_mb = 16;
  options.coordinator_flags = {"--speculative=ngram", "--num-speculative-tokens=4",
                               "--prompt-lookup-min=1"};
  auto cluster = StartStories(1, 1, options);
  ASSERT_NE(cluster, nullptr);
  const std::vector<UnaryResult> spec = RunTogether(*cluster, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ExpectInGrammar(spec[i], "speculative " + std::to_string(i));
    EXPECT_EQ(spec[i].ids(), plain[i]) << "request " << i;
  }
}

TEST(StructuredServingTest, JsonSchemaOverGrpcAndBadConstraints) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/2);
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest r = GreedyText("Lily had a cat named", 200, /*ignore_eos=*/false);
  r.mutable_constraint()->set_json_schema(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 20},
      "age": {"type": "integer", "minimum": 1, "maximum": 12},
      "friends": {"type": "array", "items": {"enum": ["Tom", "Sue"]}, "maxItems": 2}},
    "required": ["name", "age", "friends"]})");
  for (float temperature : {0.0f, 1.0f}) {
    r.mutable_sampling()->set_temperature(temperature);
    const UnaryResult res = RunUnary(cluster->api(), r);
    ASSERT_TRUE(res.status.ok()) << res.status.error_message();
    EXPECT_EQ(res.response.finish_reason(), v1::FINISH_REASON_EOS) << res.response.text();
    const nlohmann::json j = nlohmann::json::parse(res.response.text(), nullptr, false);
    ASSERT_TRUE(j.is_object()) << res.response.text();
    EXPECT_EQ(j.size(), 3u) << res.response.text();
    ASSERT_TRUE(j["name"].is_string());
    EXPECT_LE(j["name"].get<std::string>().size(), 20u);
    ASSERT_TRUE(j["age"].is_number_integer());
    EXPECT_GE(j["age"].get<int>(), 1);
    EXPECT_LE(j["age"].get<int>(), 12);
    ASSERT_TRUE(j["friends"].is_array());
    for (const auto& f : j["friends"]) EXPECT_TRUE(f == "Tom" || f == "Sue") << f;
  }

  struct Bad {
    const char* field;
    v1::Constraint constraint;
  };
  std::vector<Bad> bad(4);
  bad[0].field = "constraint.json_schema";
  bad[0].constraint.set_json_schema(R"({"type": "object", "patternProperties": {}})");
  bad[1].field = "constraint.regex";
  bad[1].constraint.set_regex("(a)\\1");
  bad[2].field = "constraint.grammar";
  bad[2].constraint.set_grammar("root ::= root \"a\" | \"b\"");
  bad[3].field = "constraint.choice";
  bad[3].constraint.mutable_choice();
  for (const Bad& b : bad) {
    v1::GenerateRequest req = GreedyText("Hi", 8);
    *req.mutable_constraint() = b.constraint;
    const UnaryResult res = RunUnary(cluster->api(), req);
    EXPECT_EQ(res.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.field;
    EXPECT_EQ(res.status.error_message().rfind(b.field, 0), 0u) << res.status.error_message();
  }
  // The server goes on serving.
  ExpectInGrammar(RunUnary(cluster->api(), Constrained("Hi", 30)), "after bad requests");
}

}  // namespace
}  // namespace tessera::testing
