#ifndef TESSERA_COORDINATOR_ENGINE_STEP_REQUEST_H_
#define TESSERA_COORDINATOR_ENGINE_STEP_REQUEST_H_

#include <functional>

#include "common/sampling_params.h"
#include "coordinator/scheduler/step_plan.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// The scheduler's plan in the wire form every rank receives. `sampling(seq_id)` gives a
// new sequence's sampling settings, `prompt_len(seq_id)` its original prompt length,
// `grammar(seq_id)` its output grammar (null: none; may be left empty).
v1::StepRequest ToStepRequest(
    const sched::StepPlan& plan, const std::function<const SamplingParams*(uint64_t)>& sampling,
    const std::function<int(uint64_t)>& prompt_len,
    const std::function<const v1::GrammarConstraint*(uint64_t)>& grammar = nullptr);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_STEP_REQUEST_H_
