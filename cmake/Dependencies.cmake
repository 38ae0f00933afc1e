# Every dependency comes from Debian 12 packages (see scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
# The GPU check builds no RPC, metrics or collective code, so its machine needs none of these.
if(NOT TESSERA_GPU_CHECK_ONLY)
  find_package(Protobuf REQUIRED)            # Debian ships no protobuf config file.
  find_package(gRPC CONFIG REQUIRED)
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_package(Gloo CONFIG REQUIRED)
endif()
if(TESSERA_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
if(TESSERA_BUILD_BENCHMARKS AND NOT TESSERA_GPU_CHECK_ONLY)  # gpu_bench does not use it.
  find_package(benchmark CONFIG REQUIRED)
endif()
if(TESSERA_GPU_CHECK_ONLY)
  # Says which copy was found: on the GPU machine they must come from the carried prefix.
  message(STATUS "Tessera GPU check: absl from ${absl_DIR}")
  message(STATUS "Tessera GPU check: nlohmann_json from ${nlohmann_json_DIR}")
  if(TESSERA_BUILD_TESTS)
    message(STATUS "Tessera GPU check: GTest from ${GTest_DIR}")
  endif()
endif()
