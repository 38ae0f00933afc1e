// `tessera`: the command-line entry point: local generation, a local cluster, a client,
// and checkpoint tooling.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/tessera/commands.h"

namespace {

constexpr char kUsage[] =
    "Usage: tessera <command> [flags]\n"
    "\n"
    "Commands:\n"
    "  run              Load a model folder and generate text in this process.\n"
    "  convert-llama2c  Convert a llama2.c checkpoint + tokenizer to a Hugging Face folder.\n"
    "  convert-gguf     Convert a GGUF file to a Hugging Face folder (serving reads GGUF directly).\n"
    "  gen-checkpoint   Write a Llama-shaped checkpoint with random weights.\n"
    "  serve            Start a coordinator and its workers on this machine.\n"
    "  generate         Send a request to a running coordinator.\n"
    "  tokenize         Text to token ids with a model folder's tokenizer.\n"
    "  hash-api-key     Turn a key read from stdin into a line of an --api-keys-file.\n"
    "  eval             Quality gate: a candidate against a baseline over a text file.\n"
    "  constrain        Compile a JSON Schema / regex / grammar against a vocabulary and\n"
    "                   draw outputs from it at random (the grammar engine alone).\n"
    "\n"
    "Run `tessera <command> --help` for the flags of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "run") return tessera::cli::RunMain(argc - 1, argv + 1);
  if (command == "convert-llama2c") return tessera::cli::ConvertLlama2cMain(argc - 1, argv + 1);
  if (command == "convert-gguf") return tessera::cli::ConvertGgufMain(argc - 1, argv + 1);
  if (command == "gen-checkpoint") return tessera::cli::GenCheckpointMain(argc - 1, argv + 1);
  if (command == "serve") return tessera::cli::ServeMain(argc - 1, argv + 1);
  if (command == "generate") return tessera::cli::GenerateMain(argc - 1, argv + 1);
  if (command == "tokenize") return tessera::cli::TokenizeMain(argc - 1, argv + 1);
  if (command == "hash-api-key") return tessera::cli::HashApiKeyMain(argc - 1, argv + 1);
  if (command == "eval") return tessera::cli::EvalMain(argc - 1, argv + 1);
  if (command == "constrain") return tessera::cli::ConstrainMain(argc - 1, argv + 1);
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
