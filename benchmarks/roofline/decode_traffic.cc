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
  const uint64_t attention = (nq + 2 * nkv) * hd * h  // qkv
                             + h * nq * hd;            // o
  const uint64_t dense_mlp = 3 * inter * h;            // gate_up, down
  const uint64_t moe_layers = config.NumMoeLayers();
  // Every rank routes every token with the whole router; the shared expert is split.
  const uint64_t moe_fixed = static_cast<uint64_t>(config.moe.num_experts) * h +
                             (layout.shared_intermediate.size() > 0
                                  ? 3 * static_cast<uint64_t>(layout.shared_intermediate.size()) * h + h
                                  : 0);
  t.layer_matrix_bytes =
      (layers * attention + (layers - moe_layers) * dense_mlp + moe_layers * moe_fixed) * w;
  t.norm_bytes = (2 * layers + 1) * h * f + (config.qk_norm ? 2 * layers * hd * f : 0);
  t.lm_head_bytes = static_cast<uint64_t>(layout.vocab.size()) * h * w;
  t.embedding_row_bytes = b * h * w;
  const uint64_t kv_token = KvCacheBytesPerToken(static_cast<int>(layers), static_cast<int>(nkv),
                                                 static_cast<int>(hd), kv_dtype);
  t.kv_read_bytes = b * ctx * kv_token;
  t.kv_write_bytes = b * kv_token;
  return t;
}

}  // namespace tessera::bench
