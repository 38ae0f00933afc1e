// The front door under attack, as a hostile client with no API key would try it: floods
// of idle and slowloris connections on a process with few descriptors, and TLS
// connections that never handshake. Each case reproduces a finding of an outside probe
// (the gRPC listener wedged for good by EMFILE; ~100 KB per TLS connection never given
// back) and asserts what a user relies on: gRPC Generate keeps answering at its usual
// latency, readiness stays truthful, memory comes back.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/sanitizers.h"
#include "tests/support/ssl_credentials.h"
#include "tests/support/test_certs.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// The test itself holds thousands of sockets.
void RaiseOwnFdLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Opens `n` TCP connections to 127.0.0.1:port that send nothing. Connections the server
// sheds are closed by it later; they stay open here, as an attacker's would.
std::vector<int> OpenConnections(int port, int n) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// Of these connections, how many the server has closed (a read sees end of stream or a
// reset).
int NumClosedByServer(const std::vector<int>& fds) {
  int closed = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ++closed;
  }
  return closed;
}

// A value of the coordinator's /metrics: the sample whose line starts with `prefix`.
double MetricValue(int metrics_port, const std::string& prefix) {
  const HttpResponse r = HttpRequest(metrics_port, "GET", "/metrics");
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
  }
  return -1;
}

// One short Generate over the cluster's channel; its latency, or -1 when it failed.
double TimedGenerate(Cluster& cluster) {
  const auto start = Clock::now();
  const UnaryResult r = RunUnary(cluster.api(), GreedyText("Once upon a time", 8), seconds(10));
  if (!r.status.ok()) {
    std::fprintf(stderr, "Generate failed: %d %s\n", r.status.error_code(), r.status.error_message().c_str());
    return -1;
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(FrontDoorAttackTest, ConnectionFloodOnHttpLeavesGrpcAnsweringWithFewDescriptors) {
  TESSERA_REQUIRE_STORIES_MODEL();
  RaiseOwnFdLimit();
  const int http_port = PickFreePort();
  ClusterOptions options;
  options.coordinator_fd_limit = 1024;  // As `ulimit -n 1024`.
  options.coordinator_flags = {absl::StrCat("--http-port=", http_port), "--header-timeout-seconds=4"};
  auto cluster = StartStories(/*tp=*/1, 1, options);
  ASSERT_NE(cluster, nullptr);
  ASSERT_TRUE(WaitFor([&] { return HttpRequest(http_port, "GET", "/health").status == 200; }, seconds(10)));

  std::vector<double> usual;
  for (int i = 0; i < 5; ++i) usual.push_back(TimedGenerate(*cluster));
  ASSERT_GT(*std::min_element(usual.begin(), usual.end()), 0);
  const double usual_max = *std::max_element(usual.begin(), usual.end());
  // Usual latency: the slowest of five calls before the flood, with room for a loaded
  // 2-core machine.
  const double bound = std::max(1.0, 5 * usual_max);

  // 1,100 idle connections (more than the process's descriptors) and 200 slowloris ones
  // that trickle a header byte every second.
  std::vector<int> idle = OpenConnections(http_port, 1100);
  std::vector<int> slow = OpenConnections(http_port, 200);
  std::printf("opened %zu idle and %zu slowloris connections to the HTTP port\n", idle.size(), slow.size());
  EXPECT_GE(idle.size() + slow.size(), 1000u);
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const std::string header = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    for (int fd : slow) ::send(fd, header.data(), header.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    while (!stop.load()) {
      for (int fd : slow) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(seconds(1));
    }
  });

  // During the flood (12 s, past the header deadline): Generate at its usual latency, and
  // readiness says ready only while every listener accepts.
  int during = 0, failed = 0, not_ready = 0;
  double worst = 0;
  const auto flood_end = Clock::now() + seconds(12);
  while (Clock::now() < flood_end) {
    const double t = TimedGenerate(*cluster);
    ++during;
    if (t < 0) {
      ++failed;
    } else {
      worst = std::max(worst, t);
    }
    const HttpResponse ready = HttpRequest(cluster->metrics_port(), "GET", "/readyz");
    if (ready.status != 200) ++not_ready;
    if (ready.status == 200) {
      EXPECT_EQ(MetricValue(cluster->metrics_port(), "tessera_listener_accepting{listener=\"grpc\"}"), 1);
    }
    std::this_thread::sleep_for(milliseconds(300));
  }
  const int closed_by_server = NumClosedByServer(idle) + NumClosedByServer(slow);
  const double refused = MetricValue(cluster->metrics_port(), "tessera_listener_refused_connections_total{listener=\"http\"}");
  std::printf("during the flood: %d Generate calls, %d failed, worst %.3f s (usual max %.3f s, bound %.3f s); "
              "readiness not ready %d times; %d of the flood's connections closed by the server, %.0f refused at "
              "accept\n",
              during, failed, worst, usual_max, bound, not_ready, closed_by_server, refused);
  EXPECT_EQ(failed, 0);
  EXPECT_LT(worst, bound);
  EXPECT_EQ(not_ready, 0);
  EXPECT_GT(refused, 0);
  // Past the header deadline every connection that sent no complete request is closed,
  // slowloris ones included.
  EXPECT_GE(closed_by_server, static_cast<int>(idle.size() + slow.size()) * 9 / 10);

  stop = true;
  trickler.join();
  CloseAll(idle);
  CloseAll(slow);
  // After the flood: gRPC as before, HTTP answers again.
  for (int i = 0; i < 3; ++i) {
    const double t = TimedGenerate(*cluster);
    EXPECT_GT(t, 0);
    EXPECT_LT(t, bound);
  }
  EXPECT_TRUE(WaitFor([&] { return HttpRequest(http_port, "GET", "/health").status == 200; }, seconds(10)));
  EXPECT_EQ(HttpRequest(cluster->metrics_port(), "GET", "/readyz").status, 200);
}

TEST(FrontDoorAttackTest, TlsConnectionsThatNeverHandshakeGiveTheirMemoryBack) {
  TESSERA_REQUIRE_STORIES_MODEL();
  RaiseOwnFdLimit();
  const KeyAndCert ca = MakeCert("tessera-test-ca", nullptr, 1, /*is_ca=*/true);
  const KeyAndCert server = MakeCert("tessera-server-1", &ca, 101, /*is_ca=*/false);
  const std::filesystem::path dir = ScratchDir("front_door_attack_tls");
  std::filesystem::create_directories(dir);
  WriteFile(dir / "tls.key", server.key_pem);
  WriteFile(dir / "tls.crt", server.cert_pem);
  const int http_port = PickFreePort();
  ClusterOptions options;
  options.coordinator_flags = {absl::StrCat("--http-port=", http_port), "--tls-cert", (dir / "tls.crt").string(),
                               "--tls-key", (dir / "tls.key").string(), "--handshake-timeout-seconds=5"};
  options.channel_credentials = TrustingCredentials(ca, nullptr);
  auto cluster = StartStories(/*tp=*/1, 1, options);
  ASSERT_NE(cluster, nullptr);
  ASSERT_GT(TimedGenerate(*cluster), 0);
  const pid_t pid = cluster->coordinator().pid;
  std::this_thread::sleep_for(seconds(1));
  const uint64_t start_rss = ProcStatusBytes(pid);

  for (const auto& [name, port] : {std::pair<const char*, int>{"HTTPS", http_port},
                                   {"gRPC TLS", std::stoi(cluster->address().substr(cluster->address().rfind(':') + 1))}}) {
    std::vector<int> conns = OpenConnections(port, 10000);
    std::this_thread::sleep_for(seconds(2));  // Let the server accept (or shed) them all.
    const uint64_t held_rss = ProcStatusBytes(pid);
    EXPECT_GT(TimedGenerate(*cluster), 0) << "while " << conns.size() << " " << name << " connections were open";
    CloseAll(conns);
    // Settled: close to where it started (the trim runs within about a second of the last
    // close); the bound asserted is the 200 MB.
    uint64_t after_rss = 0;
    WaitFor(
        [&] {
          after_rss = ProcStatusBytes(pid);
          return after_rss < start_rss + (50u << 20);
        },
        seconds(15));
    const bool back = after_rss < start_rss + (200u << 20);
    std::printf("%s: 10,000 connections that never handshake: RSS %.0f MB at start, %.0f MB while open, %.0f MB "
                "after they closed\n",
                name, start_rss / 1e6, held_rss / 1e6, after_rss / 1e6);
    // ASan's allocator quarantines what is freed: the bound measures ASan there.
    if (!kUnderAddressSanitizer) EXPECT_TRUE(back) << name << ": RSS " << after_rss / 1e6 << " MB after the connections closed, " << start_rss / 1e6
                      << " MB at start";
  }
  EXPECT_GT(TimedGenerate(*cluster), 0);
}

}  // namespace
}  // namespace tessera::testing
