# Header libraries of the CUDA attention candidates (issue 33), fetched from PyPI by
# scripts/fetch_attention_headers.sh into the cache. Each one is optional: without it the
# backend keeps its own kernels, and the benchmark reports the candidate as not built.
#   TESSERA_FLASHINFER_DIR      flashinfer-<version> folder (include/, cutlass/, cccl/)
#   TESSERA_CUDNN_FRONTEND_DIR  cudnn-frontend-<version> folder (include/)
if(DEFINED ENV{TESSERA_CACHE_DIR})
  set(_tessera_cache "$ENV{TESSERA_CACHE_DIR}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_tessera_cache "$ENV{XDG_CACHE_HOME}/tessera")
else()
  set(_tessera_cache "$ENV{HOME}/.cache/tessera")
endif()
set(TESSERA_FLASHINFER_DIR "${_tessera_cache}/third_party/flashinfer-0.7.4"
    CACHE PATH "FlashInfer headers (scripts/fetch_attention_headers.sh)")
set(TESSERA_CUDNN_FRONTEND_DIR "${_tessera_cache}/third_party/cudnn-frontend-1.32.0"
    CACHE PATH "cuDNN frontend headers (scripts/fetch_attention_headers.sh)")

set(TESSERA_HAVE_FLASHINFER OFF)
if(EXISTS "${TESSERA_FLASHINFER_DIR}/include/flashinfer/attention/hopper/prefill_sm90.cuh")
  add_library(tessera_flashinfer INTERFACE IMPORTED)
  # SYSTEM: their warnings are not ours to fix. CCCL first: FlashInfer needs a libcu++
  # newer than CUDA 13.0's (cuda::fast_mod_div).
  target_include_directories(tessera_flashinfer SYSTEM INTERFACE
    "${TESSERA_FLASHINFER_DIR}/cccl/libcudacxx/include"
    "${TESSERA_FLASHINFER_DIR}/cccl/cub"
    "${TESSERA_FLASHINFER_DIR}/cccl/thrust"
    "${TESSERA_FLASHINFER_DIR}/include"
    "${TESSERA_FLASHINFER_DIR}/cutlass/include"
    "${TESSERA_FLASHINFER_DIR}/cutlass/tools/util/include")
  set(TESSERA_HAVE_FLASHINFER ON)
  message(STATUS "Tessera: FlashInfer headers at ${TESSERA_FLASHINFER_DIR}")
else()
  message(STATUS "Tessera: FlashInfer headers not found (scripts/fetch_attention_headers.sh); "
                 "the sm_90 prefill kernel is not built")
endif()

set(TESSERA_HAVE_CUDNN_FRONTEND OFF)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(EXISTS "${TESSERA_CUDNN_FRONTEND_DIR}/include/cudnn_frontend.h" AND CUDNN_INCLUDE_DIR)
  add_library(tessera_cudnn_frontend INTERFACE IMPORTED)
  target_include_directories(tessera_cudnn_frontend SYSTEM INTERFACE
    "${TESSERA_CUDNN_FRONTEND_DIR}/include" "${CUDNN_INCLUDE_DIR}")
  # cuDNN is opened at run time (dlopen), so binaries start on machines without it and the
  # candidate reports itself unavailable there.
  target_compile_definitions(tessera_cudnn_frontend INTERFACE
    NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
  target_link_libraries(tessera_cudnn_frontend INTERFACE ${CMAKE_DL_LIBS})
  set(TESSERA_HAVE_CUDNN_FRONTEND ON)
  message(STATUS "Tessera: cuDNN frontend headers at ${TESSERA_CUDNN_FRONTEND_DIR}")
else()
  message(STATUS "Tessera: cuDNN frontend or cudnn.h not found; the cuDNN attention candidate "
                 "is not built")
endif()
