// 200 `tessera generate` processes start at the same moment against one coordinator
// (stories260K): every one must succeed. Before the fix the clients' channel set gRPC's
// minimum reconnect backoff to 100 ms, which is also its connect timeout, and 3-5 of 24
// simultaneous clients failed with "failed to connect to all addresses ... tcp handshaker
// shutdown" (issue 12).

#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"

extern char** environ;

namespace tessera::testing {
namespace {

constexpr int kClients = 200;

TEST(ManyClientsTest, TwoHundredSimultaneousGenerateClientsAllSucceed) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = StartStories(/*tp=*/1);
  ASSERT_NE(cluster, nullptr);
  const std::filesystem::path dir = ScratchDir("clients");
  const std::string tessera = (BinaryDir() / "tessera").string();

  std::vector<pid_t> pids;
  for (int i = 0; i < kClients; ++i) {
    const std::string out = (dir / absl::StrCat("client", i, ".log")).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<std::string> args = {tessera,         "generate",        "--server", cluster->address(),
                                     "--prompt",      "Once upon a time", "--max-tokens", "8",
                                     "--temperature", "0",               "--timeout", "120"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, tessera.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  int failed = 0;
  std::string first_failure;
  for (int i = 0; i < kClients; ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(pids[i], &status, 0), pids[i]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failed;
    if (first_failure.empty()) {
      std::ifstream in(dir / absl::StrCat("client", i, ".log"));
      first_failure = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
  }
  std::printf("%d simultaneous tessera generate clients: %d failed\n", kClients, failed);
  EXPECT_EQ(failed, 0) << "first failure:\n" << first_failure;
}

}  // namespace
}  // namespace tessera::testing
