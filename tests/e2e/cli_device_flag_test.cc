// `tessera run --device ...`: an unknown device, or CUDA where no device is usable, is a
// clear error and exit code 1, never a crash; auto runs wherever it can.
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

std::string RunCommandLine(const std::string& device, const std::string& extra) {
  return testing::TesseraBinary() + " run --model " + testing::StoriesModelDir().string() +
         " --device " + device +
         " --prompt 'Once upon a time' --max-tokens 60 --temperature 0 --ignore-eos " + extra;
}

TEST(CliDeviceFlagTest, MissingCudaDeviceIsAClearError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::string why = NoCudaReason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is usable here; nothing to refuse";
  const auto r = testing::RunCommand(RunCommandLine("cuda", "--json --quiet 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tessera run: " + why), std::string::npos) << r.output;
}

TEST(CliDeviceFlagTest, UnknownDeviceIsAClearError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto r = testing::RunCommand(RunCommandLine("tpu", "--quiet 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("device \"tpu\" is not one of cpu, cuda, cuda:N, auto"),
            std::string::npos)
      << r.output;
}

// auto picks CUDA where a device is usable, else the CPU; both give the reference.
TEST(CliDeviceFlagTest, AutoPicksAUsableDevice) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  const auto r = testing::RunCommand(RunCommandLine("auto", "--json --quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j.value("device", ""), NoCudaReason().empty() ? "cuda" : "cpu");
  ASSERT_TRUE(j.contains("generated_ids") && j["generated_ids"].is_array()) << r.output;
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), expected.generated_ids);
}

}  // namespace
}  // namespace tessera
