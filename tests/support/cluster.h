#ifndef TESSERA_TESTS_SUPPORT_CLUSTER_H_
#define TESSERA_TESTS_SUPPORT_CLUSTER_H_

// A local Tessera cluster for end-to-end tests: one tessera-coordinator and tp x replicas
// tessera-worker processes on 127.0.0.1, started directly (not through `tessera serve`)
// so a test can see and signal every process. The destructor stops them all: SIGTERM,
// then SIGKILL after a grace period; children also get SIGKILL if the test process dies
// (PR_SET_PDEATHSIG), so no test leaves servers behind.

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.grpc.pb.h"

namespace tessera::testing {

// The folder of the tessera, tessera-coordinator and tessera-worker binaries.
inline std::filesystem::path BinaryDir() { return std::filesystem::path(TESSERA_BINARY_DIR) / "bin"; }

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it for port 0).
// `keep_open` holds the socket so several calls return different ports; close it before use.
inline int PickFreePort(int* keep_open = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (keep_open != nullptr && port != 0) {
    *keep_open = fd;
  } else {
    ::close(fd);
  }
  return port;
}

// Whether something accepts TCP connections on host:port (an IPv4 address) right now.
inline bool Accepts(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return false;
  }
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}
inline bool Accepts(int port) { return Accepts("127.0.0.1", port); }

// A memory field of /proc/<pid>/status in bytes ("VmRSS", "RssAnon", "RssFile", "VmHWM"),
// 0 if unknown.
inline uint64_t ProcStatusBytes(pid_t pid, const std::string& field = "VmRSS") {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

struct ClusterOptions {
  std::filesystem::path model_dir;
  std::filesystem::path log_dir;  // Where each process's stdout + stderr go (required).
  int tp = 1;
  int replicas = 1;
  int threads = 1;          // Kernel threads per worker.
  int64_t kv_memory_mb = 0;  // Per worker; 0: the coordinator's default share of free memory.
  int max_num_seqs = 0;      // 0: the coordinator's default.
  std::vector<std::string> coordinator_flags;  // Extra flags, e.g. "--policy=priority".
  std::vector<std::string> worker_env;          // Extra "NAME=value" for the workers.
  std::vector<std::string> worker_flags;        // Extra flags for every worker, e.g. "--device=cuda".
  // Cluster-traffic security flags of the coordinator and of every worker: plaintext by
  // default (tests that are not about it); cluster_tls_test passes --cluster-ca etc.
  std::vector<std::string> cluster_security_flags = {"--insecure"};
  // Of the cluster's own channel (health, model info, api()); null: plaintext. Set with
  // --tls-cert in coordinator_flags.
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  std::chrono::seconds ready_timeout{180};     // Until every replica serves.
  // Every worker listens on a port fixed at launch, so Restart() brings it back at the
  // same address, as a restarted Kubernetes pod would.
  bool fixed_worker_ports = false;
  // Per worker in start order: {replica hint, rank hint}; empty: no replica hint and rank
  // hint w % tp. Sets the number of workers when not empty.
  std::vector<std::pair<int, int>> worker_hints;
  // RLIMIT_NOFILE (soft and hard) of the coordinator; 0: inherited. For tests of what a
  // flood of connections does to a process with few descriptors (`ulimit -n 1024`).
  int coordinator_fd_limit = 0;
  // Sent as `authorization: Bearer <api_key>` by ModelInfo() (readiness) when the
  // coordinator runs with --api-keys-file.
  std::string api_key;
  // The address the coordinator's ports bind to (public API, cluster port, metrics), and
  // per worker in start order the address it listens on and advertises to its peers
  // (empty: 127.0.0.1 for every one). The network-fault tests give each process its own.
  std::string coordinator_host = "127.0.0.1";
  std::vector<std::string> worker_hosts;
  // Argument prefixes that start the coordinator and, per worker in start order, each
  // worker, e.g. {"/usr/sbin/ip", "netns", "exec", name} (empty: run the binary directly).
  std::vector<std::string> coordinator_launcher;
  std::vector<std::vector<std::string>> worker_launchers;
};

class Cluster {
 public:
  struct Process {
    std::string name;
    pid_t pid = -1;
    std::filesystem::path log;
    bool reaped = false;
    int wait_status = 0;
    std::vector<std::string> args;  // What it was started with, for Restart().
    std::vector<std::string> env;
  };

  // Starts the processes and waits until health says SERVING and every replica is
  // ready. On failure everything started is stopped and the error carries the logs.
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(ClusterOptions options) {
    std::unique_ptr<Cluster> c(new Cluster(std::move(options)));
    if (absl::Status s = c->Launch(); !s.ok()) return s;
    if (absl::Status s = c->WaitReady(); !s.ok()) return s;
    return c;
  }

  ~Cluster() { Stop(); }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const std::string& address() const { return address_; }
  // The coordinator's /metrics, /healthz and /readyz HTTP port.
  int metrics_port() const { return metrics_port_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const {
    return options_.channel_credentials != nullptr ? options_.channel_credentials
                                                   : grpc::InsecureChannelCredentials();
  }
  v1::Generation::Stub& api() { return *api_; }
  const Process& coordinator() const { return processes_[0]; }
  // Worker w in start order (its current pid, log and flags).
  const Process& worker(size_t w) const { return processes_.at(w + 1); }
  // Workers in start order; worker w was given --rank-hint w % tp.
  std::vector<pid_t> worker_pids() const {
    std::vector<pid_t> pids;
    for (size_t i = 1; i < processes_.size(); ++i) pids.push_back(processes_[i].pid);
    return pids;
  }

  // Whether the process with this pid (one of ours) is still running.
  bool Running(pid_t pid) {
    for (Process& p : processes_) {
      if (p.pid != pid) continue;
      Reap(p, /*block=*/false);
      return !p.reaped;
    }
    return false;
  }

  // SIGKILL and reap (as a crashed or OOM-killed pod).
  void Kill(pid_t pid) {
    for (Process& p : processes_) {
      if (p.pid != pid || p.reaped) continue;
      ::kill(pid, SIGKILL);
      Reap(p, /*block=*/true);
    }
  }

  // Starts the process that had `pid` again with the same flags (and so the same ports);
  // its log continues. Returns the new pid. A restarted coordinator gets a fresh channel()
  // once it listens again.
  absl::StatusOr<pid_t> Restart(pid_t pid) {
    for (size_t i = 0; i < processes_.size(); ++i) {
      Process& p = processes_[i];
      if (p.pid != pid) continue;
      if (!p.reaped) Kill(pid);
      Process old = p;
      processes_.erase(processes_.begin() + static_cast<long>(i));
      if (absl::Status s = Spawn(old.name, old.args, old.env, /*append_log=*/true); !s.ok()) return s;
      Process fresh = std::move(processes_.back());
      processes_.pop_back();
      processes_.insert(processes_.begin() + static_cast<long>(i), std::move(fresh));
      if (i == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!(Accepts(options_.coordinator_host, port_) && Accepts(options_.coordinator_host, cluster_port_)) &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        channel_ = grpc::CreateChannel(address_, ChannelCredentials());
        api_ = v1::Generation::NewStub(channel_);
      }
      return processes_[i].pid;
    }
    return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
  }
  int cluster_port() const { return cluster_port_; }

  void Signal(pid_t pid, int sig) {
    for (Process& p : processes_) {
      if (p.pid == pid && !p.reaped) ::kill(pid, sig);
    }
  }

  // The default (overall) health status; UNKNOWN when the RPC fails.
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(const std::string& service = "") {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    if (!stub->Check(&ctx, req, &resp).ok()) return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  // Polls until Health() == want or the timeout passes.
  bool WaitForHealth(grpc::health::v1::HealthCheckResponse::ServingStatus want,
                     std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      if (Health() == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  absl::StatusOr<v1::ModelInfo> ModelInfo() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!options_.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.api_key);
    v1::ModelInfo info;
    grpc::Status s = api_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return info;
  }

  // The last `tail_bytes` of every process's log, for failure messages.
  std::string Logs(size_t tail_bytes = 3000) const {
    std::string out;
    for (const Process& p : processes_) {
      std::ifstream in(p.log, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > tail_bytes) text = "..." + text.substr(text.size() - tail_bytes);
      absl::StrAppend(&out, "----- ", p.name, " (pid ", p.pid, ", ", p.log.string(), ") -----\n", text,
                      text.empty() || text.back() == '\n' ? "" : "\n");
    }
    return out;
  }

  // SIGTERM to the coordinator, then the workers; SIGKILL whatever is left after the grace
  // period. Idempotent. The channel and api() are gone afterwards.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10)) {
    // The coordinator's server shutdown waits out its grace while a client connection is
    // open, so ours goes first.
    api_.reset();
    channel_.reset();
    for (Process& p : processes_) {
      if (p.pid > 0 && !p.reaped) ::kill(p.pid, SIGTERM);
    }
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + grace;
    bool second_signal_sent = false;
    for (Process& p : processes_) {
      while (p.pid > 0 && !p.reaped && std::chrono::steady_clock::now() < deadline) {
        Reap(p, /*block=*/false);
        if (p.reaped) break;
        // A second SIGTERM cuts the coordinator's drain of running requests short.
        if (!second_signal_sent && std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) {
          for (Process& q : processes_) {
            if (q.pid > 0 && !q.reaped) ::kill(q.pid, SIGTERM);
          }
          second_signal_sent = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      Reap(p, /*block=*/false);
      if (p.pid > 0 && !p.reaped) {
        std::fprintf(stderr, "cluster: %s (pid %d) ignored SIGTERM for %lld ms; killing it\n",
                     p.name.c_str(), p.pid, static_cast<long long>(grace.count()));
        ::kill(p.pid, SIGKILL);
        Reap(p, /*block=*/true);
      }
    }
  }

 private:
  explicit Cluster(ClusterOptions options) : options_(std::move(options)) {}

  absl::Status Launch() {
    if (options_.log_dir.empty()) return absl::InvalidArgumentError("ClusterOptions.log_dir is empty");
    std::filesystem::create_directories(options_.log_dir);
    int hold[3] = {-1, -1, -1};
    const int port = PickFreePort(&hold[0]);
    const int cluster_port = PickFreePort(&hold[1]);
    port_ = port;
    cluster_port_ = cluster_port;
    metrics_port_ = PickFreePort(&hold[2]);
    for (int fd : hold) {
      if (fd >= 0) ::close(fd);
    }
    if (port == 0 || cluster_port == 0 || metrics_port_ == 0) {
      return absl::InternalError("cannot find free TCP ports on 127.0.0.1");
    }
    const std::string& host = options_.coordinator_host;
    address_ = absl::StrCat(host, ":", port);

    std::vector<std::string> coordinator = options_.coordinator_launcher;
    coordinator.insert(coordinator.end(), {
        (BinaryDir() / "tessera-coordinator").string(), "--model", options_.model_dir.string(),
        "--host", host, "--cluster-host", host,
        "--port", absl::StrCat(port), "--cluster-port", absl::StrCat(cluster_port),
        "--tp", absl::StrCat(options_.tp), "--replicas", absl::StrCat(options_.replicas),
        "--metrics-port", absl::StrCat(metrics_port_)});
    if (options_.kv_memory_mb > 0) {
      coordinator.insert(coordinator.end(), {"--kv-memory-mb", absl::StrCat(options_.kv_memory_mb)});
    }
    if (options_.max_num_seqs > 0) {
      coordinator.insert(coordinator.end(), {"--max-num-seqs", absl::StrCat(options_.max_num_seqs)});
    }
    coordinator.insert(coordinator.end(), options_.cluster_security_flags.begin(),
                       options_.cluster_security_flags.end());
    coordinator.insert(coordinator.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
    if (absl::Status s = Spawn("coordinator", coordinator, {}); !s.ok()) return s;
    // Connect only once the coordinator listens: a gRPC channel whose first attempts are
    // refused backs off (1 s, 1.6 s, 2.56 s by default), which would add seconds to every
    // start, both to our health checks and to the workers' registration.
    const auto deadline = std::chrono::steady_clock::now() + options_.ready_timeout;
    while (!(Accepts(host, port) && Accepts(host, cluster_port))) {
      Reap(processes_[0], /*block=*/false);
      if (processes_[0].reaped) {
        return Failed(absl::StrCat("the coordinator exited early (", Describe(processes_[0].wait_status), ")"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Failed(absl::StrCat("the coordinator did not listen on ", port, " and ", cluster_port));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int num_workers = options_.worker_hints.empty() ? options_.tp * options_.replicas
                                                          : static_cast<int>(options_.worker_hints.size());
    for (int w = 0; w < num_workers; ++w) {
      const bool hinted = !options_.worker_hints.empty();
      std::vector<std::string> worker =
          w < static_cast<int>(options_.worker_launchers.size()) ? options_.worker_launchers[w]
                                                                 : std::vector<std::string>{};
      worker.insert(worker.end(), {
          (BinaryDir() / "tessera-worker").string(), "--coordinator",
          absl::StrCat(host, ":", cluster_port), "--threads", absl::StrCat(options_.threads),
          "--rank-hint", absl::StrCat(hinted ? options_.worker_hints[w].second : w % options_.tp)});
      if (hinted) worker.insert(worker.end(), {"--replica-hint", absl::StrCat(options_.worker_hints[w].first)});
      const std::string worker_host =
          w < static_cast<int>(options_.worker_hosts.size()) ? options_.worker_hosts[w] : "127.0.0.1";
      int worker_port = 0;
      if (options_.fixed_worker_ports) {
        worker_port = PickFreePort();
        if (worker_port == 0) return absl::InternalError("cannot find a free TCP port on 127.0.0.1");
      }
      if (options_.fixed_worker_ports || worker_host != "127.0.0.1") {
        worker.insert(worker.end(), {"--listen", absl::StrCat(worker_host, ":", worker_port),
                                     "--advertise-host", worker_host});
      }
      worker.insert(worker.end(), options_.cluster_security_flags.begin(), options_.cluster_security_flags.end());
      worker.insert(worker.end(), options_.worker_flags.begin(), options_.worker_flags.end());
      absl::Status s = Spawn(absl::StrCat("worker", w), worker, options_.worker_env);
      if (!s.ok()) return s;
    }
    channel_ = grpc::CreateChannel(address_, ChannelCredentials());
    api_ = v1::Generation::NewStub(channel_);
    return absl::OkStatus();
  }

  absl::Status WaitReady() {
    const auto deadline = std::chrono::steady_clock::now() + options_.ready_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (Process& p : processes_) {
        Reap(p, /*block=*/false);
        if (p.reaped) return Failed(absl::StrCat(p.name, " exited early (", Describe(p.wait_status), ")"));
      }
      if (Health() == grpc::health::v1::HealthCheckResponse::SERVING) {
        auto info = ModelInfo();
        if (info.ok() && static_cast<int>(info->ready_replicas()) == options_.replicas) return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return Failed(absl::StrCat("the cluster at ", address_, " (tp ", options_.tp, ", replicas ",
                               options_.replicas, ") was not SERVING with every replica ready after ",
                               options_.ready_timeout.count(), " s"));
  }

  absl::Status Failed(const std::string& what) {
    const std::string logs = Logs();
    Stop(std::chrono::seconds(2));
    return absl::UnavailableError(absl::StrCat(what, "\n", logs));
  }

  static std::string Describe(int status) {
    if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
    return absl::StrCat("status ", status);
  }

  void Reap(Process& p, bool block) {
    if (p.pid <= 0 || p.reaped) return;
    int status = 0;
    const pid_t r = ::waitpid(p.pid, &status, block ? 0 : WNOHANG);
    if (r == p.pid || (r < 0 && errno == ECHILD)) {
      p.reaped = true;
      p.wait_status = status;
    }
  }

  absl::Status Spawn(const std::string& name, const std::vector<std::string>& args,
                     const std::vector<std::string>& extra_env, bool append_log = false) {
    Process p;
    p.name = name;
    p.args = args;
    p.env = extra_env;
    p.log = options_.log_dir / (name + ".log");
    const int fd = ::open(p.log.c_str(), O_WRONLY | O_CREAT | (append_log ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", p.log.string()));
    // Everything the child needs is prepared before fork: only async-signal-safe calls after.
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
    env_storage.insert(env_storage.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    const rlim_t fd_limit = name == "coordinator" ? static_cast<rlim_t>(options_.coordinator_fd_limit) : 0;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      if (fd_limit > 0) {
        const rlimit rl{fd_limit, fd_limit};
        if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(125);
      }
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fd);
    if (pid < 0) return absl::InternalError(absl::StrCat("fork failed for ", args[0]));
    p.pid = pid;
    processes_.push_back(std::move(p));
    return absl::OkStatus();
  }

  ClusterOptions options_;
  std::vector<Process> processes_;  // [0] is the coordinator.
  std::string address_;
  int port_ = 0;
  int cluster_port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> api_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_CLUSTER_H_
