#include "benchmarks/roofline/decode_traffic.h"

#include "common/quantization.h"

namespace tessera::bench {

DecodeTraffic ComputeDecodeTraffic(const ModelConfig& config, const ShardLayout& layout,
                                   DType weight_dtype, int batch, int context, DType kv_dtype) {
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
  const uint64_t kv_token = KvCacheBytesPerToken(static_cast<int>(layers), static_cast<int>(nkv),
                                                 static_cast<int>(hd), kv_dtype);
  t.kv_read_bytes = b * ctx * kv_token;
  t.kv_write_bytes = b * kv_token;
  return t;
}

}  // namespace tessera::bench
