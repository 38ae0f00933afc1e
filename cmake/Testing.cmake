# tessera_test(NAME <name> SOURCES <files...> LIBS <targets...> LABELS <unit|integration|e2e|gpu>)
# One gtest binary per component; every test case is discovered and labelled, so
# `ctest -L unit` runs the fast ones while working.

# The tree's absolute paths, compiled into one file (tests/support/test_paths.h says why).
add_library(tessera_test_paths STATIC ${PROJECT_SOURCE_DIR}/tests/support/test_paths.cc)
target_include_directories(tessera_test_paths PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(tessera_test_paths PRIVATE
    TESSERA_SOURCE_DIR_VALUE="${PROJECT_SOURCE_DIR}"
    TESSERA_BINARY_DIR_VALUE="${PROJECT_BINARY_DIR}")

# Gives a test target TESSERA_SOURCE_DIR and TESSERA_BINARY_DIR (const char* expressions).
function(tessera_test_paths target)
  target_link_libraries(${target} PRIVATE tessera_test_paths)
  target_compile_definitions(${target} PRIVATE
      "TESSERA_SOURCE_DIR=TesseraTestSourceDir()"
      "TESSERA_BINARY_DIR=TesseraTestBinaryDir()")
  # Relative, so the command line is the same in every checkout: found through the
  # source root on the include path.
  target_compile_options(${target} PRIVATE -include tests/support/test_paths.h)
endfunction()

function(tessera_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  tessera_test_paths(${T_NAME})
  gtest_discover_tests(${T_NAME}
      PROPERTIES LABELS "${T_LABELS}"
      DISCOVERY_TIMEOUT 60)
endfunction()
