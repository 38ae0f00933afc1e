// `tessera eval` end to end on stories260K: a model against itself passes, a cache
// rounding that keeps the choices passes, a noisy copy fails the gate, bad data is a
// usage error. On SmolLM2 (a real trained model): int8 weights keep within their gate from
// llama.cpp's Q8_0, and a GGUF file served with its own types stays within 1e-3 of the same
// file dequantized. Exit codes: 0 pass, 1 threshold failed, 2 usage/load/data error.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

std::string Dataset() {
  return (std::filesystem::path(TESSERA_SOURCE_DIR) / "benchmarks" / "eval" / "tiny_stories_style.txt")
      .string();
}

// Runs `tessera eval` with `args`; stdout (the JSON report) and stderr come back together
// only when `merge_stderr`.
testing::CommandResult Eval(const std::string& args, bool merge_stderr = false) {
  return testing::RunCommand(testing::TesseraBinary() + " eval --threads 2 " + args +
                             (merge_stderr ? " 2>&1" : ""));
}

std::string StoriesArgs(const std::string& candidate) {
  return "--model " + candidate + " --baseline " + testing::StoriesModelDir().string() +
         " --dataset " + Dataset();
}

// A copy of stories260K whose every weight has Gaussian noise of `relative` times the
// tensor's RMS added: a stand-in for a broken quantization.
std::filesystem::path WriteNoisyCopy(const std::filesystem::path& dir, double relative) {
  const std::filesystem::path src = testing::StoriesModelDir();
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    if (entry.path().extension() == ".json") {
      std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
    }
  }
  auto file = SafetensorsFile::Open(src / "model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  SafetensorsWriter writer;
  std::mt19937 rng(1234);
  for (const TensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    const auto* values = reinterpret_cast<const float*>((*file)->Data(t));
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    double sum_sq = 0.0;
    for (uint64_t i = 0; i < n; ++i) sum_sq += double{values[i]} * values[i];
    std::normal_distribution<float> noise(0.0f, static_cast<float>(relative * std::sqrt(sum_sq / n)));
    std::vector<float> noisy(values, values + n);
    for (float& v : noisy) v += noise(rng);
    writer.Add(t.name, DType::kF32, t.shape, [noisy = std::move(noisy)](uint64_t offset, uint64_t count, void* dst) {
      std::copy_n(noisy.data() + offset, count, static_cast<float*>(dst));
    });
  }
  const absl::Status written = writer.Write(dir / "model.safetensors");
  EXPECT_TRUE(written.ok()) << written;
  return dir;
}

TEST(EvalCliTest, ModelAgainstItselfPassesWithEqualPerplexities) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::filesystem::path out = testing::ScratchDir("self") / "report.json";
  const auto r = Eval(StoriesArgs(testing::StoriesModelDir().string()) +
                      " --kv-cache-dtype fp32 --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  for (const char* field : {"model", "baseline", "dataset", "options", "tokens_evaluated", "windows",
                            "kl_divergence", "weight_format", "top1_agreement", "baseline_perplexity", "candidate_perplexity",
                            "ppl_increase", "max_abs_logit_diff", "thresholds", "pass",
                            "wall_seconds", "threads", "cpu", "date"}) {
    EXPECT_TRUE(report.contains(field)) << field;
  }
  EXPECT_EQ(report["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(report["kl_divergence"]["mean"].get<double>(), 0.0);
  EXPECT_EQ(report["kl_divergence"]["max"].get<double>(), 0.0);
  EXPECT_EQ(report["baseline_perplexity"].get<double>(), report["candidate_perplexity"].get<double>());
  EXPECT_EQ(report["ppl_increase"].get<double>(), 0.0);
  EXPECT_EQ(report["max_abs_logit_diff"].get<double>(), 0.0);
  const double ppl = report["baseline_perplexity"].get<double>();
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 512.0);  // stories260K's vocabulary: a uniform guess scores 512.
  EXPECT_GT(report["tokens_evaluated"].get<int>(), 1000);
  EXPECT_GT(report["windows"].get<int>(), 1);
  EXPECT_TRUE(report["pass"].get<bool>());
  std::ifstream written(out);
  EXPECT_EQ(nlohmann::json::parse(written), report);
}

TEST(EvalCliTest, Bf16KvCacheAgainstF32Passes) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto r = Eval(StoriesArgs(testing::StoriesModelDir().string()) + " --kv-cache-dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  EXPECT_EQ(report["options"]["candidate_kv_cache_dtype"], "bf16");
  EXPECT_EQ(report["options"]["baseline_kv_cache_dtype"], "fp32");
  EXPECT_GE(report["top1_agreement"].get<double>(), 0.99);
  EXPECT_GT(report["max_abs_logit_diff"].get<double>(), 0.0);  // The cache really was rounded.
  EXPECT_TRUE(report["pass"].get<bool>());
}

TEST(EvalCliTest, NoisyWeightsFailTheGate) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::filesystem::path noisy = WriteNoisyCopy(testing::ScratchDir("noisy"), 0.05);
  const auto r = Eval(StoriesArgs(noisy.string()), /*merge_stderr=*/true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Noise of 5 % of each tensor's RMS measured top-1 0.836 and perplexity +8.4 %: far over
  // the KL divergence a float candidate may have.
  EXPECT_NE(r.output.find("FAIL: mean KL divergence"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"pass\": false"), std::string::npos) << r.output;
  // Top-1 and perplexity gate when asked to, and are named.
  const auto gated = Eval(StoriesArgs(WriteNoisyCopy(testing::ScratchDir("noisy2"), 0.05).string()) +
                              " --max-mean-kld 10 --min-top1 0.99 --max-ppl-increase 0.02",
                          /*merge_stderr=*/true);
  EXPECT_EQ(gated.exit_code, 1) << gated.output;
  EXPECT_EQ(gated.output.find("FAIL: mean KL divergence"), std::string::npos) << gated.output;
  EXPECT_NE(gated.output.find("FAIL: top-1 agreement"), std::string::npos) << gated.output;
  EXPECT_NE(gated.output.find("FAIL: perplexity rose"), std::string::npos) << gated.output;
}

// SmolLM2 over Debian's Apache-2.0 text, as the quality side by side scores (llama.cpp's
// chunks), but short: 3 chunks of 256.
std::string SmolLm2Args(const std::string& baseline, const std::string& candidate) {
  return "--baseline " + baseline + " --model " + candidate +
         " --dataset /usr/share/common-licenses/Apache-2.0 --context 256 --llama-cpp-chunks --max-tokens 384";
}

std::filesystem::path DequantizedSmolLm2() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path out = testing::ScratchDir("smollm2-f32") / "model";
    const auto r = testing::RunCommand(testing::TesseraBinary() + " convert-gguf " +
                                       testing::SmolLm2Gguf().string() + " --out " + out.string());
    EXPECT_EQ(r.exit_code, 0);
    return out;
  }();
  return dir;
}

TEST(EvalCliTest, SmolLm2Int8WeightsKeepWithinTheirGateFromLlamaCppQ8_0) {
  TESSERA_REQUIRE_SMOLLM2();
  const std::string f32 = DequantizedSmolLm2().string();
  const auto r = Eval(SmolLm2Args(f32, f32) + " --quantization int8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  EXPECT_EQ(report["weight_format"], "int8");
  EXPECT_DOUBLE_EQ(report["thresholds"]["max_mean_kld"].get<double>(), 0.0075);  // 1.5 x Q8_0's 0.0050.
  EXPECT_GT(report["kl_divergence"]["mean"].get<double>(), 0.0);  // Really rounded.
  EXPECT_GE(report["kl_divergence"]["p99"].get<double>(), report["kl_divergence"]["median"].get<double>());
  EXPECT_EQ(report["tokens_evaluated"].get<int>(), 381);  // 3 chunks x 127 scored positions.
}

TEST(EvalCliTest, SmolLm2GgufServedNativelyMatchesTheFileDequantized) {
  TESSERA_REQUIRE_SMOLLM2();
  const auto r = Eval(SmolLm2Args(DequantizedSmolLm2().string(), testing::SmolLm2Gguf().string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = nlohmann::json::parse(r.output);
  EXPECT_EQ(report["weight_format"], "gguf");
  EXPECT_DOUBLE_EQ(report["thresholds"]["max_mean_kld"].get<double>(), 1e-3);
  EXPECT_LT(report["kl_divergence"]["max"].get<double>(), 1e-4);  // Measured 3e-6: float rounding only.
  EXPECT_EQ(report["top1_agreement"].get<double>(), 1.0);
}

TEST(EvalCliTest, MissingDatasetIsAUsageError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::string m = testing::StoriesModelDir().string();
  const auto r = Eval("--model " + m + " --baseline " + m + " --dataset /nonexistent/eval.txt", true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot read --dataset /nonexistent/eval.txt"), std::string::npos) << r.output;
}

TEST(EvalCliTest, EmptyDatasetIsAUsageError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::filesystem::path empty = testing::ScratchDir("empty") / "empty.txt";
  std::ofstream(empty).close();
  const std::string m = testing::StoriesModelDir().string();
  const auto r = Eval("--model " + m + " --baseline " + m + " --dataset " + empty.string(), true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is empty"), std::string::npos) << r.output;
}

TEST(EvalCliTest, DifferentVocabSizesAreAUsageError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::filesystem::path dir = testing::ScratchDir("vocab");
  std::filesystem::copy(testing::StoriesModelDir(), dir, std::filesystem::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  config["vocab_size"] = 513;
  std::ofstream(dir / "config.json") << config.dump(2);
  const auto r = Eval(StoriesArgs(dir.string()), /*merge_stderr=*/true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("vocab sizes differ: --model has 513, --baseline 512"), std::string::npos)
      << r.output;
}

TEST(EvalCliTest, MissingFlagsAndHelp) {
  const auto help = Eval("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--max-ppl-increase"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--max-mean-kld"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--llama-cpp-chunks"), std::string::npos) << help.output;
  const auto r = Eval("--dataset x.txt", true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--model is required"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera
