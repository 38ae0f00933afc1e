#ifndef TESSERA_BENCHMARKS_SERVING_STREAM_SWARM_H_
#define TESSERA_BENCHMARKS_SERVING_STREAM_SWARM_H_

#include <chrono>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace tessera::bench {

// Many GenerateStream calls open at once, held by gRPC's callback client API (a reactor
// per call, no thread per call), so one small process can hold thousands of streams
// against the front door.
struct SwarmOptions {
  std::string address;
  int num_streams = 1000;
  // Streams are spread over this many connections (each channel has its own subchannel).
  int num_channels = 8;
  std::string prompt = "Once upon a time";
  int max_new_tokens = 16;
  std::chrono::seconds deadline{120};  // Per call, from the moment all are started.
};

struct StreamOutcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  double ttft_s = -1;  // First message carrying tokens - start; -1 without tokens.
  double total_s = 0;
  int tokens = 0;
  bool finished_ok = false;  // OK status and the last message carried a finish reason.
};

struct SwarmResult {
  std::vector<StreamOutcome> outcomes;
  double wall_s = 0;  // First start to last end.
};

// Starts every stream, then waits until each has ended (each one has a deadline, so this
// is bounded by options.deadline plus gRPC's own teardown).
SwarmResult RunSwarm(const SwarmOptions& options);

// Threads and resident memory of a process, from /proc/<pid>/status; -1 when unreadable.
struct ProcessSample {
  int threads = -1;
  int64_t rss_bytes = -1;
};
ProcessSample SampleProcess(int pid);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_STREAM_SWARM_H_
