// `tessera generate`: a client of the Generation API.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_set.h"
#include "common/grpc_channel.h"
#include "common/grpc_client_tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tessera/v1/generation.grpc.pb.h"
#include "tools/tessera/commands.h"

namespace tessera::cli {
namespace {

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_EOS: return "eos";
    case v1::FINISH_REASON_CANCELLED: return "cancelled";
    case v1::FINISH_REASON_ERROR: return "error";
    default: return "unspecified";
  }
}

// Waits until the server's health service says SERVING.
bool WaitReady(const std::shared_ptr<grpc::Channel>& channel, double seconds) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    if (stub->Check(&ctx, req, &resp).ok() &&
        resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

int GenerateMain(int argc, char** argv) {
  std::string server = "127.0.0.1:50051", prompt, prompt_ids, stop;
  std::string json_schema_file, regex, choice, grammar_file;
  bool json_object = false;
  int64_t max_tokens = 16, top_k = 0, seed = -1, logprobs = 0;
  double temperature = 1.0, top_p = 1.0, wait_ready = 0, timeout = 600;
  bool stream = false, json = false, ignore_eos = false;
  FlagSet flags("tessera generate", "Sends one request to a Tessera coordinator and prints the result.");
  flags.String("server", &server, "Coordinator address.");
  tessera::ClientTlsFiles tls;
  flags.String("tls-ca", &tls.ca_file, "PEM CA bundle: connect with TLS and verify the server against it.");
  flags.String("tls-cert", &tls.cert_file, "PEM client certificate (mutual TLS; needs --tls-ca).");
  flags.String("tls-key", &tls.key_file, "PEM private key of --tls-cert.");
  flags.String("prompt", &prompt, "Prompt text.");
  flags.String("prompt-ids", &prompt_ids, "Prompt as comma-separated token ids.");
  flags.Int("max-tokens", &max_tokens, "Tokens to generate at most.");
  flags.Float("temperature", &temperature, "Sampling temperature; 0 is greedy.");
  flags.Float("top-p", &top_p, "Nucleus sampling mass.");
  flags.Int("top-k", &top_k, "Top-k (0: off).");
  flags.Int("seed", &seed, "Seed (-1: server's choice).");
  flags.Int("logprobs", &logprobs, "Top-n log-probabilities per token.");
  flags.String("stop", &stop, "A stop string.");
  flags.Bool("ignore-eos", &ignore_eos, "Keep generating past end-of-sequence.");
  flags.String("json-schema", &json_schema_file, "File holding a JSON Schema the output must match.");
  flags.Bool("json-object", &json_object, "The output is a JSON object.");
  flags.String("regex", &regex, "Regular expression the whole output must match.");
  flags.String("choice", &choice, "JSON array of strings: the output is one of them.");
  flags.String("grammar", &grammar_file, "File holding a GBNF grammar (start symbol root) for the output.");
  flags.Bool("stream", &stream, "Use GenerateStream and print text as it arrives.");
  flags.Bool("json", &json, "Print one JSON object (prompt_ids, generated_ids, text, finish_reason, usage).");
  flags.Float("wait-ready", &wait_ready, "Wait up to this many seconds for the server to be ready.");
  flags.Float("timeout", &timeout, "Deadline of the request in seconds.");
  if (auto s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  auto credentials = tessera::ClientCredentials(tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "tessera generate: %s\n", std::string(credentials.status().message()).c_str());
    return 1;
  }
  auto channel = tessera::ChannelToStartingServer(server, *credentials);
  if (wait_ready > 0 && !WaitReady(channel, wait_ready)) {
    std::fprintf(stderr, "tessera generate: %s not ready after %.0f s\n", server.c_str(), wait_ready);
    return 1;
  }
  v1::GenerateRequest req;
  if (!prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_ids, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::fprintf(stderr, "tessera generate: bad token id \"%s\"\n", std::string(part).c_str());
        return 1;
      }
      req.mutable_token_ids()->add_ids(id);
    }
  } else {
    req.set_text(prompt);
  }
  req.mutable_sampling()->set_temperature(static_cast<float>(temperature));
  req.mutable_sampling()->set_top_p(static_cast<float>(top_p));
  req.mutable_sampling()->set_top_k(static_cast<int32_t>(top_k));
  if (seed >= 0) req.mutable_sampling()->set_seed(static_cast<uint64_t>(seed));
  req.mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(std::max<int64_t>(max_tokens, 0)));
  req.mutable_stopping()->set_ignore_eos(ignore_eos);
  if (!stop.empty()) req.mutable_stopping()->add_stop(stop);
  auto read_file = [](const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    out->assign(std::istreambuf_iterator<char>(in), {});
    return true;
  };
  if (!json_schema_file.empty() &&
      !read_file(json_schema_file, req.mutable_constraint()->mutable_json_schema())) {
    std::fprintf(stderr, "cannot read --json-schema %s\n", json_schema_file.c_str());
    return 1;
  }
  if (json_object) req.mutable_constraint()->set_json_object(true);
  if (!regex.empty()) req.mutable_constraint()->set_regex(regex);
  if (!choice.empty()) {
    nlohmann::json list = nlohmann::json::parse(choice, nullptr, false);
    if (!list.is_array()) {
      std::fprintf(stderr, "--choice must be a JSON array of strings\n");
      return 2;
    }
    for (const auto& c : list) {
      if (!c.is_string()) {
        std::fprintf(stderr, "--choice must be a JSON array of strings\n");
        return 2;
      }
      req.mutable_constraint()->mutable_choice()->add_choices(c.get<std::string>());
    }
  }
  if (!grammar_file.empty() &&
      !read_file(grammar_file, req.mutable_constraint()->mutable_grammar())) {
    std::fprintf(stderr, "cannot read --grammar %s\n", grammar_file.c_str());
    return 1;
  }
  req.set_logprobs(static_cast<uint32_t>(std::max<int64_t>(logprobs, 0)));

  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  // From the environment, not a flag, so the key stays out of `ps` and shell history.
  if (const char* key = std::getenv("TESSERA_API_KEY"); key != nullptr && *key != '\0') {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", key));
  }
  v1::GenerateResponse result;
  grpc::Status status;
  if (stream) {
    auto reader = stub->GenerateStream(&ctx, req);
    v1::GenerateStreamResponse msg;
    while (reader->Read(&msg)) {
      if (msg.prompt_ids_size() > 0) *result.mutable_prompt_ids() = msg.prompt_ids();
      result.mutable_token_ids()->MergeFrom(msg.token_ids());
      result.mutable_text()->append(msg.text());
      if (!json) {
        std::fputs(msg.text().c_str(), stdout);
        std::fflush(stdout);
      }
      if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        result.set_finish_reason(msg.finish_reason());
        *result.mutable_usage() = msg.usage();
        *result.mutable_timings() = msg.timings();
      }
    }
    status = reader->Finish();
  } else {
    status = stub->Generate(&ctx, req, &result);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "tessera generate: %s: %s\n",
                 status.error_code() == grpc::StatusCode::UNAVAILABLE ? "UNAVAILABLE"
                 : status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? "INVALID_ARGUMENT"
                                                                            : absl::StrCat("code ", status.error_code()).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = std::vector<int32_t>(result.prompt_ids().begin(), result.prompt_ids().end());
    j["generated_ids"] = std::vector<int32_t>(result.token_ids().begin(), result.token_ids().end());
    j["text"] = result.text();
    j["finish_reason"] = FinishName(result.finish_reason());
    j["usage"] = {{"prompt_tokens", result.usage().prompt_tokens()},
                  {"completion_tokens", result.usage().completion_tokens()},
                  {"cached_prompt_tokens", result.usage().cached_prompt_tokens()}};
    j["timings"] = {{"queue_seconds", result.timings().queue_seconds()},
                    {"time_to_first_token_seconds", result.timings().time_to_first_token_seconds()},
                    {"total_seconds", result.timings().total_seconds()}};
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (!stream) {
    std::puts(result.text().c_str());
  } else {
    std::fputs("\n", stdout);
  }
  return 0;
}

}  // namespace tessera::cli
