#include "coordinator/http/sse_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::http {

std::string SseEvent(absl::string_view payload) { return absl::StrCat("data: ", payload, "\n\n"); }

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string HttpChunk(absl::string_view data) {
  if (data.empty()) return "";  // An empty chunk would end the body.
  return absl::StrCat(absl::StrFormat("%x", data.size()), "\r\n", data, "\r\n");
}

std::string HttpLastChunk() { return "0\r\n\r\n"; }

}  // namespace tessera::http
