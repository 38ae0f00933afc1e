// `tessera run` as a user runs it.
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera {
namespace {

TEST(CliRunTest, JsonOutputMatchesReference) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  const auto r = testing::RunCommand(testing::TesseraBinary() + " run --model " +
                                     testing::StoriesModelDir().string() +
                                     " --prompt 'Once upon a time' --max-tokens 60"
                                     " --temperature 0 --ignore-eos --json --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), expected.prompt_ids);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), expected.generated_ids);
  EXPECT_EQ("Once upon a time" + j["text"].get<std::string>(), expected.generated_text);
  EXPECT_EQ(j["finish_reason"], "length");
}

TEST(CliRunTest, PlainOutputPrintsPromptAndContinuation) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  const auto r = testing::RunCommand(testing::TesseraBinary() + " run --model " +
                                     testing::StoriesModelDir().string() +
                                     " --prompt 'Once upon a time' --max-tokens 60"
                                     " --temperature 0 --ignore-eos --quiet");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, expected.generated_text + "\n");
}

// The shipped llama2.c files, converted by `tessera convert-llama2c`, generate the reference.
TEST(CliRunTest, ConvertedLlama2cCheckpointGeneratesTheReference) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto expected = testing::LoadExpected();
  const auto out = testing::ScratchDir("converted");
  const auto src = testing::StoriesModelDir();
  const auto convert = testing::RunCommand(
      testing::TesseraBinary() + " convert-llama2c --checkpoint " + (src / "stories260K.bin").string() +
      " --tokenizer " + (src / "tok512.bin").string() + " --out " + out.string() + " 2>&1");
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  const auto r = testing::RunCommand(testing::TesseraBinary() + " run --model " + out.string() +
                                     " --prompt 'Once upon a time' --max-tokens 60"
                                     " --temperature 0 --ignore-eos --json --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), expected.prompt_ids);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), expected.generated_ids);
}

TEST(CliRunTest, MissingModelFolderIsAClearError) {
  const auto r = testing::RunCommand(testing::TesseraBinary() +
                                     " run --model /nonexistent/model --prompt hi 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;
}

TEST(CliRunTest, HelpListsTheFlags) {
  const auto r = testing::RunCommand(testing::TesseraBinary() + " run --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--model", "--prompt", "--max-tokens", "--temperature", "--json"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
}

TEST(CliRunTest, UnknownFlagIsRejected) {
  const auto r = testing::RunCommand(testing::TesseraBinary() + " run --modle x 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown flag --modle"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera
