#include "benchmarks/serving/machine_info.h"

#include "benchmarks/serving/result.h"
#include "gtest/gtest.h"

namespace tessera::bench {
namespace {

TEST(MachineInfoTest, ParsesProcFiles) {
  EXPECT_EQ(CpuModelFromCpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                "model name\t: AMD EPYC 7B13 64-Core Processor\nflags : x\n"),
            "AMD EPYC 7B13 64-Core Processor");
  EXPECT_EQ(CpuModelFromCpuinfo("processor : 0\n"), "unknown");
  EXPECT_EQ(MemTotalFromMeminfo("MemTotal:       24567744 kB\nMemFree: 1 kB\n"), 24567744ull * 1024);
  EXPECT_EQ(MemTotalFromMeminfo(""), 0u);
}

TEST(MachineInfoTest, ProbesThisMachine) {
  const MachineInfo m = ProbeMachine();
  EXPECT_GT(m.logical_cores, 0);
  EXPECT_GT(m.usable_cores, 0);
  EXPECT_GT(m.memory_bytes, 0u);
  EXPECT_FALSE(ProbeBuild().version.empty());
  EXPECT_EQ(UtcTimestamp().size(), 20u);
}

TEST(ResultJsonTest, RecordsConditionsAndMetrics) {
  Conditions c;
  c.model = "m";
  c.tp = 2;
  c.workload = "fixed";
  c.request_rate = 4;
  c.burstiness = 0.5;
  const Metrics m = ComputeMetrics({}, Slo{});
  const nlohmann::json j = ResultJson(c, m, nullptr);
  EXPECT_EQ(j["schema"], kResultSchema);
  EXPECT_EQ(j["conditions"]["tp"], 2);
  EXPECT_EQ(j["conditions"]["arrivals"], "gamma");
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    for (const char* stat : {"mean", "p50", "p95", "p99"}) EXPECT_TRUE(j["metrics"][key].contains(stat));
  }
  EXPECT_FALSE(j.contains("requests"));
}

}  // namespace
}  // namespace tessera::bench
