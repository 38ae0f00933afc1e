#include "kernels/cpu/gemm_quantized.h"

#include <algorithm>
#include <array>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_quantized_internal.h"

namespace tessera::kernels {
namespace {

// Output rows per parallel work item: enough to amortise the scheduling, few enough to
// balance the threads on small layers.
constexpr int64_t kRowsPerItem = 16;

using Table = std::array<float, 256>;

const Table& ValueTable(DType dtype) {
  static const Table int8 = [] {
    Table t;
    for (int b = 0; b < 256; ++b) t[b] = static_cast<float>(static_cast<int8_t>(b));
    return t;
  }();
  static const Table fp8 = [] {
    Table t;
    for (int b = 0; b < 256; ++b) t[b] = Fp8E4M3ToF32(static_cast<uint8_t>(b));
    return t;
  }();
  return dtype == DType::kI8 ? int8 : fp8;
}

// Eight independent partial sums so the compiler can keep a vector of them without
// reassociating (no -ffast-math).
inline float Dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {};
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[c + j] * b[c + j];
  }
  float sum = 0.0f;
  for (; c < k; ++c) sum += a[c] * b[c];
  return sum + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

void GemmQuantized(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
                   ThreadPool* pool) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  if (m <= 0 || n <= 0) return;
  const Table& table = ValueTable(w.dtype);
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  // Row-major int8 with group scales is the CUDA backend's layout (the CPU backend packs
  // int8 as kInt8Blocked16): only the portable path reads it, for tests comparing the two.
  const bool grouped = w.group_size > 0;
  if (grouped) level = SimdLevel::kScalar;
  const int64_t groups = grouped ? (k + w.group_size - 1) / w.group_size : 1;
  auto run_rows = [&](int64_t item_begin, int64_t item_end) {
    const int64_t begin = item_begin * kRowsPerItem;
    const int64_t end = std::min(n, item_end * kRowsPerItem);
    if (level >= SimdLevel::kAvx512) {
      gemm_quantized_internal::RowsAvx512(x, m, w, table.data(), y, begin, end);
      return;
    }
    if (level == SimdLevel::kAvx2) {
      gemm_quantized_internal::RowsAvx2(x, m, w, table.data(), y, begin, end);
      return;
    }
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(k)) row.resize(k);
    float* const r = row.data();
    for (int64_t o = begin; o < end; ++o) {
      const uint8_t* q = data + o * k;
      float scale = w.scales[o];
      if (grouped) {
        for (int64_t c = 0; c < k; ++c) r[c] = table[q[c]] * w.scales[o * groups + c / w.group_size];
        scale = 1.0f;
      } else {
        for (int64_t c = 0; c < k; ++c) r[c] = table[q[c]];
      }
      for (int64_t i = 0; i < m; ++i) y[i * n + o] = scale * Dot(x + i * k, r, k);
    }
  };
  const int64_t items = (n + kRowsPerItem - 1) / kRowsPerItem;
  if (pool == nullptr || pool->num_threads() == 1 || items == 1 ||
      m * n * k < kMinParallelGemmWork) {
    run_rows(0, items);
    return;
  }
  pool->ParallelFor(items, 1, run_rows);
}

}  // namespace tessera::kernels
