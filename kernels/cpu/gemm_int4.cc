#include "kernels/cpu/gemm_int4.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace tessera::kernels {
namespace int4_internal {
namespace {

void DequantRowScalar(const uint8_t* packed, const float* scales, const float* zeros,
                      int64_t cols, int group, float* dst) {
  for (int64_t c = 0; c < cols; ++c) {
    const int q = (packed[c / 2] >> (4 * (c & 1))) & 0xf;
    const int64_t g = c / group;
    dst[c] = scales[g] * (static_cast<float>(q) - zeros[g]);
  }
}

void DotRowsScalar(const float* x, const float* w, int64_t ldw, int nw, int64_t k, float* out) {
  for (int j = 0; j < nw; ++j) {
    float acc = 0.0f;
    for (int64_t c = 0; c < k; ++c) acc += x[c] * w[j * ldw + c];
    out[j] = acc;
  }
}

}  // namespace

const Int4Kernels& ScalarInt4Kernels() {
  static const Int4Kernels kernels{DequantRowScalar, DotRowsScalar, nullptr};
  return kernels;
}

}  // namespace int4_internal

namespace {

using int4_internal::Int4Kernels;

// Weight rows dequantized per task: 16 rows of a 4096-column layer are 256 KiB of floats,
// which stays in L2 while every row of x passes over it.
constexpr int64_t kPanelRows = 16;
// Rows of the panel each dot-product call reads at once (x is loaded once for all).
constexpr int kDotRows = 4;
// Weight rows per fused-GEMV task.
constexpr int64_t kGemvRows = 16;
// Weight rows dequantized per prefill task: 64 rows of 2048 columns are 512 KiB of floats,
// half an L2 on the machines measured; the float GEMM tiles them from there.
constexpr int64_t kGemmPanelRows = 64;
// Below this many packed bytes, waking the pool costs more than it saves.
constexpr int64_t kMinParallelBytes = int64_t{1} << 14;

const Int4Kernels& KernelsFor(SimdLevel level) {
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  switch (level) {
    case SimdLevel::kAvx512Bf16:
    case SimdLevel::kAvx512: return int4_internal::Avx512Int4Kernels();
    case SimdLevel::kAvx2: return int4_internal::Avx2Int4Kernels();
    case SimdLevel::kScalar: break;
  }
  return int4_internal::ScalarInt4Kernels();
}

}  // namespace

void GemmInt4(SimdLevel level, const float* x, int64_t m, const MatrixView& w, float* y,
              ThreadPool* pool) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::memset(y, 0, static_cast<size_t>(m * n) * sizeof(float));
    return;
  }
  if (level > DetectSimdLevel()) level = SimdLevel::kScalar;
  const Int4Kernels& ks = KernelsFor(level);
  const int group = w.group_size > 0 ? w.group_size : static_cast<int>(k);
  const int64_t groups = k / group;
  const auto* packed = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = k / 2;
  const bool parallel = pool != nullptr && pool->num_threads() > 1 &&
                        n * row_bytes >= kMinParallelBytes;
  auto run = [&](int64_t tasks, const std::function<void(int64_t, int64_t)>& fn) {
    if (!parallel || tasks == 1) {
      fn(0, tasks);
    } else {
      pool->ParallelFor(tasks, 1, fn);
    }
  };

  // Decode: the fused GEMV streams the packed rows once.
  if (ks.gemv != nullptr && m <= int4_internal::kMaxGemvRows && group % 32 == 0) {
    thread_local std::vector<float> permuted;
    if (permuted.size() < static_cast<size_t>(m * k)) permuted.resize(m * k);
    float* const xp = permuted.data();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c0 = 0; c0 < k; c0 += 32) {
        for (int j = 0; j < 16; ++j) {
          xp[i * k + c0 + j] = x[i * k + c0 + 2 * j];
          xp[i * k + c0 + 16 + j] = x[i * k + c0 + 2 * j + 1];
        }
      }
    }
    const int64_t tasks = (n + kGemvRows - 1) / kGemvRows;
    run(tasks, [&](int64_t begin, int64_t end) {
      ks.gemv(xp, m, k, packed, w.scales, w.zeros, group, begin * kGemvRows,
              std::min(n, end * kGemvRows), y, n);
    });
    return;
  }

  // Prefill: a panel of rows dequantized to float goes through the float GEMM's blocked
  // micro-kernels, whose arithmetic intensity the unpacking cannot spoil at this m.
  if (m > int4_internal::kMaxGemvRows) {
    const int64_t tasks = (n + kGemmPanelRows - 1) / kGemmPanelRows;
    run(tasks, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> panel, out;
      if (panel.size() < static_cast<size_t>(kGemmPanelRows * k)) panel.resize(kGemmPanelRows * k);
      if (out.size() < static_cast<size_t>(kGemmPanelRows * m)) out.resize(kGemmPanelRows * m);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t r0 = t * kGemmPanelRows;
        const int64_t nr = std::min(kGemmPanelRows, n - r0);
        for (int64_t r = 0; r < nr; ++r) {
          ks.dequant_row(packed + (r0 + r) * row_bytes, w.scales + (r0 + r) * groups,
                         w.zeros + (r0 + r) * groups, k, group, panel.data() + r * k);
        }
        GemmAtLevel(level, x, m, MatrixView{panel.data(), DType::kF32, nr, k}, out.data(),
                    nullptr);
        for (int64_t i = 0; i < m; ++i) {
          std::memcpy(y + i * n + r0, out.data() + i * nr, nr * sizeof(float));
        }
      }
    });
    return;
  }

  // Small m without a fused GEMV (scalar path, or groups not a multiple of 32).
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  run(panels, [&](int64_t begin, int64_t end) {
    // Per calling thread, so steady-state steps allocate nothing.
    thread_local std::vector<float> panel;
    if (panel.size() < static_cast<size_t>(kPanelRows * k)) panel.resize(kPanelRows * k);
    float* const p = panel.data();
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = t * kPanelRows;
      const int64_t nr = std::min(kPanelRows, n - r0);
      for (int64_t r = 0; r < nr; ++r) {
        ks.dequant_row(packed + (r0 + r) * row_bytes, w.scales + (r0 + r) * groups,
                       w.zeros + (r0 + r) * groups, k, group, p + r * k);
      }
      for (int64_t i = 0; i < m; ++i) {
        float out[kDotRows];
        for (int64_t r = 0; r < nr; r += kDotRows) {
          const int nw = static_cast<int>(std::min<int64_t>(kDotRows, nr - r));
          ks.dot_rows(x + i * k, p + r * k, k, nw, k, out);
          std::memcpy(y + i * n + r0 + r, out, nw * sizeof(float));
        }
      }
    }
  });
}

}  // namespace tessera::kernels
