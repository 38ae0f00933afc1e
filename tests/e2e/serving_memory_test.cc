// Tensor parallelism exists so no process has to hold the whole model: each worker of a
// tp=2 group must end up holding about half of a multi-GB checkpoint, not all of it.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t FolderBytes(const std::filesystem::path& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

// Removes the checkpoint however the test ends.
struct RemoveOnExit {
  std::filesystem::path dir;
  ~RemoveOnExit() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

TEST(ServingMemoryTest, EachTpRankHoldsAboutHalfOfA1BCheckpoint) {
  const auto scratch = testing::ScratchDir("memory");
  RemoveOnExit cleanup{scratch};
  const auto space = std::filesystem::space(scratch);
  if (space.available < (6ull << 30)) {
    GTEST_SKIP() << "needs 6 GiB free under " << scratch.string() << " for a 2.5 GB checkpoint, has "
                 << (space.available >> 20) << " MiB";
  }
  auto config = PresetConfig("llama-1b");
  ASSERT_TRUE(config.ok()) << config.status();
  GenerateOptions gen;
  gen.out_dir = scratch / "llama-1b";
  gen.dtype = DType::kBF16;
  gen.seed = 7;
  auto t = Clock::now();
  ASSERT_TRUE(GenerateRandomCheckpoint(*config, gen).ok());
  const uint64_t checkpoint_bytes = FolderBytes(gen.out_dir);
  std::printf("generated a %.2f GB llama-1b BF16 checkpoint in %.1f s\n", checkpoint_bytes / 1e9, SecondsSince(t));
  ASSERT_GT(checkpoint_bytes, 2'000'000'000u);

  constexpr int64_t kKvMb = 32;
  testing::ClusterOptions options;
  options.model_dir = gen.out_dir;
  options.log_dir = scratch / "logs";
  options.tp = 2;
  options.threads = 1;
  options.kv_memory_mb = kKvMb;
  options.max_num_seqs = 4;
  options.coordinator_flags = {"--max-model-len", "1024"};
  t = Clock::now();
  auto cluster = testing::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  std::printf("tp=2 group loaded and serving in %.1f s\n", SecondsSince(t));

  const double limit = 0.65 * static_cast<double>(checkpoint_bytes);
  for (pid_t pid : (*cluster)->worker_pids()) {
    const uint64_t rss = testing::ProcStatusBytes(pid, "VmRSS");
    std::printf("worker pid %d: VmRSS %.2f GB (anonymous %.2f, file %.2f, peak %.2f; checkpoint %.2f GB, "
                "limit %.2f GB)\n",
                pid, rss / 1e9, testing::ProcStatusBytes(pid, "RssAnon") / 1e9,
                testing::ProcStatusBytes(pid, "RssFile") / 1e9, testing::ProcStatusBytes(pid, "VmHWM") / 1e9,
                checkpoint_bytes / 1e9, limit / 1e9);
    ASSERT_GT(rss, 0u) << "cannot read /proc/" << pid << "/status";
    EXPECT_LT(static_cast<double>(rss), limit)
        << "worker " << pid << " holds " << rss << " bytes of a " << checkpoint_bytes << "-byte checkpoint";
    // And it does hold its half: the weights really were loaded, not mapped lazily.
    EXPECT_GT(static_cast<double>(rss), 0.4 * static_cast<double>(checkpoint_bytes));
  }

  // The sharded model serves (random weights: any tokens will do).
  const auto r = testing::RunUnary((*cluster)->api(), testing::GreedyIds({1, 300, 301}, 2),
                                   std::chrono::seconds(90));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << (*cluster)->Logs();
  EXPECT_EQ(r.response.token_ids_size(), 2);
  for (int32_t id : r.response.token_ids()) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, config->vocab_size);
  }
}

}  // namespace
}  // namespace tessera
