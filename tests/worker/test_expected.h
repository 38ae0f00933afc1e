#ifndef TESSERA_TESTS_WORKER_TEST_EXPECTED_H_
#define TESSERA_TESTS_WORKER_TEST_EXPECTED_H_

#include <vector>

#include "common/file_util.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"

namespace tessera::testing {

// The reference implementation's output for "Once upon a time" on stories260K.
struct Expected {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::vector<float> first_logits;
  std::string generated_text;
};

inline Expected LoadExpected() {
  auto text = ReadFileToString(StoriesModelDir() / "expected_once_upon_a_time.json");
  EXPECT_TRUE(text.ok()) << text.status();
  const auto j = nlohmann::json::parse(*text);
  return {j["prompt_ids"].get<std::vector<int32_t>>(),
          j["generated_ids"].get<std::vector<int32_t>>(),
          j["first_position_logits"].get<std::vector<float>>(),
          j["generated_text"].get<std::string>()};
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_TEST_EXPECTED_H_
