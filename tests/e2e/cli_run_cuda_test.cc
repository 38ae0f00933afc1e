// `tessera run --device cuda` as a user runs it: on a CUDA device it generates llama2.c's
// reference. Skips where no device is usable (cli_device_flag_test checks the errors).
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"
#include "worker/backend_factory.h"

namespace tessera {
namespace {

// Empty when this process can create a CUDA backend, else why not.
std::string NoCudaReason() {
  auto backend = MakeBackend("cuda", 0);
  return backend.ok() ? "" : std::string(backend.status().message());
}

// Float32 activations (TESSERA_CUDA_ACTIVATIONS=f32), so the whole 60-token reference is
// the bar; cuda_forward_test checks what the default BF16 activations promise.
std::string RunCommandLine(const std::string& device, const std::string& extra) {
  return "TESSERA_CUDA_ACTIVATIONS=f32 " + testing::TesseraBinary() + " run --model " +
         testing::StoriesModelDir().string() +
         " --device " + device +
         " --prompt 'Once upon a time' --max-tokens 60 --temperature 0 --ignore-eos " + extra;
}

TEST(CliRunCudaTest, JsonOutputOnCudaMatchesReference) {
  TESSERA_REQUIRE_STORIES_MODEL();
  if (const std::string why = NoCudaReason(); !why.empty()) {
    GTEST_SKIP() << "no usable CUDA device: " << why;
  }
  const auto expected = testing::LoadExpected();
  const auto r = testing::RunCommand(RunCommandLine("cuda", "--json --quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j.value("device", ""), "cuda");
  ASSERT_TRUE(j.contains("generated_ids") && j["generated_ids"].is_array()) << r.output;
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), expected.generated_ids);
  ASSERT_TRUE(j.contains("text") && j["text"].is_string()) << r.output;
  EXPECT_EQ("Once upon a time" + j["text"].get<std::string>(), expected.generated_text);
}

}  // namespace
}  // namespace tessera
