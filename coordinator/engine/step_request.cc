#include "coordinator/engine/step_request.h"

#include <algorithm>

namespace tessera {

v1::StepRequest ToStepRequest(
    const sched::StepPlan& plan, const std::function<const SamplingParams*(uint64_t)>& sampling,
    const std::function<int(uint64_t)>& prompt_len,
    const std::function<const v1::GrammarConstraint*(uint64_t)>& grammar) {
  v1::StepRequest req;
  req.set_step_id(plan.step_id);
  // Without speculation every lookahead is 0: the field stays empty (workers read that so).
  const bool lookahead =
      std::any_of(plan.new_seqs.begin(), plan.new_seqs.end(),
                  [](const sched::NewSeqData& n) { return n.num_lookahead_tokens > 0; }) ||
      std::any_of(plan.cached_seqs.begin(), plan.cached_seqs.end(),
                  [](const sched::CachedSeqData& c) { return c.num_lookahead_tokens > 0; });
  for (sched::SeqId id : plan.finished_ids) req.add_finished_seq_ids(id);
  for (sched::SeqId id : plan.preempted_ids) req.add_finished_seq_ids(id);
  auto add_copies = [](const std::vector<sched::KvCopy>& copies,
                       google::protobuf::RepeatedPtrField<v1::KvBlockCopy>* out) {
    for (const sched::KvCopy& c : copies) {
      v1::KvBlockCopy* copy = out->Add();
      copy->set_block_id(static_cast<uint32_t>(c.block_id));
      copy->set_host_slot(static_cast<uint32_t>(c.host_slot));
    }
  };
  add_copies(plan.host_copies.to_host, req.mutable_kv_to_host());
  add_copies(plan.host_copies.from_host, req.mutable_kv_from_host());
  for (const sched::NewSeqData& n : plan.new_seqs) {
    v1::NewSequence* out = req.add_new_sequences();
    out->set_seq_id(n.seq_id);
    out->mutable_token_ids()->Add(n.token_ids.begin(), n.token_ids.end());
    for (auto b : n.block_ids) out->add_block_ids(static_cast<int32_t>(b));
    out->set_num_computed_tokens(n.num_computed_tokens);
    out->set_prompt_len(prompt_len(n.seq_id));
    if (const SamplingParams* p = sampling(n.seq_id); p != nullptr) {
      v1::SamplingConfig* s = out->mutable_sampling();
      s->set_temperature(p->temperature);
      s->set_top_k(p->top_k);
      s->set_top_p(p->top_p);
      s->set_min_p(p->min_p);
      s->set_seed(p->seed);
      s->set_repetition_penalty(p->repetition_penalty);
      s->set_presence_penalty(p->presence_penalty);
      s->set_frequency_penalty(p->frequency_penalty);
      s->set_num_logprobs(p->num_logprobs);
    }
    // Sent with every (re)start: a preempted sequence's output is replayed through it.
    if (grammar != nullptr) {
      if (const v1::GrammarConstraint* g = grammar(n.seq_id); g != nullptr) {
        *out->mutable_grammar() = *g;
      }
    }
    req.add_scheduled_seq_ids(n.seq_id);
    req.add_num_scheduled_tokens(n.num_scheduled_tokens);
    if (lookahead) req.add_num_lookahead_tokens(n.num_lookahead_tokens);
  }
  for (const sched::CachedSeqData& c : plan.cached_seqs) {
    v1::CachedSequence* out = req.add_cached_sequences();
    out->set_seq_id(c.seq_id);
    for (int32_t t : c.new_token_ids) out->add_new_token_ids(t);
    for (auto b : c.new_block_ids) out->add_new_block_ids(static_cast<int32_t>(b));
    out->set_num_computed_tokens(c.num_computed_tokens);
    req.add_scheduled_seq_ids(c.seq_id);
    req.add_num_scheduled_tokens(c.num_scheduled_tokens);
    if (lookahead) req.add_num_lookahead_tokens(c.num_lookahead_tokens);
  }
  return req;
}

}  // namespace tessera
