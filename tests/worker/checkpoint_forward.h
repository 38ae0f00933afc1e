#ifndef TESSERA_TESTS_WORKER_CHECKPOINT_FORWARD_H_
#define TESSERA_TESTS_WORKER_CHECKPOINT_FORWARD_H_

// Forward passes of a checkpoint folder for the tests that compare a quantized checkpoint
// with its dequantized float twin (int4_checkpoint_test, fp8_checkpoint_test).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "tests/worker/teacher_forcing.h"
#include "worker/comm/local_communicator.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera::testing {

// Next-token logits after every position of `tokens` (one prefill step), from rank 0 of
// `world` tensor-parallel ranks; `status` gets the first failure.
inline std::vector<float> TeacherForcedAtTp(const std::filesystem::path& dir, int world,
                                            const std::vector<int32_t>& tokens,
                                            absl::Status* status,
                                            const ModelLoadOptions& options = {}) {
  auto group = LocalGroup::Create(world, std::chrono::seconds(30));
  std::vector<std::vector<float>> logits(world);
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto backend = kernels::MakeCpuBackend(1);
      LocalCommunicator comm(group, rank);
      auto model = LlamaModel::Load(dir, backend.get(), &comm, nullptr, options);
      if (!model.ok()) {
        statuses[rank] = model.status();
        return;
      }
      logits[rank] = TeacherForcedLogits(**model, tokens);
    });
  }
  for (auto& t : threads) t.join();
  *status = absl::OkStatus();
  for (const absl::Status& s : statuses) {
    if (!s.ok() && status->ok()) *status = s;
  }
  return logits[0];
}

// Largest |a - b| / max(1, |b|).
inline double WorstRelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) /
                                std::max(1.0, std::fabs(static_cast<double>(b[i]))));
  }
  return worst;
}

// Share of rows of [rows, vocab] logits whose arg-max agrees.
inline double TopOneAgreement(const std::vector<float>& a, const std::vector<float>& b,
                              size_t vocab) {
  const size_t rows = a.size() / vocab;
  int agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = &a[r * vocab];
    const float* y = &b[r * vocab];
    agree += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
  }
  return static_cast<double>(agree) / rows;
}

// Greedy decode on one rank: one token a step, so the weights go through the GEMV path.
inline absl::StatusOr<SingleSequenceResult> GreedyDecode(const std::filesystem::path& dir,
                                                         const std::vector<int32_t>& prompt,
                                                         int tokens) {
  auto backend = kernels::MakeCpuBackend(2);
  SingleRankCommunicator comm;
  auto model = LlamaModel::Load(dir, backend.get(), &comm);
  if (!model.ok()) return model.status();
  auto cache = (*model)->CreateKvCache(16, 16);
  if (!cache.ok()) return cache.status();
  SingleSequenceOptions options;
  options.max_new_tokens = tokens;
  options.sampling.temperature = 0;
  options.ignore_eos = true;
  return GenerateSingleSequence(**model, **cache, prompt, options);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_CHECKPOINT_FORWARD_H_
