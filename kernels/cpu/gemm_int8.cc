#include "kernels/cpu/gemm_int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_int8_internal.h"
#include "kernels/cpu/int8_blocked.h"

namespace tessera::kernels {
namespace {

using gemm_int8_internal::BlocksFn;
using gemm_int8_internal::Int8Activations;

// Row blocks (16 rows each) per parallel work item.
constexpr int64_t kBlocksPerItem = 4;
constexpr float kInt16Max = 32767.0f;

BlocksFn BlocksFor(SimdLevel level, bool int4) {
  namespace in = gemm_int8_internal;
  static const bool avx512 = in::CpuHasAvx512Bw();
  static const bool vnni = in::CpuHasAvx512Vnni();
  if (level >= SimdLevel::kAvx512 && avx512) {
    if (int4) return vnni ? in::BlocksInt4Avx512Vnni : in::BlocksInt4Avx512;
    return vnni ? in::BlocksAvx512Vnni : in::BlocksAvx512;
  }
  if (level >= SimdLevel::kAvx2) return int4 ? in::BlocksInt4Avx2 : in::BlocksAvx2;
  return int4 ? in::BlocksInt4Scalar : in::BlocksScalar;
}

}  // namespace

namespace gemm_int8_internal {

bool CpuHasAvx512Bw() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && CpuHasAvx512Bw();
#else
  return false;
#endif
}

// Quantizes each group of 32 columns of each row of x to int16 (see gemm_int8.h).
void QuantizeActivations(const float* x, int64_t m, int64_t k, std::vector<int32_t>* pairs,
                         std::vector<float>* scales, std::vector<int32_t>* sums,
                         Int8Activations* out) {
  const Int8BlockedShape shape{1, k};
  const int64_t half = shape.padded_cols() / 2;
  const int64_t groups = shape.groups();
  pairs->assign(static_cast<size_t>(m * half), 0);
  scales->resize(static_cast<size_t>(m * groups));
  sums->resize(static_cast<size_t>(m * groups));
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * kInt8GroupSize;
      const int64_t end = std::min(k, begin + kInt8GroupSize);
      const float* row = x + t * k;
      float amax = 0.0f;
      for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float inv = amax > 0.0f ? kInt16Max / amax : 0.0f;
      uint32_t* dst = reinterpret_cast<uint32_t*>(pairs->data() + t * half);
      int32_t sum = 0;
      for (int64_t c = begin; c < end; ++c) {
        const float v = std::clamp(std::nearbyint(row[c] * inv), -kInt16Max, kInt16Max);
        const auto q = static_cast<int16_t>(v);
        sum += q;
        dst[c / 2] |= static_cast<uint32_t>(static_cast<uint16_t>(q)) << (16 * (c % 2));
      }
      (*scales)[t * groups + g] = amax / kInt16Max;
      (*sums)[t * groups + g] = sum;
    }
  }
  *out = {pairs->data(), scales->data(), sums->data(), half, groups};
}

// The portable path, and the reference every SIMD path matches bit for bit: the same
// exact integer sums, then the same float multiply and FMA per group, in group order.
void BlocksScalar(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                  int64_t block_begin, int64_t block_end) {
  const Int8BlockedShape shape{w.rows, w.cols};
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* scales = reinterpret_cast<const uint16_t*>(base + shape.scales_offset());
  const int64_t groups = shape.groups();
  for (int64_t b = block_begin; b < block_end; ++b) {
    const auto* units = reinterpret_cast<const int8_t*>(base + b * shape.block_bytes());
    const int64_t rows_here = std::min<int64_t>(kInt8BlockRows, w.rows - b * kInt8BlockRows);
    for (int64_t t = 0; t < m; ++t) {
      const int32_t* xq = x.pairs + t * x.pairs_per_row;
      for (int64_t r = 0; r < rows_here; ++r) {
        float acc = 0.0f;
        for (int64_t g = 0; g < groups; ++g) {
          int32_t sum = 0;
          for (int64_t c = g * kInt8GroupSize; c < (g + 1) * kInt8GroupSize; ++c) {
            const auto pair = static_cast<uint32_t>(xq[c / 2]);
            const auto xc = static_cast<int16_t>(static_cast<uint16_t>(pair >> (16 * (c % 2))));
            sum += static_cast<int32_t>(units[(c / 2) * 32 + r * 2 + c % 2]) * xc;
          }
          const float ws = F16ToF32(scales[(b * groups + g) * kInt8BlockRows + r]);
          acc = std::fma(static_cast<float>(sum), ws * x.scales[t * groups + g], acc);
        }
        y[t * w.rows + b * kInt8BlockRows + r] = acc;
      }
    }
  }
}

void BlocksInt4Scalar(const Int8Activations& x, int64_t m, const MatrixView& w, float* y,
                      int64_t block_begin, int64_t block_end) {
  const Int4BlockedShape shape{w.rows, w.cols, w.group_size};
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* scales = reinterpret_cast<const float*>(base + shape.scales_offset());
  const auto* zeros = reinterpret_cast<const float*>(base + shape.zeros_offset());
  const int64_t per_weight_group = shape.group_cols() / kInt8GroupSize;
  for (int64_t b = block_begin; b < block_end; ++b) {
    const uint8_t* units = base + b * shape.block_bytes();
    const int64_t rows_here = std::min<int64_t>(kInt8BlockRows, w.rows - b * kInt8BlockRows);
    for (int64_t t = 0; t < m; ++t) {
      const int32_t* xq = x.pairs + t * x.pairs_per_row;
      for (int64_t r = 0; r < rows_here; ++r) {
        float acc = 0.0f;
        for (int64_t g = 0; g < x.groups; ++g) {
          int32_t sum = 0;
          for (int64_t c = g * kInt8GroupSize; c < (g + 1) * kInt8GroupSize; ++c) {
            const auto pair = static_cast<uint32_t>(xq[c / 2]);
            const auto xc = static_cast<int16_t>(static_cast<uint16_t>(pair >> (16 * (c % 2))));
            const int q = (units[(c / 2) * kInt8BlockRows + r] >> (4 * (c % 2))) & 0xf;
            sum += q * xc;
          }
          const int64_t at =
              (b * shape.weight_groups() + g / per_weight_group) * kInt8BlockRows + r;
          const int64_t xa = t * x.groups + g;
          const float v =
              std::fma(-zeros[at], static_cast<float>(x.sums[xa]), static_cast<float>(sum));
          acc = std::fma(v, scales[at] * x.scales[xa], acc);
        }
        y[t * w.rows + b * kInt8BlockRows + r] = acc;
      }
    }
  }
}

}  // namespace gemm_int8_internal

namespace {

// Rounds x to int16 groups once, then runs `blocks` over the row blocks in parallel.
void RunBlocked(BlocksFn blocks, int64_t row_blocks, const float* x, int64_t m,
                const MatrixView& w, float* y, ThreadPool* pool) {
  thread_local std::vector<int32_t> pairs;
  thread_local std::vector<float> scales;
  thread_local std::vector<int32_t> sums;
  Int8Activations acts;
  gemm_int8_internal::QuantizeActivations(x, m, w.cols, &pairs, &scales, &sums, &acts);
  const int64_t items = (row_blocks + kBlocksPerItem - 1) / kBlocksPerItem;
  auto run = [&](int64_t item_begin, int64_t item_end) {
    blocks(acts, m, w, y, item_begin * kBlocksPerItem,
           std::min(row_blocks, item_end * kBlocksPerItem));
  };
  if (pool == nullptr || pool->num_threads() == 1 || items == 1 ||
      m * w.rows * w.cols < kMinParallelGemmWork) {
    run(0, items);
    return;
  }
  pool->ParallelFor(items, 1, run);
}

}  // namespace

void GemmInt8Blocked(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                     ThreadPool* pool) {
  if (m <= 0 || w.rows <= 0) return;
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  RunBlocked(BlocksFor(level, /*int4=*/false), Int8BlockedShape{w.rows, w.cols}.row_blocks(),
             x, m, w, y, pool);
}

void GemmInt4Blocked(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                     ThreadPool* pool) {
  if (m <= 0 || w.rows <= 0) return;
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  RunBlocked(BlocksFor(level, /*int4=*/true),
             Int4BlockedShape{w.rows, w.cols, w.group_size}.row_blocks(), x, m, w, y, pool);
}

}  // namespace tessera::kernels
