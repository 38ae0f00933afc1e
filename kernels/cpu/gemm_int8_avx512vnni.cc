// AVX-512 VNNI block kernels for int8 and int4 weights: VPDPWSSD multiplies 16 rows x 2
// columns by a broadcast pair of int16 activations and adds in one instruction.
// Only this file's own functions are compiled for these instructions (target pragma, as in
// gemm_avx512.cc).
#include <cstdint>

#include "kernels/cpu/gemm_int8_internal.h"
#include "kernels/cpu/int8_blocked.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma")
#endif

namespace tessera::kernels::gemm_int8_avx512vnni {

using gemm_int8_internal::Int8Activations;

#define TESSERA_INT8_VNNI 1
#include "kernels/cpu/gemm_int8_avx512_traits.inc"
#undef TESSERA_INT8_VNNI

#include "kernels/cpu/gemm_int8_blocks.inc"

}  // namespace tessera::kernels::gemm_int8_avx512vnni

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

TESSERA_INT8_BLOCKS_EXPORT(gemm_int8_avx512vnni, BlocksAvx512Vnni, BlocksInt4Avx512Vnni)
