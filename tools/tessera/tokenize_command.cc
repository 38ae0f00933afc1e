// `tessera tokenize`: text -> ids with a model folder's tokenizer (only tokenizer.json and,
// if present, tokenizer_config.json are read), through the same Tokenizer the
// coordinator's Tokenize RPC uses.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_set.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/tessera/commands.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

constexpr char kSummary[] =
    "Tokenizes text with the tokenizer of a model folder (tokenizer.json, optional "
    "tokenizer_config.json; no config.json or weights needed).\n"
    "\n"
    "  tessera tokenize --model DIR --text TEXT [--add-special-tokens] [--json]\n"
    "prints the ids (and with --json one object {\"ids\": [...], \"tokens\": [...]}, tokens\n"
    "being the vocabulary pieces). Without --add-special-tokens no BOS/EOS is added.\n"
    "\n"
    "Batch mode, for tests and tools that tokenize many texts with one process:\n"
    "  tessera tokenize --model DIR --input-file FILE [--jsonl] [--stream] ...\n"
    "reads FILE one text per line (with --jsonl each line is a JSON string, so texts may\n"
    "hold newlines and CR) and prints one JSON object per text, in order:\n"
    "  {\"ids\": [...], \"tokens\": [...], \"decoded\": TEXT}\n"
    "where decoded = Decode(ids) with special tokens kept; --stream adds \"deltas\": the\n"
    "text pieces that streaming detokenization releases id by id (each valid UTF-8).\n"
    "\n"
    "By default text spelling a special token (\"<|eot_id|>\") becomes that token, as in\n"
    "Hugging Face; --plain-special-tokens encodes it as ordinary text (as Meta's reference\n"
    "tokenizer and tiktoken's encode(disallowed_special=()) do).";

Json EncodeToJson(const Tokenizer& tokenizer, const std::string& text,
                  const Tokenizer::EncodeOptions& options, bool batch, bool stream) {
  const std::vector<int32_t> ids = tokenizer.Encode(text, options);
  Json tokens = Json::array();
  for (int32_t id : ids) tokens.push_back(tokenizer.PieceForId(id));
  Json out{{"ids", ids}, {"tokens", tokens}};
  if (batch) out["decoded"] = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
  if (stream) {
    StreamDecoder decoder(&tokenizer, /*skip_special_tokens=*/false);
    Json deltas = Json::array();
    for (int32_t id : ids) {
      std::string delta = decoder.Append(id);
      if (!delta.empty()) deltas.push_back(std::move(delta));
    }
    if (std::string rest = decoder.Finish(); !rest.empty()) deltas.push_back(std::move(rest));
    out["deltas"] = std::move(deltas);
  }
  return out;
}

// Bytes that are not UTF-8 (a decoded prefix cut inside a character) are written as
// U+FFFD rather than failing the whole line.
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

absl::Status RunBatch(const Tokenizer& tokenizer, const std::string& path, bool jsonl,
                      const Tokenizer::EncodeOptions& options, bool stream) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--input-file: cannot open ", path));
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    std::string text = line;
    if (jsonl) {
      Json parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_number, ": not a JSON string (--jsonl)"));
      }
      text = parsed.get<std::string>();
    }
    std::fputs(Dump(EncodeToJson(tokenizer, text, options, /*batch=*/true, stream)).c_str(),
               stdout);
    std::fputc('\n', stdout);
  }
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::string model, text, input_file;
  bool add_special_tokens = false, json = false, jsonl = false, stream = false,
       plain_special_tokens = false;
  FlagSet flags("tessera tokenize", kSummary);
  flags.String("model", &model, "model folder holding tokenizer.json, or a .gguf file");
  flags.String("text", &text, "the text to tokenize");
  flags.String("input-file", &input_file, "batch mode: tokenize each line of this file");
  flags.Bool("jsonl", &jsonl, "batch mode: each line of --input-file is a JSON string");
  flags.Bool("stream", &stream, "batch mode: also report streaming-detokenization deltas");
  flags.Bool("add-special-tokens", &add_special_tokens,
             "add what the tokenizer adds around text (BOS for Llama)");
  flags.Bool("plain-special-tokens", &plain_special_tokens,
             "encode text that spells a special token as ordinary text");
  flags.Bool("json", &json, "print {\"ids\": [...], \"tokens\": [...]}");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return absl::OkStatus();
  }
  const bool has_text = !text.empty();
  if (model.empty() || has_text == !input_file.empty() || !flags.positional().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenize needs --model and exactly one of --text or --input-file, and no positional "
        "arguments\n\n", flags.Usage()));
  }
  auto tokenizer = Tokenizer::Load(model);
  if (!tokenizer.ok()) return tokenizer.status();
  const Tokenizer::EncodeOptions options{.add_special_tokens = add_special_tokens,
                                         .parse_special_tokens = !plain_special_tokens};
  if (!input_file.empty()) return RunBatch(**tokenizer, input_file, jsonl, options, stream);
  if (json) {
    std::printf("%s\n", Dump(EncodeToJson(**tokenizer, text, options, false, false)).c_str());
  } else {
    std::printf("%s\n", absl::StrJoin((*tokenizer)->Encode(text, options), " ").c_str());
  }
  return absl::OkStatus();
}

}  // namespace

int TokenizeMain(int argc, char** argv) {
  const absl::Status status = Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "tessera tokenize: %s\n", std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace tessera::cli
