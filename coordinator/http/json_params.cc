#include "coordinator/http/json_params.h"

#include <vector>

namespace tessera::http {
namespace {

// Sum over objects of (keys in it)^2: the work of an ordered parse. 2^24 admits an object
// of 4096 keys, far beyond any schema or tool list, and bounds the parse to milliseconds.
constexpr size_t kMaxOrderedParseCost = size_t{1} << 24;

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text, absl::string_view param) {
  using json = nlohmann::json;
  struct Cost : nlohmann::json_sax<json> {
    std::vector<size_t> keys;  // Per open object; arrays push a placeholder.
    size_t cost = 0;
    bool over = false;
    bool invalid = false;
    bool Open(bool object) {
      keys.push_back(object ? 1 : 0);  // 1 marks an object; its keys counted from 1.
      return keys.size() <= static_cast<size_t>(kMaxJsonDepth);
    }
    bool Close() {
      if (keys.back() > 0) {
        const size_t n = keys.back() - 1;
        cost += n * n;
        over = cost > kMaxOrderedParseCost;
      }
      keys.pop_back();
      return !over;
    }
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return Open(true); }
    bool key(string_t&) override {
      // The keys of one object so far: each costs a scan of those before it.
      if (++keys.back() > 1 && (keys.back() - 1) * (keys.back() - 1) > kMaxOrderedParseCost) over = true;
      return !over;
    }
    bool end_object() override { return Close(); }
    bool start_array(std::size_t) override { return Open(false); }
    bool end_array() override { return Close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      invalid = true;
      return false;
    }
  } cost;
  const bool complete =
      json::sax_parse(text.begin(), text.end(), &cost, json::input_format_t::json, /*strict=*/true);
  if (cost.over) {
    return InvalidParam(param, absl::StrCat(param, " holds objects with too many keys (a sum of squares over ",
                                            kMaxOrderedParseCost, ")"));
  }
  if (cost.invalid || !complete) {
    if (!cost.invalid && cost.keys.size() > static_cast<size_t>(kMaxJsonDepth)) {
      return InvalidParam(param, absl::StrCat(param, " nests JSON more than ", kMaxJsonDepth, " levels deep"));
    }
    return InvalidParam(param, absl::StrCat(param, " is not valid JSON"));
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, false);
  if (out.is_discarded()) return InvalidParam(param, absl::StrCat(param, " is not valid JSON"));
  return out;
}

}  // namespace tessera::http
