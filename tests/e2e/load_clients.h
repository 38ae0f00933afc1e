// Steady client load for the fault tests (chaos: killed processes; netfault: broken links):
// clients that retry UNAVAILABLE, count every attempt and flag any that outlives its
// deadline, plus the checks that the cluster serves again and gave every block back.
#ifndef TESSERA_TESTS_E2E_LOAD_CLIENTS_H_
#define TESSERA_TESTS_E2E_LOAD_CLIENTS_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/generation.grpc.pb.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"

namespace tessera::testing {

using LoadClock = std::chrono::steady_clock;

inline double Seconds(LoadClock::duration d) { return std::chrono::duration<double>(d).count(); }

inline std::string StatusName(grpc::StatusCode code) {
  static const std::map<int, std::string> names = {
      {0, "OK"}, {1, "CANCELLED"}, {2, "UNKNOWN"}, {3, "INVALID_ARGUMENT"}, {4, "DEADLINE_EXCEEDED"},
      {5, "NOT_FOUND"}, {8, "RESOURCE_EXHAUSTED"}, {9, "FAILED_PRECONDITION"}, {10, "ABORTED"},
      {13, "INTERNAL"}, {14, "UNAVAILABLE"}};
  auto it = names.find(static_cast<int>(code));
  return it == names.end() ? absl::StrCat("CODE_", static_cast<int>(code)) : it->second;
}

// A client channel that reconnects quickly to a coordinator that comes back.
inline std::shared_ptr<grpc::Channel> ClientChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

struct LoadOptions {
  std::chrono::seconds attempt_deadline{10};
  std::chrono::seconds request_budget{60};  // A logical request's retries.
  int max_new_tokens = 12;
};

struct LoadFigures {
  std::mutex mu;
  int64_t requests = 0;       // Logical requests started.
  int64_t completed = 0;      // Ended OK (perhaps after retries).
  int64_t lost = 0;           // Never OK within the request budget, or a non-retried failure.
  int64_t attempts = 0;
  int64_t late_attempts = 0;  // Ended after their deadline (plus slack): a hang.
  std::map<std::string, int64_t> attempt_statuses;
  double worst_attempt_s = 0;
};

// Sends greedy requests one after another until `stop`, each retried on UNAVAILABLE
// within the request budget; anything else, or a wrong token count, is a lost request.
inline void ClientLoop(const std::string& address, const LoadOptions& options, std::atomic<bool>* stop,
                       LoadFigures* figures, int seed) {
  auto channel = ClientChannel(address);
  auto stub = v1::Generation::NewStub(channel);
  std::minstd_rand rng(seed);
  while (!*stop) {
    v1::GenerateRequest request =
        GreedyIds({1, static_cast<int32_t>(20 + rng() % 200), 51}, options.max_new_tokens);
    const auto started = LoadClock::now();
    bool ok = false;
    bool lost = false;
    while (LoadClock::now() - started < options.request_budget) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + options.attempt_deadline);
      v1::GenerateResponse response;
      const auto attempt_start = LoadClock::now();
      grpc::Status s = stub->Generate(&ctx, request, &response);
      const double took = Seconds(LoadClock::now() - attempt_start);
      {
        std::lock_guard<std::mutex> lock(figures->mu);
        ++figures->attempts;
        ++figures->attempt_statuses[StatusName(s.error_code())];
        figures->worst_attempt_s = std::max(figures->worst_attempt_s, took);
        if (took > Seconds(options.attempt_deadline) + 2.0) ++figures->late_attempts;
      }
      if (s.ok()) {
        ok = response.token_ids_size() == options.max_new_tokens;
        lost = !ok;
        break;
      }
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE) {
        lost = true;  // Only UNAVAILABLE is retried.
        std::fprintf(stderr, "load client: %s: %s\n", StatusName(s.error_code()).c_str(),
                     s.error_message().c_str());
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::lock_guard<std::mutex> lock(figures->mu);
    ++figures->requests;
    if (ok) ++figures->completed;
    if (lost || !ok) ++figures->lost;
  }
}

// Every replica reports ready.
inline bool Serving(const std::string& address, int replicas) {
  auto stub = v1::Generation::NewStub(ClientChannel(address));
  grpc::ClientContext info_ctx;
  info_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::ModelInfo info;
  if (!stub->GetModelInfo(&info_ctx, v1::GetModelInfoRequest(), &info).ok()) return false;
  return static_cast<int>(info.ready_replicas()) == replicas;
}

// Polls until every replica reports ready; false when `timeout` passes first.
inline bool WaitServing(const std::string& address, int replicas, std::chrono::milliseconds timeout) {
  const auto deadline = LoadClock::now() + timeout;
  while (LoadClock::now() < deadline) {
    if (Serving(address, replicas)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Polls until every replica is healthy with nothing running or waiting and every KV block
// free (no leak), or `timeout` passes. `info` gets the last answer.
inline bool WaitDrained(Cluster& cluster, int replicas, std::chrono::milliseconds timeout,
                        absl::StatusOr<v1::ModelInfo>* info) {
  const auto deadline = LoadClock::now() + timeout;
  while (true) {
    *info = cluster.ModelInfo();
    bool drained = info->ok() && (*info)->replica_info_size() == replicas;
    for (int i = 0; drained && i < (*info)->replica_info_size(); ++i) {
      const auto& r = (*info)->replica_info(i);
      drained = r.healthy() && r.running() == 0 && r.waiting() == 0 && r.free_blocks() == r.total_blocks();
    }
    if (drained) return true;
    if (LoadClock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "";
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_E2E_LOAD_CLIENTS_H_
