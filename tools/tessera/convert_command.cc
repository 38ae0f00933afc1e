// `tessera convert-llama2c`: a llama2.c checkpoint + tokenizer to a Hugging Face folder.
#include <cstdio>
#include <string>

#include "common/flag_set.h"
#include "tools/checkpoint/llama2c.h"
#include "tools/tessera/commands.h"

namespace tessera::cli {

int ConvertLlama2cMain(int argc, char** argv) {
  std::string checkpoint, tokenizer, out;
  FlagSet flags("tessera convert-llama2c",
                "Converts a llama2.c fp32 checkpoint (legacy or export.py version 1) and its "
                "tokenizer.bin into a Hugging Face Llama folder (config.json, "
                "model.safetensors, tokenizer.json, tokenizer_config.json).");
  flags.String("checkpoint", &checkpoint, "llama2.c checkpoint, e.g. stories260K.bin");
  flags.String("tokenizer", &tokenizer, "llama2.c tokenizer, e.g. tok512.bin");
  flags.String("out", &out, "output folder (created if missing)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (checkpoint.empty() || tokenizer.empty() || out.empty() || !flags.positional().empty()) {
    std::fprintf(stderr,
                 "convert-llama2c needs --checkpoint, --tokenizer and --out, and no "
                 "positional arguments\n\n%s",
                 flags.Usage().c_str());
    return 1;
  }
  if (absl::Status s = ConvertLlama2c(checkpoint, tokenizer, out); !s.ok()) {
    std::fprintf(stderr, "convert-llama2c: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace tessera::cli
