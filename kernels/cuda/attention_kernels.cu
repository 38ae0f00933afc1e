// Paged attention: split-K decode kernels (the current one and the previous one, kept for
// comparison) + their reduction. The tiled prefill kernel is in
// attention_prefill_kernels.cu; both read K/V through attention_cache.cuh and
// kernels/cuda/paged_index.h, and the launchers turn head_dim into a template constant.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/attention_cache.cuh"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/paged_index.h"

namespace tessera::kernels::gpu {
namespace {

// ---------------------------------------------------------------------------------------
// Split-K kernel, version 1 (SplitKernelVersion::kV1). A block handles one token, one partition of its keys and G query heads
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

// The start of both split-K kernels: this thread's kElems dims (from d0) of the G heads'
// queries, pre-scaled, and empty softmax states.
template <int D, int G, int kElems>
__device__ __forceinline__ void LoadQueries(const AttentionArgs& a, int token, int head0,
                                            int d0, float (&qv)[G][kElems],
                                            float (&acc)[G][kElems], float (&m)[G],
                                            float (&l)[G]) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int64_t q_row = static_cast<int64_t>(token) * a.q_stride + (head0 + g) * D + d0;
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      qv[g][i] = LoadAct(a.q, q_row + i, a.bf16) * a.scale;
      acc[g][i] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
}

// The end of both split-K kernels: each of the block's kGroups groups of kGroup threads
// left a softmax state per head (m, l, and acc over its threads' kElems dims from d0);
// they are staged in shared memory and merged, one thread per (head, dim), into the
// output row (one partition) or the partition's partials for AttentionSplitReduceKernel.
template <int D, int G, int kGroups, int kGroup, int kElems>
__device__ __forceinline__ void MergeGroups(const float (&m)[G], const float (&l)[G],
                                            const float (&acc)[G][kElems], int group, int d0,
                                            const AttentionArgs& a, int token, int head0,
                                            int part, int num_partitions, float* part_max,
                                            float* part_sum, float* part_acc) {
  __shared__ float s_max[kGroups][G];
  __shared__ float s_sum[kGroups][G];
  __shared__ float s_acc[kGroups][G][D];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (threadIdx.x % kGroup == 0) {
      s_max[group][g] = m[g];
      s_sum[group][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < kElems; ++i) s_acc[group][g][d0 + i] = acc[g][i];
  }
  __syncthreads();

  for (int e = threadIdx.x; e < G * D; e += kSplitThreads) {
    const int g = e / D;
    const int d = e % D;
    float big = -INFINITY;
    for (int k = 0; k < kGroups; ++k) big = fmaxf(big, s_max[k][g]);
    float sum = 0.0f;
    float o = 0.0f;
    if (big != -INFINITY) {
      for (int k = 0; k < kGroups; ++k) {
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
  LoadQueries<D>(a, token, head0, d0, qv, acc, m, l);

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

  MergeGroups<D, G, L::kGroups, L::kGroup, L::kPerThread>(
      m, l, acc, group, d0, a, token, head0, part, num_partitions, part_max, part_sum, part_acc);
}

// ---------------------------------------------------------------------------------------
// Split-K kernel, version 2 (the default). The same block shape as version 1 (one token,
// one partition, G query heads sharing a KV head, kSplitThreads threads), built for
// bandwidth:
//  - each thread loads 16 bytes of a K or V row at once (8 BF16, 16 FP8 or 4 F32 values;
//    8 bytes where 16 would need more than 128 registers for q and the accumulators) and
//    widens them in registers; kGroup = D / kElems threads cover one row;
//  - each group issues the K and V loads of kKeysPerGroup keys before using any of them,
//    so a thread has 2 * kKeysPerGroup loads in flight;
//  - one online-softmax rescale per kKeysPerGroup keys instead of one per key.
// Partitions come from the plan (kernels/cuda/decode_plan.h): the grid has P of them
// whatever the contexts, and each token spreads its own visible keys over all P
// (paged::EvenPartitionKeys).
template <int D, int G, class Cache>
struct SplitV2Layout {
  static constexpr int kLoadElems = 16 / Cache::kBytes < D ? 16 / Cache::kBytes : D;
  static constexpr int kElems = G * kLoadElems > 64 ? kLoadElems / 2 : kLoadElems;
  static constexpr int kWords = kElems * Cache::kBytes / 4;
  static constexpr int kGroup = D / kElems;
  static constexpr int kGroups = kSplitThreads / kGroup;
  // Fewer keys in flight where q and the accumulators already take many registers.
  static constexpr int kKeysPerGroup = G * kElems >= 64 ? 2 : (G * kElems >= 32 ? 4 : 8);
  static constexpr int kKeysPerIter = kGroups * kKeysPerGroup;
  static_assert(kWords == 1 || kWords == 2 || kWords == 4, "4-, 8- or 16-byte loads");
  static_assert(kGroup >= 1 && kGroup <= 32 && (kGroup & (kGroup - 1)) == 0,
                "a row's threads form a power-of-two part of one warp");
};

template <int D, int G, class Cache>
__global__ void __launch_bounds__(kSplitThreads)
    AttentionSplitKernelV2(AttentionArgs a, int num_partitions,
                           float* part_max,  // [num_tokens * num_q_heads, num_partitions]
                           float* part_sum,  // [num_tokens * num_q_heads, num_partitions]
                           float* part_acc) {  // [..., num_partitions, D]
  using L = SplitV2Layout<D, G, Cache>;
  constexpr int kKeys = L::kKeysPerGroup;
  const int token = blockIdx.x;
  const int head0 = blockIdx.y * G;
  const int part = blockIdx.z;
  const int seq = paged::SeqOfToken(a.query_start, a.num_seqs, token);
  const int q_begin = a.query_start[seq];
  const int num_new = a.query_start[seq + 1] - q_begin;
  const int position = paged::TokenPosition(a.context_lens[seq], num_new, token - q_begin);
  const int kv_head = paged::KvHeadOf(head0, a.num_q_heads, a.num_kv_heads);
  int begin = 0;
  int end = 0;
  paged::EvenPartitionKeys(part, num_partitions, kDecodePartitionGranule, position, a.window,
                           &begin, &end);
  const int group = threadIdx.x / L::kGroup;
  const int d0 = (threadIdx.x % L::kGroup) * L::kElems;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks_per_seq;

  float qv[G][L::kElems];
  float acc[G][L::kElems];
  float m[G];
  float l[G];
  LoadQueries<D>(a, token, head0, d0, qv, acc, m, l);

  // begin and end are block-uniform, so every thread runs the same iterations and the
  // group shuffles stay converged. Key j of group `group` in an iteration is
  // k0 + j * kGroups + group: at each j the block reads kGroups consecutive keys.
  for (int k0 = begin; k0 < end; k0 += L::kKeysPerIter) {
    Words<L::kWords> kr[kKeys];
    Words<L::kWords> vr[kKeys];
    int64_t row[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const int key = k0 + j * L::kGroups + group;
      row[j] = -1;
      if (key < end) {
        row[j] = paged::CacheOffset(paged::SlotOf(table, key, a.block_size), a.num_kv_heads, D,
                                    kv_head);
        kr[j] = LoadWords<L::kWords>(a.k_cache, (row[j] + d0) * Cache::kBytes);
        vr[j] = LoadWords<L::kWords>(a.v_cache, (row[j] + d0) * Cache::kBytes);
      } else {
#pragma unroll
        for (int w = 0; w < L::kWords; ++w) kr[j].w[w] = vr[j].w[w] = 0;
      }
    }
    float s[kKeys][G];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float kf[L::kElems];
      Cache::Widen(kr[j], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < L::kElems; ++i) dot += qv[g][i] * kf[i];
        s[j][g] = dot;
      }
    }
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int o = L::kGroup / 2; o > 0; o >>= 1) {
          s[j][g] += __shfl_xor_sync(kFullMask, s[j][g], o);
        }
      }
    }
    float v_scale[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const bool valid = row[j] >= 0;
      const float k_scale = valid ? Scale<Cache, D>(a.k_scales, row[j]) : 0.0f;
      v_scale[j] = valid ? Scale<Cache, D>(a.v_scales, row[j]) : 0.0f;
#pragma unroll
      for (int g = 0; g < G; ++g) s[j][g] = valid ? s[j][g] * k_scale : -INFINITY;
    }
    float p[kKeys][G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int j = 0; j < kKeys; ++j) m_new = fmaxf(m_new, s[j][g]);
      if (m_new == -INFINITY) {  // No key of this group yet: nothing to add.
#pragma unroll
        for (int j = 0; j < kKeys; ++j) p[j][g] = 0.0f;
        continue;
      }
      const float alpha = expf(m[g] - m_new);  // 0 while m is -inf.
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        p[j][g] = expf(s[j][g] - m_new);  // 0 for invalid keys (-inf).
        sum += p[j][g];
      }
      l[g] = l[g] * alpha + sum;
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < L::kElems; ++i) acc[g][i] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      if (row[j] < 0) continue;
      float vf[L::kElems];
      Cache::Widen(vr[j], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pv = p[j][g] * v_scale[j];
#pragma unroll
        for (int i = 0; i < L::kElems; ++i) acc[g][i] += pv * vf[i];
      }
    }
  }

  // Merge the groups' softmax states (at most 128 * G * kElems floats = 32 KiB).
  MergeGroups<D, G, L::kGroups, L::kGroup, L::kElems>(
      m, l, acc, group, d0, a, token, head0, part, num_partitions, part_max, part_sum, part_acc);
}

// Merges the partitions of one (token, head), for both versions: one thread per dim.
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
// Keys a sequence may hold at most: the width of its block-table row.
int MaxKeys(const AttentionBatch& batch, const KvCacheShape& shape) {
  return std::max(1, batch.max_blocks_per_seq * shape.block_size);
}

// Version 1's partition size: `requested`, else about 264 blocks in all (two waves on a
// large GPU whatever its SM count), never below 64 keys, sized by the table's width.
int PickPartitionSize(const AttentionBatch& batch, const KvCacheShape& shape, int num_q_heads,
                      int requested) {
  const int max_keys = MaxKeys(batch, shape);
  if (requested > 0) return requested;
  // Aim for about two waves of blocks on a large GPU; never split below 64 keys.
  constexpr int64_t kTargetBlocks = 264;
  const int64_t rows = std::max<int64_t>(
      1, static_cast<int64_t>(batch.num_tokens) * num_q_heads /
             DecodeHeadsPerBlock(num_q_heads, shape.num_kv_heads));
  int64_t parts = (kTargetBlocks + rows - 1) / rows;
  parts = std::min<int64_t>(parts, (max_keys + 63) / 64);
  parts = std::max<int64_t>(parts, 1);
  return static_cast<int>((max_keys + parts - 1) / parts);
}

// Version 2's partition count: the plan's (graph-stable: no context lengths), or with
// `requested` > 0 as many as partitions of `requested` keys need at the table's width.
int64_t PickNumPartitions(const AttentionBatch& batch, const KvCacheShape& shape,
                          int num_q_heads, int requested, int sm_count) {
  const int max_keys = MaxKeys(batch, shape);
  if (requested > 0) return (max_keys + requested - 1) / requested;
  DecodeSplitInputs in;
  in.num_tokens = batch.num_tokens;
  in.num_q_heads = num_q_heads;
  in.num_kv_heads = shape.num_kv_heads;
  in.heads_per_block = DecodeHeadsPerBlock(num_q_heads, shape.num_kv_heads);
  in.max_keys = max_keys;
  in.sm_count = sm_count;
  return PlanDecodeSplit(in).num_partitions;
}

// The partition count the launch will use, for either version.
int64_t SplitPartitions(const AttentionBatch& batch, const KvCacheShape& shape, int num_q_heads,
                        int partition_size, int sm_count, SplitKernelVersion version) {
  if (version == SplitKernelVersion::kV1) {
    const int size = PickPartitionSize(batch, shape, num_q_heads, partition_size);
    return (MaxKeys(batch, shape) + size - 1) / size;
  }
  return PickNumPartitions(batch, shape, num_q_heads, partition_size, sm_count);
}

// Where SplitKernelVersion::kV1 exists (launchers.h); SplitV1Supported says the same at
// run time.
template <int D, class Cache>
constexpr bool SplitV1Instantiated() {
  return (D == 64 || D == 128) && !std::is_same_v<Cache, F32Cache>;
}

// What both split-K versions share: the partials' place in the workspace, the grid, the
// choice of G (query heads per block) and the reduction. `kernel(G, grid, part_max,
// part_sum, part_acc)` launches the version's kernel, G as an integral_constant.
template <int D, class LaunchKernel>
bool LaunchSplitWith(const AttentionArgs& args, int num_tokens, int num_partitions,
                     float* workspace, cudaStream_t stream, std::string* error,
                     LaunchKernel kernel) {
  const int64_t rows = static_cast<int64_t>(num_tokens) * args.num_q_heads;
  float* part_max = workspace;
  float* part_sum = part_max + rows * num_partitions;
  float* part_acc = part_sum + rows * num_partitions;
  const int heads_per_block = DecodeHeadsPerBlock(args.num_q_heads, args.num_kv_heads);
  const dim3 grid(num_tokens, args.num_q_heads / heads_per_block, num_partitions);
  switch (heads_per_block) {
    case 8: kernel(std::integral_constant<int, 8>{}, grid, part_max, part_sum, part_acc); break;
    case 4: kernel(std::integral_constant<int, 4>{}, grid, part_max, part_sum, part_acc); break;
    case 2: kernel(std::integral_constant<int, 2>{}, grid, part_max, part_sum, part_acc); break;
    default: kernel(std::integral_constant<int, 1>{}, grid, part_max, part_sum, part_acc); break;
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
bool LaunchSplitFor(const AttentionArgs& args, int num_tokens, int partition_size,
                    int num_partitions, float* workspace, cudaStream_t stream,
                    std::string* error) {
  return LaunchSplitWith<D>(
      args, num_tokens, num_partitions, workspace, stream, error,
      [&](auto heads, dim3 grid, float* part_max, float* part_sum, float* part_acc) {
        AttentionSplitKernel<D, decltype(heads)::value, Cache>
            <<<grid, kSplitThreads, 0, stream>>>(args, partition_size, num_partitions, part_max,
                                                 part_sum, part_acc);
      });
}

template <int D, class Cache>
bool LaunchSplitV2For(const AttentionArgs& args, int num_tokens, int num_partitions,
                      float* workspace, cudaStream_t stream, std::string* error) {
  return LaunchSplitWith<D>(
      args, num_tokens, num_partitions, workspace, stream, error,
      [&](auto heads, dim3 grid, float* part_max, float* part_sum, float* part_acc) {
        AttentionSplitKernelV2<D, decltype(heads)::value, Cache>
            <<<grid, kSplitThreads, 0, stream>>>(args, num_partitions, part_max, part_sum,
                                                 part_acc);
      });
}

}  // namespace

bool SplitV1Supported(const KvCacheShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128) &&
         (shape.dtype == DType::kBF16 || shape.dtype == DType::kF8E4M3);
}

bool AttentionHeadDimSupported(int head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

size_t AttentionSplitWorkspaceBytes(const AttentionBatch& batch, const KvCacheShape& shape,
                                    int num_q_heads, int partition_size, int sm_count,
                                    SplitKernelVersion version) {
  const int64_t parts =
      SplitPartitions(batch, shape, num_q_heads, partition_size, sm_count, version);
  if (parts <= 1 || parts > kDecodeMaxPartitions) return 0;  // The launch needs none / fails.
  return DecodeSplitWorkspaceBytes(batch.num_tokens, num_q_heads, shape.head_dim,
                                   static_cast<int>(parts));
}

bool LaunchPagedAttentionSplit(const void* q, int q_stride, const AttentionBatch& batch,
                               const void* k_cache, const void* v_cache,
                               const KvCacheShape& shape, int num_q_heads, float scale,
                               int partition_size, void* workspace, size_t workspace_bytes,
                               void* out, cudaStream_t stream, std::string* error, DType act,
                               int sm_count, SplitKernelVersion version) {
  if (!CheckActivations("PagedAttentionSplit", act, error)) return false;
  if (batch.num_tokens <= 0) return true;
  if (!CheckShapes("PagedAttentionSplit", batch, shape, num_q_heads, error)) return false;
  const bool v1 = version == SplitKernelVersion::kV1;
  const int size = v1 ? PickPartitionSize(batch, shape, num_q_heads, partition_size) : 0;
  const int64_t parts =
      SplitPartitions(batch, shape, num_q_heads, partition_size, sm_count, version);
  if (parts > kDecodeMaxPartitions) {
    return Fail(error, "PagedAttentionSplit: " + std::to_string(parts) +
                           " partitions exceed the grid limit; use a larger partition_size");
  }
  const size_t needed = AttentionSplitWorkspaceBytes(batch, shape, num_q_heads, partition_size,
                                                     sm_count, version);
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) {
    return Fail(error, "PagedAttentionSplit: workspace of " + std::to_string(workspace_bytes) +
                           " bytes, " + std::to_string(needed) + " needed");
  }
  const AttentionArgs args =
      MakeArgs(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out, act);
  float* ws = static_cast<float*>(workspace);
  const int p = static_cast<int>(parts);
  const int n = batch.num_tokens;
  auto launch = [&](auto cache) {
    using Cache = decltype(cache);
    auto for_dim = [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      if (!v1) return LaunchSplitV2For<D, Cache>(args, n, p, ws, stream, error);
      // Version 1 is compiled only where the benchmark compares it: every instantiation is
      // in the fatbin of every binary linking the backend.
      if constexpr (SplitV1Instantiated<D, Cache>()) {
        return LaunchSplitFor<D, Cache>(args, n, size, p, ws, stream, error);
      }
      return Fail(error, "PagedAttentionSplit: version 1 is kept for BF16 and FP8 caches at "
                         "head_dim 64 and 128 only");
    };
    switch (shape.head_dim) {
      case 8: return for_dim(std::integral_constant<int, 8>{});
      case 16: return for_dim(std::integral_constant<int, 16>{});
      case 32: return for_dim(std::integral_constant<int, 32>{});
      case 64: return for_dim(std::integral_constant<int, 64>{});
      case 128: return for_dim(std::integral_constant<int, 128>{});
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

}  // namespace tessera::kernels::gpu
