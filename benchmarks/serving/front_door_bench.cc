// tessera-front-door-bench: holds many GenerateStream calls open at once against a running
// coordinator and reports what the front door costs: the coordinator's threads and RSS
// (from /proc, sampled while the streams are held), TTFT and failures. See --help and
// benchmarks/serving/README.md.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmarks/serving/machine_info.h"
#include "benchmarks/serving/stats.h"
#include "benchmarks/serving/stream_swarm.h"
#include "common/flag_set.h"
#include "nlohmann/json.hpp"

namespace tessera::bench {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-front-door-bench: %s\n", message.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  std::string address = "127.0.0.1:50051", out, prompt = "Once upon a time";
  int64_t pid = 0, streams = 5000, channels = 8, max_new_tokens = 16, deadline_s = 120;
  FlagSet flags("tessera-front-door-bench",
                "Opens --streams GenerateStream calls at once (gRPC callback client, no thread per call) and "
                "reports the coordinator's threads and RSS while they are held, TTFT and failures as JSON.");
  flags.String("address", &address, "Coordinator public API address (loopback).");
  flags.Int("coordinator-pid", &pid, "The coordinator's process id, for /proc/<pid>/status (required).");
  flags.Int("streams", &streams, "Concurrent GenerateStream calls (1..100000).");
  flags.Int("channels", &channels, "Connections the streams are spread over.");
  flags.Int("max-new-tokens", &max_new_tokens, "Tokens generated per stream (ignore_eos, greedy).");
  flags.String("prompt", &prompt, "Prompt text of every stream.");
  flags.Int("deadline-s", &deadline_s, "Deadline of every call, seconds (bounds the run).");
  flags.String("out", &out, "Write the JSON result here (default: stdout only).");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (pid <= 0) return Fail("--coordinator-pid is required (the coordinator's process id)");
  if (streams < 1 || streams > 100000) return Fail(absl::StrCat("--streams must be in 1..100000, got ", streams));
  if (channels < 1 || max_new_tokens < 1 || deadline_s < 1) {
    return Fail("--channels, --max-new-tokens and --deadline-s must be positive");
  }
  const ProcessSample before = SampleProcess(static_cast<int>(pid));
  if (before.threads < 0) return Fail(absl::StrCat("cannot read /proc/", pid, "/status"));

  // One sampler thread: the peak over the run is what the streams cost.
  std::atomic<bool> done{false};
  ProcessSample peak = before;
  std::thread sampler([&] {
    while (!done.load()) {
      const ProcessSample s = SampleProcess(static_cast<int>(pid));
      peak.threads = std::max(peak.threads, s.threads);
      peak.rss_bytes = std::max(peak.rss_bytes, s.rss_bytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  SwarmOptions options;
  options.address = address;
  options.num_streams = static_cast<int>(streams);
  options.num_channels = static_cast<int>(channels);
  options.prompt = prompt;
  options.max_new_tokens = static_cast<int>(max_new_tokens);
  options.deadline = std::chrono::seconds(deadline_s);
  const SwarmResult result = RunSwarm(options);
  done.store(true);
  sampler.join();
  const ProcessSample after = SampleProcess(static_cast<int>(pid));

  std::vector<double> ttft, total;
  std::map<std::string, int> failures;
  int ok = 0;
  for (const StreamOutcome& o : result.outcomes) {
    if (o.finished_ok && o.tokens == max_new_tokens) {
      ++ok;
      ttft.push_back(o.ttft_s);
      total.push_back(o.total_s);
    } else {
      ++failures[o.finished_ok ? "SHORT_STREAM" : absl::StrCat("grpc_code_", static_cast<int>(o.code))];
    }
  }
  const BuildInfo build = ProbeBuild();
  nlohmann::json j;
  j["schema"] = "tessera-front-door-bench/v1";
  j["date"] = UtcTimestamp();
  j["conditions"] = {{"streams", streams},       {"channels", channels},
                     {"max_new_tokens", max_new_tokens}, {"prompt", prompt},
                     {"deadline_s", deadline_s}, {"address", address},
                     {"machine", ToJson(ProbeMachine())},
                     {"build", {{"type", build.build_type}, {"version", build.version}}}};
  j["metrics"] = {
      {"streams_ok", ok},
      {"failures", static_cast<int>(result.outcomes.size()) - ok},
      {"failures_by_code", failures},
      {"wall_seconds", result.wall_s},
      {"ttft_seconds", {{"p50", Percentile(ttft, 50)}, {"p99", Percentile(ttft, 99)}, {"max", Percentile(ttft, 100)}}},
      {"e2e_seconds", {{"p50", Percentile(total, 50)}, {"p99", Percentile(total, 99)}}},
      {"coordinator_threads", {{"before", before.threads}, {"peak", peak.threads}, {"after", after.threads}}},
      {"coordinator_rss_bytes", {{"before", before.rss_bytes}, {"peak", peak.rss_bytes}, {"after", after.rss_bytes}}},
      {"definitions",
       {{"ttft", "first stream message carrying tokens - call start (all calls start together)"},
        {"ok", "status OK, last message has a finish reason, max_new_tokens tokens received"},
        {"peak", "maximum of /proc/<pid>/status sampled every 50 ms during the run"}}}};
  const std::string text = j.dump(2);
  std::printf("%s\n", text.c_str());
  if (!out.empty()) {
    std::ofstream f(out);
    f << text << "\n";
    if (!f) return Fail(absl::StrCat("cannot write ", out));
  }
  return ok == streams ? 0 : 2;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
