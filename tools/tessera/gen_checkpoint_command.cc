// `tessera gen-checkpoint`: random Llama weights of real shapes, for tests and benchmarks.
#include <cstdio>
#include <string>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flag_set.h"
#include "common/progress_line.h"
#include "nlohmann/json.hpp"
#include "tools/checkpoint/generate.h"
#include "tools/tessera/commands.h"

namespace tessera::cli {
namespace {

// Overrides a field when its flag was given (flags default to 0 = keep the preset's).
absl::Status Override(const char* flag, int64_t value, int* field) {
  if (value == 0) return absl::OkStatus();
  if (value < 0 || value > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be positive, got ", value));
  }
  *field = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::string preset, out, dtype = "bf16", rope_scaling;
  int64_t sliding_window = -1, layers = 0, shards = 1, seed = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0,
          head_dim = 0, vocab = 0;
  bool lm_head = false;
  FlagSet flags("tessera gen-checkpoint",
                "Writes a Hugging Face Llama folder with random weights of a real model's "
                "shapes, a byte-level tokenizer and config.json.");
  flags.String("preset", &preset,
               absl::StrCat("model shape: ", absl::StrJoin(PresetNames(), ", ")));
  flags.String("out", &out, "output folder (created if missing)");
  flags.String("dtype", &dtype, "weight dtype: f32, bf16 or f16");
  flags.Int("layers", &layers, "number of layers (0: the preset's)");
  flags.Int("shards", &shards, "number of safetensors files (1: a single model.safetensors)");
  flags.Int("seed", &seed, "random seed; the same seed gives the same weights");
  flags.Int("hidden", &hidden, "override hidden_size");
  flags.Int("intermediate", &intermediate, "override intermediate_size");
  flags.Int("heads", &heads, "override num_attention_heads");
  flags.Int("kv-heads", &kv_heads, "override num_key_value_heads");
  flags.Int("head-dim", &head_dim, "override head_dim");
  flags.Int("vocab", &vocab, "override vocab_size (at least 259)");
  flags.Bool("lm-head", &lm_head, "also write lm_head.weight when embeddings are tied");
  flags.String("rope-scaling", &rope_scaling,
               "override rope_scaling with a config.json object, e.g. "
               "'{\"rope_type\": \"yarn\", \"factor\": 4}' (\"null\": none)");
  flags.Int("sliding-window", &sliding_window,
            "override the attention window (0: none; Mistral: every layer, Qwen2: layers from "
            "max_window_layers)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return absl::OkStatus();
  }
  if (preset.empty() || out.empty() || !flags.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gen-checkpoint needs --preset and --out, and no positional arguments\n\n", flags.Usage()));
  }
  if (layers < 0 || layers > 100000) {
    return absl::InvalidArgumentError(absl::StrCat("--layers must be positive, got ", layers));
  }
  absl::StatusOr<ModelConfig> config = PresetConfig(preset, static_cast<int>(layers));
  if (!config.ok()) return config.status();
  for (auto [flag, value, field] : {std::tuple{"hidden", hidden, &config->hidden_size},
                                    {"intermediate", intermediate, &config->intermediate_size},
                                    {"heads", heads, &config->num_attention_heads},
                                    {"kv-heads", kv_heads, &config->num_key_value_heads},
                                    {"head-dim", head_dim, &config->head_dim},
                                    {"vocab", vocab, &config->vocab_size}}) {
    if (absl::Status s = Override(flag, value, field); !s.ok()) return s;
  }
  // Mixtral's config.json has no expert size of its own: its experts are intermediate_size.
  if (config->architecture == "MixtralForCausalLM") {
    config->moe.intermediate_size = config->intermediate_size;
  }
  if (!rope_scaling.empty()) {
    const nlohmann::json j =
        nlohmann::json::parse(rope_scaling, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError("--rope-scaling is not valid JSON: " + rope_scaling);
    }
    absl::StatusOr<RopeScaling> r = RopeScaling::FromJson(j, "--rope-scaling");
    if (!r.ok()) return r.status();
    config->rope_scaling = *r;
  }
  if (sliding_window >= 0) {
    if (config->architecture == "LlamaForCausalLM" && sliding_window > 0) {
      return absl::InvalidArgumentError(
          "--sliding-window needs a Mistral or Qwen2 preset (Llama has no sliding window)");
    }
    if (sliding_window > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sliding-window out of range: ", sliding_window));
    }
    config->sliding_window = static_cast<int>(sliding_window);
  }

  GenerateOptions options;
  options.out_dir = out;
  options.seed = static_cast<uint64_t>(seed);
  options.write_tied_lm_head = lm_head;
  const std::string d = absl::AsciiStrToLower(dtype);
  if (d == "f32" || d == "float32") {
    options.dtype = DType::kF32;
  } else if (d == "bf16" || d == "bfloat16") {
    options.dtype = DType::kBF16;
  } else if (d == "f16" || d == "float16") {
    options.dtype = DType::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be f32, bf16 or f16, got \"", dtype, "\""));
  }
  if (shards < 1 || shards > 99999) {
    return absl::InvalidArgumentError(absl::StrCat("--shards must be in [1, 99999], got ", shards));
  }
  options.num_shards = static_cast<int>(shards);
  ProgressLine line("writing weights");
  int last_percent = -1;
  options.progress = [&](uint64_t done, uint64_t total) {
    // Chunks are a few MB; redrawing once per percent keeps the terminal quiet.
    const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (percent == last_percent && done != total) return;
    last_percent = percent;
    line.Update(done, total,
                absl::StrFormat("(%.1f / %.1f MiB)", done / 1048576.0, total / 1048576.0));
  };
  if (absl::Status s = GenerateRandomCheckpoint(*config, options); !s.ok()) return s;
  std::fprintf(stderr, "wrote %s (%lld parameters, %s)\n", out.c_str(),
               static_cast<long long>(config->NumParameters()), DTypeName(options.dtype));
  return absl::OkStatus();
}

}  // namespace

int GenCheckpointMain(int argc, char** argv) {
  if (absl::Status s = Run(argc, argv); !s.ok()) {
    std::fprintf(stderr, "gen-checkpoint: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::cli
