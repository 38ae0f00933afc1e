// `tessera serve`: a coordinator and tp x replicas workers on this machine.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/flag_set.h"
#include "common/speculative_options.h"
#include "common/tls/cluster_security.h"
#include "common/tls/throwaway_pki.h"
#include "tools/tessera/commands.h"
#include "tools/tessera/coordinator_limit_flags.h"
#include "tools/tessera/memfd_file.h"
#include "tools/tessera/process_supervisor.h"
#include "tools/tessera/serve_placement.h"

namespace tessera::cli {
namespace {

// SIGINT/SIGTERM received: the first stops the cluster, each later one is passed on to the
// coordinator (cutting its drain short).
std::atomic<int> g_stop_requests{0};
void OnSignal(int) { g_stop_requests.fetch_add(1); }

// The directory of the running executable: the coordinator and worker binaries sit beside it.
std::filesystem::path SelfDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

// A fresh random join secret, so even the demo cluster admits only the workers started
// here.
absl::StatusOr<std::string> RandomJoinSecret() {
  std::string bytes(32, '\0');
  const int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool read_all = random >= 0 && ::read(random, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  if (random >= 0) ::close(random);
  if (!read_all) return absl::InternalError("cannot read /dev/urandom");
  return absl::BytesToHexString(bytes) + "\n";
}

// The throwaway cluster PKI as memfds the children inherit (see MemfdFile).
struct PkiFiles {
  MemfdFile ca_cert, coordinator_cert, coordinator_key, worker_cert, worker_key;
};

absl::StatusOr<PkiFiles> PkiInMemory(const tls::ThrowawayPki& pki) {
  std::vector<MemfdFile> files;
  for (const auto& [name, pem] : {std::pair<const char*, const std::string*>{"tessera-ca.crt", &pki.ca_cert},
                                  {"tessera-coordinator.crt", &pki.coordinator_cert},
                                  {"tessera-coordinator.key", &pki.coordinator_key},
                                  {"tessera-worker.crt", &pki.worker_cert},
                                  {"tessera-worker.key", &pki.worker_key}}) {
    absl::StatusOr<MemfdFile> file = MemfdFile::Create(name, *pem);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  return PkiFiles{std::move(files[0]), std::move(files[1]), std::move(files[2]), std::move(files[3]),
                  std::move(files[4])};
}

// How long the throwaway cluster certificates stay valid: short, since they are thrown
// away when serve stops, yet longer than any sensible run of a local launcher (new
// connections after expiry would fail).
constexpr int64_t kThrowawayCertValiditySeconds = 30 * 24 * 3600;

// The coordinator's --drain-timeout-seconds when serve is not given one: only how long
// serve waits for it to stop, never passed on.
constexpr int64_t kCoordinatorDefaultDrainSeconds = 30;

// The cluster-TLS flags of one process: its own certificate and key, the shared CA.
std::vector<std::string> ClusterFlags(const tls::ClusterSecurity& s, const std::string& cert, const std::string& key) {
  if (s.insecure) return {"--insecure"};
  std::vector<std::string> out = {absl::StrCat("--cluster-ca=", s.ca_file), absl::StrCat("--cluster-cert=", cert),
                                  absl::StrCat("--cluster-key=", key)};
  if (!s.server_name.empty()) out.push_back(absl::StrCat("--cluster-server-name=", s.server_name));
  return out;
}

}  // namespace

int ServeMain(int argc, char** argv) {
  std::string model, host = "127.0.0.1", policy = "fcfs", communicator = "auto", device = "cpu";
  int64_t tp = 1, replicas = 1, port = 50051, cluster_port = 0, threads = 0, kv_memory_mb = 0;
  int64_t max_num_seqs = 256, block_size = 16, max_num_batched_tokens = 2048, metrics_port = 9400;
  FlagSet flags("tessera serve",
                "Starts a coordinator and tp x replicas workers on this machine and stops them\n"
                "all on Ctrl-C (SIGINT) or SIGTERM: the coordinator drains first (a second signal\n"
                "cuts the drain short), exit 0. A worker that dies is logged and restarted with the\n"
                "same flags (backoff 0.5 s doubling to 30 s); if the coordinator dies, serve stops\n"
                "the workers and exits 1; if serve dies, its children die with it. Secrets (cluster\n"
                "keys, the join secret) live in memory only. Clients connect to --port (gRPC) or\n"
                "--http-port (OpenAI-compatible HTTP).");
  flags.String("model", &model, "Model: a Hugging Face folder or a .gguf file.");
  std::string tls_cert, tls_key, tls_client_ca;
  flags.String("tls-cert", &tls_cert,
               "PEM certificate of the gRPC and HTTP APIs (with --tls-key). Without it the APIs use a certificate "
               "of the throwaway CA (see --api-ca-out), unless --insecure.");
  std::string api_ca_out;
  flags.String("api-ca-out", &api_ca_out,
               "Copy the throwaway CA certificate here, for clients of the TLS API: tessera generate --tls-ca FILE, "
               "curl --cacert FILE, openai (httpx verify=FILE).");
  flags.String("tls-key", &tls_key, "PEM private key of --tls-cert.");
  flags.String("tls-client-ca", &tls_client_ca, "PEM CA bundle that client certificates must chain to (mutual TLS).");
  std::string chat_template;
  flags.String("chat-template", &chat_template,
               "Jinja file for GenerateRequest.messages instead of the model's chat template.");
  std::string tool_call_parser;
  flags.String("tool-call-parser", &tool_call_parser,
               "How the model writes tool calls: llama3_json, hermes or mistral (default: from the chat template).");
  flags.Int("tp", &tp, "Tensor-parallel ranks per replica.");
  flags.Int("replicas", &replicas, "Replicas.");
  flags.String("host", &host, "Address the API binds to.");
  flags.Int("port", &port, "Public gRPC port.");
  flags.Int("cluster-port", &cluster_port, "Worker registration port (0: port + 1).");
  int64_t store_port = 0;
  flags.Int("store-port", &store_port, "Rendezvous store port for tp > 1 groups (0: any free port).");
  flags.Int("threads", &threads, "CPU threads per worker (0: cores / workers, at least 1).");
  flags.Int("kv-memory-mb", &kv_memory_mb, "KV-cache budget per worker in MiB (0: a share of free memory).");
  double kv_host_cache_gb = 0;
  flags.Float("kv-host-cache-gb", &kv_host_cache_gb,
              "Host memory per worker, in GiB, for a second KV tier that keeps evicted prefix-cache blocks (0: none).");
  std::string replica_roles;
  flags.String("replica-roles", &replica_roles,
               "Each replica's role, comma-separated: prefill, decode or both (e.g. prefill,decode for disaggregated "
               "prefill and decode; empty: all both).");
  flags.Int("max-num-seqs", &max_num_seqs, "Running sequences per replica at most.");
  flags.Int("max-num-batched-tokens", &max_num_batched_tokens, "Token budget of one step.");
  flags.Int("block-size", &block_size, "Tokens per KV-cache block.");
  std::string quantization = "none", kv_cache_dtype = "auto";
  flags.String("quantization", &quantization, "Weights quantized at load time: none, int8 or fp8.");
  flags.String("kv-cache-dtype", &kv_cache_dtype, "KV-cache element type: auto, bf16, fp8 or fp32.");
  bool enforce_eager = false;
  flags.Bool("enforce-eager", &enforce_eager,
             "Run every step eagerly, without CUDA graphs (the coordinator's --enforce-eager).");
  bool expert_parallel = false;
  flags.Bool("expert-parallel", &expert_parallel,
             "Mixtures of experts: whole experts per worker instead of every expert split across the tp workers.");
  flags.String("policy", &policy, "Scheduling policy: fcfs or priority.");
  SpeculativeOptions speculative;
  AddSpeculativeFlags(flags, &speculative);
  flags.Int("metrics-port", &metrics_port,
            "Coordinator /metrics, /healthz, /readyz port; worker i uses metrics-port + 1 + i (0: off).");
  int64_t http_port = 8000;
  std::string served_model_name;
  flags.Int("http-port", &http_port, "OpenAI-compatible HTTP API port (/v1/completions, /v1/chat/completions, "
                                     "/v1/models, /health; 0: off).");
  flags.String("served-model-name", &served_model_name,
               "Model name of the HTTP API (empty: the model folder's name).");
  std::string api_keys_file;
  flags.String("api-keys-file", &api_keys_file,
               "The coordinator's --api-keys-file: `sha256:<hex>` lines (see `tessera hash-api-key`); empty: "
               "the API is open.");
  flags.String("device", &device,
               "Worker backend: cpu, cuda (worker i uses cuda:i), cuda:N (every worker on device N), or auto.");
  flags.String("communicator", &communicator,
               "Collectives: auto (nccl when each rank has its own GPU, else shm), gloo, shm or nccl. With "
               "several ranks on one GPU, shm and gloo stage the device buffers through host memory.");
  tls::ClusterSecurity cluster;
  flags.Bool("insecure", &cluster.insecure,
             "Plaintext everywhere: the gRPC and HTTP APIs and the cluster traffic between the coordinator and the "
             "workers. By default serve makes a throwaway CA and certificates, held in memory only (memfds the "
             "children inherit, never on disk): TLS on the APIs and mutual TLS inside the cluster.");
  flags.String("cluster-ca", &cluster.ca_file,
               "Use this cluster CA instead of a throwaway one (with --cluster-cert and --cluster-key, shared by the "
               "coordinator and every worker).");
  flags.String("cluster-cert", &cluster.cert_file, "PEM certificate for the coordinator and the workers (see --cluster-ca).");
  flags.String("cluster-key", &cluster.key_file, "PEM private key of --cluster-cert.");
  flags.String("cluster-server-name", &cluster.server_name,
               "Name the cluster certificates carry, checked instead of 127.0.0.1 (with --cluster-cert).");
  CoordinatorLimitFlags limits;
  limits.Register(flags);
  if (auto s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (model.empty()) {
    std::fprintf(stderr, "tessera serve: --model is required\n");
    return 1;
  }
  if (tp < 1 || replicas < 1) {
    std::fprintf(stderr, "tessera serve: --tp and --replicas must be positive\n");
    return 1;
  }
  if (!api_ca_out.empty() && (cluster.insecure || cluster.tls() || !tls_cert.empty())) {
    std::fprintf(stderr,
                 "tessera serve: --api-ca-out copies the throwaway CA, which exists only without "
                 "--insecure, --tls-cert and --cluster-*\n");
    return 1;
  }
  if (cluster.insecure || cluster.tls()) {
    if (auto s = tls::ValidateClusterSecurity(cluster); !s.ok()) {
      std::fprintf(stderr, "tessera serve: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (auto s = limits.Validate(); !s.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (cluster_port == 0) cluster_port = port + 1;
  const int workers = static_cast<int>(tp * replicas);
  absl::StatusOr<ServePlacement> placement =
      PlanServePlacement(device, communicator, static_cast<int>(tp), static_cast<int>(replicas));
  if (!placement.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", std::string(placement.status().message()).c_str());
    return 1;
  }
  if (!placement->note.empty()) std::fprintf(stderr, "tessera serve: %s\n", placement->note.c_str());
  if (threads == 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / workers);
  const std::filesystem::path dir = SelfDir();

  // Secrets live only in memfds that the children inherit: nothing to clean up, so
  // nothing is left behind even when serve is SIGKILLed.
  absl::StatusOr<std::string> secret = RandomJoinSecret();
  absl::StatusOr<MemfdFile> join_secret =
      secret.ok() ? MemfdFile::Create("tessera-join-secret", *secret) : absl::StatusOr<MemfdFile>(secret.status());
  if (!join_secret.ok()) {
    std::fprintf(stderr, "tessera serve: join secret: %s\n", std::string(join_secret.status().message()).c_str());
    return 1;
  }
  // Mutual TLS by default, under a CA that lives only as long as this run.
  std::string coordinator_cert = cluster.cert_file, coordinator_key = cluster.key_file;
  std::string worker_cert = cluster.cert_file, worker_key = cluster.key_file;
  std::optional<PkiFiles> pki_files;
  if (!cluster.insecure && !cluster.tls()) {
    auto pki = tls::MakeThrowawayPki({host}, kThrowawayCertValiditySeconds);
    absl::StatusOr<PkiFiles> files = pki.ok() ? PkiInMemory(*pki) : absl::StatusOr<PkiFiles>(pki.status());
    if (!files.ok()) {
      std::fprintf(stderr, "tessera serve: cluster certificates: %s\n", std::string(files.status().message()).c_str());
      return 1;
    }
    pki_files = *std::move(files);
    cluster.ca_file = pki_files->ca_cert.child_path();
    if (tls_cert.empty() && tls_key.empty()) {
      // The coordinator's certificate names localhost, 127.0.0.1, ::1 and --host: it
      // serves the public APIs as well.
      tls_cert = pki_files->coordinator_cert.child_path();
      tls_key = pki_files->coordinator_key.child_path();
      if (!api_ca_out.empty()) {
        // The one file serve writes: a public certificate the user asked for.
        std::ofstream out(api_ca_out, std::ios::binary | std::ios::trunc);
        out << pki->ca_cert;
        if (!out.flush()) {
          std::fprintf(stderr, "tessera serve: --api-ca-out %s: cannot write it\n", api_ca_out.c_str());
          return 1;
        }
      }
      // Without --api-ca-out the CA is only in memory: its /proc path works for this user
      // while serve runs.
      std::fprintf(stderr,
                   "tessera serve: the APIs use TLS; clients trust %s (tessera generate --tls-ca, curl --cacert%s)\n",
                   api_ca_out.empty() ? pki_files->ca_cert.outside_path().c_str() : api_ca_out.c_str(),
                   api_ca_out.empty() ? "; readable while serve runs, --api-ca-out FILE keeps a copy" : "");
    }
    coordinator_cert = pki_files->coordinator_cert.child_path();
    coordinator_key = pki_files->coordinator_key.child_path();
    worker_cert = pki_files->worker_cert.child_path();
    worker_key = pki_files->worker_key.child_path();
    std::fprintf(stderr,
                 "tessera serve: cluster traffic uses mutual TLS (a throwaway CA; its certificates and keys are "
                 "held in memory only, never on disk)\n");
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::vector<std::string> coordinator_args = {(dir / "tessera-coordinator").string(), "--model", model, "--host", host,
                            "--port", absl::StrCat(port), "--cluster-port", absl::StrCat(cluster_port),
                            "--store-port", absl::StrCat(store_port), "--tp", absl::StrCat(tp), "--replicas", absl::StrCat(replicas),
                            "--kv-memory-mb", absl::StrCat(kv_memory_mb),
                            "--kv-host-cache-gb", absl::StrCat(kv_host_cache_gb),
                            absl::StrCat("--replica-roles=", replica_roles), "--max-num-seqs",
                            absl::StrCat(max_num_seqs), "--block-size", absl::StrCat(block_size),
                            "--max-num-batched-tokens", absl::StrCat(max_num_batched_tokens),
                            "--policy", policy, "--communicator", placement->communicator,
                            "--quantization", quantization, "--kv-cache-dtype", kv_cache_dtype,
                            "--metrics-port", absl::StrCat(metrics_port), "--http-port", absl::StrCat(http_port),
                            absl::StrCat("--served-model-name=", served_model_name),
                            "--join-secret-file", join_secret->child_path()};
  if (expert_parallel) coordinator_args.push_back("--expert-parallel");
  if (enforce_eager) coordinator_args.push_back("--enforce-eager");
  if (!api_keys_file.empty()) {
    coordinator_args.push_back("--api-keys-file");
    coordinator_args.push_back(api_keys_file);
  }
  if (!speculative.draft_model.empty()) {
    speculative.draft_model = std::filesystem::absolute(speculative.draft_model).string();
  }
  for (std::string& flag : SpeculativeFlagArgs(speculative)) coordinator_args.push_back(std::move(flag));
  if (!chat_template.empty()) {
    coordinator_args.push_back("--chat-template");
    coordinator_args.push_back(chat_template);
  }
  if (!tool_call_parser.empty()) {
    coordinator_args.push_back("--tool-call-parser");
    coordinator_args.push_back(tool_call_parser);
  }
  // Only when given: an empty --tls-cert would read as "plaintext" too, but the
  // coordinator's own checks (both or neither) should see exactly what the user passed.
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--tls-cert", &tls_cert},
                                    {"--tls-key", &tls_key},
                                    {"--tls-client-ca", &tls_client_ca}}) {
    if (!value->empty()) coordinator_args.push_back(absl::StrCat(flag, "=", *value));
  }
  for (std::string& flag : ClusterFlags(cluster, coordinator_cert, coordinator_key)) {
    coordinator_args.push_back(std::move(flag));
  }
  for (std::string& flag : limits.Args()) coordinator_args.push_back(std::move(flag));
  std::vector<std::vector<std::string>> worker_args;
  for (int w = 0; w < workers; ++w) {
    std::vector<std::string> args = {(dir / "tessera-worker").string(), "--coordinator",
                                     absl::StrCat("127.0.0.1:", cluster_port), "--join-secret-file",
                                     join_secret->child_path(), "--threads", absl::StrCat(threads),
                                     "--device", placement->worker_devices[w],
                                     "--rank-hint", absl::StrCat(w % tp), "--metrics-port",
                                     absl::StrCat(metrics_port > 0 ? metrics_port + 1 + w : 0)};
    for (std::string& flag : ClusterFlags(cluster, worker_cert, worker_key)) args.push_back(std::move(flag));
    worker_args.push_back(std::move(args));
  }
  ProcessSupervisor supervisor(std::move(coordinator_args), std::move(worker_args));
  if (absl::Status s = supervisor.Start(); !s.ok()) {
    std::fprintf(stderr, "tessera serve: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const bool stop_requested = supervisor.Supervise(g_stop_requests);
  if (!stop_requested) std::fprintf(stderr, "tessera serve: the coordinator died; stopping the workers\n");
  // The coordinator drains for up to its --drain-timeout-seconds; a margin past that
  // before SIGKILL.
  const int64_t drain_s = limits.IntValue("drain-timeout-seconds").value_or(kCoordinatorDefaultDrainSeconds);
  supervisor.Stop(g_stop_requests, std::chrono::seconds(std::max<int64_t>(drain_s, 0) + 15), std::chrono::seconds(10));
  // The memfds (and with them every secret) go as this process exits.
  if (!stop_requested) {
    std::fprintf(stderr, "tessera serve: stopped because the coordinator died\n");
    return 1;
  }
  std::fprintf(stderr, "tessera serve: stopped\n");
  return 0;
}

}  // namespace tessera::cli
