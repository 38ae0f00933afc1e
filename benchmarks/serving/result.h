#ifndef TESSERA_BENCHMARKS_SERVING_RESULT_H_
#define TESSERA_BENCHMARKS_SERVING_RESULT_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "benchmarks/serving/machine_info.h"
#include "benchmarks/serving/stats.h"
#include "benchmarks/serving/workload.h"
#include "nlohmann/json.hpp"

namespace tessera::bench {

// Everything a result depends on, written next to the numbers so results can be compared.
struct Conditions {
  std::string address;
  std::string label;
  // From GetModelInfo.
  std::string model, dtype;
  int tp = 0, replicas = 0, block_size = 0, max_context = 0, vocab_size = 0;
  // Workload.
  std::string workload;  // "fixed", "jsonl" or "shared-prefix".
  int num_requests = 0;
  int warmup_requests = 0;
  int input_len = 0;     // fixed
  int output_len = 0;    // fixed, shared-prefix; the default for jsonl
  std::string dataset;   // jsonl
  SharedPrefixOptions shared_prefix;
  // Load.
  int max_concurrency = 0;  // 0: no cap.
  double request_rate = 0;  // 0: all at once.
  double burstiness = 1;
  uint64_t seed = 0;
  double temperature = 0;
  std::string json_schema;  // The constraint's schema file; empty: free text.
  Slo slo;
  MachineInfo machine;
  BuildInfo build;
  std::string date;
};

inline constexpr char kResultSchema[] = "tessera-bench/v1";

// {"schema", "conditions", "metrics", and "requests" (per-request timings) when
// `records` is non-null}.
nlohmann::json ResultJson(const Conditions& conditions, const Metrics& metrics,
                          const std::vector<RequestRecord>* records);

nlohmann::json MetricsJson(const Metrics& metrics);

absl::Status WriteJsonFile(const std::filesystem::path& path, const nlohmann::json& j);

// A human-readable table of the main numbers, for stdout.
std::string FormatSummary(const Conditions& conditions, const Metrics& metrics);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_RESULT_H_
