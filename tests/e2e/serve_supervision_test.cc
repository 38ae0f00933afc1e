// `tessera serve` supervises its children: a killed worker is logged and restarted and its
// replica serves again; a killed coordinator ends serve with an error that says why; a
// killed serve takes its children with it and leaves no file behind (its secrets never
// touch a disk); the coordinator's limit flags pass through.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One process as /proc shows it; the start time tells a reused pid apart.
struct ProcessId {
  pid_t pid = 0;
  unsigned long long start_time = 0;
};

// The fields of /proc/<pid>/stat after the command name (which may hold spaces):
// [0] state, [1] ppid, ... [19] starttime. Empty when the process is gone.
std::vector<std::string> StatFields(pid_t pid) {
  const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// Whether the process still runs: one of its threads is not yet a zombie (a process whose
// threads are all zombies waits only for init to reap it, holding no port and no file; its
// main thread alone turns zombie while the others still tear down).
bool Alive(const ProcessId& p) {
  const std::vector<std::string> f = StatFields(p.pid);
  unsigned long long start = 0;
  if (f.size() <= 19 || !absl::SimpleAtoi(f[19], &start) || start != p.start_time) return false;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", p.pid, "/task"), ec)) {
    const std::string state = ReadAll(task.path() / "stat");
    const size_t close = state.rfind(')');
    if (close != std::string::npos && close + 2 < state.size() && state[close + 2] != 'Z' && state[close + 2] != 'X') {
      return true;
    }
  }
  return false;
}

// The live children of `parent`, found by scanning /proc for their ppid.
std::vector<ProcessId> ChildrenOf(pid_t parent) {
  std::vector<ProcessId> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::vector<std::string> f = StatFields(pid);
    pid_t ppid = 0;
    ProcessId p{pid, 0};
    if (f.size() > 19 && absl::SimpleAtoi(f[1], &ppid) && ppid == parent && absl::SimpleAtoi(f[19], &p.start_time) &&
        Alive(p)) {
      out.push_back(p);
    }
  }
  return out;
}

// The child of `parent` whose command line mentions `binary` ("tessera-worker"); pid 0 if none.
pid_t ChildRunning(pid_t parent, const std::string& binary) {
  for (const ProcessId& p : ChildrenOf(parent)) {
    if (absl::StrContains(ReadAll(absl::StrCat("/proc/", p.pid, "/cmdline")), binary)) return p.pid;
  }
  return 0;
}

std::set<std::string> Entries(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) out.insert(entry.path().filename().string());
  return out;
}

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) absl::StrAppend(&out, out.empty() ? "" : ", ", n);
  return out.empty() ? "(none)" : out;
}

struct Ports {
  int api = 0, cluster = 0, metrics = 0;
};

// Three free ports; the metrics port's successor (worker 0's metrics port) is free too.
Ports PickPorts() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    int hold[4] = {-1, -1, -1, -1};
    Ports p{PickFreePort(&hold[0]), PickFreePort(&hold[1]), PickFreePort(&hold[2])};
    for (int fd : hold) {
      if (fd >= 0) ::close(fd);
    }
    const int next = p.metrics + 1;
    if (p.api != 0 && p.cluster != 0 && p.metrics != 0 && next != p.api && next != p.cluster && !Accepts(next)) {
      return p;
    }
  }
  return {};
}

// `tessera serve` with its own TMPDIR, stdout and stderr to a log. Killed (and its children
// with it) when the test ends, however it ends.
class Serve {
 public:
  Serve(const Ports& ports, const std::vector<std::string>& extra_flags, const std::filesystem::path& dir)
      : log_(dir / "serve.log"), tmpdir_(dir / "tmp") {
    std::filesystem::create_directories(tmpdir_);
    std::vector<std::string> args = {(BinaryDir() / "tessera").string(),
                                     "serve",
                                     "--model",
                                     StoriesModelDir().string(),
                                     "--tp",
                                     "1",
                                     "--replicas",
                                     "1",
                                     "--port",
                                     absl::StrCat(ports.api),
                                     "--cluster-port",
                                     absl::StrCat(ports.cluster),
                                     "--metrics-port",
                                     absl::StrCat(ports.metrics),
                                     "--http-port",
                                     "0",
                                     "--threads",
                                     "1",
                                     "--kv-memory-mb",
                                     "16"};
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    pid_ = SpawnLogged(args, log_, {absl::StrCat("TMPDIR=", tmpdir_.string())});
  }
  ~Serve() {
    if (pid_ > 0 && !exit_status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Serve(const Serve&) = delete;
  Serve& operator=(const Serve&) = delete;

  pid_t pid() const { return pid_; }
  const std::filesystem::path& tmpdir() const { return tmpdir_; }
  std::string Log() const { return ReadAll(log_); }

  // Its wait status once it has exited within `timeout`; nullopt while it runs.
  std::optional<int> WaitExit(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!exit_status_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
        break;
      }
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return exit_status_;
  }
  bool running() { return !WaitExit(milliseconds(0)); }

 private:
  std::filesystem::path log_;
  std::filesystem::path tmpdir_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

std::unique_ptr<v1::Generation::Stub> Connect(int port, std::shared_ptr<grpc::ChannelCredentials> credentials,
                                              Serve& serve) {
  // Only once it listens: a channel whose first attempts are refused backs off for seconds.
  const auto deadline = Clock::now() + seconds(60);
  while (!Accepts(port) && serve.running() && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(20));
  return v1::Generation::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), credentials));
}

int ReadyReplicas(v1::Generation::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(seconds(2)));
  v1::ModelInfo info;
  return stub.GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok() ? static_cast<int>(info.ready_replicas())
                                                                         : -1;
}

// Whether a Generate succeeds and the replica counts as ready, before `deadline`.
bool ServesBy(v1::Generation::Stub& stub, Serve& serve, Clock::time_point deadline) {
  while (Clock::now() < deadline && serve.running()) {
    if (RunUnary(stub, GreedyText("Once upon a time", 4), seconds(3)).status.ok() && ReadyReplicas(stub) == 1) {
      return true;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return false;
}

TEST(ServeSupervisionTest, KilledWorkerIsLoggedAndRestartedAndItsReplicaServesAgain) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Ports ports = PickPorts();
  ASSERT_NE(ports.api, 0);
  Serve serve(ports, {"--insecure", "--drain-timeout-seconds", "5"}, ScratchDir("serve"));
  auto stub = Connect(ports.api, grpc::InsecureChannelCredentials(), serve);
  ASSERT_TRUE(ServesBy(*stub, serve, Clock::now() + seconds(120))) << serve.Log();
  const pid_t victim = ChildRunning(serve.pid(), "tessera-worker");
  ASSERT_NE(victim, 0) << serve.Log();

  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed = Clock::now();
  const std::string death = absl::StrCat("worker 0 (pid ", victim, ") died (killed by SIGKILL)");
  bool logged = false, replaced = false, serves = false;
  while (Clock::now() - killed < seconds(10) && !(logged && replaced && serves)) {
    logged = absl::StrContains(serve.Log(), death);
    const pid_t worker = ChildRunning(serve.pid(), "tessera-worker");
    replaced = worker != 0 && worker != victim;
    if (!replaced) {
      std::this_thread::sleep_for(milliseconds(50));
      continue;
    }
    serves = ServesBy(*stub, serve, std::min(Clock::now() + seconds(1), killed + seconds(10)));
  }
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_TRUE(logged) << "no line '" << death << "' in\n" << serve.Log();
  EXPECT_TRUE(replaced) << "no new worker process\n" << serve.Log();
  EXPECT_TRUE(serves) << "the replica did not serve again within 10 s\n" << serve.Log();
  EXPECT_LE(took, 10.0);
  EXPECT_TRUE(absl::StrContains(serve.Log(), "restarted worker 0")) << serve.Log();

  // An ordinary stop still drains and exits 0.
  stub.reset();
  ASSERT_EQ(::kill(serve.pid(), SIGTERM), 0);
  const std::optional<int> status = serve.WaitExit(seconds(30));
  ASSERT_TRUE(status.has_value()) << "serve did not stop on SIGTERM\n" << serve.Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << serve.Log();
}

TEST(ServeSupervisionTest, KilledServeTakesItsChildrenAndLeavesNoFileBehind) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Ports ports = PickPorts();
  ASSERT_NE(ports.api, 0);
  const auto dir = ScratchDir("serve");
  const std::filesystem::path ca_file = dir / "api-ca.pem";  // Outside serve's TMPDIR.
  // The default security: TLS on the APIs, mutual TLS and a join secret in the cluster.
  Serve serve(ports, {"--api-ca-out", ca_file.string()}, dir);
  const std::set<std::string> before = Entries(serve.tmpdir());
  const auto ca_deadline = Clock::now() + seconds(30);
  while (!(std::filesystem::exists(ca_file) && std::filesystem::file_size(ca_file) > 0) && serve.running() &&
         Clock::now() < ca_deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(ca_file)) << serve.Log();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadAll(ca_file);
  auto stub = Connect(ports.api, grpc::SslCredentials(ssl), serve);
  ASSERT_TRUE(ServesBy(*stub, serve, Clock::now() + seconds(120))) << serve.Log();
  stub.reset();
  const std::vector<ProcessId> children = ChildrenOf(serve.pid());
  ASSERT_EQ(children.size(), 2u) << "expected the coordinator and one worker\n" << serve.Log();

  ASSERT_EQ(::kill(serve.pid(), SIGKILL), 0);
  ASSERT_TRUE(serve.WaitExit(seconds(5)).has_value());
  const auto deadline = Clock::now() + seconds(5);
  auto any_alive = [&] {
    for (const ProcessId& p : children) {
      if (Alive(p)) return true;
    }
    return false;
  };
  const std::vector<int> serve_ports = {ports.api, ports.cluster, ports.metrics, ports.metrics + 1};
  auto any_port_open = [&] {
    for (const int port : serve_ports) {
      if (Accepts(port)) return true;
    }
    return false;
  };
  while ((any_alive() || any_port_open()) && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(50));
  for (const ProcessId& p : children) {
    EXPECT_FALSE(Alive(p)) << "pid " << p.pid << " (" << ReadAll(absl::StrCat("/proc/", p.pid, "/cmdline"))
                           << ") outlived serve by 5 s";
  }
  for (const int port : serve_ports) {
    EXPECT_FALSE(Accepts(port)) << "port " << port << " still accepts 5 s after serve died";
  }
  const std::set<std::string> after = Entries(serve.tmpdir());
  EXPECT_EQ(after, before) << "serve's TMPDIR held " << Join(before) << " before and " << Join(after)
                           << " after it was killed\n"
                           << serve.Log();
}

TEST(ServeSupervisionTest, KilledCoordinatorEndsServeWithAnErrorThatSaysWhy) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Ports ports = PickPorts();
  ASSERT_NE(ports.api, 0);
  Serve serve(ports, {"--insecure", "--drain-timeout-seconds", "5"}, ScratchDir("serve"));
  auto stub = Connect(ports.api, grpc::InsecureChannelCredentials(), serve);
  ASSERT_TRUE(ServesBy(*stub, serve, Clock::now() + seconds(120))) << serve.Log();
  stub.reset();
  const pid_t coordinator = ChildRunning(serve.pid(), "tessera-coordinator");
  ASSERT_NE(coordinator, 0) << serve.Log();
  const std::vector<ProcessId> children = ChildrenOf(serve.pid());

  ASSERT_EQ(::kill(coordinator, SIGKILL), 0);
  const std::optional<int> status = serve.WaitExit(seconds(10));
  ASSERT_TRUE(status.has_value()) << "serve still runs 10 s after its coordinator died\n" << serve.Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << *status << "\n" << serve.Log();
  const std::string log = serve.Log();
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("the coordinator (pid ", coordinator, ") died (killed by SIGKILL)")))
      << log;
  for (const ProcessId& p : children) EXPECT_FALSE(Alive(p)) << "pid " << p.pid << " outlived serve\n" << log;
}

// A share of memory the workers cannot work with is a configuration error: the coordinator
// says so with the numbers and exits, and serve with it, instead of reloading the weights
// in a loop.
TEST(ServeSupervisionTest, ImpossibleGpuMemoryUtilizationStopsServeWithTheNumbers) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Ports ports = PickPorts();
  ASSERT_NE(ports.api, 0);
  // Far less than stories260K's weights on any host. The fixed KV budget Serve passes
  // would win over the share: 0 turns it off.
  Serve serve(ports, {"--insecure", "--kv-memory-mb", "0", "--gpu-memory-utilization", "0.000000001"},
              ScratchDir("serve"));
  const std::optional<int> status = serve.WaitExit(seconds(60));
  ASSERT_TRUE(status.has_value()) << "serve still runs 60 s after an impossible --gpu-memory-utilization\n"
                                  << serve.Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << *status << "\n" << serve.Log();
  const std::string log = serve.Log();
  for (const char* part : {"tessera-coordinator: forming replica 0 failed: rank 0 (",
                           "--gpu-memory-utilization 1e-09 gives this worker 0.00 GiB of the device's ",
                           " of weights and ", " activation reserve alone; one sequence of the full context (",
                           "it must be at least ", "exiting: the workers cannot serve with this configuration"}) {
    EXPECT_TRUE(absl::StrContains(log, part)) << "no '" << part << "' in\n" << log;
  }
  int formations = 0;
  for (size_t at = 0; (at = log.find("forming replica 0 from", at)) != std::string::npos; ++at) ++formations;
  EXPECT_EQ(formations, 1) << "a configuration error is not retried\n" << log;
}

TEST(ServeSupervisionTest, ForwardedQueueLimitRefusesOverflowWithResourceExhausted) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Ports ports = PickPorts();
  ASSERT_NE(ports.api, 0);
  Serve serve(ports,
              {"--insecure", "--max-num-seqs", "1", "--max-queued-requests", "64", "--drain-timeout-seconds", "5"},
              ScratchDir("serve"));
  auto stub = Connect(ports.api, grpc::InsecureChannelCredentials(), serve);
  ASSERT_TRUE(ServesBy(*stub, serve, Clock::now() + seconds(120))) << serve.Log();

  constexpr int kCalls = 200;
  constexpr int kTokens = 40;
  struct Call {
    grpc::ClientContext ctx;
    v1::GenerateResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GenerateResponse>> reader;
  };
  std::vector<Call> calls(kCalls);
  grpc::CompletionQueue cq;
  const v1::GenerateRequest request = GreedyText("Once upon a time", kTokens);
  for (int i = 0; i < kCalls; ++i) {
    calls[i].ctx.set_deadline(DeadlineIn(seconds(150)));
    calls[i].reader = stub->AsyncGenerate(&calls[i].ctx, request, &cq);
    calls[i].reader->Finish(&calls[i].response, &calls[i].status, &calls[i]);
  }
  for (int done = 0; done < kCalls; ++done) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
  }
  cq.Shutdown();
  int admitted = 0, refused = 0;
  for (const Call& c : calls) {
    if (c.status.ok()) {
      ++admitted;
      EXPECT_EQ(c.response.token_ids_size(), kTokens);
    } else if (c.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    } else {
      ADD_FAILURE() << "lost a request: " << c.status.error_code() << " " << c.status.error_message();
    }
  }
  EXPECT_GT(refused, 0) << "--max-queued-requests 64 did not reach the coordinator\n" << serve.Log();
  // One running and 64 waiting at the least.
  EXPECT_GE(admitted, 64);
  EXPECT_EQ(admitted + refused, kCalls);
}

TEST(ServeSupervisionTest, HelpListsTheForwardedLimitFlags) {
  const CommandResult help = RunCommand(TesseraBinary() + " serve --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"max-queued-requests", "max-queued-tokens", "max-concurrent-streams", "max-undelivered-tokens",
        "max-input-bytes", "max-pending-workers", "drain-timeout-seconds", "max-connections",
        "cluster-max-connections", "handshake-timeout-seconds", "header-timeout-seconds",
        "idle-timeout-seconds", "min-request-bytes-per-second", "fd-reserve", "max-inflight-input-bytes",
        "chat-special-tokens", "gpu-memory-utilization"}) {
    EXPECT_TRUE(absl::StrContains(help.output, absl::StrCat("  --", flag, " VALUE\n      The coordinator's --", flag)))
        << flag << " missing from\n"
        << help.output;
  }
  // A value that is no integer fails before anything starts.
  const CommandResult bad =
      RunCommand(TesseraBinary() + " serve --model /nonexistent --max-queued-requests lots 2>&1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad.output, "--max-queued-requests")) << bad.output;
}

}  // namespace
}  // namespace tessera::testing
