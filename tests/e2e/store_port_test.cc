// --store-port: the collectives' rendezvous store listens on the port it is given (so a
// NetworkPolicy can open exactly it), a tp=2 Gloo group forms through it, and a port that
// is taken stops the coordinator with an error naming it.

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

TEST(StorePortTest, GlooGroupFormsThroughTheGivenStorePort) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const int store_port = PickFreePort();
  ASSERT_NE(store_port, 0);
  ClusterOptions options;
  options.coordinator_flags = {"--communicator=gloo", absl::StrCat("--store-port=", store_port)};
  auto cluster = StartStories(/*tp=*/2, /*replicas=*/1, options);
  ASSERT_NE(cluster, nullptr);
  EXPECT_TRUE(Accepts(store_port)) << "nothing listens on --store-port " << store_port;
  const UnaryResult r = RunUnary(cluster->api(), GreedyText("Once upon a time", 8));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.token_ids_size(), 8);
}

TEST(StorePortTest, TakenStorePortIsAClearStartupError) {
  TESSERA_REQUIRE_STORIES_MODEL();
  int held = -1;
  const int store_port = PickFreePort(&held);  // Bound (not listening) for the whole test.
  ASSERT_NE(store_port, 0);
  const std::filesystem::path log = ScratchDir("coordinator") / "coordinator.log";
  const std::string command = absl::StrCat(
      (BinaryDir() / "tessera-coordinator").string(), " --model ", StoriesModelDir().string(),
      " --tp 2 --port 0 --cluster-port 0 --metrics-port 0 --insecure --store-port ", store_port, " > ", log.string(), " 2>&1");
  const int status = std::system(command.c_str());
  ::close(held);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << "the coordinator started on a taken port";
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(absl::StrCat(store_port)), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera::testing
