// Authentication end to end: API keys on the public gRPC and HTTP APIs (wrong, missing and
// right keys in one server run, rotation by rewriting the file) and the worker join secret.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/auth/secret.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/e2e/serving_util.h"

namespace tessera::testing {
namespace {

void WriteKeys(const std::filesystem::path& path, std::initializer_list<std::string> keys) {
  std::string text = "# test keys\n";
  for (const std::string& k : keys) absl::StrAppend(&text, "sha256:", auth::Sha256Hex(k), "\n");
  const auto tmp = path.string() + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << text;
  std::filesystem::rename(tmp, path);  // Atomic: the poller never sees half a file.
}

// One HTTP/1.0 request with an optional Authorization header; status and body.
HttpResponse HttpCall(int port, const std::string& method, const std::string& target, const std::string& body,
                      const std::string& authorization) {
  return HttpRequest(port, method, target, body, authorization, /*timeout_s=*/60);
}

grpc::Status Tokenize(v1::Generation::Stub& stub, const std::string& key) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
  if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
  v1::TokenizeRequest req;
  req.set_text("Once upon a time");
  v1::TokenizeResponse resp;
  return stub.Tokenize(&ctx, req, &resp);
}

grpc::Status Stream(v1::Generation::Stub& stub, const std::string& key, int* tokens) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
  if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
  auto reader = stub.GenerateStream(&ctx, GreedyText("Once upon a time", 4));
  v1::GenerateStreamResponse msg;
  *tokens = 0;
  while (reader->Read(&msg)) *tokens += msg.token_ids_size();
  return reader->Finish();
}

// One server-reflection call asking for the list of services (ServerReflectionRequest
// with list_services = "*", field 7, written by hand: gRPC does not install the reflection
// protos). `answers` gets every response's raw bytes.
grpc::Status ListServicesByReflection(const std::shared_ptr<grpc::Channel>& channel, const std::string& key,
                                      std::string* answers) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
  if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&] { return cq.Next(&tag, &ok) && ok; };
  call->StartCall(&cq);
  step();
  const std::string request("\x3a\x01*", 3);
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, &cq);
  step();
  call->WritesDone(&cq);
  step();
  answers->clear();
  for (;;) {
    grpc::ByteBuffer in;
    call->Read(&in, &cq);
    if (!step()) break;
    std::vector<grpc::Slice> slices;
    (void)in.Dump(&slices);
    for (const grpc::Slice& s : slices) answers->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  grpc::Status status;
  call->Finish(&status, &cq);
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

constexpr char kCompletion[] = R"({"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 4})";

TEST(ApiKeysTest, WrongAndMissingKeysRefusedRightKeyServedAndKeysRotate) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = ScratchDir("auth_keys");
  const auto keys = dir / "api-keys";
  WriteKeys(keys, {"key-one"});
  const int http_port = PickFreePort();
  ClusterOptions options;
  options.api_key = "key-one";
  options.coordinator_flags = {"--api-keys-file", keys.string(), "--http-port", absl::StrCat(http_port),
                               "--served-model-name", "stories260K"};
  auto cluster = StartStories(1, 1, options);
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(cluster->channel());

  // gRPC: no key and a wrong key refused, the right one served, on every method.
  EXPECT_EQ(Tokenize(*stub, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Tokenize(*stub, "key-two").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Tokenize(*stub, "key-one").ok());
  int tokens = 0;
  EXPECT_EQ(Stream(*stub, "", &tokens).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(tokens, 0);
  EXPECT_EQ(Stream(*stub, "nope", &tokens).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status streamed = Stream(*stub, "key-one", &tokens);
  EXPECT_TRUE(streamed.ok()) << streamed.error_message();
  EXPECT_EQ(tokens, 4);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    v1::GenerateResponse resp;
    EXPECT_EQ(stub->Generate(&ctx, GreedyText("Once", 2), &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(cluster->ModelInfo().ok());  // With the key (ClusterOptions::api_key).

  // Reflection describes the API, so it wants the key too; without one no answer names a
  // service. Health stays open for probes that cannot send a header.
  std::string answers;
  const grpc::Status no_key = ListServicesByReflection(cluster->channel(), "", &answers);
  EXPECT_EQ(no_key.error_code(), grpc::StatusCode::UNAUTHENTICATED) << no_key.error_message();
  EXPECT_FALSE(absl::StrContains(answers, "tessera")) << answers;
  EXPECT_EQ(ListServicesByReflection(cluster->channel(), "key-two", &answers).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(absl::StrContains(answers, "tessera")) << answers;
  const grpc::Status with_key = ListServicesByReflection(cluster->channel(), "key-one", &answers);
  EXPECT_TRUE(with_key.ok()) << with_key.error_message();
  EXPECT_TRUE(absl::StrContains(answers, "tessera.v1.Generation")) << answers;
  {
    auto health = grpc::health::v1::Health::NewStub(cluster->channel());
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status checked = health->Check(&ctx, req, &resp);
    EXPECT_TRUE(checked.ok()) << checked.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }

  // HTTP: 401 in OpenAI's shape without or with a wrong key; /health stays open.
  HttpResponse none = HttpCall(http_port, "POST", "/v1/completions", kCompletion, "");
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_TRUE(absl::StrContains(none.body, R"("code":"invalid_api_key")")) << none.body;
  EXPECT_TRUE(absl::StrContains(none.body, R"("type":"invalid_request_error")")) << none.body;
  EXPECT_EQ(HttpCall(http_port, "POST", "/v1/completions", kCompletion, "Bearer key-two").status, 401);
  EXPECT_EQ(HttpCall(http_port, "GET", "/v1/models", "", "").status, 401);
  EXPECT_EQ(HttpCall(http_port, "GET", "/health", "", "").status, 200);
  HttpResponse served = HttpCall(http_port, "POST", "/v1/completions", kCompletion, "Bearer key-one");
  EXPECT_EQ(served.status, 200) << served.body;

  // Refusals are counted by reason and never log the key.
  const HttpResponse metrics = HttpGet(cluster->metrics_port(), "/metrics");
  EXPECT_TRUE(absl::StrContains(metrics.body, R"(protocol="grpc",reason="unauthenticated")") ||
              absl::StrContains(metrics.body, R"(reason="unauthenticated")"))
      << metrics.body;
  EXPECT_FALSE(absl::StrContains(cluster->Logs(1 << 20), "key-two"));

  // Rotation: rewrite the file; within a few polls the old key stops and the new one works.
  WriteKeys(keys, {"key-three"});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Tokenize(*stub, "key-three").ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(Tokenize(*stub, "key-three").ok());
  EXPECT_EQ(Tokenize(*stub, "key-one").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(HttpCall(http_port, "POST", "/v1/completions", kCompletion, "Bearer key-three").status, 200);
  EXPECT_EQ(HttpCall(http_port, "POST", "/v1/completions", kCompletion, "Bearer key-one").status, 401);
  cluster->Stop();
}

TEST(ApiKeysTest, BadKeysFileIsAStartupErrorNamingTheLine) {
  const auto dir = ScratchDir("auth_bad_keys");
  const auto keys = dir / "api-keys";
  std::ofstream(keys) << "# ok\nmy-plain-key\n";
  const std::string command = absl::StrCat(TESSERA_BINARY_DIR, "/bin/tessera-coordinator --model ",
                                           StoriesModelDir().string(), " --port 0 --cluster-port 0 --metrics-port 0 --insecure",
                                           " --api-keys-file ", keys.string(), " > ", (dir / "out").string(),
                                           " 2>&1");
  TESSERA_REQUIRE_STORIES_MODEL();
  EXPECT_NE(std::system(command.c_str()), 0);
  std::ifstream in(dir / "out");
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(out, "line 2")) << out;
  EXPECT_FALSE(absl::StrContains(out, "my-plain-key")) << out;
}

// A worker process without the secret, or with a wrong one: refused and exits; the
// coordinator logs it with its address.
int RunRogueWorker(const Cluster& cluster, const std::filesystem::path& dir, const std::string& name,
                   const std::string& secret_flag) {
  const auto log = dir / (name + ".log");
  const std::string command =
      absl::StrCat("timeout 60 ", BinaryDir().string(), "/tessera-worker --coordinator 127.0.0.1:",
                   cluster.cluster_port(), " --insecure --threads 1 ", secret_flag, " > ", log.string(), " 2>&1");
  return std::system(command.c_str());
}

grpc::Status RegisterDirect(v1::Cluster::Stub& stub, const std::string& secret, const std::string& address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  if (!secret.empty()) ctx.AddMetadata(auth::kJoinSecretMetadataKey, secret);
  v1::RegisterWorkerRequest req;
  req.set_address(address);
  req.set_rank_hint(-1);
  req.set_replica_hint(-1);
  v1::RegisterWorkerResponse resp;
  return stub.RegisterWorker(&ctx, req, &resp);
}

TEST(JoinSecretTest, RogueWorkersRefusedPendingListBoundedClusterKeepsServing) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const auto dir = ScratchDir("auth_join");
  const auto secret_file = dir / "join-secret";
  std::ofstream(secret_file) << "the-real-secret\n";
  const auto wrong_file = dir / "wrong-secret";
  std::ofstream(wrong_file) << "a-guess\n";
  ClusterOptions options;
  options.coordinator_flags = {"--join-secret-file", secret_file.string(), "--max-pending-workers", "2"};
  options.worker_flags = {"--join-secret-file", secret_file.string()};
  auto cluster = StartStories(1, 1, options);
  ASSERT_NE(cluster, nullptr);
  auto stub = v1::Generation::NewStub(cluster->channel());

  // Real worker processes: refused, and they stop instead of retrying forever.
  EXPECT_NE(RunRogueWorker(*cluster, dir, "no-secret", ""), 0);
  EXPECT_NE(RunRogueWorker(*cluster, dir, "wrong-secret", "--join-secret-file " + wrong_file.string()), 0);
  std::ifstream rogue_log(dir / "no-secret.log");
  const std::string rogue((std::istreambuf_iterator<char>(rogue_log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(rogue, "join secret")) << rogue;

  auto cluster_stub = v1::Cluster::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", cluster->cluster_port()), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(RegisterDirect(*cluster_stub, "", "10.0.0.1:1").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RegisterDirect(*cluster_stub, "the-real-secre", "10.0.0.1:1").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const std::string logs = cluster->Logs(1 << 20);
  EXPECT_TRUE(absl::StrContains(logs, "bad join secret")) << logs;
  EXPECT_TRUE(absl::StrContains(logs, "10.0.0.1:1")) << logs;
  EXPECT_FALSE(absl::StrContains(logs, "a-guess")) << logs;

  // The pending list is bounded: with the secret, two waiting workers fit, a third does not.
  EXPECT_TRUE(RegisterDirect(*cluster_stub, "the-real-secret", "10.0.0.2:1").ok());
  EXPECT_TRUE(RegisterDirect(*cluster_stub, "the-real-secret", "10.0.0.3:1").ok());
  EXPECT_EQ(RegisterDirect(*cluster_stub, "the-real-secret", "10.0.0.4:1").error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Throughout, the real replica serves.
  const UnaryResult served = RunUnary(*stub, GreedyText("Once upon a time", 4));
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.ids().size(), 4u);
  auto info = cluster->ModelInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(static_cast<int>(info->ready_replicas()), 1);
  cluster->Stop();
}

}  // namespace
}  // namespace tessera::testing
