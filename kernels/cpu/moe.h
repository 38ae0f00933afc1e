#ifndef TESSERA_KERNELS_CPU_MOE_H_
#define TESSERA_KERNELS_CPU_MOE_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

// Mixture-of-experts ops of the CPU backend (see Backend::MoeRoute and MoeExperts).
namespace tessera::kernels {

// Softmax over each row of logits [n, num_experts] (in double), its top_k experts in
// descending probability (ties: the lower id first), divided by their sum when
// `renormalize`. expert_ids, weights [n, top_k].
void MoeRoute(const float* logits, int n, int num_experts, int top_k, bool renormalize,
              int32_t* expert_ids, float* weights);

// One expert's buffers: its gathered rows and what they become.
struct ExpertScratch {
  std::vector<float> rows, gate_up, act, down;
};

// Reusable buffers of MoeExperts, kept by the backend between calls.
struct MoeScratch {
  // The routed (row, slot) pairs bucketed by held expert: bucket e is
  // [bucket_begin[e], bucket_begin[e + 1]) of token_of / weight_of.
  std::vector<int32_t> bucket_begin, fill, token_of;
  std::vector<float> weight_of;
  std::vector<int> active;  // Held experts some row was routed to.
  ExpertScratch shared;
  // Expert-parallel decode: one set of buffers per part, and the partial outputs of parts
  // 1.. (part 0 accumulates into the output itself).
  std::vector<ExpertScratch> parts;
  std::vector<std::vector<float>> part_out;
};

// Grouped expert GEMM: for each held expert some rows were routed to, gathers those rows,
// runs gate_up, SiLU-mul and down over them as one GEMM each (so a decode step reads only
// the routed experts' weights), and adds the results, scaled by the routing weights, into
// out [n, hidden] (zeroed first). Few rows per expert (decode) and enough experts: each
// thread takes whole experts on its own, so the step streams the experts' weights without
// a synchronisation per GEMM; otherwise (prefill) the threads share each expert's GEMMs.
void MoeExperts(const float* x, int n, int hidden, const int32_t* expert_ids,
                const float* weights, int top_k, const ExpertWeights& experts, float* out,
                MoeScratch* scratch, ThreadPool* pool);

// y[i, :] += sigmoid(gate_logits[i]) * x[i, :].
void AddSigmoidGated(float* y, const float* x, const float* gate_logits, int n, int dim);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_MOE_H_
