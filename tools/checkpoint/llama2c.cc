#include "tools/checkpoint/llama2c.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42" read as a little-endian uint32.
constexpr uint64_t kV1HeaderBytes = 256;
constexpr uint64_t kV0HeaderBytes = 7 * 4;

// A read-only mapping of a whole file; the fillers that read it share ownership.
class MappedFile {
 public:
  static absl::StatusOr<std::shared_ptr<MappedFile>> Open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT)
        return absl::NotFoundError(absl::StrCat(path.string(), ": file not found"));
      return absl::PermissionDeniedError(
          absl::StrCat(path.string(), ": cannot open: ", std::strerror(err)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat(path.string(), ": stat failed: ", std::strerror(err)));
    }
    auto file = std::shared_ptr<MappedFile>(new MappedFile());
    file->size_ = static_cast<uint64_t>(st.st_size);
    if (file->size_ > 0) {
      void* m = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (m == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return absl::InternalError(
            absl::StrCat(path.string(), ": mmap failed: ", std::strerror(err)));
      }
      file->data_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
    return file;
  }
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::Status Invalid(const std::filesystem::path& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
}

// The fp32 arrays of a checkpoint, in file order, with their element counts.
std::vector<std::pair<std::string, uint64_t>> Layout(const Llama2cHeader& h) {
  const uint64_t dim = h.dim, hidden = h.hidden_dim, layers = h.n_layers;
  const uint64_t head = dim / h.n_heads, kv_dim = head * h.n_kv_heads;
  const uint64_t vocab = h.vocab_size;
  std::vector<std::pair<std::string, uint64_t>> v;
  if (h.version == 0) {
    v = {{"tok_embeddings", vocab * dim},
         {"rms_att", layers * dim},
         {"wq", layers * dim * dim},
         {"wk", layers * kv_dim * dim},
         {"wv", layers * kv_dim * dim},
         {"wo", layers * dim * dim},
         {"rms_ffn", layers * dim},
         {"w1", layers * hidden * dim},
         {"w2", layers * dim * hidden},
         {"w3", layers * hidden * dim},
         {"rms_final", dim},
         {"freq_cis_real", uint64_t(h.seq_len) * head / 2},
         {"freq_cis_imag", uint64_t(h.seq_len) * head / 2}};
  } else {
    v = {{"rms_att", layers * dim},
         {"rms_ffn", layers * dim},
         {"rms_final", dim},
         {"tok_embeddings", vocab * dim},
         {"wq", layers * dim * dim},
         {"wk", layers * kv_dim * dim},
         {"wv", layers * kv_dim * dim},
         {"wo", layers * dim * dim},
         {"w1", layers * hidden * dim},
         {"w2", layers * dim * hidden},
         {"w3", layers * hidden * dim}};
  }
  if (!h.shared_classifier) v.push_back({"wcls", vocab * dim});
  return v;
}

}  // namespace

absl::StatusOr<Llama2cHeader> ReadLlama2cHeader(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const uint8_t* p = file->data();
  const uint64_t size = file->size();
  Llama2cHeader h;
  if (size >= 4 && Load<uint32_t>(p) == kMagic) {
    if (size < kV1HeaderBytes) {
      return absl::DataLossError(absl::StrCat(path.string(), ": truncated: ", size,
                                              " bytes, but a version 1 header needs ",
                                              kV1HeaderBytes));
    }
    const int32_t version = Load<int32_t>(p + 4);
    if (version != 1) {
      return absl::UnimplementedError(
          absl::StrCat(path.string(), ": llama2.c export version ", version,
                       " is not supported (only the fp32 formats: legacy v0 and version 1)"));
    }
    h.version = 1;
    p += 8;
    h.weights_offset = kV1HeaderBytes;
  } else {
    if (size < kV0HeaderBytes) {
      return absl::DataLossError(absl::StrCat(path.string(), ": truncated: ", size,
                                              " bytes, but the header needs ", kV0HeaderBytes));
    }
    h.weights_offset = kV0HeaderBytes;
  }
  h.dim = Load<int32_t>(p);
  h.hidden_dim = Load<int32_t>(p + 4);
  h.n_layers = Load<int32_t>(p + 8);
  h.n_heads = Load<int32_t>(p + 12);
  h.n_kv_heads = Load<int32_t>(p + 16);
  h.vocab_size = Load<int32_t>(p + 20);
  h.seq_len = Load<int32_t>(p + 24);
  if (h.version == 1) {
    h.shared_classifier = p[28] != 0;
  } else {
    // Legacy files flag an untied classifier with a negative vocab_size.
    h.shared_classifier = h.vocab_size > 0;
    if (h.vocab_size < 0 && h.vocab_size != INT32_MIN) h.vocab_size = -h.vocab_size;
  }

  const std::string params = absl::StrCat(
      "dim=", h.dim, " hidden_dim=", h.hidden_dim, " n_layers=", h.n_layers, " n_heads=", h.n_heads,
      " n_kv_heads=", h.n_kv_heads, " vocab_size=", h.vocab_size, " seq_len=", h.seq_len);
  // Each field is bounded so that the size arithmetic below cannot overflow 64 bits.
  constexpr int kMaxField = 1 << 18;
  for (int v :
       {h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size, h.seq_len}) {
    if (v <= 0 || v > kMaxField) {
      return Invalid(path, absl::StrCat("implausible header (", params,
                                        "): every field must be in [1, ", kMaxField, "]"));
    }
  }
  if (h.dim % h.n_heads != 0 || h.n_heads % h.n_kv_heads != 0 || (h.dim / h.n_heads) % 2 != 0) {
    return Invalid(path, absl::StrCat("inconsistent header (", params,
                                      "): dim must split into n_heads even-sized heads, and "
                                      "n_heads must be a multiple of n_kv_heads"));
  }
  uint64_t floats = 0;
  for (const auto& [name, n] : Layout(h)) floats += n;
  h.expected_file_size = h.weights_offset + floats * 4;
  if (size != h.expected_file_size) {
    return absl::DataLossError(
        absl::StrCat(path.string(), ": the header (version ", h.version, ", ", params,
                     h.shared_classifier ? ", shared classifier" : ", separate classifier",
                     ") implies a file of ", h.expected_file_size, " bytes, but it is ", size,
                     " bytes", size < h.expected_file_size ? " (truncated)" : " (trailing data)"));
  }
  return h;
}

absl::StatusOr<SentencePieceVocab> ReadLlama2cTokenizer(const std::filesystem::path& path,
                                                        int vocab_size) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const uint64_t size = data.size();
  if (size < 4) {
    return absl::DataLossError(absl::StrCat(path.string(), ": truncated: ", size,
                                            " bytes, too short for max_token_length"));
  }
  uint64_t pos = 4;
  SentencePieceVocab vocab;
  std::unordered_map<std::string, int> seen;
  const std::string space = "\xE2\x96\x81";
  for (int id = 0; id < vocab_size; ++id) {
    if (size - pos < 8) {
      return absl::DataLossError(absl::StrCat(path.string(), ": truncated in token ", id, " of ",
                                              vocab_size, " (at byte ", pos, " of ", size, ")"));
    }
    const float score = Load<float>(p + pos);
    const int32_t len = Load<int32_t>(p + pos + 4);
    pos += 8;
    if (len < 0 || static_cast<uint64_t>(len) > size - pos) {
      return absl::DataLossError(absl::StrCat(path.string(), ": token ", id, " claims ", len,
                                              " bytes but ", size - pos, " remain"));
    }
    std::string piece(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
    pos += static_cast<uint64_t>(len);
    if (id == 1) {
      piece = "<s>";  // Stored as "\n<s>\n" for run.c's decoder.
    } else if (id == 2) {
      piece = "</s>";
    } else {
      std::string mapped;
      for (char c : piece) {
        if (c == ' ')
          mapped += space;
        else
          mapped += c;
      }
      piece = std::move(mapped);
    }
    if (auto [it, inserted] = seen.emplace(piece, id); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ": token ", id, " \"", piece,
                                                     "\" repeats token ", it->second));
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  if (pos != size) {
    return absl::DataLossError(absl::StrCat(path.string(), ": ", size - pos, " bytes left after ",
                                            vocab_size,
                                            " tokens (vocab_size comes from the checkpoint): "
                                            "tokenizer and checkpoint do not match"));
  }
  return vocab;
}

absl::Status ConvertLlama2c(const std::filesystem::path& checkpoint_bin,
                            const std::filesystem::path& tokenizer_bin,
                            const std::filesystem::path& out_dir) {
  ASSIGN_OR_RETURN(const Llama2cHeader h, ReadLlama2cHeader(checkpoint_bin));
  ASSIGN_OR_RETURN(const SentencePieceVocab vocab,
                   ReadLlama2cTokenizer(tokenizer_bin, h.vocab_size));
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(checkpoint_bin));
  if (file->size() != h.expected_file_size) {
    return absl::AbortedError(absl::StrCat(checkpoint_bin.string(), ": changed while reading"));
  }

  ModelConfig c;
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_attention_heads = h.n_heads;
  c.num_key_value_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.num_hidden_layers = h.n_layers;
  c.vocab_size = h.vocab_size;
  c.max_position_embeddings = h.seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.shared_classifier;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = DType::kF32;
  RETURN_IF_ERROR(ModelConfig::FromJson(c.ToJson(), checkpoint_bin.string()).status());

  std::map<std::string, uint64_t> offset;  // Byte offset of each array in the file.
  uint64_t at = h.weights_offset;
  for (const auto& [name, n] : Layout(h)) {
    offset[name] = at;
    at += n * 4;
  }
  const int64_t dim = h.dim, hidden = h.hidden_dim, head = dim / h.n_heads;
  const int64_t kv_dim = head * h.n_kv_heads;
  const uint8_t* base = file->data();

  // A filler copying a row-major matrix with `cols` columns from byte `src`; `permute`
  // reorders rows within each head from interleaved-pair to rotate_half RoPE order.
  auto copy = [file, base](uint64_t src, int64_t cols, bool permute, int64_t head_dim) {
    return [file, base, src, cols, permute, head_dim](uint64_t offset, uint64_t n, void* dst) {
      auto* out = static_cast<uint8_t*>(dst);
      if (!permute) {
        std::memcpy(out, base + src + offset * 4, n * 4);
        return;
      }
      const uint64_t half = static_cast<uint64_t>(head_dim / 2);
      for (uint64_t e = offset; e < offset + n;) {
        const uint64_t row = e / cols, col = e % cols;
        const uint64_t h = row / head_dim, rem = row % head_dim;
        // new row h*hd + half*(hd/2) + j  <-  old row h*hd + 2*j + half
        const uint64_t old_row = h * head_dim + 2 * (rem % half) + rem / half;
        const uint64_t m = std::min<uint64_t>(cols - col, offset + n - e);
        std::memcpy(out + (e - offset) * 4, base + src + (old_row * cols + col) * 4, m * 4);
        e += m;
      }
    };
  };
  SafetensorsWriter writer;
  auto add = [&](std::string name, std::vector<int64_t> shape, uint64_t src, bool permute = false) {
    const int64_t cols = shape.back();
    writer.Add(std::move(name), DType::kF32, std::move(shape), copy(src, cols, permute, head));
  };
  add("model.embed_tokens.weight", {h.vocab_size, dim}, offset["tok_embeddings"]);
  for (int64_t l = 0; l < h.n_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    add(p + "input_layernorm.weight", {dim}, offset["rms_att"] + l * dim * 4);
    add(p + "self_attn.q_proj.weight", {dim, dim}, offset["wq"] + l * dim * dim * 4, true);
    add(p + "self_attn.k_proj.weight", {kv_dim, dim}, offset["wk"] + l * kv_dim * dim * 4, true);
    add(p + "self_attn.v_proj.weight", {kv_dim, dim}, offset["wv"] + l * kv_dim * dim * 4);
    add(p + "self_attn.o_proj.weight", {dim, dim}, offset["wo"] + l * dim * dim * 4);
    add(p + "post_attention_layernorm.weight", {dim}, offset["rms_ffn"] + l * dim * 4);
    add(p + "mlp.gate_proj.weight", {hidden, dim}, offset["w1"] + l * hidden * dim * 4);
    add(p + "mlp.down_proj.weight", {dim, hidden}, offset["w2"] + l * dim * hidden * 4);
    add(p + "mlp.up_proj.weight", {hidden, dim}, offset["w3"] + l * hidden * dim * 4);
  }
  add("model.norm.weight", {dim}, offset["rms_final"]);
  // Written even when tied, as llama2.c's hf_export does, so loaders may use either.
  add("lm_head.weight", {h.vocab_size, dim},
      h.shared_classifier ? offset["tok_embeddings"] : offset["wcls"]);
  writer.SetMetadata("format", "pt");

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(out_dir.string(), ": cannot create folder: ", ec.message()));
  }
  RETURN_IF_ERROR(writer.Write(out_dir / "model.safetensors"));
  RETURN_IF_ERROR(WriteStringToFile(out_dir / "config.json", c.ToJson()));
  RETURN_IF_ERROR(WriteStringToFile(out_dir / "tokenizer.json", SentencePieceTokenizerJson(vocab)));
  RETURN_IF_ERROR(
      WriteStringToFile(out_dir / "tokenizer_config.json", LlamaTokenizerConfigJson(h.seq_len)));
  return absl::OkStatus();
}

}  // namespace tessera
