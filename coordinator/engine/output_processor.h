#ifndef TESSERA_COORDINATOR_ENGINE_OUTPUT_PROCESSOR_H_
#define TESSERA_COORDINATOR_ENGINE_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace tessera {

// Turns a request's generated tokens into text deltas: detokenizes with the prompt's last
// tokens as context (so the first token keeps its leading space), holds back incomplete
// UTF-8 and anything that could be the start of a stop string, and finds stop strings.
class OutputProcessor {
 public:
  OutputProcessor(const Tokenizer* tokenizer, const std::vector<int32_t>& prompt,
                  std::vector<std::string> stop_strings);

  // Adds one token; returns the text that can be released now.
  std::string Append(int32_t token_id);
  // True once a stop string appeared; the text before it has been released.
  bool stopped() const { return stopped_; }
  // Releases what was held back (the request ended without a stop string).
  std::string Flush();
  const std::string& text() const { return released_; }

 private:
  std::string DecodeOutput() const;

  const Tokenizer* tokenizer_;
  std::vector<int32_t> context_;  // Last prompt tokens, then the output.
  size_t context_len_ = 0;
  std::string context_text_;
  std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string released_;
  std::string full_;  // Output text decoded so far (complete UTF-8).
  bool stopped_ = false;
};

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Length(const std::string& s);

// `s` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD
// (as Hugging Face decoders do); an incomplete sequence at the very end is kept as is, since
// the next token may complete it. Byte-fallback tokens of a model can spell invalid UTF-8,
// and protobuf strings must not carry it.
std::string SanitizeUtf8(const std::string& s);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_ENGINE_OUTPUT_PROCESSOR_H_
