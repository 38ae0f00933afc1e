#include "worker/comm/gloo_kv_store.h"

#include "absl/time/time.h"
#include "gloo/common/error.h"

namespace tessera {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException(std::string(status.message()));
}

}  // namespace

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = client_.Set(key, absl::string_view(data.data(), data.size()));
  if (!status.ok()) Throw(status);
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  wait({key}, timeout_);
  absl::StatusOr<std::string> value = client_.Get(key);
  if (!value.ok()) Throw(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  // gloo::kNoTimeout (zero) means "the default", never "wait forever".
  const std::chrono::milliseconds effective = timeout.count() > 0 ? timeout : timeout_;
  absl::Status status = client_.Wait(keys, absl::FromChrono(effective));
  if (!status.ok()) Throw(status);
}

}  // namespace tessera
