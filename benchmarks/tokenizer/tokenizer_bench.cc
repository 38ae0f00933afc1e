// tokenizer_bench: load time, encode and decode throughput of a tokenizer on one thread.
//
//   tokenizer_bench --model DIR --corpus english.txt --corpus mixed.jsonl --out FILE.json
//
// Each corpus is a list of texts (one per line; a file ending in .jsonl holds one JSON
// string per line). Encode throughput is measured twice: the first pass over a corpus
// (an empty pre-token cache) and the steady state over repeated passes. Every text's
// decode(encode(x)) is checked against x, so a fast but wrong tokenizer cannot report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/serving/machine_info.h"
#include "common/file_util.h"
#include "common/flag_set.h"
#include "common/progress_line.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<std::vector<std::string>> ReadCorpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--corpus: cannot open ", path));
  const bool jsonl = absl::EndsWith(path, ".jsonl");
  std::vector<std::string> texts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!jsonl) {
      if (!line.empty()) texts.push_back(line + "\n");
      continue;
    }
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": not a JSON string"));
    }
    texts.push_back(j.get<std::string>());
  }
  if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no texts"));
  return texts;
}

std::string LoadAverage() {
  auto text = ReadFileToString("/proc/loadavg");
  if (!text.ok()) return "unknown";
  const std::string& s = *text;
  // "0.52 0.58 0.59 1/467 12345": the first three fields.
  size_t end = 0;
  for (int fields = 0; fields < 3 && end != std::string::npos; ++fields) end = s.find(' ', end + 1);
  return s.substr(0, end);
}

// One corpus: the first encode pass, then passes until `min_seconds`, then decode passes.
absl::StatusOr<Json> Measure(const Tokenizer& tokenizer, const std::string& path,
                             double min_seconds) {
  ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCorpus(path));
  uint64_t bytes = 0;
  for (const std::string& t : texts) bytes += t.size();
  const Tokenizer::EncodeOptions options{.add_special_tokens = false,
                                         .parse_special_tokens = false};
  ProgressLine progress(absl::StrCat("tokenizer_bench ", std::filesystem::path(path).filename().string()));

  std::vector<std::vector<int32_t>> ids(texts.size());
  uint64_t num_tokens = 0;
  Clock::time_point start = Clock::now();
  for (size_t i = 0; i < texts.size(); ++i) {
    ids[i] = tokenizer.Encode(texts[i], options);
    num_tokens += ids[i].size();
  }
  const double first_pass_s = SecondsSince(start);
  for (size_t i = 0; i < texts.size(); ++i) {
    if (tokenizer.Decode(ids[i], /*skip_special_tokens=*/false) != texts[i]) {
      return absl::InternalError(absl::StrCat(path, ": text ", i + 1,
                                              " does not survive decode(encode(x)); not timing a wrong tokenizer"));
    }
  }
  progress.Update(1, 3, "first encode pass done");

  int encode_passes = 0;
  start = Clock::now();
  do {
    for (const std::string& t : texts) {
      std::vector<int32_t> out = tokenizer.Encode(t, options);
      if (out.empty() && !t.empty()) return absl::InternalError("empty encoding");
    }
    ++encode_passes;
  } while (SecondsSince(start) < min_seconds);
  const double encode_s = SecondsSince(start);
  progress.Update(2, 3, absl::StrCat(encode_passes, " encode passes"));

  int decode_passes = 0;
  uint64_t decoded_bytes = 0;
  start = Clock::now();
  do {
    for (const std::vector<int32_t>& v : ids) {
      decoded_bytes += tokenizer.Decode(v, /*skip_special_tokens=*/false).size();
    }
    ++decode_passes;
  } while (SecondsSince(start) < min_seconds);
  const double decode_s = SecondsSince(start);
  progress.Update(3, 3, absl::StrCat(decode_passes, " decode passes"));

  const double mb = static_cast<double>(bytes) / 1e6;
  return Json{{"corpus", path},
              {"texts", texts.size()},
              {"bytes", bytes},
              {"tokens", num_tokens},
              {"bytes_per_token", static_cast<double>(bytes) / std::max<uint64_t>(1, num_tokens)},
              {"encode_first_pass_mb_per_s", mb / first_pass_s},
              {"encode_mb_per_s", mb * encode_passes / encode_s},
              {"encode_passes", encode_passes},
              {"decode_mb_per_s", static_cast<double>(decoded_bytes) / 1e6 / decode_s},
              {"decode_passes", decode_passes}};
}

absl::Status Run(int argc, char** argv) {
  std::string model, out, label;
  std::string corpus_list;
  int64_t load_repeats = 5;
  double min_seconds = 3.0;
  FlagSet flags("tokenizer_bench",
                "Measures a tokenizer on one thread: load time of --model, and encode / decode "
                "MB/s over each --corpus (texts one per line; .jsonl files hold one JSON string "
                "per line). Special-token text is encoded as plain text and nothing is added "
                "around it. Writes JSON with machine and build info to --out.");
  flags.String("model", &model, "folder holding tokenizer.json (+ tokenizer_config.json)");
  flags.String("corpus", &corpus_list, "comma-separated corpus files");
  flags.String("out", &out, "result file, e.g. benchmarks/results/tokenizer_llama3.json");
  flags.String("label", &label, "free-form note stored in the result (conditions)");
  flags.Int("load-repeats", &load_repeats, "times to load the tokenizer (min and median kept)");
  flags.Float("min-seconds", &min_seconds, "minimum time of each throughput measurement");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return absl::OkStatus();
  }
  if (model.empty() || corpus_list.empty() || load_repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer_bench needs --model and --corpus\n\n",
                                                   flags.Usage()));
  }
  const std::string load_before = LoadAverage();
  std::vector<double> load_s;
  std::unique_ptr<Tokenizer> tokenizer;
  ProgressLine progress("tokenizer_bench load");
  for (int64_t i = 0; i < load_repeats; ++i) {
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(model));
    load_s.push_back(SecondsSince(start));
    progress.Update(i + 1, load_repeats);
  }
  std::sort(load_s.begin(), load_s.end());

  Json corpora = Json::array();
  for (absl::string_view path : absl::StrSplit(corpus_list, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(Json result, Measure(*tokenizer, std::string(path), min_seconds));
    corpora.push_back(std::move(result));
  }
  const bench::BuildInfo build = bench::ProbeBuild();
  Json result{{"benchmark", "tokenizer"},
              {"timestamp", bench::UtcTimestamp()},
              {"model", model},
              {"vocab_size", tokenizer->vocab_size()},
              {"label", label},
              {"threads", 1},
              {"load_seconds_min", load_s.front()},
              {"load_seconds_median", load_s[load_s.size() / 2]},
              {"load_repeats", load_repeats},
              {"corpora", corpora},
              {"load_average_before", load_before},
              {"load_average_after", LoadAverage()},
              {"machine", bench::ToJson(bench::ProbeMachine())},
              {"build", {{"build_type", build.build_type}, {"version", build.version}}}};
  const std::string text = result.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!out.empty()) RETURN_IF_ERROR(WriteStringToFile(out, text));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  const absl::Status status = tessera::Run(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
