// Prefill attention on the tensor cores: flash-attention style (online softmax over key
// tiles, nothing of size context x context in memory), causal, sliding-window and paged.
// A block takes 64 consecutive query rows of one sequence and one query head; each of its
// 4 warps owns 16 rows. Per tile of 32 keys: S = Q K^T and then O += P V as BF16 WMMA
// products with float accumulation, the softmax itself in float. Only Q (exact when the
// activations are BF16) and P are rounded to BF16 on the way into the tensor cores: K and V
// are BF16 or FP8 codes, exact in BF16, and the softmax scale and the FP8 rows' scales are
// applied in float to the scores and to P. The backend uses this kernel only for BF16 and
// FP8 caches (see CudaBackend).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kTcRows = 64;       // Query rows per block.
constexpr int kTcKeys = 32;       // Keys per tile.
constexpr int kTcWarps = kTcRows / 16;
constexpr int kTcThreads = kTcWarps * 32;

// Eight consecutive cache elements as eight BF16 values in one 16-byte word (BF16 cache:
// one 16-byte load; FP8: one 8-byte load, each code widened exactly). `off` is a multiple
// of 8 elements and the cache 16-byte aligned (checked at launch).
template <class T>
__device__ __forceinline__ uint4 Load8AsBf16(const void* cache, int64_t off);
template <>
__device__ __forceinline__ uint4 Load8AsBf16<__nv_bfloat16>(const void* cache, int64_t off) {
  return *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(cache) + off);
}
template <>
__device__ __forceinline__ uint4 Load8AsBf16<__nv_fp8_e4m3>(const void* cache, int64_t off) {
  const uint2 codes = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(cache) + off);
  const uint32_t words[2] = {codes.x, codes.y};
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = words[i / 2] >> (16 * (i % 2));
    __nv_fp8_e4m3 lo, hi;
    lo.__x = static_cast<__nv_fp8_storage_t>(w & 0xff);
    hi.__x = static_cast<__nv_fp8_storage_t>((w >> 8) & 0xff);
    const __nv_bfloat162 pair =
        __floats2bfloat162_rn(static_cast<float>(lo), static_cast<float>(hi));
    out[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Dynamic shared memory of one block, in bytes.
template <int D>
constexpr size_t TcSharedBytes() {
  return sizeof(__nv_bfloat16) * (kTcRows * D + 2 * kTcKeys * D + kTcWarps * 16 * kTcKeys) +
         sizeof(float) *
             (kTcWarps * 16 * kTcKeys + kTcWarps * 16 * D + 2 * kTcWarps * 16 + 2 * kTcKeys) +
         sizeof(int64_t) * kTcKeys;
}

template <int D, class T>
__global__ void __launch_bounds__(kTcThreads) AttentionPrefillTcKernel(AttentionArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  extern __shared__ __align__(32) unsigned char smem[];
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem);   // [64][D]
  __nv_bfloat16* s_k = s_q + kTcRows * D;                // [32][D]
  __nv_bfloat16* s_v = s_k + kTcKeys * D;                // [32][D]
  __nv_bfloat16* s_p = s_v + kTcKeys * D;                // [warp][16][32]
  auto* s_s = reinterpret_cast<float*>(s_p + kTcWarps * 16 * kTcKeys);  // [warp][16][32]
  float* s_o = s_s + kTcWarps * 16 * kTcKeys;            // [warp][16][D]: this tile's P V
  float* s_alpha = s_o + kTcWarps * 16 * D;              // [warp][16]
  float* s_l = s_alpha + kTcWarps * 16;                  // [warp][16]
  float* s_k_scale = s_l + kTcWarps * 16;                // [32]: the tile's keys' FP8 scales
  float* s_v_scale = s_k_scale + kTcKeys;                // [32]
  auto* s_key_off = reinterpret_cast<int64_t*>(s_v_scale + kTcKeys);  // [32]: row offsets
  __shared__ int s_seq;
  __shared__ int s_tile;

  if (threadIdx.x == 0) {
    // Blocks map to sequences' 64-row tiles in order; surplus blocks find none and exit.
    int b = blockIdx.x;
    s_seq = -1;
    for (int s = 0; s < a.num_seqs; ++s) {
      const int tiles = (a.query_start[s + 1] - a.query_start[s] + kTcRows - 1) / kTcRows;
      if (b < tiles) {
        s_seq = s;
        s_tile = b;
        break;
      }
      b -= tiles;
    }
  }
  __syncthreads();
  if (s_seq < 0) return;
  const int seq = s_seq;
  const int head = blockIdx.y;
  const int q_begin = a.query_start[seq];
  const int num_new = a.query_start[seq + 1] - q_begin;
  const int context_len = a.context_lens[seq];
  const int first = s_tile * kTcRows;
  const int rows = min(kTcRows, num_new - first);
  const int kv_head = paged::KvHeadOf(head, a.num_q_heads, a.num_kv_heads);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int kv_end = paged::TokenPosition(context_len, num_new, first + rows - 1) + 1;
  const int kv_begin =
      paged::FirstKeyTile(paged::TokenPosition(context_len, num_new, first), a.window, kTcKeys);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  for (int e = threadIdx.x; e < kTcRows * D; e += kTcThreads) {
    const int r = e / D;
    const int d = e % D;
    // Unscaled: BF16 activations stay exact, and the softmax scale goes onto the scores.
    const float v = r < rows ? LoadAct(a.q,
                                       static_cast<int64_t>(q_begin + first + r) * a.q_stride +
                                           head * D + d,
                                       a.bf16)
                             : 0.0f;
    s_q[e] = __float2bfloat16(v);
  }

  // Lanes r and r + 16 keep row r's running max and sum; every lane keeps its share of the
  // warp's 16 x D output (element lane + 32 i, row (lane + 32 i) / D).
  constexpr int kOutPerLane = 16 * D / 32;
  float o[kOutPerLane];
  for (int i = 0; i < kOutPerLane; ++i) o[i] = 0.0f;
  float m = -INFINITY;
  float l = 0.0f;
  const int my_row = warp * 16 + lane % 16;
  const int my_pos = paged::TokenPosition(context_len, num_new, first + my_row);
  const bool warp_active = warp * 16 < rows;

  for (int k0 = kv_begin; k0 < kv_end; k0 += kTcKeys) {
    __syncthreads();  // The previous tile is consumed (and s_q is complete).
    // Each key's row offset once (the page-table lookup divides by the runtime block size)
    // and its FP8 scales. FP8 codes are exact in BF16; their row scales wait for the scores
    // (K) and for P (V), where they cost no rounding of their own (a scaled code would be
    // rounded to BF16).
    if (threadIdx.x < kTcKeys) {
      const int j = threadIdx.x;
      const int key = k0 + j;
      int64_t off = -1;
      float k_scale = 1.0f;
      float v_scale = 1.0f;
      if (key < kv_end) {
        off = paged::CacheOffset(paged::SlotOf(table, key, a.block_size), a.num_kv_heads, D,
                                 kv_head);
        if (a.k_scales != nullptr) {
          k_scale = a.k_scales[off / D];
          v_scale = a.v_scales[off / D];
        }
      }
      s_key_off[j] = off;
      s_k_scale[j] = k_scale;
      s_v_scale[j] = v_scale;
    }
    __syncthreads();
    // Then the tile, 8 elements per load.
    for (int c = threadIdx.x; c < kTcKeys * D / 8; c += kTcThreads) {
      const int j = c / (D / 8);
      const int d = c % (D / 8) * 8;
      const int64_t off = s_key_off[j];
      const uint4 zero = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(s_k + j * D + d) =
          off >= 0 ? Load8AsBf16<T>(a.k_cache, off + d) : zero;
      *reinterpret_cast<uint4*>(s_v + j * D + d) =
          off >= 0 ? Load8AsBf16<T>(a.v_cache, off + d) : zero;
    }
    __syncthreads();
    if (!warp_active) continue;

    // S = Q K^T for the warp's 16 rows and the tile's 32 keys.
    float* s = s_s + warp * 16 * kTcKeys;
    for (int n = 0; n < kTcKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int k = 0; k < D / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> kb;
        wmma::load_matrix_sync(qa, s_q + warp * 16 * D + k * 16, D);
        // K stored [key][d] is K^T in column-major order.
        wmma::load_matrix_sync(kb, s_k + n * 16 * D + k * 16, D);
        wmma::mma_sync(c, qa, kb, c);
      }
      wmma::store_matrix_sync(s + n * 16, c, kTcKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: lanes r and r + 16 share row r, 16 keys each, and keep the same
    // running max and sum (combined through one shuffle each).
    __nv_bfloat16* p = s_p + warp * 16 * kTcKeys;
    {
      const int row = lane % 16;
      const int j0 = lane / 16 * (kTcKeys / 2);
      const bool row_valid = my_row < rows;
      const int first_key = paged::FirstVisibleKey(my_pos, a.window);
      float v[kTcKeys / 2];
      float tile_max = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < kTcKeys / 2; ++jj) {
        const int j = j0 + jj;
        const int key = k0 + j;
        const bool visible = row_valid && key <= my_pos && key >= first_key && key < kv_end;
        v[jj] = visible ? s[row * kTcKeys + j] * (a.scale * s_k_scale[j]) : -INFINITY;
        tile_max = fmaxf(tile_max, v[jj]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
      const float m_new = fmaxf(m, tile_max);
      float alpha = 1.0f;
      float sum = 0.0f;
      if (m_new == -INFINITY) {  // Nothing visible yet: keep the empty state.
#pragma unroll
        for (int jj = 0; jj < kTcKeys / 2; ++jj) {
          p[row * kTcKeys + j0 + jj] = __float2bfloat16(0.0f);
        }
      } else {
        alpha = expf(m - m_new);  // 0 while m is -inf.
#pragma unroll
        for (int jj = 0; jj < kTcKeys / 2; ++jj) {
          const float pj = v[jj] == -INFINITY ? 0.0f : expf(v[jj] - m_new);
          sum += pj;
          p[row * kTcKeys + j0 + jj] = __float2bfloat16(pj * s_v_scale[j0 + jj]);
        }
        m = m_new;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 16);
      l = l * alpha + sum;
      if (lane < 16) s_alpha[warp * 16 + lane] = alpha;
    }
    __syncwarp();

    // This tile's P V (16 x D), then O = O * alpha + P V.
    float* pv = s_o + warp * 16 * D;
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int k = 0; k < kTcKeys / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, p + k * 16, kTcKeys);
        wmma::load_matrix_sync(vb, s_v + k * 16 * D + n * 16, D);
        wmma::mma_sync(c, pa, vb, c);
      }
      wmma::store_matrix_sync(pv + n * 16, c, D, wmma::mem_row_major);
    }
    __syncwarp();
    for (int i = 0; i < kOutPerLane; ++i) {
      const int e = lane + 32 * i;
      o[i] = o[i] * s_alpha[warp * 16 + e / D] + pv[e];
    }
  }

  if (!warp_active) return;
  if (lane < 16) s_l[warp * 16 + lane] = l;
  __syncwarp();
  for (int i = 0; i < kOutPerLane; ++i) {
    const int e = lane + 32 * i;
    const int r = e / D;
    const int row = warp * 16 + r;
    if (row >= rows) continue;
    const float sum = s_l[warp * 16 + r];
    StoreAct(a.out,
             (static_cast<int64_t>(q_begin + first + row) * a.num_q_heads + head) * D + e % D,
             sum > 0.0f ? o[i] / sum : 0.0f, a.bf16);
  }
#else
  __trap();  // Built without BF16 tensor cores: fail the launch rather than return nothing.
#endif  // __CUDA_ARCH__ >= 800
}

template <int D, class T>
bool LaunchTcFor(const AttentionArgs& args, int num_tokens, cudaStream_t stream,
                 std::string* error) {
  constexpr size_t kBytes = TcSharedBytes<D>();
  // Above 48 KiB a kernel must opt in to dynamic shared memory, per device: so on every
  // launch (a cheap driver call next to a prefill).
  const cudaError_t opt_in = cudaFuncSetAttribute(
      AttentionPrefillTcKernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(kBytes));
  if (opt_in != cudaSuccess) {
    return Fail(error, std::string("PagedAttentionPrefillTc: shared memory opt-in failed: ") +
                           cudaGetErrorString(opt_in));
  }
  // Tiles never straddle sequences, so each sequence adds at most one partial tile.
  const int tiles = (num_tokens + kTcRows - 1) / kTcRows + args.num_seqs;
  AttentionPrefillTcKernel<D, T><<<dim3(tiles, args.num_q_heads), kTcThreads, kBytes, stream>>>(
      args);
  return CheckLaunch("PagedAttentionPrefillTc", error);
}

}  // namespace

bool AttentionPrefillTcSupported(const KvCacheShape& shape) {
  return (shape.dtype == DType::kBF16 || shape.dtype == DType::kF8E4M3) &&
         (shape.head_dim == 64 || shape.head_dim == 128);
}

bool LaunchPagedAttentionPrefillTc(const void* q, int q_stride, const AttentionBatch& batch,
                                   const void* k_cache, const void* v_cache,
                                   const KvCacheShape& shape, int num_q_heads, float scale,
                                   void* out, cudaStream_t stream, std::string* error, DType act) {
  if (act != DType::kF32 && act != DType::kBF16) {
    return Fail(error, std::string("PagedAttentionPrefillTc: activation dtype ") +
                           DTypeName(act) + " is not supported (F32 or BF16)");
  }
  if (batch.num_tokens <= 0) return true;
  if (!AttentionPrefillTcSupported(shape)) {
    return Fail(error, "PagedAttentionPrefillTc: needs a BF16 or FP8 cache and head_dim 64 or "
                       "128, got head_dim " + std::to_string(shape.head_dim));
  }
  if (shape.num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % shape.num_kv_heads != 0 ||
      num_q_heads > 65535) {
    return Fail(error, "PagedAttentionPrefillTc: num_q_heads " + std::to_string(num_q_heads) +
                           " is not a positive multiple of num_kv_heads " +
                           std::to_string(shape.num_kv_heads));
  }
  // Rows are read 8 elements per load; caches come from cudaMalloc (layers at multiples of
  // whole blocks), so only a caller's odd slice fails here.
  if (reinterpret_cast<uintptr_t>(k_cache) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(v_cache) % 16 != 0) {
    return Fail(error, "PagedAttentionPrefillTc: the K and V caches must be 16-byte aligned");
  }
  const AttentionArgs args =
      MakeArgs(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out, act);
  const bool fp8 = shape.dtype == DType::kF8E4M3;
  if (fp8) {
    return shape.head_dim == 64
               ? LaunchTcFor<64, __nv_fp8_e4m3>(args, batch.num_tokens, stream, error)
               : LaunchTcFor<128, __nv_fp8_e4m3>(args, batch.num_tokens, stream, error);
  }
  return shape.head_dim == 64
             ? LaunchTcFor<64, __nv_bfloat16>(args, batch.num_tokens, stream, error)
             : LaunchTcFor<128, __nv_bfloat16>(args, batch.num_tokens, stream, error);
}

}  // namespace tessera::kernels::gpu
