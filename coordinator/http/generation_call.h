#ifndef TESSERA_COORDINATOR_HTTP_GENERATION_CALL_H_
#define TESSERA_COORDINATOR_HTTP_GENERATION_CALL_H_

#include <memory>

#include "coordinator/http/http_exchange.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/http/openai_response.h"
#include "coordinator/http/openai_serving.h"

namespace tessera::http {

// Runs one completion or chat completion (its `generate` ready: input set and checked)
// through the shared Admission and engine, and answers it as one JSON response or as a
// Server-Sent Events stream. Call on the exchange's strand.
//
// Like the gRPC reactors it holds no thread: the engine's RequestStream listener posts to
// the connection's strand, and a stream keeps one write in flight, so a client that does
// not read leaves tokens in the RequestStream, whose bound makes the engine end the
// request. A client that disconnects (noticed by the server's socket watch, or a failed
// write) cancels the engine request, which frees its KV blocks within one step.
//
// A stream's headers wait for the first event, so a request refused after admission
// (queue full, no replica) still gets its HTTP status (429, 503) instead of a 200 stream
// that carries an error.
void RunGeneration(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving, OpenAiRequest request);

// Answers with OpenAI's error shape.
void RespondError(HttpExchange& exchange, const ApiError& error);

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_GENERATION_CALL_H_
