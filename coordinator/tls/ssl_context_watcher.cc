#include "coordinator/tls/ssl_context_watcher.h"

#include <openssl/ssl.h>

#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tessera::tls {

namespace ssl = boost::asio::ssl;

absl::StatusOr<std::shared_ptr<ssl::context>> MakeServerContext(const TlsFiles& files) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  if (!ec) ctx->use_certificate_chain_file(files.cert_file, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", files.cert_file, ": ", ec.message()));
  ctx->use_private_key_file(files.key_file, ssl::context::pem, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-key ", files.key_file, ": ", ec.message()));
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key ", files.key_file, " does not match ", files.cert_file));
  }
  if (!files.client_ca_file.empty()) {
    ctx->load_verify_file(files.client_ca_file, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca ", files.client_ca_file, ": ", ec.message()));
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return absl::InternalError(ec.message());
    // Session resumption with client verification fails without an id context.
    static constexpr unsigned char kSessionContext[] = "tessera-http";
    SSL_CTX_set_session_id_context(ctx->native_handle(), kSessionContext, sizeof(kSessionContext) - 1);
  }
  return ctx;
}

absl::StatusOr<std::unique_ptr<SslContextWatcher>> SslContextWatcher::Create(TlsFiles files) {
  auto ctx = MakeServerContext(files);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<SslContextWatcher>(new SslContextWatcher(std::move(files), std::move(*ctx)));
}

SslContextWatcher::SslContextWatcher(TlsFiles files, std::shared_ptr<ssl::context> context)
    : files_(std::move(files)), context_(std::move(context)) {
  stamps_ = Stamps();
}

std::vector<std::filesystem::file_time_type> SslContextWatcher::Stamps() const {
  std::vector<std::filesystem::file_time_type> out;
  for (const std::string* path : {&files_.cert_file, &files_.key_file, &files_.client_ca_file}) {
    std::error_code ec;
    // A missing file (mid-swap) reads as the epoch: a change, retried on the next poll.
    out.push_back(path->empty() ? std::filesystem::file_time_type{}
                                : std::filesystem::last_write_time(*path, ec));
  }
  return out;
}

std::shared_ptr<ssl::context> SslContextWatcher::Current() const {
  absl::MutexLock lock(&mu_);
  return context_;
}

bool SslContextWatcher::Poll() {
  const auto stamps = Stamps();
  if (stamps == stamps_) return false;
  auto ctx = MakeServerContext(files_);
  if (!ctx.ok()) {
    // Stamps are not recorded, so the next poll tries again.
    Log(LogLevel::kWarning, "tessera-coordinator", "http tls: keeping the previous certificate",
        {{"error", std::string(ctx.status().message())}});
    return false;
  }
  stamps_ = stamps;
  absl::MutexLock lock(&mu_);
  context_ = std::move(*ctx);
  Log(LogLevel::kInfo, "tessera-coordinator", "http tls: reloaded the certificate", {});
  return true;
}

}  // namespace tessera::tls
