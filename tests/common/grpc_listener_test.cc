// GrpcListener (common/net/grpc_listener.h) in front of a real in-process gRPC server: the
// connection cap, survival of descriptor exhaustion (gRPC 1.51's own listener stops for
// good on EMFILE), and a listening socket that fails and is reopened.
#include "common/net/grpc_listener.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/fd_budget.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/sanitizers.h"

namespace tessera::net {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

template <typename Pred>
bool WaitFor(Pred pred, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return pred();
}

// Answers every method with OK and an empty message.
class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { Finish(grpc::Status::OK); }
      void OnDone() override { delete this; }
    };
    return new Reactor();
  }
};

struct Served {
  EchoService service;
  std::unique_ptr<GrpcListener> listener;
  std::unique_ptr<grpc::Server> server;
  ~Served() {
    if (listener != nullptr) listener->Stop();
    if (server != nullptr) server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<Served> Serve(int64_t max_connections) {
  auto s = std::make_unique<Served>();
  auto listener = GrpcListener::Bind({"grpc", "127.0.0.1", 0, max_connections});
  if (!listener.ok()) return nullptr;
  s->listener = *std::move(listener);
  grpc::ServerBuilder builder;
  s->listener->AddTo(builder, grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&s->service);
  s->server = builder.BuildAndStart();
  if (s->server == nullptr) return nullptr;
  s->listener->Start();
  return s;
}

// A call over a new connection (its own subchannel pool).
bool HealthCheck(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  grpc::Slice payload("ping");
  grpc::ByteBuffer request(&payload, 1), response;
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&ctx, "/test.Echo/Call", grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status.ok();
}

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) <= 0;
}

TEST(GrpcListenerTest, ServesAndCapsConnections) {
  auto s = Serve(/*max_connections=*/4);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(HealthCheck(s->listener->port()));
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) fds.push_back(Connect(s->listener->port()));
  // Over the cap, connections are closed at accept; those within it stay open.
  EXPECT_TRUE(WaitFor([&] { return s->listener->stats().refused.load() >= 6; }, seconds(5)))
      << s->listener->stats().refused.load();
  std::this_thread::sleep_for(milliseconds(200));
  int closed = 0;
  for (int fd : fds) closed += ClosedByPeer(fd);
  EXPECT_GE(closed, 6);
  EXPECT_EQ(s->listener->stats().open_connections.load(), 4);
  for (int fd : fds) ::close(fd);
  // gRPC closes the connections its peers closed; the listener counts them out and serves
  // again.
  EXPECT_TRUE(WaitFor([&] { return HealthCheck(s->listener->port()); }, seconds(10)));
}

TEST(GrpcListenerTest, AFailedListeningSocketIsReopened) {
  auto s = Serve(64);
  ASSERT_NE(s, nullptr);
  const int port = s->listener->port();
  ASSERT_TRUE(HealthCheck(port));
  // shutdown() on a listening socket makes accept() fail with EINVAL: the listener must not
  // end there (gRPC's own would, leaving the port dead behind a healthy process).
  const int broken = s->listener->listen_fd_for_testing();
  ::shutdown(broken, SHUT_RDWR);
  // Reopened at once (accepting is off only in between, too briefly to observe here).
  EXPECT_TRUE(WaitFor([&] { return s->listener->stats().refused.load() == 0 && HealthCheck(port); }, seconds(5)));
  EXPECT_TRUE(WaitFor([&] { return s->listener->stats().accepting.load(); }, seconds(10)));
  EXPECT_EQ(s->listener->port(), port);
  EXPECT_TRUE(WaitFor([&] { return HealthCheck(port); }, seconds(10)));
}

TEST(GrpcListenerTest, OutOfDescriptorsShedsConnectionsAndKeepsListening) {
  // Under ASan + UBSan, UBSan reported an invalid vptr in a shared_ptr while this whole
  // process (gRPC client and server) was out of descriptors; no symbolized stack could be
  // had (the symbolizer cannot start then). Not yet understood: see issue 32's note. The
  // coordinator's flood under `ulimit -n 1024` (front_door_attack_test) runs there too.
  if (tessera::testing::kUnderAddressSanitizer) GTEST_SKIP() << "the process-wide EMFILE case runs in the other builds";
  auto s = Serve(100000);
  ASSERT_NE(s, nullptr);
  const int port = s->listener->port();
  ASSERT_TRUE(HealthCheck(port));
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Room for ~40 more descriptors in this process: the connections below exhaust them
  // (each takes one here and one in the listener).
  int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(probe + 40);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    const int fd = Connect(port);
    if (fd >= 0) fds.push_back(fd);
    std::this_thread::sleep_for(milliseconds(2));
  }
  std::this_thread::sleep_for(milliseconds(500));
  const int64_t refused = s->listener->stats().refused.load();
  for (int fd : fds) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_GT(refused, 0) << "the process never ran out of descriptors";
  EXPECT_TRUE(s->listener->stats().accepting.load());
  EXPECT_TRUE(WaitFor([&] { return HealthCheck(port); }, seconds(10)));
}

TEST(FdBudgetTest, ReserveIsTheTopOfTheLimit) {
  const FdBudget budget = ConfigureFdBudget(100);
  EXPECT_GE(budget.limit, 200);
  EXPECT_EQ(budget.reserve, 100);
  EXPECT_EQ(budget.connections(), budget.limit - 100);
  EXPECT_FALSE(InFdReserve(budget.limit - 101));
  EXPECT_TRUE(InFdReserve(budget.limit - 100));
}

}  // namespace
}  // namespace tessera::net
