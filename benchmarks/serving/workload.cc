#include "benchmarks/serving/workload.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

std::vector<int32_t> Draw(int n, const RandomTokens& tokens, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(tokens.first_id, tokens.vocab_size - 1);
  std::vector<int32_t> ids(static_cast<size_t>(std::max(n, 0)));
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

}  // namespace

std::vector<RequestSpec> FixedLengthWorkload(int num_requests, int input_len, int output_len,
                                             const RandomTokens& tokens) {
  std::mt19937_64 rng(tokens.seed);
  std::vector<RequestSpec> specs(static_cast<size_t>(std::max(num_requests, 0)));
  for (RequestSpec& spec : specs) {
    spec.prompt_ids = Draw(input_len, tokens, rng);
    spec.output_len = output_len;
  }
  return specs;
}

std::vector<RequestSpec> SharedPrefixWorkload(const SharedPrefixOptions& options,
                                              const RandomTokens& tokens) {
  std::mt19937_64 rng(tokens.seed);
  std::vector<RequestSpec> specs;
  for (int p = 0; p < options.num_prefixes; ++p) {
    const std::vector<int32_t> prefix = Draw(options.prefix_len, tokens, rng);
    for (int s = 0; s < options.suffixes_per_prefix; ++s) {
      RequestSpec spec;
      spec.prompt_ids = prefix;
      const std::vector<int32_t> suffix = Draw(options.suffix_len, tokens, rng);
      spec.prompt_ids.insert(spec.prompt_ids.end(), suffix.begin(), suffix.end());
      spec.output_len = options.output_len;
      specs.push_back(std::move(spec));
    }
  }
  std::shuffle(specs.begin(), specs.end(), rng);
  return specs;
}

absl::StatusOr<std::vector<RequestSpec>> LoadJsonlWorkload(const std::filesystem::path& path,
                                                           int default_output_len) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open workload file ", path.string()));
  std::vector<RequestSpec> specs;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = absl::StrCat(path.string(), ":", line_no);
    const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
    }
    RequestSpec spec;
    const auto prompt = j.find("prompt");
    if (prompt == j.end()) return absl::InvalidArgumentError(absl::StrCat(where, ": no \"prompt\""));
    if (prompt->is_string()) {
      spec.is_text = true;
      spec.prompt_text = prompt->get<std::string>();
      if (spec.prompt_text.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": \"prompt\" is empty"));
      }
    } else if (prompt->is_array() && !prompt->empty()) {
      for (const Json& id : *prompt) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"prompt\" holds ", id.dump(), ", not a token id"));
        }
        spec.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"prompt\" must be a string or a non-empty array of token ids"));
    }
    const auto output_len = j.find("output_len");
    if (output_len == j.end()) {
      if (default_output_len <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": no \"output_len\" and no --output-len default"));
      }
      spec.output_len = default_output_len;
    } else if (output_len->is_number_integer() && output_len->get<int64_t>() > 0 &&
               output_len->get<int64_t>() <= INT32_MAX) {
      spec.output_len = static_cast<int>(output_len->get<int64_t>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"output_len\" is ", output_len->dump(), ", not a positive integer"));
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("workload file ", path.string(), " holds no requests"));
  }
  return specs;
}

}  // namespace tessera::bench
