// The rendezvous store's authentication: the join secret (HMAC challenge-response both
// ways) and mutual TLS under the cluster CA. Who gets in, who is refused, and that a
// refused peer never reads or writes a key.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rendezvous/kv_store_client.h"
#include "common/rendezvous/kv_store_protocol.h"
#include "common/rendezvous/kv_store_server.h"
#include "common/rendezvous/socket_util.h"
#include "gtest/gtest.h"
#include "tests/support/test_certs.h"

namespace tessera {
namespace {

using testing::KeyAndCert;
using testing::MakeCert;

constexpr char kSecret[] = "the-cluster-secret";

// The cluster's CA and member certificates, plus what a rogue might hold.
class Pki {
 public:
  Pki() {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("kv_store_auth_test_", ::getpid());
    std::filesystem::create_directories(dir_);
    Write("ca.crt", ca_.cert_pem);
    Write("server.crt", server_.cert_pem);
    Write("server.key", server_.key_pem);
    Write("client.crt", client_.cert_pem);
    Write("client.key", client_.key_pem);
    Write("other-ca.crt", other_ca_.cert_pem);
    Write("stranger.crt", stranger_.cert_pem);
    Write("stranger.key", stranger_.key_pem);
    Write("expired.crt", expired_.cert_pem);
    Write("expired.key", expired_.key_pem);
  }
  ~Pki() { std::filesystem::remove_all(dir_); }

  KvStoreSecurity Store() const { return Files("server", "ca.crt"); }
  KvStoreSecurity Member() const { return Files("client", "ca.crt"); }
  KvStoreSecurity Stranger() const { return Files("stranger", "ca.crt"); }
  KvStoreSecurity Expired() const { return Files("expired", "ca.crt"); }
  // A client that trusts only another CA (so it also refuses the real store).
  KvStoreSecurity OtherCaClient() const { return Files("stranger", "other-ca.crt"); }

 private:
  void Write(const std::string& name, const std::string& text) { testing::WriteFile(dir_ / name, text); }
  KvStoreSecurity Files(const std::string& who, const std::string& ca) const {
    KvStoreSecurity s;
    s.join_secret = kSecret;
    s.ca_file = (dir_ / ca).string();
    s.cert_file = (dir_ / (who + ".crt")).string();
    s.key_file = (dir_ / (who + ".key")).string();
    return s;
  }

  std::filesystem::path dir_;
  KeyAndCert ca_ = MakeCert("cluster-ca", nullptr, 1, /*is_ca=*/true);
  KeyAndCert server_ = MakeCert("coordinator", &ca_, 10, /*is_ca=*/false);
  KeyAndCert client_ = MakeCert("worker", &ca_, 11, /*is_ca=*/false);
  KeyAndCert other_ca_ = MakeCert("other-ca", nullptr, 2, /*is_ca=*/true);
  KeyAndCert stranger_ = MakeCert("stranger", &other_ca_, 20, /*is_ca=*/false);
  KeyAndCert expired_ = MakeCert("old-worker", &ca_, 12, /*is_ca=*/false, -7200, -3600);
};

std::unique_ptr<KvStoreServer> StartStore(KvStoreSecurity security) {
  auto server = KvStoreServer::Start("127.0.0.1", 0, std::move(security));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

absl::StatusOr<std::unique_ptr<KvStoreClient>> ConnectTo(const KvStoreServer& server, const KvStoreSecurity& s) {
  return KvStoreClient::Connect("127.0.0.1", server.port(), absl::Seconds(5), s, absl::Seconds(5));
}

// A member can use the store; the key it set is there.
void ExpectMemberWorks(const KvStoreServer& server, const KvStoreSecurity& s) {
  auto client = ConnectTo(server, s);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("group/rank0", "10.0.0.1:1234").ok());
  auto value = (*client)->Get("group/rank0");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "10.0.0.1:1234");
}

TEST(KvStoreAuthTest, JoinSecretAdmitsMembersOnly) {
  KvStoreSecurity store_security;
  store_security.join_secret = kSecret;
  auto server = StartStore(store_security);
  ASSERT_NE(server, nullptr);
  ExpectMemberWorks(*server, store_security);
  const size_t keys = server->num_keys();

  ::testing::internal::CaptureStderr();
  for (const std::string& guess : {std::string(), std::string("the-cluster-secreT"), std::string(kSecret) + "x"}) {
    KvStoreSecurity rogue;
    rogue.join_secret = guess;
    auto client = ConnectTo(*server, rogue);
    ASSERT_FALSE(client.ok()) << "secret '" << guess << "' was accepted";
    EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied) << client.status();
    EXPECT_TRUE(absl::StrContains(client.status().message(), "join secret")) << client.status();
  }
  // A client that skips the handshake and writes a request at once gets nothing stored.
  {
    auto fd = comm_internal::ConnectTcp("127.0.0.1", server->port(), absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(fd.ok());
    std::string req;
    comm_internal::AppendU8(req, comm_internal::kKvSet);
    req.append(64, 'x');  // Taken as its nonce and MAC: wrong.
    ASSERT_EQ(::send(fd->get(), req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    char buf[64];
    ssize_t n = 0;
    do {
      n = ::recv(fd->get(), buf, sizeof(buf), 0);  // Greeting, then kKvDenied, then the close.
    } while (n > 0);
  }
  absl::SleepFor(absl::Milliseconds(100));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server->num_keys(), keys);
  EXPECT_TRUE(absl::StrContains(log, "rendezvous-store: refused a connection")) << log;
  EXPECT_TRUE(absl::StrContains(log, "peer=127.0.0.1:")) << log;
  EXPECT_TRUE(absl::StrContains(log, "wrong join secret")) << log;
  EXPECT_FALSE(absl::StrContains(log, kSecret)) << "the secret must never be logged";
}

TEST(KvStoreAuthTest, ClientRefusesAStoreWithoutTheSecret) {
  KvStoreSecurity impostor;
  impostor.join_secret = "not-the-cluster's";
  auto server = StartStore(impostor);
  ASSERT_NE(server, nullptr);
  KvStoreSecurity member;
  member.join_secret = kSecret;
  auto client = ConnectTo(*server, member);
  ASSERT_FALSE(client.ok());
  // The store refuses the member's proof first; either way nothing is published to it.
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied) << client.status();
  EXPECT_EQ(server->num_keys(), 0u);
}

TEST(KvStoreAuthTest, MutualTlsAdmitsCertifiedMembersOnly) {
  Pki pki;
  auto server = StartStore(pki.Store());
  ASSERT_NE(server, nullptr);
  ExpectMemberWorks(*server, pki.Member());
  const size_t keys = server->num_keys();

  ::testing::internal::CaptureStderr();
  // Plaintext, even with the right secret.
  KvStoreSecurity plaintext;
  plaintext.join_secret = kSecret;
  auto no_tls = ConnectTo(*server, plaintext);
  EXPECT_FALSE(no_tls.ok());
  // A certificate from another CA, and an expired one from the right CA.
  auto stranger = ConnectTo(*server, pki.Stranger());
  EXPECT_FALSE(stranger.ok());
  auto expired = ConnectTo(*server, pki.Expired());
  EXPECT_FALSE(expired.ok());
  // The right certificate without the secret.
  KvStoreSecurity no_secret = pki.Member();
  no_secret.join_secret = "";
  auto secretless = ConnectTo(*server, no_secret);
  ASSERT_FALSE(secretless.ok());
  EXPECT_EQ(secretless.status().code(), absl::StatusCode::kPermissionDenied) << secretless.status();
  absl::SleepFor(absl::Milliseconds(200));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server->num_keys(), keys);
  EXPECT_TRUE(absl::StrContains(log, "no mutual TLS")) << log;
  EXPECT_TRUE(absl::StrContains(log, "peer=127.0.0.1:")) << log;
  EXPECT_TRUE(absl::StrContains(log, "wrong join secret")) << log;
  // Every refusal was logged: three TLS failures and the secretless one.
  size_t refusals = 0;
  for (size_t at = log.find("refused a connection"); at != std::string::npos;
       at = log.find("refused a connection", at + 1)) {
    ++refusals;
  }
  EXPECT_EQ(refusals, 4u) << log;
}

TEST(KvStoreAuthTest, MemberVerifiesTheStoreCertificateAndName) {
  Pki pki;
  auto server = StartStore(pki.Store());
  ASSERT_NE(server, nullptr);
  // A client trusting another CA refuses the real store.
  auto distrusting = ConnectTo(*server, pki.OtherCaClient());
  ASSERT_FALSE(distrusting.ok());
  EXPECT_TRUE(absl::StrContains(distrusting.status().message(), "TLS")) << distrusting.status();
  // The store's certificate names 127.0.0.1 and localhost, not this.
  KvStoreSecurity wrong_name = pki.Member();
  wrong_name.server_name = "coordinator.example";
  auto misnamed = ConnectTo(*server, wrong_name);
  ASSERT_FALSE(misnamed.ok());
  EXPECT_TRUE(absl::StrContains(misnamed.status().message(), "coordinator.example")) << misnamed.status();
  // The override to a name it does carry works, as does dialling "localhost".
  KvStoreSecurity right_name = pki.Member();
  right_name.server_name = "localhost";
  ExpectMemberWorks(*server, right_name);
  auto by_name = KvStoreClient::Connect("localhost", server->port(), absl::Seconds(5), pki.Member());
  EXPECT_TRUE(by_name.ok()) << by_name.status();
}

TEST(KvStoreAuthTest, SilentPeersDoNotBlockMembers) {
  Pki pki;
  auto server = StartStore(pki.Store());
  ASSERT_NE(server, nullptr);
  // Connections that never start TLS hold a handshake slot each until they time out;
  // members still get through beside them.
  std::vector<comm_internal::UniqueFd> idle;
  for (int i = 0; i < 8; ++i) {
    auto fd = comm_internal::ConnectTcp("127.0.0.1", server->port(), absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(fd.ok());
    idle.push_back(std::move(*fd));
  }
  ExpectMemberWorks(*server, pki.Member());
}

}  // namespace
}  // namespace tessera
