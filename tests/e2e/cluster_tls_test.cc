// Mutual TLS on cluster traffic (--cluster-ca, --cluster-cert, --cluster-key): a
// certified cluster serves; workers without a certificate, with one from another CA or
// with an expired one cannot register; the workers' own ports and the rendezvous store
// refuse uncertified callers; plaintext needs --insecure by name; and `tessera serve`
// runs its cluster with mutual TLS and its gRPC and HTTP APIs with TLS by default.

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rendezvous/kv_store_client.h"
#include "common/tls/cert_issuer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/ssl_credentials.h"
#include "tests/support/test_certs.h"

namespace tessera::testing {
namespace {

// The cluster's CA and one member certificate (coordinator and workers share it: it names
// 127.0.0.1, where all of them listen), plus what rogues hold.
struct ClusterPki {
  explicit ClusterPki(const std::filesystem::path& dir) : dir(dir) {
    WriteFile(dir / "ca.crt", ca.cert_pem);
    for (const auto& [name, kc] : {std::pair<const char*, const KeyAndCert*>{"member", &member},
                                   {"stranger", &stranger},
                                   {"expired", &expired}}) {
      WriteFile(dir / (std::string(name) + ".crt"), kc->cert_pem);
      WriteFile(dir / (std::string(name) + ".key"), kc->key_pem);
    }
  }
  std::string Path(const std::string& name) const { return (dir / name).string(); }
  std::vector<std::string> Flags(const std::string& who) const {
    return {"--cluster-ca", Path("ca.crt"), "--cluster-cert", Path(who + ".crt"), "--cluster-key", Path(who + ".key")};
  }
  KvStoreSecurity Store(const std::string& who, const std::string& secret) const {
    KvStoreSecurity s;
    s.join_secret = secret;
    s.ca_file = Path("ca.crt");
    s.cert_file = Path(who + ".crt");
    s.key_file = Path(who + ".key");
    return s;
  }
  std::shared_ptr<grpc::ChannelCredentials> Credentials(const KeyAndCert* client) const {
    return TrustingCredentials(ca, client);
  }

  std::filesystem::path dir;
  KeyAndCert ca = MakeCert("tessera-cluster-ca", nullptr, 1, /*is_ca=*/true);
  KeyAndCert member = MakeCert("tessera-member", &ca, 100, /*is_ca=*/false);
  KeyAndCert other_ca = MakeCert("another-ca", nullptr, 2, /*is_ca=*/true);
  KeyAndCert stranger = MakeCert("stranger", &other_ca, 200, /*is_ca=*/false);
  KeyAndCert expired = MakeCert("retired-member", &ca, 101, /*is_ca=*/false, -7200, -3600);
};

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A worker's listening port, from its log line "serving on 127.0.0.1:PORT (mutual TLS)".
int WorkerPort(const std::filesystem::path& log) {
  std::smatch m;
  const std::string text = ReadAll(log);
  if (!std::regex_search(text, m, std::regex(R"(serving on 127\.0\.0\.1:(\d+))"))) return 0;
  return std::stoi(m[1]);
}

grpc::Status CheckHealth(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A new connection, a new handshake.
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(address, credentials, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp);
}

grpc::Status RegisterPlaintext(int cluster_port) {
  auto stub = v1::Cluster::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", cluster_port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  v1::RegisterWorkerRequest req;
  req.set_address("10.9.9.9:1");
  req.set_rank_hint(-1);
  req.set_replica_hint(-1);
  v1::RegisterWorkerResponse resp;
  return stub->RegisterWorker(&ctx, req, &resp);
}

TEST(ClusterTlsTest, CertifiedClusterServesRoguesAreRefusedEverywhere) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = ScratchDir("cluster_tls");
  const ClusterPki pki(dir);
  std::ofstream(dir / "join-secret") << "cluster-tls-secret\n";
  const int store_port = PickFreePort();
  ASSERT_NE(store_port, 0);
  ClusterOptions options;
  options.cluster_security_flags = pki.Flags("member");
  // Gloo here (its ranks exchange addresses through the store); the name-override test
  // below takes the default, shm on one host.
  options.coordinator_flags = {"--join-secret-file", (dir / "join-secret").string(), "--store-port",
                               absl::StrCat(store_port), "--communicator=gloo"};
  options.worker_flags = {"--join-secret-file", (dir / "join-secret").string()};
  // tp 2: the ranks meet through the rendezvous store, so it runs under TLS and the secret.
  auto cluster = StartStories(2, 1, options);
  ASSERT_NE(cluster, nullptr);
  const UnaryResult served = RunUnary(cluster->api(), GreedyText("Once upon a time", 6));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message() << "\n" << cluster->Logs();
  EXPECT_EQ(served.ids().size(), 6u);
  EXPECT_TRUE(absl::StrContains(cluster->Logs(1 << 20), "(mutual TLS)")) << cluster->Logs();

  // Rogue workers, all at once, each for a few seconds of retrying: plaintext, a
  // certificate from another CA (trusting the real one), an expired certificate.
  const std::string worker = (BinaryDir() / "tessera-worker").string();
  const std::string common = absl::StrCat(" --coordinator 127.0.0.1:", cluster->cluster_port(),
                                          " --threads 1 --join-secret-file ", (dir / "join-secret").string());
  const std::string stranger = absl::StrCat(" --cluster-ca ", pki.Path("ca.crt"), " --cluster-cert ",
                                            pki.Path("stranger.crt"), " --cluster-key ", pki.Path("stranger.key"));
  const std::string expired = absl::StrCat(" --cluster-ca ", pki.Path("ca.crt"), " --cluster-cert ",
                                           pki.Path("expired.crt"), " --cluster-key ", pki.Path("expired.key"));
  const std::string rogues = absl::StrCat(
      "(timeout 6 ", worker, common, " --insecure > ", (dir / "rogue-plaintext.log").string(), " 2>&1 & ",
      "timeout 6 ", worker, common, stranger, " > ", (dir / "rogue-stranger.log").string(), " 2>&1 & ",
      "timeout 6 ", worker, common, expired, " > ", (dir / "rogue-expired.log").string(), " 2>&1 & wait)");
  RunCommand(rogues);
  for (const char* name : {"rogue-plaintext.log", "rogue-stranger.log", "rogue-expired.log"}) {
    const std::string log = ReadAll(dir / name);
    EXPECT_TRUE(absl::StrContains(log, "cannot register")) << name << ":\n" << log;
    EXPECT_FALSE(absl::StrContains(log, "registered with")) << name << ":\n" << log;
  }
  // The rogues with certificates were told at startup why peers would refuse them.
  EXPECT_TRUE(absl::StrContains(ReadAll(dir / "rogue-expired.log"), "certificate has expired"));
  EXPECT_TRUE(absl::StrContains(ReadAll(dir / "rogue-stranger.log"), "unable to get local issuer"));
  EXPECT_EQ(RegisterPlaintext(cluster->cluster_port()).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pending_workers(), 0u) << "a rogue registered";
  // gRPC's TLS layer logs each refused handshake on the coordinator.
  const std::string coordinator_log = ReadAll(cluster->coordinator().log);
  EXPECT_GE(Count(coordinator_log, "Handshake failed"), 3u) << coordinator_log;

  // A worker's own port serves only callers with a cluster certificate.
  const int worker_port = WorkerPort(cluster->worker(0).log);
  ASSERT_NE(worker_port, 0) << cluster->Logs();
  const std::string worker_address = absl::StrCat("127.0.0.1:", worker_port);
  EXPECT_FALSE(CheckHealth(worker_address, grpc::InsecureChannelCredentials()).ok());
  EXPECT_FALSE(CheckHealth(worker_address, pki.Credentials(nullptr)).ok()) << "served a caller without a certificate";
  EXPECT_FALSE(CheckHealth(worker_address, pki.Credentials(&pki.stranger)).ok());
  EXPECT_TRUE(CheckHealth(worker_address, pki.Credentials(&pki.member)).ok());

  // The rendezvous store: no certificate, a stranger's, an expired one, or the right one
  // without the join secret.
  KvStoreSecurity plaintext;
  plaintext.join_secret = "cluster-tls-secret";
  const std::vector<std::pair<std::string, KvStoreSecurity>> store_rogues = {
      {"plaintext", plaintext},
      {"stranger", pki.Store("stranger", "cluster-tls-secret")},
      {"expired", pki.Store("expired", "cluster-tls-secret")},
      {"no secret", pki.Store("member", "")},
  };
  for (const auto& [name, security] : store_rogues) {
    auto client = KvStoreClient::Connect("127.0.0.1", store_port, absl::Seconds(5), security, absl::Seconds(3));
    EXPECT_FALSE(client.ok()) << name << " reached the store";
  }
  auto member = KvStoreClient::Connect("127.0.0.1", store_port, absl::Seconds(5),
                                       pki.Store("member", "cluster-tls-secret"), absl::Seconds(3));
  EXPECT_TRUE(member.ok()) << member.status();
  const std::string after = ReadAll(cluster->coordinator().log);
  EXPECT_EQ(Count(after, "rendezvous-store: refused a connection"), 4u) << after;
  EXPECT_TRUE(absl::StrContains(after, "peer=127.0.0.1:")) << after;

  // Throughout, the certified replica keeps serving.
  const UnaryResult again = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  cluster->Stop();
}

// Certificates that name neither 127.0.0.1 nor localhost, only a cluster name: with
// --cluster-server-name every peer checks that name instead of the dialled address and the
// cluster (tp 2: gRPC both ways and the store) works; a worker that checks the address it
// dialled refuses the coordinator.
TEST(ClusterTlsTest, ServerNameOverrideIsCheckedInsteadOfTheAddress) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = ScratchDir("cluster_tls_name");
  const KeyAndCert ca = MakeCert("tessera-cluster-ca", nullptr, 1, /*is_ca=*/true);
  tls::CertRequest request;
  request.common_name = "tessera-member";
  request.dns_names = {"tessera-cluster.internal"};
  auto member = tls::IssueCert(request, &ca);
  ASSERT_TRUE(member.ok()) << member.status();
  WriteFile(dir / "ca.crt", ca.cert_pem);
  WriteFile(dir / "named.crt", member->cert_pem);
  WriteFile(dir / "named.key", member->key_pem);
  const std::vector<std::string> files = {"--cluster-ca", (dir / "ca.crt").string(), "--cluster-cert",
                                          (dir / "named.crt").string(), "--cluster-key", (dir / "named.key").string()};
  ClusterOptions options;
  options.cluster_security_flags = files;
  options.cluster_security_flags.push_back("--cluster-server-name=tessera-cluster.internal");
  auto cluster = StartStories(2, 1, options);
  ASSERT_NE(cluster, nullptr);
  const UnaryResult served = RunUnary(cluster->api(), GreedyText("Once upon a time", 4));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message() << "\n" << cluster->Logs();

  std::string command = absl::StrCat("timeout 4 ", (BinaryDir() / "tessera-worker").string(),
                                     " --coordinator 127.0.0.1:", cluster->cluster_port(), " --threads 1");
  for (const std::string& f : files) absl::StrAppend(&command, " ", f);
  const CommandResult unnamed = RunCommand(command + " 2>&1");
  EXPECT_TRUE(absl::StrContains(unnamed.output, "cannot register")) << unnamed.output;
  EXPECT_FALSE(absl::StrContains(unnamed.output, "registered with")) << unnamed.output;
  cluster->Stop();
}

TEST(ClusterTlsTest, PlaintextNeedsInsecureByName) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const CommandResult coordinator =
      RunCommand(absl::StrCat((BinaryDir() / "tessera-coordinator").string(), " --model ", StoriesModelDir().string(),
                              " --port 0 --cluster-port 0 --metrics-port 0 2>&1"));
  EXPECT_NE(coordinator.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(coordinator.output, "--cluster-ca, --cluster-cert and --cluster-key"))
      << coordinator.output;
  EXPECT_TRUE(absl::StrContains(coordinator.output, "--insecure")) << coordinator.output;
  const CommandResult worker = RunCommand(
      absl::StrCat((BinaryDir() / "tessera-worker").string(), " --coordinator 127.0.0.1:1 --threads 1 2>&1"));
  EXPECT_NE(worker.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(worker.output, "--cluster-ca, --cluster-cert and --cluster-key")) << worker.output;
  // Half a set of files, or both modes at once, is refused too.
  const CommandResult half = RunCommand(absl::StrCat((BinaryDir() / "tessera-worker").string(),
                                                     " --coordinator 127.0.0.1:1 --cluster-ca /dev/null 2>&1"));
  EXPECT_NE(half.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(half.output, "--cluster-cert is missing")) << half.output;
  // A key that is not the certificate's is a startup error naming the flag.
  const auto dir = ScratchDir("cluster_tls_flags");
  const KeyAndCert ca = MakeCert("ca", nullptr, 1, /*is_ca=*/true);
  const KeyAndCert a = MakeCert("a", &ca, 2, /*is_ca=*/false);
  const KeyAndCert b = MakeCert("b", &ca, 3, /*is_ca=*/false);
  WriteFile(dir / "ca.crt", ca.cert_pem);
  WriteFile(dir / "a.crt", a.cert_pem);
  WriteFile(dir / "b.key", b.key_pem);
  const CommandResult mismatch = RunCommand(absl::StrCat(
      (BinaryDir() / "tessera-worker").string(), " --coordinator 127.0.0.1:1 --cluster-ca ", (dir / "ca.crt").string(),
      " --cluster-cert ", (dir / "a.crt").string(), " --cluster-key ", (dir / "b.key").string(), " 2>&1"));
  EXPECT_NE(mismatch.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(mismatch.output, "--cluster-key")) << mismatch.output;
    // --insecure starts, and says loudly what it means.
  const CommandResult insecure = RunCommand(absl::StrCat(
      "timeout 2 ", (BinaryDir() / "tessera-worker").string(), " --coordinator 127.0.0.1:1 --threads 1 --insecure 2>&1"));
  EXPECT_TRUE(absl::StrContains(insecure.output, "WARNING")) << insecure.output;
  EXPECT_TRUE(absl::StrContains(insecure.output, "plaintext")) << insecure.output;
}

TEST(ClusterTlsTest, ServeRunsItsClusterWithMutualTlsAndItsApisWithTlsByDefault) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = ScratchDir("cluster_tls_serve");
  int hold[3] = {-1, -1, -1};
  const int port = PickFreePort(&hold[0]);
  const int cluster_port = PickFreePort(&hold[1]);
  const int http_port = PickFreePort(&hold[2]);
  for (int fd : hold) ::close(fd);
  ASSERT_TRUE(port != 0 && cluster_port != 0 && http_port != 0);
  const std::filesystem::path ca_file = dir / "api-ca.pem";
  Child serve({(BinaryDir() / "tessera").string(), "serve", "--model", StoriesModelDir().string(), "--port",
               absl::StrCat(port), "--cluster-port", absl::StrCat(cluster_port), "--http-port",
               absl::StrCat(http_port), "--metrics-port", "0", "--threads", "1", "--kv-memory-mb", "16",
               "--api-ca-out", ca_file.string()},
              dir / "serve.log");
  const auto ca_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(std::filesystem::exists(ca_file) && std::filesystem::file_size(ca_file) > 0) &&
         std::chrono::steady_clock::now() < ca_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(ca_file)) << serve.Log();
  std::ifstream ca_in(ca_file);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca_in), std::istreambuf_iterator<char>());
  auto stub = v1::Generation::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl)));
  UnaryResult served;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    served = RunUnary(*stub, GreedyText("Once upon a time", 4), std::chrono::seconds(5));
  } while (!served.status.ok() && serve.running() && std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(served.status.ok()) << served.status.error_message() << "\n" << serve.Log();

  const std::string log = serve.Log();
  // The keys live in memfds the children inherit, never in a file (serve_supervision_test
  // checks that nothing is left behind even when serve is SIGKILLed).
  EXPECT_TRUE(absl::StrContains(log, "held in memory only, never on disk")) << log;
  EXPECT_TRUE(absl::StrContains(log, "workers register on 127.0.0.1:" + std::to_string(cluster_port) +
                                         " (mutual TLS)"))
      << log;
  // The cluster port speaks only TLS with a client certificate.
  EXPECT_EQ(RegisterPlaintext(cluster_port).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The public gRPC API refuses plaintext; the HTTP API speaks HTTPS under the same CA.
  auto plaintext = v1::Generation::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(RunUnary(*plaintext, GreedyText("Once upon a time", 2), std::chrono::seconds(5)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const CommandResult https = RunCommand(absl::StrCat("curl -sS --max-time 10 --cacert ", ca_file.string(),
                                                      " https://127.0.0.1:", http_port, "/v1/models"));
  EXPECT_EQ(https.exit_code, 0) << https.output;
  EXPECT_TRUE(absl::StrContains(https.output, "\"object\"")) << https.output;
  EXPECT_NE(RunCommand(absl::StrCat("curl -sS --max-time 10 http://127.0.0.1:", http_port, "/v1/models")).exit_code,
            0)
      << "the HTTP API answered plaintext";

  serve.Terminate(std::chrono::seconds(20));
}

}  // namespace
}  // namespace tessera::testing
