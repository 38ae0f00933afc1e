#include "coordinator/api/unparseable_request_interceptor.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace tessera {
namespace {

constexpr absl::Duration kLogInterval = absl::Seconds(10);

// At most one line per kLogInterval; the next line says how many were left out.
class RateLimitedLog {
 public:
  void Log(LogLevel level, absl::string_view message, LogFields fields) {
    int64_t suppressed = 0;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (now - last_ < kLogInterval) {
        ++suppressed_;
        return;
      }
      last_ = now;
      suppressed = suppressed_;
      suppressed_ = 0;
    }
    if (suppressed > 0) fields.emplace_back("suppressed_since_last", suppressed);
    tessera::Log(level, "tessera-coordinator", message, fields);
  }

 private:
  absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

RateLimitedLog& UnparseableLog() {
  static auto* log = new RateLimitedLog();
  return *log;
}

class UnparseableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparseableRequestInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // Bytes that do not parse end a call before our code runs: the synchronous API answers
      // INTERNAL, the callback API UNIMPLEMENTED, both with no message. Every method of the
      // service is implemented, so either means the request did not parse.
      const bool unparsed = status.error_code() == grpc::StatusCode::INTERNAL ||
                            status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
      if (unparsed && status.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request to ", method_,
                         " could not be parsed: truncated or malformed protobuf bytes, or a string field "
                         "(text, request_id, stop) that is not valid UTF-8 (send raw bytes as token_ids)")));
        UnparseableLog().Log(LogLevel::kWarning, "unparseable request refused", {{"method", method_}});
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    const std::string method = info->method() == nullptr ? "" : info->method();
    // Our service only; health and reflection keep gRPC's own behaviour.
    if (!absl::StartsWith(method, "/tessera.v1.Generation/")) return nullptr;
    return new UnparseableRequestInterceptor(method);
  }
};

void ProtobufLogHandler(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  static auto* log = new RateLimitedLog();
  if (level == google::protobuf::LOGLEVEL_FATAL) {  // Never dropped: the process is about to end.
    Log(LogLevel::kError, "tessera-coordinator", absl::StrCat("protobuf: ", message));
    return;
  }
  const LogLevel ours = level >= google::protobuf::LOGLEVEL_ERROR     ? LogLevel::kError
                        : level == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarning
                                                                      : LogLevel::kInfo;
  log->Log(ours, absl::StrCat("protobuf: ", message),
           {{"source", absl::StrCat(filename == nullptr ? "?" : filename, ":", line)}});
}

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> UnparseableRequestInterceptorFactory() {
  return std::make_unique<Factory>();
}

void RateLimitProtobufLogging() { google::protobuf::SetLogHandler(&ProtobufLogHandler); }

}  // namespace tessera
