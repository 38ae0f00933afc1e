#include "coordinator/api/tokenize_call.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/grpc_status.h"
#include "coordinator/api/input_budget.h"
#include "coordinator/api/token_offsets.h"
#include "coordinator/engine/output_processor.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {
namespace {

using google::protobuf::io::CodedOutputStream;

// TokenizeResponse's fields (tessera/v1/generation.proto), all length-delimited.
constexpr uint8_t kTokenIds = (1 << 3) | 2;
constexpr uint8_t kPieces = (2 << 3) | 2;
constexpr uint8_t kVocabPieces = (3 << 3) | 2;
constexpr uint8_t kText = (4 << 3) | 2;
constexpr uint8_t kOffsets = (5 << 3) | 2;

// What a response slice owns: its bytes and the lease of the input that made them.
struct ResponseBytes {
  uint8_t* data = nullptr;
  InputBudget::Lease lease;
};

void FreeResponseBytes(void* p) {
  auto* bytes = static_cast<ResponseBytes*>(p);
  std::free(bytes->data);
  delete bytes;  // Returns the lease, which may ask for a trim now the bytes are gone.
}

size_t IdSize(int32_t id) { return CodedOutputStream::VarintSize64(static_cast<uint64_t>(int64_t{id})); }

size_t DelimitedSize(size_t payload) { return 1 + CodedOutputStream::VarintSize32(static_cast<uint32_t>(payload)) + payload; }

uint8_t* WriteDelimited(uint8_t tag, absl::string_view payload, uint8_t* out) {
  *out++ = tag;
  out = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(payload.size()), out);
  std::memcpy(out, payload.data(), payload.size());
  return out + payload.size();
}

}  // namespace

void TokenizeCall::MakePieces() {
  const int32_t n = tokenizer_->vocab_size();
  pieces_.resize(n);
  vocab_pieces_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    // A byte-fallback piece alone is not valid UTF-8; protobuf strings must be.
    std::string piece = SanitizeUtf8(tokenizer_->Decode({id}, /*skip_special_tokens=*/false));
    if (const size_t complete = CompleteUtf8Length(piece); complete < piece.size()) {
      piece.replace(complete, std::string::npos, "\xEF\xBF\xBD");
    }
    pieces_[id] = std::move(piece);
    vocab_pieces_[id] = tokenizer_->PieceForId(id);
  }
}

grpc::Status TokenizeCall::Run(grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response) {
  v1::TokenizeRequest request;
  if (grpc::Status s = grpc::SerializationTraits<v1::TokenizeRequest>::Deserialize(request_bytes, &request);
      !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the TokenizeRequest cannot be parsed");
  }
  if (absl::Status s = CheckInputSize("text", request.text().size(), *limits_); !s.ok()) return ToGrpcStatus(s);
  auto bytes = std::make_unique<ResponseBytes>();
  if (limits_->input_budget != nullptr) {
    auto lease = limits_->input_budget->Acquire(static_cast<int64_t>(request.text().size()), "Tokenize text");
    if (!lease.ok()) return ToGrpcStatus(lease.status());
    bytes->lease = *std::move(lease);
  }
  absl::call_once(pieces_once_, [this] { MakePieces(); });

  std::vector<int32_t> ids = tokenizer_->Encode(request.text(), request.add_special_tokens());
  std::string().swap(*request.mutable_text());
  TokenOffsets offsets = ComputeTokenOffsets(*tokenizer_, ids);
  std::string text = SanitizeUtf8(offsets.text);
  std::string().swap(offsets.text);
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(pieces_.size())) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "the tokenizer produced an id outside its vocabulary");
    }
  }

  size_t ids_payload = 0;
  size_t size = 0;
  for (int32_t id : ids) {
    ids_payload += IdSize(id);
    size += DelimitedSize(pieces_[id].size()) + DelimitedSize(vocab_pieces_[id].size());
  }
  size_t offsets_payload = 0;
  for (uint32_t o : offsets.offsets) offsets_payload += CodedOutputStream::VarintSize32(o);
  if (!ids.empty()) size += DelimitedSize(ids_payload);
  if (!text.empty()) size += DelimitedSize(text.size());
  if (!offsets.offsets.empty()) size += DelimitedSize(offsets_payload);
  if (size > static_cast<size_t>(INT32_MAX)) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the Tokenize answer would exceed 2 GiB; send the text in smaller parts");
  }

  bytes->data = static_cast<uint8_t*>(std::malloc(size > 0 ? size : 1));
  if (bytes->data == nullptr) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory");
  uint8_t* out = bytes->data;
  if (!ids.empty()) {
    *out++ = kTokenIds;
    out = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(ids_payload), out);
    for (int32_t id : ids) out = CodedOutputStream::WriteVarint64ToArray(static_cast<uint64_t>(int64_t{id}), out);
  }
  for (int32_t id : ids) out = WriteDelimited(kPieces, pieces_[id], out);
  for (int32_t id : ids) out = WriteDelimited(kVocabPieces, vocab_pieces_[id], out);
  if (!text.empty()) out = WriteDelimited(kText, text, out);
  if (!offsets.offsets.empty()) {
    *out++ = kOffsets;
    out = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(offsets_payload), out);
    for (uint32_t o : offsets.offsets) out = CodedOutputStream::WriteVarint32ToArray(o, out);
  }
  ResponseBytes* owned = bytes.release();
  grpc::Slice slice(owned->data, size, &FreeResponseBytes, owned);
  *response = grpc::ByteBuffer(&slice, 1);
  return grpc::Status::OK;
}

}  // namespace tessera
