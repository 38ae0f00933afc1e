// tessera-coordinator: the public gRPC API, the scheduler and the cluster of workers.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth/api_keys.h"
#include "common/auth/secret.h"
#include "common/flag_set.h"
#include "common/grpc_channel.h"
#include "common/tls/cluster_credentials.h"
#include "common/tls/cluster_security.h"
#include "coordinator/tls/grpc_server_tls.h"
#include "common/generation_config.h"
#include "common/logging.h"
#include "common/metrics/http_server.h"
#include "common/metrics/process_collector.h"
#include "common/model_config.h"
#include "common/tensor_parallel.h"
#include "common/net/connection_limits.h"
#include "common/net/grpc_listener.h"
#include "common/net/listener_collector.h"
#include "common/speculative_options.h"
#include "common/chat_template/chat_template.h"
#include "common/checkpoint_quantization.h"
#include "common/quantization.h"
#include "common/tokenizer/token_bytes.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/generation_service.h"
#include "coordinator/api/reflection_auth_interceptor.h"
#include "coordinator/api/unparseable_request_interceptor.h"
#include "coordinator/cluster/cluster_manager.h"
#include "coordinator/engine/engine.h"
#include "coordinator/http/api_key_gate.h"
#include "coordinator/http/openai_response.h"
#include "coordinator/http/http_server.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/http/tool_calls.h"
#include "coordinator/metrics/engine_metrics.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signals{0};  // A second SIGTERM/SIGINT cuts the drain short.
void OnSignal(int) {
  g_stop = true;
  g_signals.fetch_add(1);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-coordinator: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, host = "127.0.0.1", cluster_host = "127.0.0.1", policy = "fcfs", communicator = "auto";
  int64_t port = 50051, cluster_port = 50052, tp = 1, replicas = 1, block_size = 16;
  int64_t max_num_seqs = 256, max_num_batched_tokens = 2048, max_model_len = 0;
  int64_t kv_memory_mb = 0, heartbeat_ms = 1000, collective_timeout_ms = 10000;
  double kv_memory_fraction = 0.5, load_weight = 1.0;
  bool no_prefix_caching = false;
  bool expert_parallel = false, enforce_eager = false;
  int64_t metrics_port = 9400;
  std::string metrics_host, log_format = "text", log_level = "info";
  std::string generation_config = "auto";
  std::string chat_template_file;
  std::string tool_call_parser;
  tessera::FlagSet flags("tessera-coordinator",
                         "Serves tessera.v1.Generation over gRPC and drives tensor-parallel worker\n"
                         "groups: workers register on the cluster port and are formed into\n"
                         "`replicas` groups of `tp` ranks.");
  flags.String("model", &model, "Model folder (config.json, tokenizer.json) or .gguf file; workers read the weights from the same path.");
  flags.String("host", &host, "Address the public API binds to.");
  flags.Int("port", &port, "Public gRPC port (Generation, health, reflection).");
  flags.String("cluster-host", &cluster_host, "Address the worker-facing port (and the Gloo rendezvous store) binds to.");
  flags.Int("cluster-port", &cluster_port, "Port workers register on.");
  std::string join_secret_file;
  int64_t max_pending_workers = 0;
  flags.String("join-secret-file", &join_secret_file,
               "File holding the cluster's join secret: workers must present the same (their "
               "--join-secret-file) to register. Empty: anyone reaching --cluster-port may join.");
  flags.Int("max-pending-workers", &max_pending_workers,
            "Registered workers waiting for a group at most; more get RESOURCE_EXHAUSTED (0: 4 x tp x replicas).");
  int64_t store_port = 0;
  tessera::tls::ClusterSecurity cluster_security;
  tessera::tls::AddClusterSecurityFlags(flags, &cluster_security);
  flags.Int("store-port", &store_port,
            "Port of the collectives' rendezvous store (on --cluster-host, tp > 1 only; 0: any free port).");
  flags.Int("tp", &tp, "Tensor-parallel ranks per replica.");
  flags.Bool("enforce-eager", &enforce_eager,
             "Workers run every step eagerly, without CUDA graphs (as vLLM's flag): for debugging "
             "a graph problem or to save the graphs' memory. By default CUDA workers replay graphs.");
  flags.Bool("expert-parallel", &expert_parallel,
             "Mixtures of experts: each rank holds whole experts (num_experts / tp of them) instead of "
             "a 1/tp slice of every expert. Attention stays tensor-parallel.");
  flags.Int("replicas", &replicas, "Replicas (groups of tp workers).");
  flags.Int("block-size", &block_size, "Tokens per KV-cache block.");
  flags.Int("max-num-seqs", &max_num_seqs, "Running sequences per replica at most.");
  flags.Int("max-num-batched-tokens", &max_num_batched_tokens, "Token budget of one step.");
  flags.Int("max-model-len", &max_model_len, "Context limit (0: the model's max_position_embeddings).");
  flags.Float("kv-memory-fraction", &kv_memory_fraction, "Share of a worker's free memory after loading given to the KV cache.");
  flags.Int("kv-memory-mb", &kv_memory_mb, "Fixed KV-cache budget per worker in MiB (overrides the fraction).");
  std::string replica_roles;
  flags.String("replica-roles", &replica_roles,
               "Disaggregated prefill and decode: each replica's role, by index, comma-separated: prefill, decode or "
               "both (e.g. prefill,decode; replicas past the list: both). A request starts on a prefill replica, "
               "streams its first token from there, and its KV moves rank to rank to a decode replica of the same tp "
               "size, which generates the rest, so long prompts stop stalling decoding streams. Empty: all both.");
  double kv_host_cache_gb = 0;
  flags.Float("kv-host-cache-gb", &kv_host_cache_gb,
              "Host memory per worker, in GiB, for a second KV tier (0: none): prefix-cache blocks evicted from the "
              "device pool are kept there and loaded back on a prefix hit instead of recomputed, as vLLM's CPU "
              "offloading and SGLang's HiCache. Needs prefix caching.");
  double gpu_memory_utilization = 0;
  flags.Float("gpu-memory-utilization", &gpu_memory_utilization,
              "Share of each worker's device memory (the host's RAM on the CPU backend), in (0, 1], that it may "
              "use for weights, activations and the KV cache together, as vLLM's flag: the KV cache gets what the "
              "weights and the largest step's activations leave of it. A share too small for one sequence of "
              "the full context, or more than other processes leave free, stops the coordinator at startup "
              "with the numbers. 0: --kv-memory-fraction sizes the KV cache; --kv-memory-mb overrides both.");
  std::string quantization = "none", kv_cache_dtype = "auto";
  flags.String("quantization", &quantization,
               "Weights quantized at load time: none, int8 (W8A16, per-channel scales) or fp8 (E4M3, "
               "per-channel scales). Pre-quantized checkpoints need no flag.");
  flags.String("kv-cache-dtype", &kv_cache_dtype,
               "KV-cache element type: auto (the model's 16-bit type; fp32 for fp32 models), bf16, "
               "fp8 (E4M3, a scale per token and head) or fp32.");
  tessera::SpeculativeOptions speculative;
  tessera::AddSpeculativeFlags(flags, &speculative);
  flags.String("policy", &policy, "Scheduling policy: fcfs or priority.");
  flags.String("communicator", &communicator, "Collectives between ranks: auto (nccl when every CUDA rank has a GPU of its own, else shm when a group shares a host, else gloo; ranks sharing a GPU stage through host memory), gloo, shm or nccl.");
  flags.Bool("no-prefix-caching", &no_prefix_caching, "Disable prefix caching.");
  flags.String("generation-config", &generation_config,
               "Request defaults and extra stop ids: auto (the model folder's generation_config.json, "
               "when it has one), none (Tessera's defaults), or a folder holding generation_config.json.");
  flags.String("chat-template", &chat_template_file,
               "Jinja file that turns GenerateRequest.messages into the prompt, instead of the model's own "
               "template (chat_template.jinja or tokenizer_config.json's chat_template).");
  flags.String("tool-call-parser", &tool_call_parser,
               "How the model writes tool calls (OpenAI API tools): llama3_json, hermes or mistral; "
               "default: told from the chat template.");
  flags.Float("router-load-weight", &load_weight, "Router: blocks of load worth one block of prefill.");
  flags.Int("heartbeat-ms", &heartbeat_ms, "Interval of worker health probes.");
  flags.Int("collective-timeout-ms", &collective_timeout_ms, "Timeout of every collective on the workers.");
  int64_t max_input_bytes = 0, max_concurrent_streams = 512, max_undelivered_tokens = 256;
  flags.Int("max-input-bytes", &max_input_bytes,
            "Largest text (prompt text, Tokenize text) accepted, in bytes, checked before tokenizing "
            "(0: 16 bytes per context token, at most 64 MiB).");
  int64_t max_inflight_input_bytes = 0;
  flags.Int("max-inflight-input-bytes", &max_inflight_input_bytes,
            "Bytes of input text being tokenized at once over all requests (Tokenize, Generate text and messages, "
            "HTTP completions and chat); a request beyond it is refused at once with RESOURCE_EXHAUSTED (HTTP 429) "
            "(0: 64 MiB, or --max-input-bytes when that is larger; at least --max-input-bytes).");
  std::string chat_special_tokens = "parse";
  flags.String("chat-special-tokens", &chat_special_tokens,
               "Special-token text (\"<|im_end|>\", \"</s>\") written inside chat messages: parse (the special "
               "tokens, as Hugging Face and vLLM do) or plain (ordinary text; the template's own stay special).");
  flags.Int("max-concurrent-streams", &max_concurrent_streams,
            "Generate and GenerateStream calls served at once; more get RESOURCE_EXHAUSTED. Also bounds "
            "the API's threads (gRPC's synchronous server uses one per call). The HTTP API counts its "
            "generations apart against the same bound (beyond it: 429).");
  flags.Int("max-undelivered-tokens", &max_undelivered_tokens,
            "Tokens a stream may have waiting for a client that does not read; past that the request is "
            "cancelled (RESOURCE_EXHAUSTED) and its KV blocks freed.");
  // Aging on by default: under strict priority a steady stream of high priorities starves
  // the low ones forever.
  int64_t max_queued_requests = 0, max_queued_tokens = 0, priority_aging = 256;
  flags.Int("max-queued-requests", &max_queued_requests,
            "Requests waiting per replica at most; beyond that RESOURCE_EXHAUSTED at once (0: no bound).");
  flags.Int("max-queued-tokens", &max_queued_tokens,
            "Prompt tokens waiting per replica at most; beyond that RESOURCE_EXHAUSTED at once (0: no bound).");
  flags.Int("priority-aging", &priority_aging,
            "--policy=priority: later arrivals one priority level is worth, so a low priority waits behind at most "
            "this many per level (0: strict priority, which can starve low priorities).");
  tessera::net::ConnectionLimits connection_limits;
  connection_limits.AddFlags(flags);
  int64_t drain_timeout_seconds = 30;
  flags.Int("drain-timeout-seconds", &drain_timeout_seconds,
            "On SIGTERM: refuse new requests and let running ones finish for at most this long, then exit.");
  int64_t http_port = 0, http_threads = 2;
  std::string http_host, served_model_name;
  flags.Int("http-port", &http_port,
            "Port of the OpenAI-compatible HTTP API: /v1/completions, /v1/chat/completions, /v1/models, /health "
            "(0: disabled; `tessera serve` enables it on 8000).");
  flags.String("http-host", &http_host, "Address the HTTP API binds to (empty: same as --host).");
  flags.Int("http-threads", &http_threads, "I/O threads of the HTTP API (connections do not hold threads).");
  flags.String("served-model-name", &served_model_name,
               "The model name the HTTP API answers to (\"model\" in requests, /v1/models); empty: the model "
               "folder's name.");
  std::string api_keys_file;
  flags.String("api-keys-file", &api_keys_file,
               "File of the public API's keys, one `sha256:<hex digest of the key>` line each (make one with "
               "`tessera hash-api-key`). Every gRPC call and HTTP request but GET /health then needs "
               "`authorization: Bearer <key>`. Reread when it changes (keys rotate without a restart). "
               "Empty: the API is open.");
  flags.Int("metrics-port", &metrics_port, "HTTP port of /metrics, /healthz and /readyz (0: disabled).");
  flags.String("metrics-host", &metrics_host, "Address the metrics port binds to (empty: same as --host).");
  tessera::tls::TlsFiles tls_files;
  flags.String("tls-cert", &tls_files.cert_file,
               "PEM certificate chain of the public gRPC and HTTP ports (with --tls-key: TLS; reloaded when "
               "the file changes).");
  flags.String("tls-key", &tls_files.key_file, "PEM private key of --tls-cert.");
  flags.String("tls-client-ca", &tls_files.client_ca_file,
               "PEM CA bundle: clients must present a certificate it signed (mutual TLS).");
  flags.String("log-format", &log_format, "Log lines on stderr: text or json.");
  flags.String("log-level", &log_level, "Least severe level logged: debug, info, warning or error.");
  if (auto s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (auto s = tessera::ConfigureLogging(log_format, log_level); !s.ok()) return Fail(std::string(s.message()));
  if (model.empty()) return Fail("--model is required");
  if (auto s = tessera::tls::Validate(tls_files); !s.ok()) return Fail(std::string(s.message()));
  if (auto s = tessera::tls::ValidateClusterSecurity(cluster_security); !s.ok()) return Fail(std::string(s.message()));
  tessera::tls::LogClusterSecurity(cluster_security, "tessera-coordinator");
  if (!tls_files.enabled()) {
    std::fprintf(stderr,
                 "tessera-coordinator: warning: the public gRPC and HTTP APIs are plaintext; pass --tls-cert and "
                 "--tls-key outside a trusted network\n");
  }
  if (communicator != "auto" && communicator != "gloo" && communicator != "shm" &&
      communicator != "nccl") {
    return Fail(absl::StrCat("--communicator must be auto, gloo, shm or nccl, got ", communicator));
  }
  if (tp < 1 || replicas < 1) return Fail(absl::StrCat("--tp and --replicas must be positive, got ", tp, " and ", replicas));
  if (policy != "fcfs" && policy != "priority") return Fail(absl::StrCat("--policy must be fcfs or priority, got ", policy));
  if (!(gpu_memory_utilization >= 0 && gpu_memory_utilization <= 1)) {
    return Fail(absl::StrCat("--gpu-memory-utilization must be in (0, 1] (0: unset), got ", gpu_memory_utilization));
  }
  auto roles = tessera::ParseReplicaRoles(replica_roles);
  if (!roles.ok()) return Fail(absl::StrCat("--replica-roles: ", roles.status().message()));
  if (static_cast<int64_t>(roles->size()) > replicas) {
    return Fail(absl::StrCat("--replica-roles names ", roles->size(), " replicas; --replicas is ", replicas));
  }
  if (!(kv_host_cache_gb >= 0)) return Fail(absl::StrCat("--kv-host-cache-gb must be >= 0, got ", kv_host_cache_gb));
  if (kv_host_cache_gb > 0 && no_prefix_caching) {
    return Fail("--kv-host-cache-gb keeps prefix-cache blocks, so it needs prefix caching (drop --no-prefix-caching)");
  }
  if (gpu_memory_utilization > 0 && kv_memory_mb > 0) {
    tessera::Log(tessera::LogLevel::kWarning, "tessera-coordinator",
                 "--kv-memory-mb sizes the KV cache; --gpu-memory-utilization is ignored");
  }
  if (auto s = connection_limits.Validate(); !s.ok()) return Fail(std::string(s.message()));
  // Before any socket or file is opened: the limit is raised and the reserve set aside.
  const tessera::net::FdBudget fd_budget = tessera::net::ConfigureFdBudget(connection_limits.fd_reserve);
  const tessera::net::ConnectionLimits::Caps connection_caps = connection_limits.CapsUnder(fd_budget);
  tessera::net::LogConnectionCaps(fd_budget, connection_caps);

  auto config = tessera::ModelConfig::Load(model);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  if (auto s = tessera::ValidateSpeculativeOptions(speculative); !s.ok()) return Fail(std::string(s.message()));
  if (speculative.method == "draft") {
    auto draft_config = tessera::ModelConfig::Load(speculative.draft_model);
    if (!draft_config.ok()) return Fail(absl::StrCat("--draft-model: ", draft_config.status().message()));
    if (draft_config->vocab_size != config->vocab_size) {
      return Fail(absl::StrCat("--draft-model has a vocabulary of ", draft_config->vocab_size, " tokens, --model ",
                               config->vocab_size, ": the draft must use the target's tokenizer"));
    }
    speculative.draft_model = std::filesystem::absolute(speculative.draft_model).string();
  }
  // Refused here with the numbers (uneven expert counts, a dense model), not by every worker.
  if (auto layout = tessera::ShardLayout::Make(*config, 0, static_cast<int>(tp), expert_parallel); !layout.ok()) {
    return Fail(absl::StrCat(
        "--tp ", tp, expert_parallel ? " --expert-parallel" : "", ": ",
        tessera::WithValidTensorParallelSizes(layout.status(), *config, expert_parallel).message()));
  }
  const auto weight_format = tessera::ParseWeightQuantization(quantization);
  if (!weight_format.ok()) return Fail(absl::StrCat("--quantization: ", weight_format.status().message()));
  // A pre-quantized checkpoint (FP8, GPTQ/AWQ) is served as stored: --quantization on top
  // of it is refused here, before any worker loads, and GetModelInfo and the metrics
  // report the checkpoint's format instead of the flag.
  const auto checkpoint_quantization = tessera::LoadCheckpointQuantizationName(model);
  if (!checkpoint_quantization.ok()) return Fail(std::string(checkpoint_quantization.status().message()));
  if (auto s = tessera::CheckLoadTimeQuantization(quantization, *checkpoint_quantization, model); !s.ok()) {
    return Fail(absl::StrCat("--quantization: ", s.message()));
  }
  const std::string reported_quantization =
      checkpoint_quantization->empty() ? std::string(tessera::WeightQuantizationName(*weight_format))
                                       : *checkpoint_quantization;
  const auto kv_format = tessera::ParseKvCacheDType(kv_cache_dtype);
  if (!kv_format.ok()) return Fail(absl::StrCat("--kv-cache-dtype: ", kv_format.status().message()));
  const tessera::DType kv_dtype = tessera::ResolveKvCacheDType(*kv_format, config->torch_dtype);
  const std::string kv_dtype_name(tessera::KvCacheDTypeName(kv_dtype));
  const uint64_t kv_bytes_per_token = tessera::KvCacheBytesPerToken(
      config->num_hidden_layers, config->num_key_value_heads, config->head_dim, kv_dtype);
  auto tokenizer = tessera::Tokenizer::Load(model);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  // Loaded once: every `messages` request renders with it. Without one, such requests get
  // FAILED_PRECONDITION while text and token_ids serve as before.
  std::unique_ptr<tessera::ChatTemplate> chat_template;
  absl::Status chat_template_status;  // Why there is none, for the HTTP API's errors.
  if (!chat_template_file.empty()) {
    auto loaded = tessera::ChatTemplate::LoadOverride(model, chat_template_file);
    if (!loaded.ok()) return Fail(absl::StrCat("--chat-template: ", loaded.status().message()));
    chat_template = *std::move(loaded);
  } else if (auto loaded = tessera::ChatTemplate::Load(model); loaded.ok()) {
    chat_template = *std::move(loaded);
  } else if (chat_template_status = loaded.status();
             loaded.status().code() == absl::StatusCode::kNotFound) {
    tessera::Log(tessera::LogLevel::kInfo, "tessera-coordinator",
                 "the model has no chat template; messages input will be refused (see --chat-template)");
  } else {
    tessera::Log(tessera::LogLevel::kWarning, "tessera-coordinator",
                 "the model's chat template does not load; messages input will be refused (see --chat-template)",
                 {{"error", std::string(loaded.status().message())}});
  }
  tessera::GenerationConfig defaults;
  if (generation_config != "none") {
    auto loaded = tessera::GenerationConfig::LoadIfPresent(
        generation_config == "auto" ? std::filesystem::path(model) : std::filesystem::path(generation_config),
        *config);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
    defaults = *std::move(loaded);
  }
  model = std::filesystem::absolute(model).string();

  tessera::EngineOptions eo;
  eo.block_size = static_cast<int>(block_size);
  eo.max_num_batched_tokens = static_cast<int>(max_num_batched_tokens);
  eo.max_num_seqs = static_cast<int>(max_num_seqs);
  const int context = max_model_len > 0 ? static_cast<int>(max_model_len) : config->max_position_embeddings;
  eo.max_model_len = context;
  eo.policy = policy == "priority" ? tessera::sched::SchedulingPolicy::kPriority
                                   : tessera::sched::SchedulingPolicy::kFcfs;
  eo.enable_prefix_caching = !no_prefix_caching;
  if (max_queued_requests < 0 || max_queued_tokens < 0 || priority_aging < 0) {
    return Fail(absl::StrCat("--max-queued-requests, --max-queued-tokens and --priority-aging must be >= 0, got ",
                             max_queued_requests, ", ", max_queued_tokens, " and ", priority_aging));
  }
  eo.max_queued_requests = static_cast<int>(max_queued_requests);
  eo.max_queued_tokens = max_queued_tokens;
  eo.priority_aging_arrivals = static_cast<int>(priority_aging);
  eo.router_load_weight = load_weight;
  eo.replica_roles = *roles;
  eo.num_speculative_tokens = speculative.enabled() ? static_cast<int>(speculative.num_tokens) : 0;
  eo.eos_token_ids = defaults.StopTokenIds(*config);
  tessera::EngineMetrics metrics({std::filesystem::path(model).filename().string(),
                                  tessera::DTypeName(config->torch_dtype), static_cast<int>(block_size),
                                  static_cast<int>(tp), static_cast<int>(replicas),
                                  reported_quantization, kv_dtype_name, kv_bytes_per_token});
  eo.metrics = &metrics;
  tessera::Engine engine(tokenizer->get(), eo);
  engine.set_heartbeat_interval(std::chrono::milliseconds(heartbeat_ms));

  tessera::ClusterOptions co;
  co.tp = static_cast<int>(tp);
  co.replicas = static_cast<int>(replicas);
  co.store_host = cluster_host;
  if (store_port < 0 || store_port > 65535) return Fail(absl::StrCat("--store-port must be in [0, 65535], got ", store_port));
  co.store_port = static_cast<int>(store_port);
  if (max_pending_workers < 0) return Fail(absl::StrCat("--max-pending-workers must be >= 0, got ", max_pending_workers));
  co.max_pending_workers = static_cast<int>(max_pending_workers);
  if (!join_secret_file.empty()) {
    auto secret = tessera::auth::ReadSecretFile(join_secret_file);
    if (!secret.ok()) return Fail(absl::StrCat("--join-secret-file: ", secret.status().message()));
    co.join_secret = *std::move(secret);
  } else {
    tessera::Log(tessera::LogLevel::kWarning, "tessera-coordinator",
                 "no --join-secret-file: any process that reaches the cluster port can join as a worker");
  }
  // Rank 0 of every group masks constrained sequences against these (structured outputs).
  co.group.token_bytes =
      std::make_shared<const std::vector<std::string>>(tessera::TokenByteStrings(**tokenizer));
  co.group.special_token_ids = tessera::SpecialTokenIds(**tokenizer);
  co.store_security = tessera::tls::StoreSecurity(cluster_security, "");  // The manager adds the join secret.
  co.group.worker_credentials = tessera::tls::ClusterChannelCredentials(cluster_security);
  co.group.worker_server_name = cluster_security.insecure ? "" : cluster_security.server_name;
  co.group.model_dir = model;
  co.group.communicator = communicator;
  co.group.block_size = static_cast<int>(block_size);
  co.group.kv_memory_fraction = kv_memory_fraction;
  co.group.kv_memory_bytes = static_cast<uint64_t>(kv_memory_mb) << 20;
  co.group.kv_host_cache_bytes = static_cast<uint64_t>(std::max(kv_host_cache_gb, 0.0) * (1ull << 30));
  co.group.gpu_memory_utilization = gpu_memory_utilization;
  co.group.max_num_seqs = static_cast<int>(max_num_seqs);
  co.group.max_num_tokens = static_cast<int>(max_num_batched_tokens);
  co.group.quantization = std::string(tessera::WeightQuantizationName(*weight_format));
  co.group.kv_cache_dtype = kv_cache_dtype;
  co.group.expert_parallel = expert_parallel;
  co.group.enforce_eager = enforce_eager;
  if (speculative.enabled()) {
    co.group.speculative_method = speculative.method;
    co.group.num_speculative_tokens = static_cast<int>(speculative.num_tokens);
    co.group.draft_model_dir = speculative.draft_model;
    co.group.prompt_lookup_min = static_cast<int>(speculative.prompt_lookup_min);
    co.group.prompt_lookup_max = static_cast<int>(speculative.prompt_lookup_max);
  }
  co.group.max_blocks = static_cast<int>(max_num_seqs * ((context + block_size - 1) / block_size) + 1);
  co.group.collective_timeout = std::chrono::milliseconds(collective_timeout_ms);
  auto cluster = tessera::ClusterManager::Create(co, &engine);
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));

  tessera::ServingLimits limits;
  limits.vocab_size = config->vocab_size;
  limits.max_context = context;
  constexpr int64_t kMaxInputBytesCap = int64_t{64} << 20;
  if (max_input_bytes < 0 || max_input_bytes > kMaxInputBytesCap) {
    return Fail(absl::StrCat("--max-input-bytes must be in [0, ", kMaxInputBytesCap, "], got ", max_input_bytes));
  }
  limits.max_input_bytes = max_input_bytes > 0 ? max_input_bytes : std::min<int64_t>(int64_t{context} * 16, kMaxInputBytesCap);
  if (max_inflight_input_bytes == 0) max_inflight_input_bytes = std::max<int64_t>(int64_t{64} << 20, limits.max_input_bytes);
  if (max_inflight_input_bytes < limits.max_input_bytes) {
    return Fail(absl::StrCat("--max-inflight-input-bytes must be at least --max-input-bytes (", limits.max_input_bytes,
                             "), got ", max_inflight_input_bytes));
  }
  limits.input_budget = std::make_shared<tessera::InputBudget>(max_inflight_input_bytes);
  if (chat_special_tokens != "parse" && chat_special_tokens != "plain") {
    return Fail(absl::StrCat("--chat-special-tokens must be parse or plain, got ", chat_special_tokens));
  }
  limits.chat_plain_special_tokens = chat_special_tokens == "plain";
  if (max_concurrent_streams < 1 || max_undelivered_tokens < 1) {
    return Fail(absl::StrCat("--max-concurrent-streams and --max-undelivered-tokens must be positive, got ",
                             max_concurrent_streams, " and ", max_undelivered_tokens));
  }
  limits.max_concurrent_streams = static_cast<int>(max_concurrent_streams);
  limits.max_undelivered_tokens = static_cast<int>(max_undelivered_tokens);
  limits.default_sampling = defaults.DefaultSampling();
  if (defaults.max_new_tokens.has_value()) {
    limits.default_max_new_tokens = std::min(*defaults.max_new_tokens, context - 1);
  }
  tessera::ModelDescription desc{std::filesystem::path(model).filename().string(),
                                 tessera::DTypeName(config->torch_dtype), static_cast<int>(tp),
                                 static_cast<int>(replicas), static_cast<int>(block_size),
                                 reported_quantization, kv_dtype_name, kv_bytes_per_token};
  desc.total_parameters = static_cast<uint64_t>(config->NumParameters());
  desc.active_parameters = static_cast<uint64_t>(config->NumActiveParameters());
  desc.num_experts = config->moe.num_experts;
  desc.experts_per_token = config->moe.top_k;
  desc.expert_parallel = expert_parallel;
  tessera::GenerationServiceImpl api(&engine, tokenizer->get(), limits, desc, chat_template.get());
  api.set_pending_workers([cluster = cluster->get()] { return cluster->PendingWorkers(); });
  std::unique_ptr<tessera::auth::ApiKeyStore> api_keys;
  if (!api_keys_file.empty()) {
    auto opened = tessera::auth::ApiKeyStore::Open(api_keys_file);
    if (!opened.ok()) return Fail(absl::StrCat("--api-keys-file: ", opened.status().message()));
    api_keys = *std::move(opened);
    api.set_api_keys(api_keys.get());
  } else {
    tessera::Log(tessera::LogLevel::kWarning, "tessera-coordinator",
                 "no --api-keys-file: the public API (gRPC and HTTP) is open to anyone who can reach it");
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder public_builder;
  // Our own accept loop instead of AddListeningPort: see common/net/grpc_listener.h.
  auto public_listener = tessera::net::GrpcListener::Bind(
      {"grpc", host, static_cast<int>(port), connection_caps.grpc});
  if (!public_listener.ok()) return Fail(std::string(public_listener.status().message()));
  (*public_listener)->AddTo(public_builder, tessera::tls::PublicServerCredentials(tls_files));
  const int bound_port = (*public_listener)->port();
  // Connections that never finish their handshake, and idle ones, give their descriptor
  // back (gRPC's defaults: 120 s, never).
  public_builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                                    static_cast<int>(connection_limits.handshake_timeout_seconds * 1000));
  public_builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                    static_cast<int>(connection_limits.idle_timeout_seconds * 1000));
  public_builder.RegisterService(&api);
  // Sized on purpose: the largest text allowed, or a full context of token ids at 10 bytes
  // each (a negative int32 varint), plus room for the other fields. A bigger message is
  // refused by gRPC (RESOURCE_EXHAUSTED) before any of it is parsed.
  const int64_t max_message = std::max<int64_t>(limits.max_input_bytes, int64_t{context} * 10) + (64 << 10);
  public_builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  // Threads: the Generation service is on the callback API (gRPC's fixed pool, none per
  // call); only health and reflection are synchronous, and this bounds their threads.
  grpc::ResourceQuota quota("tessera-public-api");
  quota.SetMaxThreads(16);
  public_builder.SetResourceQuota(quota);
  public_builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(max_concurrent_streams));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(tessera::UnparseableRequestInterceptorFactory());
  // Reflection asks for the API key too; health stays open for probes (see the header).
  if (api_keys != nullptr) interceptors.push_back(tessera::ReflectionAuthInterceptorFactory(api_keys.get()));
  public_builder.experimental().SetInterceptorCreators(std::move(interceptors));
  tessera::RateLimitProtobufLogging();
  auto public_server = public_builder.BuildAndStart();
  if (public_server == nullptr) return Fail(absl::StrCat("cannot start the gRPC API on ", host, ":", port));
  (*public_listener)->Start();

  grpc::ServerBuilder cluster_builder;
  auto cluster_listener = tessera::net::GrpcListener::Bind(
      {"cluster", cluster_host, static_cast<int>(cluster_port), connection_caps.cluster});
  if (!cluster_listener.ok()) return Fail(std::string(cluster_listener.status().message()));
  (*cluster_listener)->AddTo(cluster_builder, tessera::tls::ClusterServerCredentials(cluster_security));
  const int bound_cluster_port = (*cluster_listener)->port();
  cluster_builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                                     static_cast<int>(connection_limits.handshake_timeout_seconds * 1000));
  tessera::AllowClusterKeepalive(cluster_builder);
  cluster_builder.RegisterService(cluster->get());
  auto cluster_server = cluster_builder.BuildAndStart();
  if (cluster_server == nullptr) {
    return Fail(absl::StrCat("cannot start the cluster port on ", cluster_host, ":", cluster_port));
  }
  (*cluster_listener)->Start();
  metrics.readiness().WatchListener(&(*public_listener)->stats());
  metrics.readiness().WatchListener(&(*cluster_listener)->stats());
  std::vector<const tessera::net::ListenerStats*> listener_stats = {&(*public_listener)->stats(),
                                                                    &(*cluster_listener)->stats()};
  std::fprintf(stderr, "tessera-coordinator: API on %s:%d%s, workers register on %s:%d%s (tp=%lld, replicas=%lld)\n",
               host.c_str(), bound_port, tls_files.enabled() ? " (TLS)" : " (plaintext)", cluster_host.c_str(), bound_cluster_port,
               cluster_security.insecure ? " (plaintext, --insecure)" : " (mutual TLS)",
               static_cast<long long>(tp), static_cast<long long>(replicas));

  // The OpenAI-compatible HTTP API: the same engine, validation and limits as gRPC, its
  // own --max-concurrent-streams count, and metrics labelled protocol="http".
  tessera::Admission http_admission(&engine, tokenizer->get(), limits, chat_template.get(), "http");
  tessera::http::OpenAiServing openai;
  std::unique_ptr<tessera::http::Router> openai_router;
  std::unique_ptr<tessera::http::HttpServer> http_server;
  if (http_port > 0) {
    if (http_port > 65535 || http_threads < 1) {
      return Fail(absl::StrCat("--http-port must be in [0, 65535] and --http-threads positive, got ", http_port,
                               " and ", http_threads));
    }
    // The same template as the gRPC messages input (--chat-template or the model's).
    if (chat_template == nullptr) openai.chat_template_status = chat_template_status;
    openai.admission = &http_admission;
    openai.tokenizer = tokenizer->get();
    openai.served_model = served_model_name.empty() ? desc.name : served_model_name;
    openai.created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    openai.chat_template = chat_template.get();
    if (!tool_call_parser.empty()) {
      if (auto parsed = tessera::http::ToolCallFormatFromName(tool_call_parser); !parsed.ok()) {
        return Fail(absl::StrCat("--tool-call-parser: ", parsed.status().message()));
      }
      openai.tool_call_format = tool_call_parser;
    }
    openai.ready = [&metrics, &engine] { return !engine.draining() && metrics.readiness().Ready().ok; };
    openai_router = tessera::http::MakeOpenAiRouter(&openai);
    tessera::http::HttpServerOptions ho;
    ho.host = http_host.empty() ? host : http_host;
    ho.port = static_cast<int>(http_port);
    ho.num_threads = static_cast<int>(http_threads);
    ho.tls = tls_files;
    // A JSON body holds the prompt (or a full context of token ids) plus the other fields.
    ho.max_body_bytes = static_cast<uint64_t>(max_message);
    ho.max_connections = connection_caps.http;
    ho.handshake_timeout_seconds = static_cast<int>(connection_limits.handshake_timeout_seconds);
    ho.header_timeout_seconds = static_cast<int>(connection_limits.header_timeout_seconds);
    ho.idle_timeout_seconds = static_cast<int>(connection_limits.idle_timeout_seconds);
    ho.min_body_bytes_per_second = connection_limits.min_request_bytes_per_second;
    ho.handler = [router = openai_router.get(), keys = api_keys.get(),
                  metrics = &metrics](std::shared_ptr<tessera::http::HttpExchange> ex) {
      if (!tessera::http::Authorize(keys, metrics, *ex)) return;
      router->Dispatch(std::move(ex));
    };
    ho.error_body = [](int status, const std::string& message) {
      tessera::http::ApiError e;
      e.http_status = status;
      e.type = "invalid_request_error";
      e.message = message;
      return tessera::http::Dump(tessera::http::ErrorBody(e));
    };
    auto started = tessera::http::HttpServer::Start(std::move(ho));
    if (!started.ok()) return Fail(std::string(started.status().message()));
    http_server = std::move(*started);
    metrics.readiness().WatchListener(&http_server->stats());
    listener_stats.push_back(&http_server->stats());
    std::fprintf(stderr, "tessera-coordinator: OpenAI-compatible HTTP API on %s://%s:%d/v1 (model \"%s\"%s)\n",
                 tls_files.enabled() ? "https" : "http", (http_host.empty() ? host : http_host).c_str(), http_server->port(), openai.served_model.c_str(),
                 chat_template != nullptr ? ", chat template loaded" : ", no chat template");
  }

  auto process = std::make_shared<tessera::ProcessCollector>();
  auto listener_collector = std::make_shared<tessera::net::ListenerCollector>(listener_stats);
  std::unique_ptr<tessera::MetricsHttpServer> metrics_server;
  if (metrics_port > 0) {
    tessera::MetricsHttpOptions mo;
    mo.host = metrics_host.empty() ? host : metrics_host;
    mo.port = static_cast<int>(metrics_port);
    mo.collectables = {metrics.registry(), process, listener_collector};
    mo.checks["/healthz"] = [&metrics] { return metrics.readiness().Live(); };
    mo.checks["/readyz"] = [&metrics, &engine]() -> tessera::HealthResult {
      if (engine.draining()) return tessera::HealthResult{false, "draining: shutting down"};
      return metrics.readiness().Ready();
    };
    auto server = tessera::MetricsHttpServer::Start(std::move(mo));
    if (server.ok()) {
      metrics_server = std::move(*server);
      std::fprintf(stderr, "tessera-coordinator: metrics on http://%s:%d/metrics (/healthz, /readyz)\n",
                   (metrics_host.empty() ? host : metrics_host).c_str(), metrics_server->port());
    } else {
      // Serving matters more than its metrics: say so loudly and go on without them.
      tessera::Log(tessera::LogLevel::kError, "tessera-coordinator",
                   "metrics endpoint disabled", {{"error", std::string(server.status().message())}});
    }
  }

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto* health = public_server->GetHealthCheckService();
  bool serving = false;
  health->SetServingStatus(false);
  // A listener that cannot reopen its socket for this long ends the process (exit 1), so
  // Kubernetes or `tessera serve` restarts it rather than leaving a half-dead server.
  constexpr auto kDeadListenerLimit = std::chrono::seconds(30);
  std::optional<std::chrono::steady_clock::time_point> listener_dead_since;
  int exit_code = 0;
  while (!g_stop) {
    if (absl::Status s = (*cluster)->ConfigurationError(); !s.ok()) {
      tessera::Log(tessera::LogLevel::kError, "tessera-coordinator",
                   "exiting: the workers cannot serve with this configuration",
                   {{"error", std::string(s.message())}});
      exit_code = 1;
      break;
    }
    // gRPC health follows the same readiness as /readyz.
    const bool now = metrics.readiness().Ready().ok;
    if (now != serving) {
      health->SetServingStatus(now);
      health->SetServingStatus("tessera.v1.Generation", now);
      serving = now;
    }
    const bool all_accepting = std::all_of(listener_stats.begin(), listener_stats.end(),
                                           [](const tessera::net::ListenerStats* l) { return l->accepting.load(); });
    if (all_accepting) {
      listener_dead_since.reset();
    } else if (!listener_dead_since) {
      listener_dead_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - *listener_dead_since > kDeadListenerLimit) {
      tessera::Log(tessera::LogLevel::kError, "tessera-coordinator",
                   "a listening port could not be reopened for 30 s; exiting so that the process is restarted");
      exit_code = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Drain: readiness goes off first (load balancers stop routing here), new requests get
  // UNAVAILABLE, and admitted ones run to the end within --drain-timeout-seconds.
  health->SetServingStatus(false);
  engine.BeginDrain();
  const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drain_timeout_seconds);
  while (engine.num_active_requests() > 0 && g_signals.load() < 2 &&
         std::chrono::steady_clock::now() < drain_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (const int left = engine.num_active_requests(); left > 0) {
    std::fprintf(stderr, "tessera-coordinator: drain ended with %d requests still running; they fail as UNAVAILABLE\n",
                 left);
  } else {
    std::fprintf(stderr, "tessera-coordinator: drained; exiting\n");
  }
  // The grace lets handlers (which poll every 20 ms) write the final message of requests
  // that just finished; idle client connections would otherwise hold it to the end.
  (*public_listener)->Stop();
  public_server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  // Stopped, not destroyed: the engine's last events still post to its connections. The
  // grace is the gRPC server's: the final chunks of requests that just finished go out.
  if (http_server != nullptr) http_server->Stop(std::chrono::milliseconds(500));
  (*cluster_listener)->Stop();
  cluster_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  engine.Stop();
  http_server.reset();
  metrics_server.reset();
  return exit_code;
}
