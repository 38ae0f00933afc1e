#include "coordinator/engine/output_processor.h"

#include <algorithm>

namespace tessera {

size_t CompleteUtf8Length(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  size_t i = s.size();
  int continuation = 0;
  while (i > 0 && continuation < 4) {
    const unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xc0) != 0x80) break;
    --i;
    ++continuation;
  }
  if (i == 0) return s.size();
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  int need;
  if (lead < 0x80) need = 0;
  else if ((lead & 0xe0) == 0xc0) need = 1;
  else if ((lead & 0xf0) == 0xe0) need = 2;
  else if ((lead & 0xf8) == 0xf0) need = 3;
  else return s.size();  // Not a lead byte: invalid, release as is.
  return continuation >= need ? s.size() : i - 1;
}

std::string SanitizeUtf8(const std::string& s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, min = 0x10000;
    }
    if (len == 0) {  // Stray continuation byte or a byte no UTF-8 sequence starts with.
      out += kReplacement;
      ++i;
      continue;
    }
    uint32_t cp = c & (0x7f >> len);
    int have = 1;
    while (have < len && i + have < s.size() &&
           (static_cast<unsigned char>(s[i + have]) & 0xc0) == 0x80) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + have]) & 0x3f);
      ++have;
    }
    if (have == len && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff)) {
      out.append(s, i, len);
      i += len;
    } else if (have < len && i + have == s.size()) {
      out.append(s, i, have);  // Possibly completed by the next token.
      i += have;
    } else {
      out += kReplacement;
      i += have;
    }
  }
  return out;
}

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
                                 std::vector<std::string> stop_strings)
    : tokenizer_(tokenizer), stops_(std::move(stop_strings)) {
  // A few prompt tokens are enough context for the decoder's leading-space rule.
  const size_t keep = std::min<size_t>(prompt.size(), 4);
  context_.assign(prompt.end() - keep, prompt.end());
  context_len_ = keep;
  context_text_ = tokenizer_->Decode(context_);
  for (const auto& s : stops_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

std::string OutputProcessor::DecodeOutput() const {
  const std::string all = tokenizer_->Decode(context_);
  if (all.size() >= context_text_.size() && all.compare(0, context_text_.size(), context_text_) == 0) {
    return all.substr(context_text_.size());
  }
  // The context decoded differently once followed by output: fall back to the output alone.
  return tokenizer_->Decode(std::vector<int32_t>(context_.begin() + context_len_, context_.end()));
}

std::string OutputProcessor::Append(int32_t token_id) {
  if (stopped_) return "";
  context_.push_back(token_id);
  const std::string decoded = SanitizeUtf8(DecodeOutput());
  full_ = decoded.substr(0, CompleteUtf8Length(decoded));
  // Look for a stop string in the part not yet released (plus the overlap it may span).
  size_t stop_at = std::string::npos;
  const size_t search_from = released_.size() >= max_stop_len_ ? released_.size() - max_stop_len_ + 1 : 0;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t p = full_.find(s, search_from);
    if (p != std::string::npos && p < stop_at) stop_at = p;
  }
  size_t release_to;
  if (stop_at != std::string::npos) {
    stopped_ = true;
    release_to = stop_at;
  } else {
    // Hold back a tail that could still grow into a stop string.
    release_to = max_stop_len_ > 1 && full_.size() >= max_stop_len_ - 1
                     ? full_.size() - (max_stop_len_ - 1)
                     : (max_stop_len_ > 1 ? 0 : full_.size());
    release_to = CompleteUtf8Length(full_.substr(0, release_to));
  }
  if (release_to <= released_.size()) return "";
  std::string delta = full_.substr(released_.size(), release_to - released_.size());
  released_ += delta;
  return delta;
}

std::string OutputProcessor::Flush() {
  if (stopped_ || full_.size() <= released_.size()) return "";
  std::string delta = full_.substr(released_.size());
  released_ = full_;
  return delta;
}

}  // namespace tessera
