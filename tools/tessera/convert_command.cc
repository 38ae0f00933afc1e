// `tessera convert-llama2c` and `tessera convert-gguf`: other formats to a Hugging Face folder.
#include <cstdio>
#include <string>

#include "common/flag_set.h"
#include "tools/checkpoint/gguf_convert.h"
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

int ConvertGgufMain(int argc, char** argv) {
  std::string out, dtype_name = "f32";
  FlagSet flags("tessera convert-gguf",
                "Converts a GGUF file (llama.cpp, Ollama, LM Studio) into a Hugging Face folder: "
                "config.json, tokenizer.json and tokenizer_config.json (chat template included) from its "
                "metadata, model.safetensors with every tensor dequantized. Usage: tessera convert-gguf "
                "FILE.gguf --out DIR. Serving needs no conversion: --model FILE.gguf reads the file itself.");
  flags.String("out", &out, "output folder (created if missing)");
  flags.String("dtype", &dtype_name, "element type of model.safetensors: f32, bf16 or f16");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (out.empty() || flags.positional().size() != 1) {
    std::fprintf(stderr, "convert-gguf needs one GGUF file and --out\n\n%s", flags.Usage().c_str());
    return 1;
  }
  DType dtype = DType::kF32;
  if (dtype_name == "bf16") {
    dtype = DType::kBF16;
  } else if (dtype_name == "f16") {
    dtype = DType::kF16;
  } else if (dtype_name != "f32") {
    std::fprintf(stderr, "convert-gguf: --dtype must be f32, bf16 or f16, not %s\n", dtype_name.c_str());
    return 1;
  }
  if (absl::Status s = ConvertGguf(flags.positional()[0], out, dtype); !s.ok()) {
    std::fprintf(stderr, "convert-gguf: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace tessera::cli
