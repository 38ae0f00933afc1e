// Untrusted GGUF files: the header, metadata and tensor table parser, the translation of
// the metadata into Hugging Face documents (tokenizer included), and the block decoders
// on the first row of every tensor.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/gguf_file.h"
#include "common/gguf_hf.h"
#include "common/gguf_quants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tessera::GgufFile::Parse(data, size, "fuzz.gguf");
  if (!file.ok()) return 0;
  if (auto files = tessera::GgufToHfFiles(**file); files.ok()) {
    (void)tessera::GgufHfTensors(**file, files->config);
  }
  std::vector<float> row;
  std::vector<uint8_t> packed;
  std::vector<int8_t> codes;
  std::vector<float> scales, zeros;
  for (const tessera::GgufTensor& t : (*file)->tensors()) {
    const int64_t cols = t.cols();
    if (cols > (1 << 16)) continue;  // Bounded work per input.
    row.resize(static_cast<size_t>(cols));
    (void)tessera::DequantizeGgml(t.type, t.data, cols, row.data());
    if (cols % tessera::kGgmlNativeGroup != 0) continue;
    scales.resize(static_cast<size_t>(cols / tessera::kGgmlNativeGroup));
    zeros.resize(scales.size());
    if (tessera::GgmlMapsToInt4(t.type)) {
      packed.resize(static_cast<size_t>(cols / 2));
      (void)tessera::GgmlRowToInt4(t.type, t.data, cols, packed.data(), scales.data(), zeros.data());
    } else if (tessera::GgmlMapsToInt8(t.type)) {
      codes.resize(static_cast<size_t>(cols));
      tessera::GgmlRowToInt8(t.type, t.data, cols, codes.data(), scales.data());
    }
  }
  return 0;
}
