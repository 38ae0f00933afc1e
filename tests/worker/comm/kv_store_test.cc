#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/rendezvous/kv_store_client.h"
#include "common/rendezvous/kv_store_server.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::unique_ptr<KvStoreServer> StartServer() {
  auto server = KvStoreServer::Start("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<KvStoreClient> ConnectTo(const KvStoreServer& server) {
  auto client = KvStoreClient::Connect("127.0.0.1", server.port(), absl::Seconds(5));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

TEST(KvStoreTest, SetGetBinarySafeValues) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  auto client = ConnectTo(*server);
  ASSERT_NE(client, nullptr);
  std::string value("a\0b\xff\n", 5);
  ASSERT_TRUE(client->Set("k1", value).ok());
  auto got = client->Get("k1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(client->Set("k1", "").ok());  // Overwrite with an empty value.
  EXPECT_EQ(client->Get("k1").value(), "");
  std::string big(3 << 20, 'z');
  ASSERT_TRUE(client->Set("big", big).ok());
  EXPECT_EQ(client->Get("big").value(), big);
}

TEST(KvStoreTest, GetOfMissingKeyIsNotFound) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectTo(*server);
  ASSERT_NE(client, nullptr);
  auto got = client->Get("nope");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("nope"), std::string::npos);
}

TEST(KvStoreTest, WaitReturnsOnceAnotherClientSetsTheKeys) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto waiter = ConnectTo(*server);
  auto setter = ConnectTo(*server);
  ASSERT_NE(waiter, nullptr);
  ASSERT_NE(setter, nullptr);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(setter->Set("a", "1").ok());
    EXPECT_TRUE(setter->Set("b", "2").ok());
  });
  absl::Status s = waiter->Wait({"a", "b"}, absl::Seconds(10));
  t.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(waiter->Get("b").value(), "2");
}

TEST(KvStoreTest, WaitTimesOutNamingTheKeys) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectTo(*server);
  ASSERT_NE(client, nullptr);
  absl::Status s = client->Wait({"never"}, absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("never"), std::string::npos) << s;
  // The connection stays usable after a timed-out wait.
  EXPECT_TRUE(client->Set("x", "y").ok());
}

TEST(KvStoreTest, EraseKeysWithPrefix) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectTo(*server);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Set("g1/0", "a").ok());
  ASSERT_TRUE(client->Set("g1/1", "b").ok());
  ASSERT_TRUE(client->Set("g2/0", "c").ok());
  EXPECT_EQ(server->EraseKeysWithPrefix("g1/"), 2u);
  EXPECT_EQ(server->num_keys(), 1u);
  EXPECT_EQ(client->Get("g1/0").status().code(), absl::StatusCode::kNotFound);
}

TEST(KvStoreTest, StoppingTheServerWakesWaitersWithAnError) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ConnectTo(*server);
  ASSERT_NE(client, nullptr);
  absl::Status s;
  std::thread t([&] { s = client->Wait({"k"}, absl::Seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.reset();
  t.join();
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(client->Set("k", "v").ok());
}

TEST(KvStoreTest, ConnectToNothingFailsAfterTimeout) {
  int port = 0;
  {
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    port = server->port();
  }
  auto client = KvStoreClient::Connect("127.0.0.1", port, absl::Milliseconds(100));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
}

}  // namespace
}  // namespace tessera
