#include "common/speculative_options.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(SpeculativeOptionsTest, FlagsParseValidateAndPassOn) {
  SpeculativeOptions o;
  FlagSet flags("test", "");
  AddSpeculativeFlags(flags, &o);
  const char* argv[] = {"test", "--speculative=draft", "--num-speculative-tokens=3", "--draft-model=/m/small"};
  ASSERT_TRUE(flags.Parse(4, const_cast<char**>(argv)).ok());
  EXPECT_TRUE(ValidateSpeculativeOptions(o).ok());
  EXPECT_EQ(SpeculativeFlagArgs(o),
            (std::vector<std::string>{"--speculative=draft", "--num-speculative-tokens=3", "--prompt-lookup-min=1",
                                      "--prompt-lookup-max=4", "--draft-model=/m/small"}));
  EXPECT_TRUE(SpeculativeFlagArgs(SpeculativeOptions{}).empty());
}

TEST(SpeculativeOptionsTest, ImpossibleSettingsNameTheFlag) {
  auto error = [](SpeculativeOptions o) { return std::string(ValidateSpeculativeOptions(o).message()); };
  SpeculativeOptions o;
  EXPECT_TRUE(ValidateSpeculativeOptions(o).ok());
  o.method = "medusa";
  EXPECT_NE(error(o).find("--speculative"), std::string::npos);
  o.method = "draft";
  EXPECT_NE(error(o).find("--draft-model"), std::string::npos);
  o.method = "ngram";
  o.num_tokens = 16;
  EXPECT_NE(error(o).find("--num-speculative-tokens"), std::string::npos);
  o.num_tokens = 4;
  o.prompt_lookup_min = 5;  // Above the maximum, 4.
  EXPECT_NE(error(o).find("--prompt-lookup-min"), std::string::npos);
  o.prompt_lookup_min = 1;
  o.draft_model = "/m/small";
  EXPECT_NE(error(o).find("--draft-model"), std::string::npos);
  o.method = "none";
  EXPECT_NE(error(o).find("--draft-model"), std::string::npos);
}

}  // namespace
}  // namespace tessera
