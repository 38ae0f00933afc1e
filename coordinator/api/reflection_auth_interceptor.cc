#include "coordinator/api/reflection_auth_interceptor.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"

namespace tessera {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Sets `error_response { error_code, error_message }` of a ServerReflectionResponse through
// protobuf's reflection: the reflection protos' generated classes are gRPC's, not installed.
// False when the message does not have that shape.
bool SetErrorResponse(google::protobuf::Message* response, const std::string& message) {
  const google::protobuf::FieldDescriptor* error_field =
      response->GetDescriptor()->FindFieldByName("error_response");
  if (error_field == nullptr || error_field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
    return false;
  }
  // Drops whatever the handler put beside it, echoed request included.
  response->Clear();
  google::protobuf::Message* error = response->GetReflection()->MutableMessage(response, error_field);
  const google::protobuf::FieldDescriptor* code = error->GetDescriptor()->FindFieldByName("error_code");
  const google::protobuf::FieldDescriptor* text = error->GetDescriptor()->FindFieldByName("error_message");
  if (code == nullptr || code->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_INT32 ||
      text == nullptr || text->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
    return false;
  }
  error->GetReflection()->SetInt32(error, code, grpc::StatusCode::UNAUTHENTICATED);
  error->GetReflection()->SetString(error, text, message);
  return true;
}

class ReflectionAuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  ReflectionAuthInterceptor(grpc::experimental::ServerRpcInfo* info, const auth::ApiKeyStore* keys)
      : info_(info), keys_(keys) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      Check(*methods->GetRecvInitialMetadata());
    }
    if (!refusal_.empty()) {
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
        // An empty request names nothing; gRPC's handler answers it with an error.
        if (void* request = methods->GetRecvMessage(); request != nullptr) {
          static_cast<google::protobuf::Message*>(request)->Clear();
        }
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
        const void* response = methods->GetSendMessage();
        if (response == nullptr ||
            !SetErrorResponse(const_cast<google::protobuf::Message*>(
                                  static_cast<const google::protobuf::Message*>(response)),
                              refusal_)) {
          // Not the message expected: send nothing at all rather than something unchecked.
          info_->server_context()->TryCancel();
        }
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
        methods->ModifySendStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, refusal_));
      }
    }
    methods->Proceed();
  }

 private:
  void Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
    const auto header = metadata.find("authorization");
    const absl::string_view value =
        header == metadata.end() ? absl::string_view() : absl::string_view(header->second.data(), header->second.size());
    const absl::Status checked = keys_->Check(value);
    if (checked.ok()) return;
    refusal_ = absl::StrCat("server reflection: ", checked.message());
    Log(LogLevel::kWarning, "tessera-coordinator", "unauthenticated request refused",
        {{"method", std::string(info_->method() == nullptr ? "" : info_->method())},
         {"reason", std::string(checked.message())}});
  }

  grpc::experimental::ServerRpcInfo* const info_;
  const auth::ApiKeyStore* const keys_;
  std::string refusal_;  // Non-empty: the call is refused, with this message.
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(const auth::ApiKeyStore* keys) : keys_(keys) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    const absl::string_view method = info->method() == nullptr ? "" : info->method();
    // v1alpha (gRPC 1.51's plugin) and v1 (newer plugins).
    if (!absl::StartsWith(method, "/grpc.reflection.")) return nullptr;
    return new ReflectionAuthInterceptor(info, keys_);
  }

 private:
  const auth::ApiKeyStore* const keys_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ReflectionAuthInterceptorFactory(
    const auth::ApiKeyStore* keys) {
  return std::make_unique<Factory>(keys);
}

}  // namespace tessera
