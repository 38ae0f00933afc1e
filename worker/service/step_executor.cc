#include "worker/service/step_executor.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/sampler.h"

namespace tessera {
namespace {

SamplingParams FromProto(const v1::SamplingConfig& s) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p() > 0 ? s.top_p() : 1.0f;
  p.min_p = s.min_p();
  p.seed = s.seed();
  p.has_seed = true;
  p.repetition_penalty = s.repetition_penalty() > 0 ? s.repetition_penalty() : 1.0f;
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.num_logprobs = static_cast<int>(s.num_logprobs());
  return p;
}

}  // namespace

StepExecutor::StepExecutor(LlamaModel* model, std::unique_ptr<KvCache> cache)
    : model_(model), cache_(std::move(cache)) {}

absl::Status StepExecutor::Apply(const v1::StepRequest& request) {
  for (uint64_t id : request.finished_seq_ids()) seqs_.erase(id);
  for (const v1::NewSequence& n : request.new_sequences()) {
    SeqState s;
    s.tokens.assign(n.token_ids().begin(), n.token_ids().end());
    s.blocks.assign(n.block_ids().begin(), n.block_ids().end());
    s.prompt_len = static_cast<int>(n.prompt_len());
    s.num_computed = static_cast<int>(n.num_computed_tokens());
    s.sampling = FromProto(n.sampling());
    seqs_[n.seq_id()] = std::move(s);
  }
  for (const v1::CachedSequence& c : request.cached_sequences()) {
    auto it = seqs_.find(c.seq_id());
    if (it == seqs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", request.step_id(), " continues sequence ", c.seq_id(),
                       " that this worker does not hold"));
    }
    SeqState& s = it->second;
    s.tokens.insert(s.tokens.end(), c.new_token_ids().begin(), c.new_token_ids().end());
    s.blocks.insert(s.blocks.end(), c.new_block_ids().begin(), c.new_block_ids().end());
    s.num_computed = static_cast<int>(c.num_computed_tokens());
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Execute(const v1::StepRequest& request, v1::StepResponse* response) {
  response->set_step_id(request.step_id());
  RETURN_IF_ERROR(Apply(request));
  if (request.scheduled_seq_ids_size() != request.num_scheduled_tokens_size()) {
    return absl::InvalidArgumentError("scheduled_seq_ids and num_scheduled_tokens differ in length");
  }
  if (request.scheduled_seq_ids_size() == 0) return absl::OkStatus();

  const int block_size = cache_->shape().block_size;
  StepBatch batch;
  int max_blocks = 0;
  std::vector<SeqState*> scheduled;
  for (int i = 0; i < request.scheduled_seq_ids_size(); ++i) {
    auto it = seqs_.find(request.scheduled_seq_ids(i));
    if (it == seqs_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", request.scheduled_seq_ids(i), " scheduled but unknown"));
    }
    scheduled.push_back(&it->second);
    max_blocks = std::max(max_blocks, static_cast<int>(it->second.blocks.size()));
  }
  batch.max_blocks_per_seq = max_blocks;
  // Decode sequences (one token) go first, so a backend can give them its decode attention
  // kernel (kernels::AttentionBatch::num_decode_seqs); the response keeps the request's order.
  std::vector<int> order(scheduled.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(),
                        [&](int i) { return request.num_scheduled_tokens(i) == 1; });
  std::vector<int> logits_seq;  // Index into `scheduled` per logits row.
  for (const int i : order) {
    SeqState& s = *scheduled[i];
    const int n = static_cast<int>(request.num_scheduled_tokens(i));
    const int end = s.num_computed + n;
    if (n <= 0 || end > static_cast<int>(s.tokens.size()) ||
        end > static_cast<int>(s.blocks.size()) * block_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", request.scheduled_seq_ids(i), ": ", n, " tokens scheduled after ",
          s.num_computed, " computed, but it has ", s.tokens.size(), " tokens and ",
          s.blocks.size(), " blocks"));
    }
    const bool samples = end == static_cast<int>(s.tokens.size());
    batch.AddSequence(s.tokens, s.blocks, s.num_computed, end, block_size, samples);
    if (samples) logits_seq.push_back(static_cast<int>(i));
    s.num_computed = end;
  }

  // Where the backend samples on its device (CUDA), only token ids come back to the host;
  // top-n logprobs still need the full rows here. Every rank decides alike (the same
  // requests, the same backend kind), so all of them run the same collectives.
  kernels::Backend& backend = *model_->backend();
  const bool on_device =
      backend.HasDeviceSampler() &&
      std::all_of(logits_seq.begin(), logits_seq.end(),
                  [&](int i) { return scheduled[i]->sampling.num_logprobs == 0; });
  const float* device_logits = nullptr;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(
      model_->Forward(batch, cache_.get(), &logits_, on_device ? &device_logits : nullptr));
  response->set_forward_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  // Every rank holds the full logits; rank 0 samples and answers for the group.
  if (model_->layout().rank != 0) return absl::OkStatus();
  const size_t vocab = model_->config().vocab_size;
  std::vector<SampledToken> drawn(logits_seq.size());
  if (on_device) {
    std::vector<kernels::DeviceSamplingRow> rows(logits_seq.size());
    std::vector<int32_t> penalty_tokens;
    std::vector<int32_t> penalty_counts;
    for (size_t row = 0; row < logits_seq.size(); ++row) {
      const SeqState& s = *scheduled[logits_seq[row]];
      rows[row] = DeviceSamplingRowFor(s.sampling, s.tokens, s.prompt_len,
                                       s.tokens.size() - s.prompt_len, &penalty_tokens,
                                       &penalty_counts);
    }
    std::vector<int32_t> ids(rows.size());
    std::vector<float> logprobs(rows.size());
    std::string error;
    if (!backend.SampleOnDevice(device_logits, static_cast<int>(vocab), rows.data(),
                                static_cast<int>(rows.size()), penalty_tokens.data(),
                                penalty_counts.data(), penalty_tokens.size(), ids.data(),
                                logprobs.data(), &error)) {
      return absl::InternalError(absl::StrCat("sampling on the ", std::string(backend.name()),
                                              " device failed: ", error));
    }
    for (size_t row = 0; row < rows.size(); ++row) drawn[row] = {ids[row], logprobs[row], {}};
  } else {
    for (size_t row = 0; row < logits_seq.size(); ++row) {
      const SeqState& s = *scheduled[logits_seq[row]];
      const uint64_t step = s.tokens.size() - s.prompt_len;  // Index of the token drawn.
      drawn[row] = SampleToken(absl::MakeConstSpan(logits_.data() + row * vocab, vocab),
                               s.sampling, s.tokens, s.prompt_len, step);
    }
  }
  std::vector<size_t> order_of_rows(logits_seq.size());
  std::iota(order_of_rows.begin(), order_of_rows.end(), size_t{0});
  std::sort(order_of_rows.begin(), order_of_rows.end(),
            [&](size_t a, size_t b) { return logits_seq[a] < logits_seq[b]; });
  for (const size_t row : order_of_rows) {
    const int i = logits_seq[row];
    const SampledToken& t = drawn[row];
    v1::SampledTokenProto* out = response->add_sampled();
    out->set_seq_id(request.scheduled_seq_ids(i));
    out->set_token_id(t.id);
    out->set_logprob(t.logprob);
    for (const auto& [id, lp] : t.top_logprobs) {
      out->add_top_ids(id);
      out->add_top_logprobs(lp);
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
