#ifndef TESSERA_TESTS_SUPPORT_TEST_PATHS_H_
#define TESSERA_TESTS_SUPPORT_TEST_PATHS_H_

// The source and build folders of the tree a test binary was built from. Every test
// translation unit gets this header forced in and TESSERA_SOURCE_DIR / TESSERA_BINARY_DIR
// defined as these calls (cmake/Testing.cmake): the absolute paths are compiled into one
// small file, so the other test sources compile the same in every checkout and ccache
// serves them across clones (CI builds a fresh clone each time). Global names: a
// namespace declared in every test file would shadow gtest's `testing` in some of them.
const char* TesseraTestSourceDir();
const char* TesseraTestBinaryDir();

#endif  // TESSERA_TESTS_SUPPORT_TEST_PATHS_H_
