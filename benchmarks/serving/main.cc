// tessera-bench: a load generator for a running Tessera coordinator (tessera.v1 gRPC).
// See `tessera-bench --help` and benchmarks/serving/README.md.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/serving/client_loop.h"
#include "benchmarks/serving/grpc_client.h"
#include "benchmarks/serving/machine_info.h"
#include "benchmarks/serving/result.h"
#include "benchmarks/serving/stats.h"
#include "benchmarks/serving/workload.h"
#include "common/flag_set.h"
#include "common/grpc_channel.h"
#include "common/grpc_client_tls.h"
#include "common/progress_line.h"

namespace tessera::bench {
namespace {

struct Flags {
  std::string address = "127.0.0.1:50051";
  ClientTlsFiles tls;
  std::string workload = "fixed";
  std::string dataset;
  std::string out;
  std::string label;
  int64_t num_requests = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t num_prefixes = 4;
  int64_t suffixes_per_prefix = 4;
  int64_t prefix_len = 256;
  int64_t suffix_len = 32;
  int64_t warmup = 2;
  int64_t max_concurrency = 0;
  double request_rate = 0;
  double burstiness = 1;
  int64_t seed = 0;
  double temperature = 0;
  std::string json_schema;  // File; its text goes with every request as the constraint.
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  double timeout_s = 600;
  int64_t wait_ready_s = 60;
  bool save_requests = false;
  bool no_progress = false;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-bench: %s\n", message.c_str());
  return 1;
}

absl::StatusOr<std::vector<RequestSpec>> BuildWorkload(const Flags& f, int count, uint64_t seed,
                                                      const v1::ModelInfo& info) {
  RandomTokens tokens;
  tokens.vocab_size = static_cast<int>(info.vocab_size());
  tokens.seed = seed;
  if (f.workload == "fixed") {
    return FixedLengthWorkload(count, static_cast<int>(f.input_len), static_cast<int>(f.output_len), tokens);
  }
  if (f.workload == "shared-prefix") {
    SharedPrefixOptions o;
    o.num_prefixes = static_cast<int>(f.num_prefixes);
    o.suffixes_per_prefix = static_cast<int>(f.suffixes_per_prefix);
    o.prefix_len = static_cast<int>(f.prefix_len);
    o.suffix_len = static_cast<int>(f.suffix_len);
    o.output_len = static_cast<int>(f.output_len);
    std::vector<RequestSpec> specs = SharedPrefixWorkload(o, tokens);
    if (count >= 0 && static_cast<int>(specs.size()) > count) specs.resize(count);
    return specs;
  }
  if (f.workload == "jsonl") {
    auto specs = LoadJsonlWorkload(f.dataset, static_cast<int>(f.output_len));
    if (!specs.ok()) return specs.status();
    if (count < 0) return specs;
    // Cycle through the file to `count` requests (warm-up reuses its first lines).
    std::vector<RequestSpec> out;
    for (int i = 0; i < count; ++i) out.push_back((*specs)[i % specs->size()]);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--workload is \"", f.workload, "\"; use fixed, jsonl or shared-prefix"));
}

absl::Status CheckFits(const std::vector<RequestSpec>& specs, const v1::ModelInfo& info) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const RequestSpec& s = specs[i];
    if (!s.is_text && s.prompt_ids.size() + s.output_len > info.max_context()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request %d: %d prompt + %d output tokens exceed the served context of %d", i,
          s.prompt_ids.size(), s.output_len, info.max_context()));
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  FlagSet flags("tessera-bench",
                "Load generator for a running Tessera coordinator. Sends GenerateStream requests\n"
                "(ignore_eos, max_new_tokens = the output length) at a request rate or all at once,\n"
                "under a concurrency cap, after a warm-up that is not counted, and reports TTFT,\n"
                "TPOT, ITL and end-to-end latency (mean, p50, p95, p99), throughput and goodput.\n"
                "Workloads: fixed (random token prompts of --input-len), jsonl (--dataset lines\n"
                "{\"prompt\": text or [ids], \"output_len\": N}), shared-prefix (--num-prefixes x\n"
                "--suffixes-per-prefix prompts). Writes a JSON result with its conditions (--out).");
  flags.String("address", &f.address, "Coordinator API address host:port.");
  flags.String("tls-ca", &f.tls.ca_file, "PEM CA bundle: connect with TLS and verify the server against it.");
  flags.String("tls-cert", &f.tls.cert_file, "PEM client certificate (mutual TLS; needs --tls-ca).");
  flags.String("tls-key", &f.tls.key_file, "PEM private key of --tls-cert.");
  flags.String("workload", &f.workload, "fixed, jsonl or shared-prefix.");
  flags.Int("num-requests", &f.num_requests, "Measured requests (shared-prefix: at most prefixes x suffixes).");
  flags.Int("input-len", &f.input_len, "Prompt tokens (fixed workload).");
  flags.Int("output-len", &f.output_len, "Output tokens per request (jsonl: default for lines without output_len).");
  flags.String("dataset", &f.dataset, "JSON Lines file (jsonl workload).");
  flags.Int("num-prefixes", &f.num_prefixes, "Shared-prefix workload: distinct prefixes.");
  flags.Int("suffixes-per-prefix", &f.suffixes_per_prefix, "Shared-prefix workload: suffixes of each prefix.");
  flags.Int("prefix-len", &f.prefix_len, "Shared-prefix workload: prefix tokens.");
  flags.Int("suffix-len", &f.suffix_len, "Shared-prefix workload: suffix tokens.");
  flags.Int("warmup", &f.warmup, "Warm-up requests before the measured ones (not counted).");
  flags.Int("max-concurrency", &f.max_concurrency, "Requests in flight at most (0: no cap).");
  flags.Float("request-rate", &f.request_rate, "Requests per second (0: all at once).");
  flags.Float("burstiness", &f.burstiness, "Gamma shape of inter-arrival times: 1 Poisson, <1 burstier.");
  flags.Int("seed", &f.seed, "Seed of prompts and arrival times.");
  flags.Float("temperature", &f.temperature, "Sampling temperature.");
  flags.String("json-schema", &f.json_schema,
               "File holding a JSON Schema every request's output is held to (structured outputs).");
  flags.Float("slo-ttft-ms", &f.slo_ttft_ms, "Goodput: TTFT objective in ms (0: none).");
  flags.Float("slo-tpot-ms", &f.slo_tpot_ms, "Goodput: TPOT objective in ms (0: none).");
  flags.Float("timeout-s", &f.timeout_s, "Deadline of each request in seconds.");
  flags.Int("wait-ready-s", &f.wait_ready_s, "Seconds to wait for the server to report SERVING.");
  flags.String("out", &f.out, "Write the JSON result here.");
  flags.String("label", &f.label, "Free text recorded in the result.");
  flags.Bool("save-requests", &f.save_requests, "Add per-request timings to the JSON result.");
  flags.Bool("no-progress", &f.no_progress, "No progress bar on stderr.");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (f.num_requests <= 0) return Fail(absl::StrCat("--num-requests must be positive, got ", f.num_requests));
  if (f.warmup < 0) return Fail(absl::StrCat("--warmup must be >= 0, got ", f.warmup));
  if (f.max_concurrency < 0) return Fail(absl::StrCat("--max-concurrency must be >= 0, got ", f.max_concurrency));
  if (f.request_rate < 0 || std::isnan(f.request_rate)) {
    return Fail(absl::StrCat("--request-rate must be >= 0 (0: all at once), got ", f.request_rate));
  }
  if (!(f.burstiness > 0)) return Fail(absl::StrCat("--burstiness must be positive, got ", f.burstiness));
  if (f.workload == "fixed" && (f.input_len <= 0 || f.output_len <= 0)) {
    return Fail(absl::StrCat("--input-len and --output-len must be positive, got ", f.input_len, " and ", f.output_len));
  }
  if (f.workload == "shared-prefix" &&
      (f.num_prefixes <= 0 || f.suffixes_per_prefix <= 0 || f.prefix_len <= 0 || f.suffix_len < 0 || f.output_len <= 0)) {
    return Fail("--num-prefixes, --suffixes-per-prefix, --prefix-len and --output-len must be positive");
  }
  if (f.workload == "jsonl" && f.dataset.empty()) return Fail("--workload jsonl needs --dataset FILE");
  if (!(f.timeout_s > 0)) return Fail(absl::StrCat("--timeout-s must be positive, got ", f.timeout_s));

  auto credentials = ClientCredentials(f.tls);
  if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
  auto channel = ChannelToStartingServer(f.address, *credentials);
  if (absl::Status s = WaitUntilServing(channel, std::chrono::seconds(f.wait_ready_s)); !s.ok()) {
    return Fail(absl::StrCat(f.address, ": ", s.message()));
  }
  auto stub = v1::Generation::NewStub(channel);
  auto info = FetchModelInfo(*stub);
  if (!info.ok()) return Fail(absl::StrCat(f.address, ": ", info.status().message()));
  if (info->vocab_size() <= 3 && f.workload != "jsonl") {
    return Fail(absl::StrCat("the served vocabulary has ", info->vocab_size(), " tokens; random prompts need more than 3"));
  }

  const uint64_t seed = static_cast<uint64_t>(f.seed);
  auto measured = BuildWorkload(f, static_cast<int>(f.num_requests), seed, *info);
  if (!measured.ok()) return Fail(std::string(measured.status().message()));
  // Warm-up prompts come from another seed, so they do not warm the prefix cache for the
  // measured ones (jsonl warm-up reuses the file's first lines).
  auto warmup = BuildWorkload(f, static_cast<int>(f.warmup), seed + 0x9e3779b97f4a7c15ULL, *info);
  if (!warmup.ok()) return Fail(std::string(warmup.status().message()));
  for (auto* specs : {&*measured, &*warmup}) {
    if (absl::Status s = CheckFits(*specs, *info); !s.ok()) return Fail(std::string(s.message()));
  }

  std::string json_schema;
  if (!f.json_schema.empty()) {
    std::ifstream in(f.json_schema, std::ios::binary);
    if (!in) return Fail(absl::StrCat("cannot read --json-schema ", f.json_schema));
    json_schema.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto send = [&](const RequestSpec& spec, int index, const std::function<double()>& now) {
    StreamOptions o;
    o.timeout_s = f.timeout_s;
    o.temperature = f.temperature;
    o.json_schema = json_schema;
    o.request_id = absl::StrCat("bench-", index);
    return StreamOne(*stub, spec, o, now);
  };

  if (!warmup->empty()) {
    if (!f.no_progress) std::fprintf(stderr, "tessera-bench: %zu warm-up requests\n", warmup->size());
    LoopOptions o;
    o.max_concurrency = static_cast<int>(f.max_concurrency);
    const std::vector<RequestRecord> records = RunRequests(*warmup, o, send);
    for (const RequestRecord& r : records) {
      if (!r.ok) {
        std::fprintf(stderr, "tessera-bench: a warm-up request failed: %s: %s\n", r.status_code.c_str(),
                     r.error_message.c_str());
        break;
      }
    }
  }

  LoopOptions o;
  o.max_concurrency = static_cast<int>(f.max_concurrency);
  o.arrivals.rate = f.request_rate;
  o.arrivals.burstiness = f.burstiness;
  o.arrivals.seed = seed;
  ProgressLine progress("tessera-bench");
  const int total = static_cast<int>(measured->size());
  if (!f.no_progress) {
    progress.Update(0, total, absl::StrCat("0/", total, " requests"));
    o.on_done = [&](int done, int failed) {
      progress.Update(done, total, absl::StrCat(done, "/", total, " requests",
                                                failed > 0 ? absl::StrCat(", ", failed, " failed") : ""));
    };
  }
  const std::vector<RequestRecord> records = RunRequests(*measured, o, send);
  Slo slo{f.slo_ttft_ms, f.slo_tpot_ms};
  const Metrics metrics = ComputeMetrics(records, slo);

  Conditions c;
  c.address = f.address;
  c.label = f.label;
  c.model = info->model();
  c.dtype = info->dtype();
  c.tp = static_cast<int>(info->tp());
  c.replicas = static_cast<int>(info->replicas());
  c.block_size = static_cast<int>(info->block_size());
  c.max_context = static_cast<int>(info->max_context());
  c.vocab_size = static_cast<int>(info->vocab_size());
  c.workload = f.workload;
  c.num_requests = total;
  c.warmup_requests = static_cast<int>(warmup->size());
  c.input_len = f.workload == "fixed" ? static_cast<int>(f.input_len)
                : f.workload == "shared-prefix" ? static_cast<int>(f.prefix_len + f.suffix_len) : 0;
  c.output_len = static_cast<int>(f.output_len);
  c.dataset = f.dataset;
  c.shared_prefix = {static_cast<int>(f.num_prefixes), static_cast<int>(f.suffixes_per_prefix),
                     static_cast<int>(f.prefix_len), static_cast<int>(f.suffix_len),
                     static_cast<int>(f.output_len)};
  c.max_concurrency = static_cast<int>(f.max_concurrency);
  c.request_rate = f.request_rate;
  c.burstiness = f.burstiness;
  c.seed = seed;
  c.temperature = f.temperature;
  c.json_schema = f.json_schema;
  c.slo = slo;
  c.machine = ProbeMachine();
  c.build = ProbeBuild();
  c.date = UtcTimestamp();

  std::fputs(FormatSummary(c, metrics).c_str(), stdout);
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      std::fprintf(stderr, "tessera-bench: first failure: %s: %s\n", r.status_code.c_str(), r.error_message.c_str());
      break;
    }
  }
  if (!f.out.empty()) {
    const auto j = ResultJson(c, metrics, f.save_requests ? &records : nullptr);
    if (absl::Status s = WriteJsonFile(f.out, j); !s.ok()) return Fail(std::string(s.message()));
    if (!f.no_progress) std::fprintf(stderr, "tessera-bench: wrote %s\n", f.out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
