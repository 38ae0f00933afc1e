#ifndef TESSERA_COORDINATOR_HTTP_SSE_WRITER_H_
#define TESSERA_COORDINATOR_HTTP_SSE_WRITER_H_

#include <string>

#include "absl/strings/string_view.h"

// Server-Sent Events framing (text/event-stream) as OpenAI streams use it: each event a
// single `data:` line and a blank line; the stream ends with `data: [DONE]`.
namespace tessera::http {

// `payload` is one line of JSON (no newline), so one data: line carries it.
std::string SseEvent(absl::string_view payload);
std::string SseDone();

// HTTP/1.1 chunked transfer coding of one piece, and the last (empty) chunk: a stream's
// length is unknown when its headers go out.
std::string HttpChunk(absl::string_view data);
std::string HttpLastChunk();

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_SSE_WRITER_H_
