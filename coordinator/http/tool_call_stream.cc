#include "coordinator/http/tool_call_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace tessera::http {
namespace {

constexpr absl::string_view kLlamaPythonTag = "<|python_tag|>";

// The length of the longest end of `text` that is a proper start of `marker`: text that
// may yet become the marker and so must wait for the next piece.
size_t PartialMarkerAtEnd(absl::string_view text, absl::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (absl::EndsWith(text, marker.substr(0, n))) return n;
  }
  return 0;
}

}  // namespace

std::string ToolCallStream::Push(absl::string_view text) {
  held_.append(text.data(), text.size());
  if (parsing_.forced) state_ = State::kHolding;
  if (state_ == State::kHolding) return "";
  const absl::string_view marker = ToolCallMarker(parsing_.format);
  if (marker.empty()) {
    // Llama 3.1's JSON: a call is the whole output, so only its start decides.
    if (state_ == State::kStart) {
      const absl::string_view start = absl::StripLeadingAsciiWhitespace(held_);
      if (start.empty()) return "";
      if (start[0] == '{' || absl::StartsWith(start, kLlamaPythonTag)) {
        state_ = State::kHolding;
        return "";
      }
      if (absl::StartsWith(kLlamaPythonTag, start)) return "";
      state_ = State::kContent;
    }
    return std::exchange(held_, std::string());
  }
  // A marker may open calls after some content (Hermes, Mistral).
  const size_t at = absl::string_view(held_).find(marker);
  if (at != absl::string_view::npos) {
    state_ = State::kHolding;
    std::string content = held_.substr(0, at);
    held_.erase(0, at);
    return content;
  }
  state_ = State::kContent;
  const size_t keep = PartialMarkerAtEnd(held_, marker);
  std::string content = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return content;
}

ToolCallStream::End ToolCallStream::Finish() {
  End end;
  if (state_ == State::kHolding) {
    if (std::optional<ParsedToolCalls> parsed = ParseToolCalls(parsing_.format, held_, parsing_.forced);
        parsed.has_value()) {
      end.content = std::move(parsed->content);
      end.calls = std::move(parsed->calls);
      held_.clear();
      return end;
    }
  }
  end.content = std::exchange(held_, std::string());
  return end;
}

}  // namespace tessera::http
