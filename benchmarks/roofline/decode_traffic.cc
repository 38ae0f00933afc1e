#include "benchmarks/roofline/decode_traffic.h"

namespace tessera::bench {

DecodeTraffic ComputeDecodeTraffic(const ModelConfig& config, const ShardLayout& layout,
                                   DType weight_dtype, int batch, int context) {
  const uint64_t w = DTypeSize(weight_dtype), f = sizeof(float);
  const uint64_t h = config.hidden_size, hd = config.head_dim;
  const uint64_t nq = layout.q_heads.size(), nkv = layout.kv_heads.size();
  const uint64_t inter = layout.intermediate.size();
  const uint64_t layers = config.num_hidden_layers;
  const uint64_t b = batch, ctx = context;
  DecodeTraffic t;
  const uint64_t per_layer = (nq + 2 * nkv) * hd * h  // qkv
                             + h * nq * hd             // o
                             + 2 * inter * h           // gate_up
                             + h * inter;              // down
  t.layer_matrix_bytes = layers * per_layer * w;
  t.norm_bytes = (2 * layers + 1) * h * f;
  t.lm_head_bytes = static_cast<uint64_t>(layout.vocab.size()) * h * w;
  t.embedding_row_bytes = b * h * w;
  t.kv_read_bytes = b * ctx * layers * 2 * nkv * hd * f;
  t.kv_write_bytes = b * layers * 2 * nkv * hd * f;
  return t;
}

}  // namespace tessera::bench
