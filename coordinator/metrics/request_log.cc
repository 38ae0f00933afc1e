#include "coordinator/metrics/request_log.h"

#include "common/logging.h"

namespace tessera {

void LogFinishedRequest(const FinishedRequestRecord& r) {
  if (!LogEnabled(LogLevel::kInfo)) return;
  LogFields fields = {{"request_id", r.request_id},
                      {"protocol", r.protocol},
                      {"replica", int64_t{r.replica}},
                      {"prompt_tokens", int64_t{r.prompt_tokens}},
                      {"generation_tokens", int64_t{r.generation_tokens}},
                      {"cached_prompt_tokens", int64_t{r.cached_prompt_tokens}},
                      {"queue_seconds", r.queue_seconds}};
  if (r.ttft_seconds.has_value()) fields.emplace_back("ttft_seconds", *r.ttft_seconds);
  fields.emplace_back("duration_seconds", r.e2e_seconds);
  fields.emplace_back("finish_reason", r.finish_reason);
  Log(r.finish_reason == "error" ? LogLevel::kWarning : LogLevel::kInfo, "tessera-coordinator",
      "request finished", fields);
}

}  // namespace tessera
