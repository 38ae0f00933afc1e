#ifndef TESSERA_COORDINATOR_API_TOKENIZE_CALL_H_
#define TESSERA_COORDINATOR_API_TOKENIZE_CALL_H_

#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

// Tokenize on raw bytes. Its answer holds several strings per token, and as a protobuf
// message every one is a heap object (about 50 bytes each, 1.5 GB for a 50 MB text of
// short tokens); written straight in wire form it is a single buffer of about the
// serialized size, handed to gRPC without a copy. The buffer holds its input's lease of
// --max-inflight-input-bytes until gRPC has sent and freed it.
class TokenizeCall {
 public:
  // Both outlive the call object.
  TokenizeCall(const Tokenizer* tokenizer, const ServingLimits* limits) : tokenizer_(tokenizer), limits_(limits) {}

  // Parses `request` (a TokenizeRequest; emptied as it is read) and writes the
  // TokenizeResponse into `response`.
  grpc::Status Run(grpc::ByteBuffer* request, grpc::ByteBuffer* response);

 private:
  // Each token's `pieces` and `vocab_pieces` entries depend on its id alone: made once.
  void MakePieces();

  const Tokenizer* const tokenizer_;
  const ServingLimits* const limits_;
  absl::once_flag pieces_once_;
  std::vector<std::string> pieces_;
  std::vector<std::string> vocab_pieces_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_TOKENIZE_CALL_H_
