#include "benchmarks/serving/machine_info.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#ifndef TESSERA_BENCH_BUILD_TYPE
#define TESSERA_BENCH_BUILD_TYPE "unknown"
#endif
#ifndef TESSERA_BENCH_VERSION
#define TESSERA_BENCH_VERSION "unknown"
#endif
#ifndef TESSERA_BENCH_SOURCE_DIR
#define TESSERA_BENCH_SOURCE_DIR ""
#endif

namespace tessera::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Standard output of a shell command; empty when it fails.
std::string Capture(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[1024];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  return ::pclose(pipe) == 0 ? out : "";
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (!dir.empty() && ::access((std::string(dir) + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

}  // namespace

std::string CpuModelFromCpuinfo(const std::string& cpuinfo) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos) return Trim(line.substr(colon + 1));
  }
  return "unknown";
}

uint64_t MemTotalFromMeminfo(const std::string& meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    uint64_t kib = 0;
    std::istringstream(std::string(line)) >> kib;
    return kib * 1024;
  }
  return 0;
}

MachineInfo ProbeMachine() {
  MachineInfo m;
  m.cpu_model = CpuModelFromCpuinfo(ReadFile("/proc/cpuinfo"));
  m.logical_cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  CPU_ZERO(&set);
  m.usable_cores = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : m.logical_cores;
  m.memory_bytes = MemTotalFromMeminfo(ReadFile("/proc/meminfo"));
  if (OnPath("nvidia-smi")) {
    const std::string out = Capture(
        "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null");
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> fields = absl::StrSplit(line, ',');
      MachineInfo::Gpu gpu;
      if (fields.size() > 0) gpu.name = Trim(fields[0]);
      if (fields.size() > 1) gpu.driver = Trim(fields[1]);
      if (fields.size() > 2) gpu.memory = Trim(fields[2]);
      m.gpus.push_back(gpu);
    }
  }
  return m;
}

BuildInfo ProbeBuild() {
  BuildInfo b;
  b.build_type = TESSERA_BENCH_BUILD_TYPE;
  b.version = TESSERA_BENCH_VERSION;
  const std::string source = TESSERA_BENCH_SOURCE_DIR;
  if (!source.empty() && std::filesystem::exists(source + "/.git") && OnPath("git")) {
    // --no-optional-locks: describing must never write the index of a tree others work in.
    const std::string described = Trim(Capture("git --no-optional-locks -C '" + source +
                                               "' describe --tags --always --dirty 2>/dev/null"));
    if (!described.empty()) b.version = described;
  }
  return b;
}

std::string UtcTimestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

nlohmann::json ToJson(const MachineInfo& machine) {
  nlohmann::json j;
  j["cpu_model"] = machine.cpu_model;
  j["logical_cores"] = machine.logical_cores;
  j["usable_cores"] = machine.usable_cores;
  j["memory_bytes"] = machine.memory_bytes;
  j["gpus"] = nlohmann::json::array();
  for (const MachineInfo::Gpu& gpu : machine.gpus) {
    j["gpus"].push_back({{"name", gpu.name}, {"driver", gpu.driver}, {"memory", gpu.memory}});
  }
  return j;
}

}  // namespace tessera::bench
