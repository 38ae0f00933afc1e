#include "tests/support/test_paths.h"

const char* TesseraTestSourceDir() { return TESSERA_SOURCE_DIR_VALUE; }
const char* TesseraTestBinaryDir() { return TESSERA_BINARY_DIR_VALUE; }
