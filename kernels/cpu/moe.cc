#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace tessera::kernels {

void MoeRoute(const float* logits, int n, int num_experts, int top_k, bool renormalize,
              int32_t* expert_ids, float* weights) {
  std::vector<double> probs(num_experts);
  std::vector<int32_t> order(num_experts);
  for (int i = 0; i < n; ++i) {
    const float* row = logits + static_cast<int64_t>(i) * num_experts;
    const float max = *std::max_element(row, row + num_experts);
    double sum = 0;
    for (int e = 0; e < num_experts; ++e) {
      probs[e] = std::exp(static_cast<double>(row[e]) - max);
      sum += probs[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int32_t a, int32_t b) {
                        return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
                      });
    double kept = 0;
    for (int j = 0; j < top_k; ++j) kept += probs[order[j]];
    const double denominator = renormalize ? kept : sum;
    for (int j = 0; j < top_k; ++j) {
      expert_ids[static_cast<int64_t>(i) * top_k + j] = order[j];
      weights[static_cast<int64_t>(i) * top_k + j] =
          static_cast<float>(probs[order[j]] / denominator);
    }
  }
}

namespace {

// Rows per expert up to which a decode-like step runs experts in parallel rather than each
// expert's GEMMs: at a few rows a GEMM streams its weights once, whoever runs it.
constexpr int kExpertParallelMaxRows = 16;

// Runs expert `e` (held index) over its `m` routed rows starting at bucket `begin`, adding
// the weighted results into out [n, hidden].
void RunExpert(const float* x, int hidden, const ExpertWeights& experts, int e, int begin,
               int m, const MoeScratch& routing, ExpertScratch* s, float* out,
               ThreadPool* pool) {
  const int inter = experts.intermediate;
  s->rows.resize(static_cast<size_t>(m) * hidden);
  s->gate_up.resize(static_cast<size_t>(m) * 2 * inter);
  s->act.resize(static_cast<size_t>(m) * inter);
  s->down.resize(static_cast<size_t>(m) * hidden);
  for (int r = 0; r < m; ++r) {
    std::memcpy(s->rows.data() + static_cast<size_t>(r) * hidden,
                x + static_cast<size_t>(routing.token_of[begin + r]) * hidden,
                sizeof(float) * hidden);
  }
  Gemm(s->rows.data(), m, experts.gate_up[e], s->gate_up.data(), pool);
  SiluMul(s->gate_up.data(), m, inter, s->act.data(), pool);
  Gemm(s->act.data(), m, experts.down[e], s->down.data(), pool);
  for (int r = 0; r < m; ++r) {
    const float w = routing.weight_of[begin + r];
    float* dst = out + static_cast<size_t>(routing.token_of[begin + r]) * hidden;
    const float* src = s->down.data() + static_cast<size_t>(r) * hidden;
    for (int d = 0; d < hidden; ++d) dst[d] += w * src[d];
  }
}

}  // namespace

void MoeExperts(const float* x, int n, int hidden, const int32_t* expert_ids,
                const float* weights, int top_k, const ExpertWeights& experts, float* out,
                MoeScratch* s, ThreadPool* pool) {
  const size_t out_size = static_cast<size_t>(n) * hidden;
  std::memset(out, 0, sizeof(float) * out_size);
  // Bucket the (row, slot) pairs by held expert, rows in order within each bucket.
  std::vector<int32_t>& begin = s->bucket_begin;
  begin.assign(experts.num_local + 1, 0);
  const int64_t pairs = static_cast<int64_t>(n) * top_k;
  for (int64_t p = 0; p < pairs; ++p) {
    const int local = expert_ids[p] - experts.first_expert;
    if (local >= 0 && local < experts.num_local) ++begin[local + 1];
  }
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  s->token_of.resize(begin.back());
  s->weight_of.resize(begin.back());
  s->fill.assign(begin.begin(), begin.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) {
    const int local = expert_ids[p] - experts.first_expert;
    if (local < 0 || local >= experts.num_local) continue;
    s->token_of[s->fill[local]] = static_cast<int32_t>(p / top_k);
    s->weight_of[s->fill[local]] = weights[p];
    ++s->fill[local];
  }
  s->active.clear();
  int max_rows = 0;
  for (int e = 0; e < experts.num_local; ++e) {
    const int m = begin[e + 1] - begin[e];
    if (m == 0) continue;
    s->active.push_back(e);
    max_rows = std::max(max_rows, m);
  }
  const std::vector<int>& active = s->active;
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  if (threads == 1 || max_rows > kExpertParallelMaxRows ||
      static_cast<int>(active.size()) < 2 * threads) {
    for (int e : active) {
      RunExpert(x, hidden, experts, e, begin[e], begin[e + 1] - begin[e], *s, &s->shared, out,
                pool);
    }
    return;
  }
  // Part p runs active experts p, p + threads, ...: within one expert of each other in
  // weight bytes, which is what a decode step's time follows. Part 0 accumulates into
  // `out`, the others into their own buffers, summed into `out` at the end.
  s->parts.resize(threads);
  s->part_out.resize(threads - 1);
  pool->ParallelFor(threads, 1, [&](int64_t first, int64_t last) {
    for (int64_t part = first; part < last; ++part) {
      float* dst = out;
      if (part > 0) {
        s->part_out[part - 1].assign(out_size, 0.0f);
        dst = s->part_out[part - 1].data();
      }
      for (size_t i = part; i < active.size(); i += threads) {
        const int e = active[i];
        RunExpert(x, hidden, experts, e, begin[e], begin[e + 1] - begin[e], *s, &s->parts[part],
                  dst, nullptr);
      }
    }
  });
  for (const std::vector<float>& part : s->part_out) {
    for (size_t i = 0; i < out_size; ++i) out[i] += part[i];
  }
}

void AddSigmoidGated(float* y, const float* x, const float* gate_logits, int n, int dim) {
  for (int i = 0; i < n; ++i) {
    const float g = 1.0f / (1.0f + std::exp(-gate_logits[i]));
    float* row = y + static_cast<size_t>(i) * dim;
    const float* src = x + static_cast<size_t>(i) * dim;
    for (int d = 0; d < dim; ++d) row[d] += g * src[d];
  }
}

}  // namespace tessera::kernels
