// TLS of the public API (--tls-cert, --tls-key, --tls-client-ca): who is served, who is
// refused, and rotation of the files without a restart.

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/https_probe.h"
#include "tests/support/ssl_credentials.h"
#include "tests/support/test_certs.h"

namespace tessera::testing {
namespace {

struct Pki {
  KeyAndCert ca = MakeCert("tessera-test-ca", nullptr, 1, /*is_ca=*/true);
  KeyAndCert server = MakeCert("tessera-server-1", &ca, 101, /*is_ca=*/false);
  KeyAndCert client = MakeCert("tessera-client", &ca, 201, /*is_ca=*/false);
  KeyAndCert other_ca = MakeCert("another-ca", nullptr, 2, /*is_ca=*/true);
  KeyAndCert other_client = MakeCert("stranger", &other_ca, 301, /*is_ca=*/false);
};

std::shared_ptr<grpc::ChannelCredentials> Trusting(const KeyAndCert& ca, const KeyAndCert* client = nullptr) {
  return TrustingCredentials(ca, client);
}

// Its own subchannel pool, so each probe makes a new connection (and a new handshake).
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, credentials, args);
}

struct Probe {
  grpc::Status status;
  std::string peer_serial;  // Of the server's certificate, when the call got through.
};

Probe Call(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = v1::Generation::NewStub(FreshChannel(address, std::move(credentials)));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::GenerateResponse response;
  Probe p;
  p.status = stub->Generate(&ctx, GreedyText("Once upon a time", 4), &response);
  if (auto auth = ctx.auth_context(); auth != nullptr) {
    for (const auto& pem : auth->FindPropertyValues("x509_pem_cert")) {
      std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                    BIO_free);
      std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr),
                                                       X509_free);
      if (cert != nullptr) p.peer_serial = absl::StrCat(ASN1_INTEGER_get(X509_get0_serialNumber(cert.get())));
    }
  }
  return p;
}

class TlsTest : public ::testing::Test {
 protected:
  void WriteServer(const KeyAndCert& server) {
    // Key first: gRPC's watcher rejects a pair that does not match and keeps the old one
    // until both agree, so either order converges.
    WriteFile(dir_ / "tls.key", server.key_pem);
    WriteFile(dir_ / "tls.crt", server.cert_pem);
  }

  std::unique_ptr<Cluster> Start(bool client_ca) {
    dir_ = ScratchDir("tls");
    std::filesystem::create_directories(dir_);
    WriteServer(pki_.server);
    WriteFile(dir_ / "ca.crt", pki_.ca.cert_pem);
    http_port_ = PickFreePort();
    ClusterOptions options;
    options.coordinator_flags = {"--http-port", absl::StrCat(http_port_), "--tls-cert", (dir_ / "tls.crt").string(), "--tls-key", (dir_ / "tls.key").string()};
    if (client_ca) options.coordinator_flags.insert(options.coordinator_flags.end(), {"--tls-client-ca", (dir_ / "ca.crt").string()});
    options.channel_credentials = Trusting(pki_.ca, client_ca ? &pki_.client : nullptr);
    return StartStories(/*tp=*/1, /*replicas=*/1, std::move(options));
  }

  Pki pki_;
  std::filesystem::path dir_;
  int http_port_ = 0;
};

TEST_F(TlsTest, ServesTrustingClientsRefusesOthersAndReloadsRotatedCertificate) {
  auto cluster = Start(/*client_ca=*/false);
  ASSERT_NE(cluster, nullptr);
  const std::string address = cluster->address();

  Probe ok = Call(address, Trusting(pki_.ca));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.peer_serial, "101");

  EXPECT_EQ(Call(address, grpc::InsecureChannelCredentials()).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(address, Trusting(pki_.other_ca)).status.error_code(), grpc::StatusCode::UNAVAILABLE);

  // The HTTP API: the same certificate, the same refusals.
  HttpsProbe https = GetOverTls(http_port_, "/v1/models", &pki_.ca);
  EXPECT_TRUE(https.handshake_ok) << https.error;
  EXPECT_EQ(https.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(https.server_serial, "101");
  EXPECT_EQ(GetPlaintextStatusLine(http_port_, "/v1/models"), "");
  EXPECT_FALSE(GetOverTls(http_port_, "/v1/models", &pki_.other_ca).handshake_ok);

  // Rotation: new connections get the new certificate, without a restart.
  const KeyAndCert rotated = MakeCert("tessera-server-2", &pki_.ca, 102, /*is_ca=*/false);
  WriteServer(rotated);
  Probe after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    after = Call(address, Trusting(pki_.ca));
  } while (after.peer_serial != "102" && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.peer_serial, "102");
  HttpsProbe rotated_https;
  do {
    rotated_https = GetOverTls(http_port_, "/v1/models", &pki_.ca);
    if (rotated_https.server_serial == "102") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(rotated_https.server_serial, "102");
  EXPECT_EQ(rotated_https.status_line, "HTTP/1.1 200 OK");

  // An expired certificate (rotated in, as a renewal that never came would leave it) is
  // refused by a verifying client.
  const KeyAndCert expired = MakeCert("tessera-server-expired", &pki_.ca, 103, /*is_ca=*/false,
                                      /*not_before_s=*/-7200, /*not_after_s=*/-3600);
  WriteServer(expired);
  grpc::Status refused;
  const auto deadline2 = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    refused = Call(address, Trusting(pki_.ca)).status;
  } while (refused.ok() && std::chrono::steady_clock::now() < deadline2);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  HttpsProbe expired_https;
  do {
    expired_https = GetOverTls(http_port_, "/v1/models", &pki_.ca);
    if (!expired_https.handshake_ok) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } while (std::chrono::steady_clock::now() < deadline2);
  EXPECT_FALSE(expired_https.handshake_ok);
  EXPECT_NE(expired_https.error.find("certificate verify failed"), std::string::npos) << expired_https.error;
}

TEST_F(TlsTest, ClientCaRequiresAVerifiedClientCertificate) {
  auto cluster = Start(/*client_ca=*/true);
  ASSERT_NE(cluster, nullptr);
  const std::string address = cluster->address();

  Probe ok = Call(address, Trusting(pki_.ca, &pki_.client));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(Call(address, Trusting(pki_.ca)).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(address, Trusting(pki_.ca, &pki_.other_client)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);

  EXPECT_EQ(GetOverTls(http_port_, "/v1/models", &pki_.ca, &pki_.client).status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(GetOverTls(http_port_, "/v1/models", &pki_.ca).status_line, "");
  EXPECT_EQ(GetOverTls(http_port_, "/v1/models", &pki_.ca, &pki_.other_client).status_line, "");
}

}  // namespace
}  // namespace tessera::testing
