// Micro-benchmarks of the CPU kernels. Every benchmark reports bytes/s (the bytes the
// kernel must move at least) and, where it computes, FLOP/s, so results sit on a roofline
// whose memory ceiling is BM_MemoryReadBandwidth.
//
//   kernel_bench [--benchmark_filter=...]   threads: TESSERA_BENCH_THREADS or every core.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "benchmark/benchmark.h"
#include "benchmarks/roofline/memory_bandwidth.h"
#include "common/dtype.h"
#include "common/quantization.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/int8_blocked.h"
#include "kernels/cpu/kv_cache_format.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {
namespace {

int BenchThreads() {
  if (const char* env = std::getenv("TESSERA_BENCH_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(BenchThreads());
  return *pool;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

void SetRates(benchmark::State& state, double bytes, double flops) {
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1024);
  if (flops > 0) {
    state.counters["flops"] =
        benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.counters["threads"] = Pool().num_threads();
  state.SetLabel(SimdLevelName(ActiveSimdLevel()));
}

// Enough copies of the weights to overflow the last-level cache, used in turn, so decode
// GEMVs read their weights from memory as they do in a real forward pass.
constexpr size_t kRotationBytes = size_t{512} << 20;

// Args: m, N, K, dtype, SIMD level (-1: the detected one).
void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  if (state.range(4) >= 0) {
    const auto wanted = static_cast<SimdLevel>(state.range(4));
    if (SetSimdLevelOverride(wanted) != wanted) {
      state.SkipWithError("SIMD level not supported by this CPU");
      ClearSimdLevelOverride();
      return;
    }
  }
  const size_t w_bytes = static_cast<size_t>(n * k) * DTypeSize(dtype);
  const size_t copies = std::clamp<size_t>(kRotationBytes / w_bytes, 1, 64);
  std::vector<std::vector<uint8_t>> weights(copies);
  {
    const std::vector<float> values = RandomFloats(static_cast<size_t>(n * k), 1);
    for (auto& w : weights) {
      w.resize(w_bytes);
      ConvertFromF32(values.data(), values.size(), dtype, w.data());
    }
  }
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 2);
  std::vector<float> y(static_cast<size_t>(m * n));
  size_t next = 0;
  for (auto _ : state) {
    Gemm(x.data(), m, MatrixView{weights[next].data(), dtype, n, k}, y.data(), &Pool());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  SetRates(state, static_cast<double>(w_bytes) + 4.0 * (m * k + m * n), 2.0 * m * n * k);
  ClearSimdLevelOverride();
}

// The shapes of the 1B side-by-side model (hidden 2048, intermediate 5632, 4 of 32 heads
// for K/V): fused qkv, fused gate/up, down; decode (m = 1), batched decode, prefill.
void GemmArgs(benchmark::internal::Benchmark* b) {
  const int64_t kAuto = -1;
  for (int64_t m : {1, 64}) {
    b->Args({m, 2048, 2048, static_cast<int64_t>(DType::kF32), kAuto});
  }
  for (int64_t level : {static_cast<int64_t>(SimdLevel::kAvx512),
                        static_cast<int64_t>(SimdLevel::kAvx512Bf16)}) {
    for (int64_t m : {1, 4, 32, 128}) {
      const int64_t bf16 = static_cast<int64_t>(DType::kBF16);
      b->Args({m, 2560, 2048, bf16, level});
      b->Args({m, 11264, 2048, bf16, level});
      b->Args({m, 2048, 5632, bf16, level});
    }
  }
  // llama-1b (Llama 3.2 1B shapes): gate/up, down and the 128k lm_head, at the row counts
  // of decode and of speculative verification (1 + k tokens).
  for (int64_t m : {1, 2, 4, 5}) {
    const int64_t bf16 = static_cast<int64_t>(DType::kBF16);
    const int64_t level = static_cast<int64_t>(SimdLevel::kAvx512Bf16);
    b->Args({m, 16384, 2048, bf16, level});
    b->Args({m, 2048, 8192, bf16, level});
    b->Args({m, 128256, 2048, bf16, level});
  }
  b->ArgNames({"m", "N", "K", "dtype", "level"});
  b->UseRealTime();
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs);

// int8 weights in the CPU backend's blocked layout (BF16 scale per 32 columns), the
// --quantization int8 path. Args: m, N, K, SIMD level (-1: the detected one).
void BM_GemmInt8(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  if (state.range(3) >= 0) {
    const auto wanted = static_cast<SimdLevel>(state.range(3));
    if (SetSimdLevelOverride(wanted) != wanted) {
      state.SkipWithError("SIMD level not supported by this CPU");
      ClearSimdLevelOverride();
      return;
    }
  }
  const Int8BlockedShape shape{n, k};
  const size_t w_bytes = shape.bytes();
  const size_t copies = std::clamp<size_t>(kRotationBytes / w_bytes, 1, 64);
  std::vector<std::vector<uint8_t>> weights(copies);
  {
    std::mt19937 rng(1);
    std::vector<int8_t> q(static_cast<size_t>(n * k));
    for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    const std::vector<float> scales(static_cast<size_t>(n * shape.groups()), 0.0078125f);
    for (auto& w : weights) {
      w.resize(w_bytes);
      PackInt8Blocked(q.data(), scales.data(), n, k, w.data());
    }
  }
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 2);
  std::vector<float> y(static_cast<size_t>(m * n));
  size_t next = 0;
  for (auto _ : state) {
    MatrixView w{weights[next].data(), DType::kI8, n, k};
    w.group_size = kInt8GroupSize;
    w.layout = WeightLayout::kInt8Blocked16;
    Gemm(x.data(), m, w, y.data(), &Pool());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  SetRates(state, static_cast<double>(w_bytes) + 4.0 * (m * k + m * n), 2.0 * m * n * k);
  ClearSimdLevelOverride();
}
BENCHMARK(BM_GemmInt8)
    ->ArgsProduct({{1, 4, 32, 128}, {2560, 11264}, {2048}, {-1}})
    ->ArgsProduct({{1, 4, 32, 128}, {2048}, {5632}, {-1}})
    ->ArgNames({"m", "N", "K", "level"})
    ->UseRealTime();

// Group-wise 4-bit weights (GPTQ/AWQ after repacking). Args: m, N, K, group size, SIMD
// level (-1: the detected one). Bytes: the packed codes plus the float scales and zeros.
void BM_GemmInt4(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int group = static_cast<int>(state.range(3));
  if (state.range(4) >= 0) {
    const auto wanted = static_cast<SimdLevel>(state.range(4));
    if (SetSimdLevelOverride(wanted) != wanted) {
      state.SkipWithError("SIMD level not supported by this CPU");
      ClearSimdLevelOverride();
      return;
    }
  }
  const size_t code_bytes = static_cast<size_t>(n * k / 2);
  const size_t groups = static_cast<size_t>(n * (k / group));
  const size_t w_bytes = code_bytes + 2 * groups * sizeof(float);
  const size_t copies = std::clamp<size_t>(kRotationBytes / w_bytes, 1, 64);
  struct Int4Weights {
    std::vector<uint8_t> codes;
    std::vector<float> scales, zeros;
  };
  std::vector<Int4Weights> weights(copies);
  std::mt19937 rng(1);
  for (auto& w : weights) {
    w.codes.resize(code_bytes);
    for (auto& c : w.codes) c = static_cast<uint8_t>(rng());
    w.scales.assign(groups, 0.01f);
    w.zeros.assign(groups, 8.0f);
  }
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 2);
  std::vector<float> y(static_cast<size_t>(m * n));
  size_t next = 0;
  for (auto _ : state) {
    const Int4Weights& w = weights[next];
    Gemm(x.data(), m,
         MatrixView{w.codes.data(), DType::kU4, n, k, w.scales.data(), group, w.zeros.data()},
         y.data(), &Pool());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  SetRates(state, static_cast<double>(w_bytes) + 4.0 * (m * k + m * n), 2.0 * m * n * k);
  ClearSimdLevelOverride();
}
BENCHMARK(BM_GemmInt4)
    ->ArgsProduct({{1, 4, 32, 128}, {2560, 11264}, {2048}, {128}, {-1, 1}})
    ->ArgsProduct({{1, 4, 32, 128}, {2048}, {5632}, {128}, {-1}})
    ->ArgNames({"m", "N", "K", "group", "level"})
    ->UseRealTime();

// The compute ceiling of the BF16 GEMM: VDPBF16PS with 16 independent accumulators (no
// loads) on every pool thread. flops = 2 x 32 pairs x instructions.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f,avx512bf16"))) void Bf16DotChains(int64_t iterations,
                                                                  float* sink) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh one = reinterpret_cast<const __m512bh&>(static_cast<const __m512i&>(
      _mm512_set1_epi16(0x3f80)));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, one, one);
  }
  __m512 total = acc[0];
  for (int j = 1; j < 16; ++j) total = _mm512_add_ps(total, acc[j]);
  *sink = _mm512_reduce_add_ps(total);
}

void BM_Bf16DotPeak(benchmark::State& state) {
  if (DetectSimdLevel() < SimdLevel::kAvx512Bf16) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  constexpr int64_t kIterations = 1 << 20;
  const int threads = Pool().num_threads();
  std::vector<float> sinks(threads * 16);
  for (auto _ : state) {
    Pool().ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) Bf16DotChains(kIterations, &sinks[t * 16]);
    });
    benchmark::DoNotOptimize(sinks.data());
  }
  SetRates(state, 0, 2.0 * 32 * 16 * kIterations * threads);
}
BENCHMARK(BM_Bf16DotPeak)->UseRealTime();
#endif

// Decode attention: args num_seqs, context, q heads, kv heads, head_dim, cache dtype (0 F32,
// 1 BF16, 2 FP8 E4M3); one new token per sequence.
void BM_PagedAttentionDecode(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int q_heads = static_cast<int>(state.range(2));
  const int kv_heads = static_cast<int>(state.range(3));
  const int head_dim = static_cast<int>(state.range(4));
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF8E4M3};
  KvCacheShape shape;
  shape.dtype = dtypes[state.range(5)];
  shape.block_size = 16;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = head_dim;
  const int blocks_per_seq = (context + shape.block_size - 1) / shape.block_size;
  shape.num_blocks = blocks_per_seq * num_seqs + 1;
  std::vector<int32_t> tables(static_cast<size_t>(blocks_per_seq) * num_seqs);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i + 1);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
  std::vector<int32_t> query_start(num_seqs + 1), context_lens(num_seqs, context);
  for (int s = 0; s <= num_seqs; ++s) query_start[s] = s;
  // Random rows stored the way WriteKvCache stores them in this dtype.
  std::vector<uint8_t> k_cache(shape.bytes()), v_cache(shape.bytes());
  {
    const std::vector<float> k = RandomFloats(shape.elements(), 4);
    const std::vector<float> v = RandomFloats(shape.elements(), 5);
    const int64_t slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
    for (int64_t slot = 0; slot < slots; ++slot) {
      for (int h = 0; h < kv_heads; ++h) {
        StoreKvRow(&k[KvRowIndex(shape, slot, h)], shape, slot, h, k_cache.data());
        StoreKvRow(&v[KvRowIndex(shape, slot, h)], shape, slot, h, v_cache.data());
      }
    }
  }
  const std::vector<float> q = RandomFloats(static_cast<size_t>(num_seqs) * q_heads * head_dim, 6);
  std::vector<float> out(q.size());
  AttentionBatch batch;
  batch.num_seqs = num_seqs;
  batch.num_tokens = num_seqs;
  batch.query_start = query_start.data();
  batch.context_lens = context_lens.data();
  batch.block_tables = tables.data();
  batch.max_blocks_per_seq = blocks_per_seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (auto _ : state) {
    PagedAttention(q.data(), q_heads * head_dim, batch, k_cache.data(), v_cache.data(), shape,
                   q_heads, scale, out.data(), &Pool());
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * num_seqs * context * kv_heads *
                         (head_dim * DTypeSize(shape.dtype) + KvScaleBytes(shape.dtype));
  SetRates(state, kv_bytes, 4.0 * num_seqs * context * q_heads * head_dim);
}
BENCHMARK(BM_PagedAttentionDecode)
    ->ArgNames({"seqs", "ctx", "qh", "kvh", "hd", "dtype"})
    ->Args({1, 1024, 32, 32, 64, 0})
    ->Args({1, 1024, 32, 4, 64, 0})  // The side-by-side 1B model at 1k context.
    ->Args({1, 1024, 32, 4, 64, 1})
    ->Args({1, 1024, 32, 4, 64, 2})
    ->Args({16, 1024, 32, 32, 64, 0})
    ->Args({16, 1024, 32, 8, 64, 0})
    ->Args({16, 1024, 32, 8, 64, 1})
    ->Args({16, 1024, 32, 8, 64, 2})
    ->UseRealTime();

// Args: rows, dim.
void BM_RmsNorm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), dim = static_cast<int>(state.range(1));
  const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * dim, 7);
  const std::vector<float> w = RandomFloats(dim, 8);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    RmsNorm(x.data(), w.data(), n, dim, 1e-5f, out.data(), &Pool());
    benchmark::DoNotOptimize(out.data());
  }
  SetRates(state, 4.0 * (2.0 * n * dim + dim), 4.0 * n * dim);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"n", "dim"})->Args({1, 4096})->Args({64, 4096})->UseRealTime();

// Memory read bandwidth: every thread sums its share of a 1 GiB buffer (integer adds, which
// the compiler vectorises without reassociation concerns). The roofline's memory ceiling;
// the same read as tessera-roofline's (benchmarks/roofline/memory_bandwidth.h).
void BM_MemoryReadBandwidth(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  const size_t words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  ThreadPool& pool = Pool();
  // First touch from the pool spreads pages the way the reads will use them.
  bench::ParallelFill(buffer.get(), words, pool);
  for (auto _ : state) {
    benchmark::DoNotOptimize(bench::ParallelRead(buffer.get(), words, pool));
  }
  SetRates(state, static_cast<double>(bytes), 0);
}
BENCHMARK(BM_MemoryReadBandwidth)->ArgName("MiB")->Arg(1024)->UseRealTime();

}  // namespace
}  // namespace tessera::kernels

BENCHMARK_MAIN();
