// The pieces of `tessera serve` that need no processes: the restart backoff of dead workers
// and the coordinator limit flags it passes on.
#include <chrono>
#include <string>
#include <vector>

#include "common/flag_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/tessera/coordinator_limit_flags.h"
#include "tools/tessera/restart_backoff.h"

namespace tessera::cli {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RestartBackoffTest, DoublesWhileTheChildKeepsDyingUpToTheCap) {
  RestartBackoff backoff;
  std::vector<int64_t> delays;
  for (int i = 0; i < 9; ++i) delays.push_back(backoff.NextDelay(milliseconds(100)).count());
  EXPECT_THAT(delays, ElementsAre(500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000));
}

TEST(RestartBackoffTest, StartsShortAgainAfterTheChildStayedUp) {
  RestartBackoff backoff;
  for (int i = 0; i < 5; ++i) backoff.NextDelay(milliseconds(0));
  EXPECT_EQ(backoff.NextDelay(milliseconds(59'000)).count(), 16000);
  EXPECT_EQ(backoff.NextDelay(milliseconds(60'000)).count(), 500);
  EXPECT_EQ(backoff.NextDelay(milliseconds(10)).count(), 1000);
}

absl::Status Parse(FlagSet& flags, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags.Parse(static_cast<int>(argv.size()), argv.data());
}

TEST(CoordinatorLimitFlagsTest, PassesOnOnlyWhatWasGiven) {
  FlagSet flags("test", "");
  CoordinatorLimitFlags limits;
  limits.Register(flags);
  ASSERT_TRUE(Parse(flags, {"serve"}).ok());
  EXPECT_THAT(limits.Args(), IsEmpty());
  EXPECT_FALSE(limits.IntValue("drain-timeout-seconds").has_value());

  FlagSet given("test", "");
  CoordinatorLimitFlags given_limits;
  given_limits.Register(given);
  ASSERT_TRUE(Parse(given, {"serve", "--max-queued-requests", "64", "--drain-timeout-seconds=5",
                            "--chat-special-tokens", "plain", "--gpu-memory-utilization", "0.85"})
                  .ok());
  ASSERT_TRUE(given_limits.Validate().ok());
  EXPECT_THAT(given_limits.Args(), ElementsAre("--max-queued-requests=64", "--drain-timeout-seconds=5",
                                               "--chat-special-tokens=plain", "--gpu-memory-utilization=0.85"));
  EXPECT_EQ(given_limits.IntValue("drain-timeout-seconds"), 5);
}

TEST(CoordinatorLimitFlagsTest, RefusesAnIntegerFlagThatIsNoInteger) {
  FlagSet flags("test", "");
  CoordinatorLimitFlags limits;
  limits.Register(flags);
  ASSERT_TRUE(Parse(flags, {"serve", "--max-connections", "many"}).ok());
  const absl::Status s = limits.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("--max-connections"));
}

}  // namespace
}  // namespace tessera::cli
