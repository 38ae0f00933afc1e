#include "worker/graph_batch.h"

#include <algorithm>

namespace tessera {
namespace {

int PowerOfTwoAtLeast(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

int RoundUp(int n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

// Leading sequences with exactly one token: the ones the decode attention kernel takes
// (kernels::AttentionBatch::num_decode_seqs counts them the same way).
int LeadingDecodeSeqs(const StepBatch& b) {
  int d = 0;
  while (d < b.num_seqs() && b.query_start[d + 1] - b.query_start[d] == 1) ++d;
  return d;
}

}  // namespace

int DecodeGraphSize(int seqs) {
  for (int size : kDecodeGraphSizes) {
    if (seqs <= size) return size;
  }
  return 0;
}

int GraphTokenBucket(int n) {
  if (n <= 128) return RoundUp(n, 16);
  if (n <= 1024) return RoundUp(n, 64);
  return RoundUp(n, 256);
}

std::string_view StepKindOf(const StepBatch& batch) {
  if (batch.num_tokens() == batch.num_seqs()) return "decode";
  for (int s = 0; s < batch.num_seqs(); ++s) {
    if (batch.query_start[s + 1] - batch.query_start[s] == 1) return "mixed";
  }
  return "prefill";
}

std::optional<GraphShape> GraphShapeFor(const StepBatch& batch, const GraphLimits& limits) {
  const int seqs = batch.num_seqs(), tokens = batch.num_tokens();
  const int logits = static_cast<int>(batch.logits_rows.size());
  if (seqs == 0 || logits == 0 || batch.max_blocks_per_seq > limits.width) return std::nullopt;
  const int decode = LeadingDecodeSeqs(batch);
  GraphShape shape;
  if (decode == seqs) {
    shape.decode_seqs = shape.seqs = shape.tokens = DecodeGraphSize(seqs);
    if (shape.seqs == 0) return std::nullopt;
    shape.logits = std::min(DecodeGraphSize(logits), shape.tokens);
  } else {
    shape.decode_seqs = decode == 0 ? 0 : DecodeGraphSize(decode);
    if (decode > 0 && shape.decode_seqs == 0) return std::nullopt;
    const int others = seqs - decode;
    const int other_bucket = PowerOfTwoAtLeast(others + 1);
    shape.seqs = shape.decode_seqs + other_bucket;
    // Every padding sequence has a token; the last one takes what is left.
    shape.tokens =
        shape.decode_seqs + GraphTokenBucket(tokens - decode + (other_bucket - others));
    shape.logits = std::min(GraphTokenBucket(logits), shape.tokens);
    const int padding_tokens = shape.tokens - shape.decode_seqs - (tokens - decode) -
                               (other_bucket - others - 1);
    // The padding sequence's context must fit in the block table it attends through.
    if (padding_tokens > limits.width * limits.block_size) return std::nullopt;
  }
  if (shape.tokens > limits.max_tokens || shape.seqs > limits.max_seqs ||
      shape.logits > limits.max_logits) {
    return std::nullopt;
  }
  return shape;
}

StepBatch PadToGraphShape(const StepBatch& batch, const GraphShape& shape, int width) {
  const int seqs = batch.num_seqs();
  const int decode = LeadingDecodeSeqs(batch);
  // Tokens of the real non-decode sequences move up by the padding decode sequences.
  const int shift = shape.decode_seqs - decode;
  StepBatch padded;
  padded.max_blocks_per_seq = width;
  padded.query_start.push_back(0);
  auto add_real = [&](int s) {
    for (int t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      padded.token_ids.push_back(batch.token_ids[t]);
      padded.positions.push_back(batch.positions[t]);
      padded.slot_mapping.push_back(batch.slot_mapping[t]);
    }
    padded.query_start.push_back(padded.num_tokens());
    padded.context_lens.push_back(batch.context_lens[s]);
    for (int b = 0; b < width; ++b) {
      padded.block_tables.push_back(
          b < batch.max_blocks_per_seq
              ? batch.block_tables[static_cast<size_t>(s) * batch.max_blocks_per_seq + b]
              : 0);
    }
  };
  for (int s = 0; s < decode; ++s) add_real(s);
  for (int s = decode; s < shape.decode_seqs; ++s) padded.AddPaddingSequence(1);
  for (int s = decode; s < seqs; ++s) add_real(s);
  const int padding_seqs = shape.seqs - shape.decode_seqs - (seqs - decode);
  for (int s = 0; s < padding_seqs; ++s) {
    const int left = shape.tokens - padded.num_tokens();
    padded.AddPaddingSequence(s + 1 < padding_seqs ? 1 : left);
  }
  for (int row : batch.logits_rows) padded.logits_rows.push_back(row < decode ? row : row + shift);
  padded.logits_rows.resize(shape.logits, 0);
  return padded;
}

}  // namespace tessera
