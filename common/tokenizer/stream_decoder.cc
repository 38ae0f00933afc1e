#include "common/tokenizer/stream_decoder.h"

#include "common/tokenizer/unicode_util.h"

namespace tessera {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

std::string ReplaceInvalidUtf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = Utf8CharLength(text, pos);
    if (len == 1 && static_cast<uint8_t>(text[pos]) >= 0x80) {
      out += kReplacement;
    } else {
      out.append(text, pos, len);
    }
    pos += len;
  }
  return out;
}

bool EndsInsideCharacter(const std::string& text) {
  // Find the last lead byte among the final (at most four) bytes.
  size_t i = text.size();
  size_t continuation = 0;
  while (i > 0 && continuation < 4 && (static_cast<uint8_t>(text[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return false;
  const uint8_t lead = static_cast<uint8_t>(text[i - 1]);
  size_t need;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
  } else {
    return false;  // ASCII, or a byte no character starts with: nothing to wait for.
  }
  return continuation < need;
}

std::string StreamDecoder::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_->Decode(std::vector<int32_t>(ids_.begin() + begin, ids_.begin() + end),
                            skip_special_tokens_);
}

std::string StreamDecoder::Append(int32_t id) {
  ids_.push_back(id);
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  if (new_text.size() <= prefix_text.size() || EndsInsideCharacter(new_text)) return "";
  if (new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    // Decoding is not a concatenation here (a decoder rule changed earlier text); keep
    // the already released text and wait for the window to move on.
    return "";
  }
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return ReplaceInvalidUtf8(delta);
}

std::string StreamDecoder::Finish() {
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size() ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    return "";
  }
  return ReplaceInvalidUtf8(new_text.substr(prefix_text.size()));
}

}  // namespace tessera
