// Sampling over [rows, vocab] float32 logits, one thread block per row. Top-k and top-p
// cut-offs are found exactly, without sorting, by building the threshold key bit by bit
// (32 counting/summing passes over the row); then one uniform draw picks a token by a
// block-wide prefix sum in index order. Deterministic: fixed thread-to-element mapping and
// reduction order, and the draw depends only on the row's seed.
#include <cmath>
#include <string>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launchers.h"

namespace tessera::kernels::gpu {
namespace {

constexpr int kSampleThreads = 512;

// Order-preserving map float -> uint32: a > b (as floats) iff Key(a) > Key(b).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t bits = __float_as_uint(f);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Block-wide argmax (lowest index among equal values; NaNs never win). All threads get it.
__device__ void BlockArgmax(const float* row, int vocab, float* best_value, int* best_index) {
  __shared__ float s_value[32];
  __shared__ int s_index[32];
  float value = -INFINITY;
  int index = -1;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > value || (index < 0 && v == v)) {  // First non-NaN, then strictly larger.
      value = v;
      index = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, value, o);
    const int oi = __shfl_xor_sync(kFullMask, index, o);
    if (oi >= 0 && (index < 0 || ov > value || (ov == value && oi < index))) {
      value = ov;
      index = oi;
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    s_value[threadIdx.x / 32] = value;
    s_index[threadIdx.x / 32] = index;
  }
  __syncthreads();
  value = -INFINITY;
  index = -1;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    const float ov = s_value[w];
    const int oi = s_index[w];
    if (oi >= 0 && (index < 0 || ov > value || (ov == value && oi < index))) {
      value = ov;
      index = oi;
    }
  }
  *best_value = value;
  *best_index = index < 0 ? 0 : index;  // An all-NaN row yields token 0.
}

// log-softmax of the raw logits at `token`.
__device__ float LogProb(const float* row, int vocab, float max_logit, int token,
                         float* scratch) {
  float sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(row[i] - max_logit);
  sum = BlockSum(sum, scratch);
  return row[token] - max_logit - logf(sum);
}

__global__ void __launch_bounds__(kSampleThreads)
    ArgmaxKernel(const float* logits, int vocab, int32_t* tokens, float* logprobs) {
  __shared__ float scratch[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best;
  int token;
  BlockArgmax(row, vocab, &best, &token);
  if (logprobs != nullptr) {
    const float lp = LogProb(row, vocab, best, token, scratch);
    if (threadIdx.x == 0) logprobs[blockIdx.x] = lp;
  }
  if (threadIdx.x == 0) tokens[blockIdx.x] = token;
}

__global__ void __launch_bounds__(kSampleThreads)
    SampleKernel(const float* logits, int vocab, const SamplingRowParams* params,
                 int32_t* tokens, float* logprobs) {
  __shared__ float scratch[32];
  __shared__ float s_chunk[kSampleThreads];
  __shared__ int s_token;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const SamplingRowParams p = params[blockIdx.x];
  float best;
  int argmax;
  BlockArgmax(row, vocab, &best, &argmax);
  int token = argmax;

  if (p.temperature > 0.0f && best != -INFINITY) {
    const float inv_t = 1.0f / p.temperature;
    // Unnormalised probability of element i: exp((l_i - max) / T); 0 for NaN / -inf.
    // The maximum weighs 1, so min-p keeps the weights >= min_p.
    auto weight = [&](int i) {
      const float v = row[i];
      return v == v ? expf((v - best) * inv_t) : 0.0f;
    };
    const float min_weight = p.min_p > 0.0f ? p.min_p : 0.0f;

    // Top-k: the largest threshold key with at least k keys >= it (the k-th largest key).
    uint32_t threshold = 0;
    if (p.top_k > 0 && p.top_k < vocab) {
      for (int bit = 31; bit >= 0; --bit) {
        const uint32_t candidate = threshold | (1u << bit);
        float count = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
          count += Key(row[i]) >= candidate ? 1.0f : 0.0f;
        }
        if (BlockSum(count, scratch) >= static_cast<float>(p.top_k)) threshold = candidate;
      }
    }
    // Top-p within the top-k set: the largest threshold whose kept mass reaches
    // top_p * (mass of the top-k set). Mass at `threshold` itself is the full set, so the
    // search never goes below it.
    if (p.top_p < 1.0f) {
      float total = 0.0f;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (Key(row[i]) >= threshold) total += weight(i);
      }
      const float target = p.top_p * BlockSum(total, scratch);
      uint32_t nucleus = 0;
      for (int bit = 31; bit >= 0; --bit) {
        const uint32_t candidate = nucleus | (1u << bit);
        const uint32_t cut = candidate > threshold ? candidate : threshold;
        float mass = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
          if (Key(row[i]) >= cut) mass += weight(i);
        }
        if (BlockSum(mass, scratch) >= target) nucleus = candidate;
      }
      if (nucleus > threshold) threshold = nucleus;
    }

    // Draw: thread t owns the contiguous chunk [t * chunk, (t + 1) * chunk).
    const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
    const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
    const int end = min(vocab, begin + chunk);
    float mine = 0.0f;
    for (int i = begin; i < end; ++i) {
      if (Key(row[i]) < threshold) continue;
      const float w = weight(i);
      if (w >= min_weight) mine += w;
    }
    __syncthreads();
    s_chunk[threadIdx.x] = mine;
    if (threadIdx.x == 0) s_token = argmax;
    __syncthreads();
    if (threadIdx.x == 0) {  // Exclusive prefix sum in place; 512 adds.
      float running = 0.0f;
      for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
        const float c = s_chunk[t];
        s_chunk[t] = running;
        running += c;
      }
      scratch[0] = running;
    }
    __syncthreads();
    const float u = static_cast<float>(SplitMix64(p.seed) >> 40) * (1.0f / 16777216.0f);
    const float target = u * scratch[0];
    const float prefix = s_chunk[threadIdx.x];
    if (mine > 0.0f && prefix <= target && target < prefix + mine) {
      float running = prefix;
      int pick = -1;
      for (int i = begin; i < end; ++i) {
        if (Key(row[i]) < threshold) continue;
        const float w = weight(i);
        if (w <= 0.0f || w < min_weight) continue;
        pick = i;  // Rounding fallback: the last kept token of the chunk.
        running += w;
        if (running > target) break;
      }
      if (pick >= 0) s_token = pick;
    }
    __syncthreads();
    token = s_token;
  }

  if (logprobs != nullptr) {
    const float lp = LogProb(row, vocab, best, token, scratch);
    if (threadIdx.x == 0) logprobs[blockIdx.x] = lp;
  }
  if (threadIdx.x == 0) tokens[blockIdx.x] = token;
}

// One block per row; each listed token is distinct, so no two threads touch one logit.
__global__ void ApplyPenaltiesKernel(float* logits, int vocab, const PenaltyRowParams* params,
                                     const int32_t* tokens, const int32_t* output_counts) {
  const PenaltyRowParams p = params[blockIdx.x];
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  for (int e = p.begin + static_cast<int>(threadIdx.x); e < p.end; e += blockDim.x) {
    const int32_t t = tokens[e];
    if (t < 0 || t >= vocab) continue;
    float v = row[t];
    if (p.repetition != 1.0f) v = v > 0.0f ? v / p.repetition : v * p.repetition;
    const int32_t c = output_counts[e];
    if (c > 0) v -= p.presence + p.frequency * static_cast<float>(c);
    row[t] = v;
  }
}

__global__ void __launch_bounds__(kSampleThreads)
    LogProbsAtKernel(const float* logits, int vocab, const int32_t* tokens, float* logprobs) {
  __shared__ float scratch[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best;
  int argmax;
  BlockArgmax(row, vocab, &best, &argmax);
  const int token = min(max(tokens[blockIdx.x], 0), vocab - 1);
  const float lp = LogProb(row, vocab, best, token, scratch);
  if (threadIdx.x == 0) logprobs[blockIdx.x] = lp;
}

bool CheckArgs(const char* what, int rows, int vocab, std::string* error) {
  if (vocab <= 0) return Fail(error, std::string(what) + ": vocab " + std::to_string(vocab) +
                                         " must be positive");
  if (rows > 0x7fffffff) return Fail(error, std::string(what) + ": too many rows");
  return true;
}

}  // namespace

bool LaunchArgmax(const float* logits, int rows, int vocab, int32_t* tokens, float* logprobs,
                  cudaStream_t stream, std::string* error) {
  if (rows <= 0) return true;
  if (!CheckArgs("Argmax", rows, vocab, error)) return false;
  ArgmaxKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, tokens, logprobs);
  return CheckLaunch("Argmax", error);
}

bool LaunchSample(const float* logits, int rows, int vocab, const SamplingRowParams* params,
                  int32_t* tokens, float* logprobs, cudaStream_t stream, std::string* error) {
  if (rows <= 0) return true;
  if (!CheckArgs("Sample", rows, vocab, error)) return false;
  SampleKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, params, tokens, logprobs);
  return CheckLaunch("Sample", error);
}

bool LaunchApplyPenalties(float* logits, int rows, int vocab, const PenaltyRowParams* params,
                          const int32_t* tokens, const int32_t* output_counts,
                          cudaStream_t stream, std::string* error) {
  if (rows <= 0) return true;
  if (!CheckArgs("ApplyPenalties", rows, vocab, error)) return false;
  ApplyPenaltiesKernel<<<rows, 128, 0, stream>>>(logits, vocab, params, tokens, output_counts);
  return CheckLaunch("ApplyPenalties", error);
}

bool LaunchLogProbsAt(const float* logits, int rows, int vocab, const int32_t* tokens,
                      float* logprobs, cudaStream_t stream, std::string* error) {
  if (rows <= 0) return true;
  if (!CheckArgs("LogProbsAt", rows, vocab, error)) return false;
  LogProbsAtKernel<<<rows, kSampleThreads, 0, stream>>>(logits, vocab, tokens, logprobs);
  return CheckLaunch("LogProbsAt", error);
}

}  // namespace tessera::kernels::gpu
