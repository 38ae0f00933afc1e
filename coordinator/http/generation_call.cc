#include "coordinator/http/generation_call.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "coordinator/api/response_building.h"
#include "coordinator/engine/request_stream.h"
#include "coordinator/http/sse_writer.h"
#include "coordinator/http/tool_call_stream.h"

namespace tessera::http {
namespace {

using json = nlohmann::json;

// Tokens of left context when a token is decoded for logprobs (see api/token_offsets.h:
// a piece alone loses its word-boundary space and byte-fallback fusion).
constexpr size_t kContextTokens = 8;

std::string NewId(Endpoint endpoint) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s%016x%08x", endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", rng(),
                         static_cast<uint32_t>(rng()));
}

bool IsFailure(const RequestEvent& e) {
  return e.finished &&
         (e.finish_reason == sched::FinishReason::kError || e.finish_reason == sched::FinishReason::kCancelled);
}

class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving, OpenAiRequest request)
      : exchange_(std::move(exchange)), serving_(serving), request_(std::move(request)) {
    meta_.id = NewId(request_.endpoint);
    meta_.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    meta_.model = serving_->served_model;
    if (request_.tool_parsing.has_value() && request_.stream) tool_stream_.emplace(*request_.tool_parsing);
  }

  void Start() {
    Admission* admission = serving_->admission;
    if (!admission->AcquireStream()) {
      RespondError(*exchange_, ToApiError(FromGrpcStatus(admission->TooManyStreams()), request_.endpoint));
      return;
    }
    holds_slot_ = true;
    // A unary answer is bounded by max_tokens, so only a stream needs the bound.
    stream_ = std::make_shared<RequestStream>(request_.stream ? admission->limits().max_undelivered_tokens
                                                              : std::numeric_limits<int>::max());
    // Weak: the stream outlives nothing here, and the listener must not keep the call.
    std::weak_ptr<GenerationCall> weak = weak_from_this();
    stream_->SetListener([weak] {
      if (auto call = weak.lock()) call->exchange_->Post([call] { call->Pump(); });
    });
    stream_->SetInterrupt([weak] {
      if (auto call = weak.lock()) {
        call->exchange_->Post([call] {
          call->exchange_->Abort();
          call->Done();
        });
      }
    });
    exchange_->OnClientGone([self = shared_from_this()] { self->OnClientGone(); });
    request_.generate.set_request_id(meta_.id);
    std::string request_id;
    auto seq = admission->Start(request_.generate, std::chrono::steady_clock::time_point::max(), stream_,
                                &request_id, &prompt_);
    if (!seq.ok()) {
      RespondError(*exchange_, ToApiError(seq.status(), request_.endpoint));
      Done();
      return;
    }
    started_ = true;
    seq_id_ = *seq;
    const size_t tail = std::min(prompt_.size(), kContextTokens);
    context_.assign(prompt_.end() - tail, prompt_.end());
    Pump();
  }

 private:
  // Moves what the engine queued to the client; on the strand.
  void Pump() {
    if (done_ || writing_) return;
    std::optional<RequestEvent> e = stream_->TryPop();
    if (!e.has_value()) return;
    if (IsFailure(*e)) {
      Fail(FromGrpcStatus(FailureStatus(*e)));
      return;
    }
    std::vector<TokenLogprobText> logprobs = LogprobTexts(*e);
    if (!request_.stream) {
      text_ += ParseText(*e);
      for (TokenLogprobText& t : logprobs) logprobs_.push_back(std::move(t));
      if (e->finished) RespondWhole(*e);
      return;
    }
    StreamEvent(*e, std::move(logprobs));
  }

  void RespondWhole(const RequestEvent& e) {
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    json lp = nullptr;
    if (request_.logprobs) lp = chat ? ChatLogprobs(logprobs_) : CompletionLogprobs(logprobs_, 0);
    const char* reason = FinishReasonString(e.finish_reason);
    json usage = Usage(e.prompt_tokens, e.completion_tokens);
    std::optional<ParsedToolCalls> calls;
    if (request_.tool_parsing.has_value()) {
      calls = ParseToolCalls(request_.tool_parsing->format, text_, request_.tool_parsing->forced);
    }
    const json body =
        !chat ? CompletionResponse(meta_, text_, std::move(lp), reason, std::move(usage))
        : calls.has_value()
            ? ChatCompletionResponse(meta_, calls->content, std::move(lp), "tool_calls", std::move(usage), calls->calls)
            : ChatCompletionResponse(meta_, text_, std::move(lp), reason, std::move(usage));
    exchange_->Respond(200, Dump(body));
    Done();
  }

  void StreamEvent(const RequestEvent& e, std::vector<TokenLogprobText> logprobs) {
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    std::string out;
    if (!headers_sent_) {
      exchange_->StartStream(200, "text/event-stream");
      headers_sent_ = true;
      if (chat) {
        const std::string empty;
        out += SseEvent(Dump(ChatChunk(meta_, /*with_role=*/true, &empty, nullptr, nullptr, request_.include_usage)));
      }
    }
    // With tools, text that may be a call is held until the end, then sent as calls or
    // as the content it turned out to be.
    std::string text = tool_stream_.has_value() ? tool_stream_->Push(ParseText(e)) : e.text;
    std::vector<ToolCall> calls;
    if (e.finished && tool_stream_.has_value()) {
      ToolCallStream::End end = tool_stream_->Finish();
      text += end.content;
      calls = std::move(end.calls);
    }
    const char* reason = e.finished ? FinishReasonString(e.finish_reason) : nullptr;
    if (!text.empty() || !logprobs.empty() || (e.finished && calls.empty())) {
      json lp = nullptr;
      if (request_.logprobs) {
        lp = chat ? ChatLogprobs(logprobs) : CompletionLogprobs(logprobs, streamed_bytes_);
      }
      streamed_bytes_ += text.size();
      // The last chunk of a chat stream has an empty delta unless text came with the end.
      const char* chunk_reason = calls.empty() ? reason : nullptr;
      const json chunk = chat ? ChatChunk(meta_, false, text.empty() && e.finished ? nullptr : &text, std::move(lp),
                                          chunk_reason, request_.include_usage)
                              : CompletionChunk(meta_, text, std::move(lp), chunk_reason, request_.include_usage);
      out += SseEvent(Dump(chunk));
    }
    if (!calls.empty()) {
      for (json& delta : ToolCallDeltas(calls)) {
        out += SseEvent(Dump(ChatToolCallChunk(meta_, std::move(delta), request_.include_usage)));
      }
      out += SseEvent(Dump(ChatChunk(meta_, false, nullptr, nullptr, "tool_calls", request_.include_usage)));
    }
    if (e.finished) {
      if (request_.include_usage) {
        out += SseEvent(Dump(UsageChunk(meta_, request_.endpoint, Usage(e.prompt_tokens, e.completion_tokens))));
      }
      out += SseDone();
    }
    if (out.empty()) return;  // Tokens whose text is held back (a partial stop string).
    writing_ = true;
    const bool last = e.finished;
    exchange_->Write(std::move(out), [self = shared_from_this(), last](bool ok) {
      self->writing_ = false;
      if (!ok) {
        self->OnClientGone();
        return;
      }
      if (last) {
        self->exchange_->EndStream();
        self->Done();
        return;
      }
      self->Pump();
    });
  }

  // The request failed: an HTTP error while nothing was sent, else an error event and the
  // end of the stream (the status line already said 200).
  void Fail(const absl::Status& status) {
    const ApiError error = ToApiError(status, request_.endpoint);
    if (!headers_sent_) {
      RespondError(*exchange_, error);
      Done();
      return;
    }
    writing_ = true;
    exchange_->Write(SseEvent(Dump(ErrorBody(error))) + SseDone(), [self = shared_from_this()](bool ok) {
      self->writing_ = false;
      if (ok) self->exchange_->EndStream();
      self->Done();
    });
  }

  // The event's text as tool-call parsing reads it: with the family's marker put back
  // where its special-token id was generated (decoding skips special tokens).
  std::string ParseText(const RequestEvent& e) const {
    if (!request_.tool_parsing.has_value() || request_.tool_parsing->marker_token_id < 0) return e.text;
    for (int32_t id : e.token_ids) {
      if (id == request_.tool_parsing->marker_token_id) {
        return absl::StrCat(ToolCallMarker(request_.tool_parsing->format), e.text);
      }
    }
    return e.text;
  }

  // Each token's text in context (the decode of the tokens before it, plus it, minus the
  // decode of the tokens before it), and its alternatives' texts in the same context.
  std::vector<TokenLogprobText> LogprobTexts(const RequestEvent& e) {
    std::vector<TokenLogprobText> out;
    if (!request_.logprobs) return out;
    const Tokenizer& tok = *serving_->tokenizer;
    for (const TokenLogprobs& lp : e.logprobs) {
      const std::string before = tok.Decode(context_);
      auto text_of = [&](int32_t id) {
        std::vector<int32_t> ids = context_;
        ids.push_back(id);
        std::string after = tok.Decode(ids);
        return after.size() >= before.size() && after.compare(0, before.size(), before) == 0
                   ? after.substr(before.size())
                   : tok.Decode({id});
      };
      TokenLogprobText t;
      t.token = text_of(lp.token_id);
      t.logprob = lp.logprob;
      for (size_t i = 0; i < lp.top.size() && static_cast<int>(i) < request_.top_logprobs; ++i) {
        t.top.emplace_back(text_of(lp.top[i].first), lp.top[i].second);
      }
      out.push_back(std::move(t));
      context_.push_back(lp.token_id);
      if (context_.size() > kContextTokens) context_.erase(context_.begin());
    }
    return out;
  }

  void OnClientGone() {
    if (done_) return;
    if (started_) serving_->admission->engine()->Cancel(seq_id_);
    Done();
  }

  // The exchange is answered or abandoned: stop listening and give the slot back. Never
  // from inside the listener (SetListener waits for it).
  void Done() {
    if (done_) return;
    done_ = true;
    if (stream_ != nullptr) {
      stream_->SetListener(nullptr);
      stream_->SetInterrupt(nullptr);
    }
    if (holds_slot_) serving_->admission->ReleaseStream();
    holds_slot_ = false;
  }

  const std::shared_ptr<HttpExchange> exchange_;
  const OpenAiServing* const serving_;
  OpenAiRequest request_;
  ResponseMeta meta_;
  std::shared_ptr<RequestStream> stream_;
  std::optional<ToolCallStream> tool_stream_;  // A streamed chat whose output may be tool calls.
  bool holds_slot_ = false;
  bool started_ = false;
  uint64_t seq_id_ = 0;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> context_;  // The last tokens, for decoding logprob tokens.
  bool done_ = false;
  bool writing_ = false;
  bool headers_sent_ = false;
  size_t streamed_bytes_ = 0;  // Text sent so far (completions' text_offset).
  // A unary response, accumulated.
  std::string text_;
  std::vector<TokenLogprobText> logprobs_;
};

}  // namespace

void RespondError(HttpExchange& exchange, const ApiError& error) {
  exchange.Respond(error.http_status, Dump(ErrorBody(error)));
}

void RunGeneration(std::shared_ptr<HttpExchange> exchange, const OpenAiServing* serving, OpenAiRequest request) {
  std::make_shared<GenerationCall>(std::move(exchange), serving, std::move(request))->Start();
}

}  // namespace tessera::http
