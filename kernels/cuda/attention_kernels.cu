// Paged attention: a split-K decode kernel + its reduction, and a tiled prefill kernel.
// Both read K/V through kernels/cuda/paged_index.h; launchers at the end turn head_dim
// into a template constant.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

// How each cache element type is read: four consecutive elements at element offset `off`
// as floats (times the row's scale for FP8, applied by the kernels through Scale()).
struct F32Cache {
  static constexpr bool kScaled = false;
  __device__ static float4 Load4(const void* c, int64_t off) {
    return *reinterpret_cast<const float4*>(static_cast<const float*>(c) + off);
  }
  __device__ static float Load(const void* c, int64_t off) {
    return static_cast<const float*>(c)[off];
  }
};

struct Bf16Cache {
  static constexpr bool kScaled = false;
  __device__ static float4 Load4(const void* c, int64_t off) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(c) + off);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
  }
  __device__ static float Load(const void* c, int64_t off) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(c)[off]);
  }
};

struct Fp8Cache {
  static constexpr bool kScaled = true;
  __device__ static float Convert(uint8_t b) {
    return static_cast<float>(*reinterpret_cast<const __nv_fp8_e4m3*>(&b));
  }
  __device__ static float4 Load4(const void* c, int64_t off) {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(c) + off);
    return make_float4(Convert(raw & 0xff), Convert((raw >> 8) & 0xff), Convert((raw >> 16) & 0xff),
                       Convert(raw >> 24));
  }
  __device__ static float Load(const void* c, int64_t off) {
    return Convert(static_cast<const uint8_t*>(c)[off]);
  }
};

// The scale of the row at element offset `row_off` (a multiple of D): 1 unless FP8.
template <class Cache, int D>
__device__ __forceinline__ float Scale(const float* scales, int64_t row_off) {
  if constexpr (Cache::kScaled) return scales[row_off / D];
  return 1.0f;
}

// ---------------------------------------------------------------------------------------
// Split-K kernel. A block handles one token, one partition of its keys and G query heads
// that share a KV head (grouped-query attention), so each K/V row is read once for the G
// heads instead of once per head: decode is bound by those reads. A "group" of kGroup
// threads handles one key at a time, each thread owning kPerThread consecutive dims (float4
// loads, coalesced along the head); the block's groups stride over the partition's keys
// with an online softmax per head, then merge in shared memory.
constexpr int kSplitThreads = 128;

template <int D>
struct SplitLayout {
  static constexpr int kGroup = D / 4 < 32 ? D / 4 : 32;
  static constexpr int kPerThread = D / kGroup;
  static constexpr int kGroups = kSplitThreads / kGroup;
  static_assert(kPerThread % 4 == 0, "float4 loads");
};

// Query heads one split-K block serves: the largest of 8, 4, 2, 1 dividing the GQA group
// (num_q_heads / num_kv_heads), so a block never spans two KV heads.
int SplitHeadsPerBlock(int num_q_heads, int num_kv_heads) {
  const int group = num_kv_heads > 0 ? num_q_heads / num_kv_heads : 1;
  for (int g : {8, 4, 2}) {
    if (group % g == 0) return g;
  }
  return 1;
}

template <int D, int G, class Cache>
__global__ void __launch_bounds__(kSplitThreads)
    AttentionSplitKernel(AttentionArgs a, int partition_size, int num_partitions,
                         float* part_max, float* part_sum, float* part_acc) {
  using L = SplitLayout<D>;
  const int token = blockIdx.x;
  const int head0 = blockIdx.y * G;
  const int part = blockIdx.z;
  const int seq = paged::SeqOfToken(a.query_start, a.num_seqs, token);
  const int q_begin = a.query_start[seq];
  const int num_new = a.query_start[seq + 1] - q_begin;
  const int position = paged::TokenPosition(a.context_lens[seq], num_new, token - q_begin);
  const int kv_head = paged::KvHeadOf(head0, a.num_q_heads, a.num_kv_heads);
  // Partitions wholly before the window find no keys and report an empty softmax.
  int begin = 0;
  int end = 0;
  paged::PartitionKeys(part, partition_size, position, a.window, &begin, &end);
  const int group = threadIdx.x / L::kGroup;
  const int d0 = (threadIdx.x % L::kGroup) * L::kPerThread;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;

  float qv[G][L::kPerThread];
  float m[G];
  float l[G];
  float acc[G][L::kPerThread];
  for (int g = 0; g < G; ++g) {
    const int64_t q_row = static_cast<int64_t>(token) * a.q_stride + (head0 + g) * D + d0;
    for (int i = 0; i < L::kPerThread; ++i) {
      qv[g][i] = LoadAct(a.q, q_row + i, a.bf16) * a.scale;
      acc[g][i] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }

  // Every thread runs the same number of iterations so the group shuffles stay converged.
  for (int k0 = begin; k0 < end; k0 += L::kGroups) {
    const int key = k0 + group;
    const bool valid = key < end;
    int64_t row_off = 0;
    float s[G];
    for (int g = 0; g < G; ++g) s[g] = 0.0f;
    if (valid) {
      row_off = paged::CacheOffset(paged::SlotOf(table, key, a.block_size), a.num_kv_heads, D,
                                   kv_head);
      const int64_t off = row_off + d0;
      for (int i = 0; i < L::kPerThread; i += 4) {
        const float4 kk = Cache::Load4(a.k_cache, off + i);
        for (int g = 0; g < G; ++g) {
          s[g] += qv[g][i] * kk.x + qv[g][i + 1] * kk.y + qv[g][i + 2] * kk.z +
                  qv[g][i + 3] * kk.w;
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      for (int o = L::kGroup / 2; o > 0; o >>= 1) s[g] += __shfl_xor_sync(kFullMask, s[g], o);
    }
    if (valid) {
      const float k_scale = Scale<Cache, D>(a.k_scales, row_off);
      const float v_scale = Scale<Cache, D>(a.v_scales, row_off);
      float alpha[G];
      float pv[G];
      for (int g = 0; g < G; ++g) {
        const float sg = s[g] * k_scale;
        const float m_new = fmaxf(m[g], sg);
        alpha[g] = expf(m[g] - m_new);  // 0 while m is -inf.
        const float p = expf(sg - m_new);
        l[g] = l[g] * alpha[g] + p;
        pv[g] = p * v_scale;
        m[g] = m_new;
      }
      const int64_t off = row_off + d0;
      for (int i = 0; i < L::kPerThread; i += 4) {
        const float4 vv = Cache::Load4(a.v_cache, off + i);
        for (int g = 0; g < G; ++g) {
          acc[g][i] = acc[g][i] * alpha[g] + pv[g] * vv.x;
          acc[g][i + 1] = acc[g][i + 1] * alpha[g] + pv[g] * vv.y;
          acc[g][i + 2] = acc[g][i + 2] * alpha[g] + pv[g] * vv.z;
          acc[g][i + 3] = acc[g][i + 3] * alpha[g] + pv[g] * vv.w;
        }
      }
    }
  }

  __shared__ float s_max[L::kGroups][G];
  __shared__ float s_sum[L::kGroups][G];
  __shared__ float s_acc[L::kGroups][G][D];
  for (int g = 0; g < G; ++g) {
    if (threadIdx.x % L::kGroup == 0) {
      s_max[group][g] = m[g];
      s_sum[group][g] = l[g];
    }
    for (int i = 0; i < L::kPerThread; ++i) s_acc[group][g][d0 + i] = acc[g][i];
  }
  __syncthreads();

  for (int e = threadIdx.x; e < G * D; e += kSplitThreads) {
    const int g = e / D;
    const int d = e % D;
    float big = -INFINITY;
    for (int k = 0; k < L::kGroups; ++k) big = fmaxf(big, s_max[k][g]);
    float sum = 0.0f;
    float o = 0.0f;
    if (big != -INFINITY) {
      for (int k = 0; k < L::kGroups; ++k) {
        if (s_max[k][g] == -INFINITY) continue;
        const float w = expf(s_max[k][g] - big);
        sum += s_sum[k][g] * w;
        o += s_acc[k][g][d] * w;
      }
    }
    const int64_t row = static_cast<int64_t>(token) * a.num_q_heads + head0 + g;
    if (num_partitions == 1) {
      StoreAct(a.out, row * D + d, sum > 0.0f ? o / sum : 0.0f, a.bf16);
    } else {
      const int64_t idx = row * num_partitions + part;
      part_acc[idx * D + d] = o;
      if (d == 0) {
        part_max[idx] = big;
        part_sum[idx] = sum;
      }
    }
  }
}

// Merges the partitions of one (token, head): one thread per dim.
template <int D>
__global__ void AttentionSplitReduceKernel(int num_q_heads, int num_partitions,
                                           const float* part_max, const float* part_sum,
                                           const float* part_acc, void* out, bool bf16) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * num_q_heads + blockIdx.y;
  const int d = threadIdx.x;
  const int64_t base = row * num_partitions;
  float big = -INFINITY;
  for (int p = 0; p < num_partitions; ++p) big = fmaxf(big, part_max[base + p]);
  float sum = 0.0f;
  float o = 0.0f;
  if (big != -INFINITY) {
    for (int p = 0; p < num_partitions; ++p) {
      if (part_max[base + p] == -INFINITY) continue;
      const float w = expf(part_max[base + p] - big);
      sum += part_sum[base + p] * w;
      o += part_acc[(base + p) * D + d] * w;
    }
  }
  StoreAct(out, row * D + d, sum > 0.0f ? o / sum : 0.0f, bf16);
}

// ---------------------------------------------------------------------------------------
// Prefill kernel. Block = (tile of kRows consecutive tokens of one sequence, query head);
// 4 warps each own 4 query rows. Per key tile, lane j scores key j against a row; the PV
// product broadcasts each lane's probability with shuffles, lane owning dims lane + 32*i.
constexpr int kPrefillRows = 16;
constexpr int kPrefillKeys = 32;
constexpr int kPrefillThreads = 128;
constexpr int kRowsPerWarp = kPrefillRows / (kPrefillThreads / 32);

template <int D, class Cache>
__global__ void __launch_bounds__(kPrefillThreads) AttentionPrefillKernel(AttentionArgs a) {
  constexpr int kDimsPerLane = (D + 31) / 32;
  __shared__ float s_q[kPrefillRows][D];
  __shared__ float s_k[kPrefillKeys][D + 1];  // +1: lanes read different rows, no conflicts.
  __shared__ float s_v[kPrefillKeys][D];
  __shared__ int s_seq;
  __shared__ int s_tile;

  if (threadIdx.x == 0) {
    // Blocks map to sequences' tiles in order; surplus blocks (the grid is an upper bound)
    // find none and exit.
    int b = blockIdx.x;
    s_seq = -1;
    for (int s = 0; s < a.num_seqs; ++s) {
      const int tiles = (a.query_start[s + 1] - a.query_start[s] + kPrefillRows - 1) /
                        kPrefillRows;
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
  const int first = s_tile * kPrefillRows;  // First local token of the tile.
  const int rows = min(kPrefillRows, num_new - first);
  const int kv_head = paged::KvHeadOf(head, a.num_q_heads, a.num_kv_heads);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;
  const int kv_end = paged::TokenPosition(context_len, num_new, first + rows - 1) + 1;
  // Whole key tiles before the earliest key the tile's rows see are skipped.
  const int kv_begin = paged::FirstKeyTile(paged::TokenPosition(context_len, num_new, first),
                                           a.window, kPrefillKeys);

  for (int e = threadIdx.x; e < kPrefillRows * D; e += kPrefillThreads) {
    const int r = e / D;
    const int d = e % D;
    s_q[r][d] = r < rows ? LoadAct(a.q,
                                   static_cast<int64_t>(q_begin + first + r) * a.q_stride +
                                       head * D + d,
                                   a.bf16) *
                               a.scale
                         : 0.0f;
  }

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float m[kRowsPerWarp];
  float l[kRowsPerWarp];
  float acc[kRowsPerWarp][kDimsPerLane];
  int pos[kRowsPerWarp];
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
    for (int i = 0; i < kDimsPerLane; ++i) acc[rr][i] = 0.0f;
    pos[rr] = paged::TokenPosition(context_len, num_new, first + warp * kRowsPerWarp + rr);
  }

  for (int k0 = kv_begin; k0 < kv_end; k0 += kPrefillKeys) {
    __syncthreads();  // The previous tile is consumed (and s_q is complete).
    for (int e = threadIdx.x; e < kPrefillKeys * D; e += kPrefillThreads) {
      const int j = e / D;
      const int d = e % D;
      const int key = k0 + j;
      float kv = 0.0f;
      float vv = 0.0f;
      if (key < kv_end) {
        const int64_t row_off = paged::CacheOffset(paged::SlotOf(table, key, a.block_size),
                                                   a.num_kv_heads, D, kv_head);
        kv = Cache::Load(a.k_cache, row_off + d) * Scale<Cache, D>(a.k_scales, row_off);
        vv = Cache::Load(a.v_cache, row_off + d) * Scale<Cache, D>(a.v_scales, row_off);
      }
      s_k[j][d] = kv;
      s_v[j][d] = vv;
    }
    __syncthreads();

    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      if (r >= rows) break;  // Same r for the whole warp.
      const int key = k0 + lane;
      float s = -INFINITY;
      if (key <= pos[rr] && key >= paged::FirstVisibleKey(pos[rr], a.window)) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += s_q[r][d] * s_k[lane][d];
        s = dot;
      }
      const float tile_max = WarpMax(s);
      if (tile_max == -INFINITY) continue;  // Whole tile masked for this row (warp-uniform).
      const float m_new = fmaxf(m[rr], tile_max);
      const float alpha = expf(m[rr] - m_new);
      const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
      l[rr] = l[rr] * alpha + WarpSum(p);
      for (int i = 0; i < kDimsPerLane; ++i) acc[rr][i] *= alpha;
      for (int j = 0; j < kPrefillKeys; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < D) acc[rr][i] += pj * s_v[j][d];
        }
      }
      m[rr] = m_new;
    }
  }

  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    if (r >= rows) break;
    const int64_t o = (static_cast<int64_t>(q_begin + first + r) * a.num_q_heads + head) * D;
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) StoreAct(a.out, o + d, l[rr] > 0.0f ? acc[rr][i] / l[rr] : 0.0f, a.bf16);
    }
  }
}

// ---------------------------------------------------------------------------------------
bool CheckActivations(const char* what, DType act, std::string* error) {
  if (act == DType::kF32 || act == DType::kBF16) return true;
  return Fail(error, std::string(what) + ": activation dtype " + DTypeName(act) +
                         " is not supported (F32 or BF16)");
}

bool CheckShapes(const char* what, const AttentionBatch& batch, const KvCacheShape& shape,
                 int num_q_heads, std::string* error) {
  if (!AttentionHeadDimSupported(shape.head_dim)) {
    return Fail(error, std::string(what) + ": head_dim " + std::to_string(shape.head_dim) +
                           " is not supported (supported: 8, 16, 32, 64, 128)");
  }
  if (shape.num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % shape.num_kv_heads != 0) {
    return Fail(error, std::string(what) + ": num_q_heads " + std::to_string(num_q_heads) +
                           " is not a positive multiple of num_kv_heads " +
                           std::to_string(shape.num_kv_heads));
  }
  if (shape.block_size <= 0) {
    return Fail(error, std::string(what) + ": block_size " + std::to_string(shape.block_size) +
                           " must be positive");
  }
  if (batch.num_tokens > 65535 * 1024 || num_q_heads > 65535) {
    return Fail(error, std::string(what) + ": grid too large (num_tokens " +
                           std::to_string(batch.num_tokens) + ", num_q_heads " +
                           std::to_string(num_q_heads) + ")");
  }
  return true;
}

// Keys a sequence may hold at most: the width of its block-table row.
int MaxKeys(const AttentionBatch& batch, const KvCacheShape& shape) {
  return std::max(1, batch.max_blocks_per_seq * shape.block_size);
}

int PickPartitionSize(const AttentionBatch& batch, const KvCacheShape& shape, int num_q_heads,
                      int requested) {
  const int max_keys = MaxKeys(batch, shape);
  if (requested > 0) return requested;
  // Aim for about two waves of blocks on a large GPU; never split below 64 keys.
  constexpr int64_t kTargetBlocks = 264;
  const int64_t rows = std::max<int64_t>(
      1, static_cast<int64_t>(batch.num_tokens) * num_q_heads /
             SplitHeadsPerBlock(num_q_heads, shape.num_kv_heads));
  int64_t parts = (kTargetBlocks + rows - 1) / rows;
  parts = std::min<int64_t>(parts, (max_keys + 63) / 64);
  parts = std::max<int64_t>(parts, 1);
  return static_cast<int>((max_keys + parts - 1) / parts);
}

template <int D, class Cache>
bool LaunchSplitFor(const AttentionArgs& args, int num_tokens, int partition_size,
                    int num_partitions, float* workspace, cudaStream_t stream,
                    std::string* error) {
  const int64_t rows = static_cast<int64_t>(num_tokens) * args.num_q_heads;
  float* part_max = workspace;
  float* part_sum = part_max + rows * num_partitions;
  float* part_acc = part_sum + rows * num_partitions;
  const int heads_per_block = SplitHeadsPerBlock(args.num_q_heads, args.num_kv_heads);
  const dim3 grid(num_tokens, args.num_q_heads / heads_per_block, num_partitions);
  auto launch = [&](auto heads) {
    AttentionSplitKernel<D, decltype(heads)::value, Cache><<<grid, kSplitThreads, 0, stream>>>(
        args, partition_size, num_partitions, part_max, part_sum, part_acc);
  };
  switch (heads_per_block) {
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
  if (!CheckLaunch("PagedAttentionSplit", error)) return false;
  if (num_partitions > 1) {
    AttentionSplitReduceKernel<D><<<dim3(num_tokens, args.num_q_heads), D, 0, stream>>>(
        args.num_q_heads, num_partitions, part_max, part_sum, part_acc, args.out, args.bf16);
    return CheckLaunch("PagedAttentionSplitReduce", error);
  }
  return true;
}

template <int D, class Cache>
bool LaunchPrefillFor(const AttentionArgs& args, int num_tokens, cudaStream_t stream,
                      std::string* error) {
  // Tiles never straddle sequences, so each sequence adds at most one partial tile.
  const int tiles = (num_tokens + kPrefillRows - 1) / kPrefillRows + args.num_seqs;
  AttentionPrefillKernel<D, Cache><<<dim3(tiles, args.num_q_heads), kPrefillThreads, 0, stream>>>(
      args);
  return CheckLaunch("PagedAttentionPrefill", error);
}

}  // namespace

bool AttentionHeadDimSupported(int head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

size_t AttentionSplitWorkspaceBytes(const AttentionBatch& batch, const KvCacheShape& shape,
                                    int num_q_heads, int partition_size) {
  const int size = PickPartitionSize(batch, shape, num_q_heads, partition_size);
  const int64_t parts = (MaxKeys(batch, shape) + size - 1) / size;
  if (parts <= 1) return 0;
  const int64_t rows = static_cast<int64_t>(batch.num_tokens) * num_q_heads * parts;
  return static_cast<size_t>(rows) * (2 + std::max(shape.head_dim, 0)) * sizeof(float);
}

bool LaunchPagedAttentionSplit(const void* q, int q_stride, const AttentionBatch& batch,
                               const void* k_cache, const void* v_cache,
                               const KvCacheShape& shape, int num_q_heads, float scale,
                               int partition_size, void* workspace, size_t workspace_bytes,
                               void* out, cudaStream_t stream, std::string* error, DType act) {
  if (!CheckActivations("PagedAttentionSplit", act, error)) return false;
  if (batch.num_tokens <= 0) return true;
  if (!CheckShapes("PagedAttentionSplit", batch, shape, num_q_heads, error)) return false;
  const int size = PickPartitionSize(batch, shape, num_q_heads, partition_size);
  const int64_t parts = (MaxKeys(batch, shape) + size - 1) / size;
  if (parts > 65535) {
    return Fail(error, "PagedAttentionSplit: " + std::to_string(parts) +
                           " partitions exceed the grid limit; use a larger partition_size");
  }
  const size_t needed = AttentionSplitWorkspaceBytes(batch, shape, num_q_heads, partition_size);
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) {
    return Fail(error, "PagedAttentionSplit: workspace of " + std::to_string(workspace_bytes) +
                           " bytes, " + std::to_string(needed) + " needed");
  }
  const AttentionArgs args =
      MakeArgs(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out, act);
  float* ws = static_cast<float*>(workspace);
  const int p = static_cast<int>(parts);
  auto launch = [&](auto cache) {
    using Cache = decltype(cache);
    switch (shape.head_dim) {
      case 8: return LaunchSplitFor<8, Cache>(args, batch.num_tokens, size, p, ws, stream, error);
      case 16: return LaunchSplitFor<16, Cache>(args, batch.num_tokens, size, p, ws, stream, error);
      case 32: return LaunchSplitFor<32, Cache>(args, batch.num_tokens, size, p, ws, stream, error);
      case 64: return LaunchSplitFor<64, Cache>(args, batch.num_tokens, size, p, ws, stream, error);
      case 128:
        return LaunchSplitFor<128, Cache>(args, batch.num_tokens, size, p, ws, stream, error);
    }
    return Fail(error, "PagedAttentionSplit: unreachable head_dim");
  };
  switch (shape.dtype) {
    case DType::kF32: return launch(F32Cache{});
    case DType::kBF16: return launch(Bf16Cache{});
    case DType::kF8E4M3: return launch(Fp8Cache{});
    default: return Fail(error, "PagedAttentionSplit: unsupported cache dtype");
  }
}

bool LaunchPagedAttentionPrefill(const void* q, int q_stride, const AttentionBatch& batch,
                                 const void* k_cache, const void* v_cache,
                                 const KvCacheShape& shape, int num_q_heads, float scale,
                                 void* out, cudaStream_t stream, std::string* error, DType act) {
  if (!CheckActivations("PagedAttentionPrefill", act, error)) return false;
  if (batch.num_tokens <= 0) return true;
  if (!CheckShapes("PagedAttentionPrefill", batch, shape, num_q_heads, error)) return false;
  const AttentionArgs args =
      MakeArgs(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out, act);
  auto launch = [&](auto cache) {
    using Cache = decltype(cache);
    switch (shape.head_dim) {
      case 8: return LaunchPrefillFor<8, Cache>(args, batch.num_tokens, stream, error);
      case 16: return LaunchPrefillFor<16, Cache>(args, batch.num_tokens, stream, error);
      case 32: return LaunchPrefillFor<32, Cache>(args, batch.num_tokens, stream, error);
      case 64: return LaunchPrefillFor<64, Cache>(args, batch.num_tokens, stream, error);
      case 128: return LaunchPrefillFor<128, Cache>(args, batch.num_tokens, stream, error);
    }
    return Fail(error, "PagedAttentionPrefill: unreachable head_dim");
  };
  switch (shape.dtype) {
    case DType::kF32: return launch(F32Cache{});
    case DType::kBF16: return launch(Bf16Cache{});
    case DType::kF8E4M3: return launch(Fp8Cache{});
    default: return Fail(error, "PagedAttentionPrefill: unsupported cache dtype");
  }
}

}  // namespace tessera::kernels::gpu
