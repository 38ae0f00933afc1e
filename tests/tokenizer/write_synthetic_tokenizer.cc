// Writes the synthetic byte-level tokenizer of generated checkpoints into a folder, so
// the Python tests can load the same files in Hugging Face `tokenizers` and in Tessera.
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/file_util.h"
#include "common/flag_set.h"
#include "tools/checkpoint/byte_level_tokenizer_json.h"

int main(int argc, char** argv) {
  std::string flavor = "llama3";
  std::string out;
  int64_t num_regular_tokens = 128000;
  tessera::FlagSet flags("write_synthetic_tokenizer",
                         "Writes tokenizer.json + tokenizer_config.json of a synthetic "
                         "byte-level BPE (the one gen-checkpoint uses) into --out.");
  flags.String("flavor", &flavor, "llama3 or qwen2.");
  flags.String("out", &out, "Folder to write (created if missing).");
  flags.Int("num-regular-tokens", &num_regular_tokens,
            "Byte pieces + merged pieces; the specials follow.");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), flags.Usage().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (out.empty() || (flavor != "llama3" && flavor != "qwen2")) {
    std::fprintf(stderr, "--out is required and --flavor must be llama3 or qwen2\n");
    return 2;
  }
  auto files = tessera::SyntheticByteLevelTokenizer(
      flavor == "llama3" ? tessera::ByteLevelFlavor::kLlama3 : tessera::ByteLevelFlavor::kQwen2,
      static_cast<int>(num_regular_tokens));
  if (!files.ok()) {
    std::fprintf(stderr, "%s\n", files.status().ToString().c_str());
    return 1;
  }
  std::filesystem::create_directories(out);
  for (const auto& [name, text] : {std::pair<const char*, const std::string&>(
                                       "tokenizer.json", files->tokenizer_json),
                                   {"tokenizer_config.json", files->tokenizer_config_json}}) {
    if (absl::Status s = tessera::WriteStringToFile(std::filesystem::path(out) / name, text);
        !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
