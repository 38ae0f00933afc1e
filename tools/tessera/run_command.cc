// `tessera run`: single-process generation, like llama-cli.
#include <algorithm>
#include <random>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/generation_config.h"
#include "common/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tools/tessera/commands.h"
#include "common/flag_set.h"
#include "common/progress_line.h"
#include "worker/backend_factory.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera::cli {
namespace {

struct RunFlags {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  int64_t seed = -1;
  int64_t threads = 0;
  std::string device = "cpu";
  std::string quantization = "none";
  std::string kv_cache_dtype = "auto";
  bool json = false;
  bool ignore_eos = false;
  bool quiet = false;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera run: %s\n", message.c_str());
  return 1;
}

// Text of `ids` after `prefix_len` tokens, as the full decode shows it.
std::string Suffix(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t prefix_len) {
  const std::string all = tok.Decode(ids);
  const std::string prefix =
      tok.Decode(std::vector<int32_t>(ids.begin(), ids.begin() + prefix_len));
  return all.size() >= prefix.size() ? all.substr(prefix.size()) : all;
}

}  // namespace

int RunMain(int argc, char** argv) {
  RunFlags f;
  FlagSet flags("tessera run",
                "Loads a Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json)\n"
                "and generates a continuation of the prompt in this process, on the CPU or a CUDA device.");
  flags.String("model", &f.model, "Model: a Hugging Face folder or a .gguf file.");
  flags.String("prompt", &f.prompt, "Prompt text.");
  flags.String("prompt-ids", &f.prompt_ids, "Prompt as comma-separated token ids (instead of --prompt).");
  flags.Int("max-tokens", &f.max_tokens, "Tokens to generate at most.");
  flags.Float("temperature", &f.temperature, "Sampling temperature; 0 is greedy.");
  flags.Int("top-k", &f.top_k, "Sample from the k most likely tokens (0: all).");
  flags.Float("top-p", &f.top_p, "Nucleus sampling mass, in (0, 1].");
  flags.Float("min-p", &f.min_p, "Drop tokens below min_p times the top probability.");
  flags.Int("seed", &f.seed, "Random seed (-1: random).");
  flags.Int("threads", &f.threads, "CPU threads (0: one per core).");
  flags.String("device", &f.device, "cpu, cuda (device 0), cuda:N, or auto (cuda when a device is usable).");
  flags.String("quantization", &f.quantization, "Weights quantized at load time: none, int8 or fp8.");
  flags.String("kv-cache-dtype", &f.kv_cache_dtype, "KV-cache element type: auto, bf16, fp8 or fp32.");
  flags.Bool("json", &f.json, "Print one JSON object (prompt_ids, generated_ids, text, timings).");
  flags.Bool("ignore-eos", &f.ignore_eos, "Keep generating past the end-of-sequence token.");
  flags.Bool("quiet", &f.quiet, "No progress or timing lines on stderr.");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()));
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (f.model.empty()) return Fail("--model is required (a Hugging Face Llama folder)");
  if (f.prompt.empty() && f.prompt_ids.empty()) return Fail("--prompt or --prompt-ids is required");
  if (f.max_tokens <= 0) return Fail(absl::StrCat("--max-tokens must be positive, got ", f.max_tokens));

  auto tokenizer = Tokenizer::Load(f.model);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  std::vector<int32_t> prompt_ids;
  if (!f.prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(f.prompt_ids, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) return Fail(absl::StrCat("bad token id \"", part, "\""));
      prompt_ids.push_back(id);
    }
  } else {
    prompt_ids = (*tokenizer)->Encode(f.prompt);
  }

  ModelLoadOptions load_options;
  if (auto q = ParseWeightQuantization(f.quantization); q.ok()) {
    load_options.quantization = *q;
  } else {
    return Fail(absl::StrCat("--quantization: ", q.status().message()));
  }
  if (auto d = ParseKvCacheDType(f.kv_cache_dtype); d.ok()) {
    load_options.kv_cache_dtype = *d;
  } else {
    return Fail(absl::StrCat("--kv-cache-dtype: ", d.status().message()));
  }
  auto made_backend = MakeBackend(f.device, static_cast<int>(f.threads));
  if (!made_backend.ok()) return Fail(std::string(made_backend.status().message()));
  std::unique_ptr<kernels::Backend> backend = std::move(*made_backend);
  SingleRankCommunicator comm;
  ProgressLine progress("loading " + f.model);
  auto model = LlamaModel::Load(f.model, backend.get(), &comm, [&](int done, int total, uint64_t bytes) {
    if (!f.quiet) progress.Update(done, total, absl::StrFormat("(%.1f MB)", bytes / 1e6));
  }, load_options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const ModelConfig& config = (*model)->config();
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return Fail(absl::StrCat("prompt token id ", id, " outside the vocabulary of ", config.vocab_size));
    }
  }

  const int block_size = 16;
  const int context = std::min<int64_t>(config.max_position_embeddings,
                                        prompt_ids.size() + f.max_tokens);
  auto cache = (*model)->CreateKvCache((context + block_size - 1) / block_size + 1, block_size);
  if (!cache.ok()) return Fail(std::string(cache.status().message()));

  SingleSequenceOptions options;
  options.max_new_tokens = static_cast<int>(f.max_tokens);
  options.ignore_eos = f.ignore_eos;
  auto generation = GenerationConfig::LoadIfPresent(f.model, config);
  if (!generation.ok()) return Fail(std::string(generation.status().message()));
  options.stop_token_ids = generation->StopTokenIds(config);
  options.sampling.temperature = static_cast<float>(f.temperature);
  options.sampling.top_k = static_cast<int>(f.top_k);
  options.sampling.top_p = static_cast<float>(f.top_p);
  options.sampling.min_p = static_cast<float>(f.min_p);
  options.sampling.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  options.sampling.has_seed = true;

  std::vector<int32_t> all = prompt_ids;
  std::string printed;
  if (!f.json) {
    printed = (*tokenizer)->Decode(all);
    std::fputs(printed.c_str(), stdout);
    std::fflush(stdout);
  }
  auto result = GenerateSingleSequence(**model, **cache, prompt_ids, options, [&](int32_t id) {
    all.push_back(id);
    if (f.json) return;
    // Print what the full decode adds, so byte-fallback pieces come out as whole characters.
    const std::string text = (*tokenizer)->Decode(all);
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::fputs(text.c_str() + printed.size(), stdout);
      std::fflush(stdout);
      printed = text;
    }
  });
  if (!result.ok()) return Fail(std::string(result.status().message()));

  const double decode_tps = result->decode_steps > 0 ? result->decode_steps / result->decode_seconds : 0;
  if (f.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt_ids;
    j["generated_ids"] = result->generated_ids;
    j["text"] = Suffix(**tokenizer, all, prompt_ids.size());
    j["finish_reason"] = result->finish_reason;
    j["device"] = std::string(backend->name());
    j["timings"] = {{"prefill_seconds", result->prefill_seconds},
                    {"decode_seconds", result->decode_seconds},
                    {"decode_tokens_per_second", decode_tps}};
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs("\n", stdout);
  }
  if (!f.quiet) {
    std::fprintf(stderr,
                 "tessera run: %zu prompt tokens in %.1f ms, %zu generated (%s), decode %.1f tokens/s\n",
                 prompt_ids.size(), result->prefill_seconds * 1e3, result->generated_ids.size(),
                 result->finish_reason.c_str(), decode_tps);
  }
  return 0;
}

}  // namespace tessera::cli
