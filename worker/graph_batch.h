#ifndef TESSERA_WORKER_GRAPH_BATCH_H_
#define TESSERA_WORKER_GRAPH_BATCH_H_

#include <optional>
#include <string_view>
#include <tuple>

#include "worker/step_batch.h"

namespace tessera {

// The shape a step is padded to so it can replay a captured backend graph: graphs bake in
// every size the host passes to a kernel, so steps that pad to one shape share one graph.
// A step has `decode_seqs` leading one-token sequences (the decode attention kernel's) and
// `seqs - decode_seqs` others (the prefill kernel's: prompt chunks, speculative
// verification), `tokens` tokens in all, and `logits` rows of logits.
struct GraphShape {
  int decode_seqs = 0;
  int seqs = 0;
  int tokens = 0;
  int logits = 0;

  bool pure_decode() const { return seqs == decode_seqs; }
  friend bool operator<(const GraphShape& a, const GraphShape& b) {
    return std::tie(a.decode_seqs, a.seqs, a.tokens, a.logits) <
           std::tie(b.decode_seqs, b.seqs, b.tokens, b.logits);
  }
  friend bool operator==(const GraphShape& a, const GraphShape& b) {
    return !(a < b) && !(b < a);
  }
};

// Decode batch sizes with a graph of their own (vLLM's capture sizes, to 256).
inline constexpr int kDecodeGraphSizes[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};

// The decode graph a batch of `seqs` one-token sequences runs in (0: none that large).
int DecodeGraphSize(int seqs);
// The token count a step's other sequences (and its logits rows) pad to: a multiple of 16
// up to 128, of 64 up to 1,024 and of 256 beyond.
int GraphTokenBucket(int n);

// What a step computes, for metrics: "decode" (every sequence one token), "prefill" (none
// does) or "mixed".
std::string_view StepKindOf(const StepBatch& batch);

// Limits of the shapes graphs are captured for; a bigger step runs eagerly (at thousands
// of tokens the launches are a sliver of the step).
struct GraphLimits {
  int max_tokens = 8192;
  int max_seqs = 256;
  int max_logits = 8192;
  // Block-table width every graph uses (the most blocks a sequence can hold) and the
  // cache's block size: a padding sequence must fit in that table.
  int width = 0;
  int block_size = 16;
};

// The shape `batch` pads to, or nothing when it is past the limits. Buckets are coarse
// where padding is cheap relative to the step and fine where it is not: decode batches
// take the decode graph sizes (1, 2, 4, 8, 16, 24, 32, ...), other sequences the next
// power of two above their count plus one (a padding sequence absorbs the padding
// tokens), tokens a multiple of 16 up to 128, of 64 up to 1,024 and of 256 beyond.
std::optional<GraphShape> GraphShapeFor(const StepBatch& batch, const GraphLimits& limits);

// `batch` laid out at `shape` with block tables `width` wide: its decode sequences, then
// padding decode sequences, then its other sequences, then padding sequences (the last
// takes the remaining tokens). Padding tokens are token 0, write their K/V nowhere (slot
// -1) and attend over the null block 0, which no sequence owns; their logits rows (after
// the real ones, which keep their order) point at token 0. So the real rows' results are
// the unpadded step's.
StepBatch PadToGraphShape(const StepBatch& batch, const GraphShape& shape, int width);

}  // namespace tessera

#endif  // TESSERA_WORKER_GRAPH_BATCH_H_
