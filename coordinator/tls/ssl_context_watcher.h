#ifndef TESSERA_COORDINATOR_TLS_SSL_CONTEXT_WATCHER_H_
#define TESSERA_COORDINATOR_TLS_SSL_CONTEXT_WATCHER_H_

#include <filesystem>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/ssl/context.hpp"
#include "coordinator/tls/tls_options.h"

namespace tessera::tls {

// Builds a server ssl::context from PEM files (TLS 1.2+, and client certificates required
// and verified when client_ca_file is set).
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeServerContext(const TlsFiles& files);

// The HTTP port's context, rebuilt when the files change: Poll() compares their
// modification times and, on a change, builds a new context that new connections get
// from Current(); connections already open keep theirs. A rewrite that does not load yet
// (a key that does not match the certificate, half of a rotation) keeps the old context
// until the files agree.
class SslContextWatcher {
 public:
  static absl::StatusOr<std::unique_ptr<SslContextWatcher>> Create(TlsFiles files);

  std::shared_ptr<boost::asio::ssl::context> Current() const;
  // Returns true when it loaded a new context.
  bool Poll();

 private:
  SslContextWatcher(TlsFiles files, std::shared_ptr<boost::asio::ssl::context> context);
  std::vector<std::filesystem::file_time_type> Stamps() const;

  const TlsFiles files_;
  std::vector<std::filesystem::file_time_type> stamps_;  // Of the files the context came from.
  mutable absl::Mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::tls

#endif  // TESSERA_COORDINATOR_TLS_SSL_CONTEXT_WATCHER_H_
