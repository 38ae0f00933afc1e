#include "benchmarks/serving/stream_swarm.h"

#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "tessera/v1/generation.grpc.pb.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Counts ends; Wait returns once every call has ended.
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    absl::MutexLock lock(&mu_);
    --left_;
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](int* left) { return *left <= 0; }, &left_));
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
};

class StreamCall final : public grpc::ClientReadReactor<v1::GenerateStreamResponse> {
 public:
  StreamCall(v1::Generation::Stub* stub, const v1::GenerateRequest& request,
             std::chrono::system_clock::time_point deadline, StreamOutcome* outcome, Countdown* countdown)
      : request_(request), outcome_(outcome), countdown_(countdown) {
    context_.set_deadline(deadline);
    start_ = Clock::now();
    stub->async()->GenerateStream(&context_, &request_, this);
    StartRead(&message_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status.
    if (message_.token_ids_size() > 0 && outcome_->ttft_s < 0) outcome_->ttft_s = Since(start_);
    outcome_->tokens += message_.token_ids_size();
    last_had_finish_ = message_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override {
    outcome_->code = status.error_code();
    outcome_->message = status.error_message();
    outcome_->total_s = Since(start_);
    outcome_->finished_ok = status.ok() && last_had_finish_;
    Countdown* countdown = countdown_;
    delete this;
    countdown->Done();
  }

 private:
  grpc::ClientContext context_;
  const v1::GenerateRequest request_;
  v1::GenerateStreamResponse message_;
  StreamOutcome* const outcome_;
  Countdown* const countdown_;
  Clock::time_point start_;
  bool last_had_finish_ = false;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

SwarmResult RunSwarm(const SwarmOptions& options) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Generation::Stub>> stubs;
  for (int i = 0; i < std::max(1, options.num_channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Generation::NewStub(channels.back()));
  }
  v1::GenerateRequest request;
  request.set_text(options.prompt);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_new_tokens(options.max_new_tokens);
  request.mutable_stopping()->set_ignore_eos(true);

  SwarmResult result;
  result.outcomes.resize(options.num_streams);
  Countdown countdown(options.num_streams);
  const auto start = Clock::now();
  const auto deadline = std::chrono::system_clock::now() + options.deadline;
  for (int i = 0; i < options.num_streams; ++i) {
    request.set_request_id(absl::StrCat("swarm-", i));
    new StreamCall(stubs[i % stubs.size()].get(), request, deadline, &result.outcomes[i], &countdown);
  }
  countdown.Wait();
  result.wall_s = Since(start);
  return result;
}

ProcessSample SampleProcess(int pid) {
  ProcessSample s;
  for (absl::string_view line : absl::StrSplit(ReadAll(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, "Threads:")) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &s.threads)) s.threads = -1;
    } else if (absl::ConsumePrefix(&line, "VmRSS:")) {
      line = absl::StripAsciiWhitespace(line);
      int64_t kb = 0;
      if (absl::ConsumeSuffix(&line, "kB") && absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) {
        s.rss_bytes = kb * 1024;
      }
    }
  }
  return s;
}

}  // namespace tessera::bench
