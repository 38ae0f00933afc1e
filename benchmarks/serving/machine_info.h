#ifndef TESSERA_BENCHMARKS_SERVING_MACHINE_INFO_H_
#define TESSERA_BENCHMARKS_SERVING_MACHINE_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace tessera::bench {

// The conditions a benchmark number depends on besides its flags: the machine and the
// build. Recorded in every result file.
struct MachineInfo {
  std::string cpu_model;         // "model name" of /proc/cpuinfo ("unknown" if absent).
  int logical_cores = 0;         // Online logical CPUs.
  int usable_cores = 0;          // In this process's affinity mask.
  uint64_t memory_bytes = 0;     // MemTotal.
  struct Gpu {
    std::string name, driver, memory;
  };
  std::vector<Gpu> gpus;         // From nvidia-smi when it is on PATH; empty otherwise.
};
MachineInfo ProbeMachine();

// "model name" of the first processor in /proc/cpuinfo-formatted text.
std::string CpuModelFromCpuinfo(const std::string& cpuinfo);
// MemTotal in bytes from /proc/meminfo-formatted text; 0 when absent.
uint64_t MemTotalFromMeminfo(const std::string& meminfo);

struct BuildInfo {
  std::string build_type;  // CMAKE_BUILD_TYPE of this binary.
  std::string version;     // `git describe` of the source tree when available, else the project version.
};
BuildInfo ProbeBuild();

// Now, as ISO 8601 UTC ("2025-01-31T12:00:00Z").
std::string UtcTimestamp();

nlohmann::json ToJson(const MachineInfo& machine);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_MACHINE_INFO_H_
