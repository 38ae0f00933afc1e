# tessera_test(NAME <name> SOURCES <files...> LIBS <targets...> LABELS <unit|integration|e2e|gpu>)
# One gtest binary per component; every test case is discovered and labelled, so
# `ctest -L unit` runs the fast ones while working.
function(tessera_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${T_NAME} PRIVATE
      TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      TESSERA_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${T_NAME}
      PROPERTIES LABELS "${T_LABELS}"
      DISCOVERY_TIMEOUT 60)
endfunction()
