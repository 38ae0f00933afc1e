#ifndef TESSERA_TESTS_E2E_TP_ONE_DEVICE_H_
#define TESSERA_TESTS_E2E_TP_ONE_DEVICE_H_

// Tensor parallelism with every rank of a replica on one device: a real coordinator and
// tp workers serve a model at tp 1, 2 and 4, their groups reducing through a host
// communicator (shm or Gloo; on a GPU, host-staged), and the greedy ids of tp 2 and 4 are
// compared with tp 1's. The models: stories260K and three generated Llama-family
// checkpoints (llama3 rope scaling, Qwen2's q/k/v biases, Mistral's sliding window), so
// the comparison covers head slicing, bias slicing, windows and KV-head replication.
// tp_one_device_cuda_test runs it on a GPU, tp_one_device_cpu_test on the CPU backend.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"
#include "tests/worker/bf16_emulation.h"
#include "tests/worker/test_expected.h"
#include "tools/checkpoint/generate.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera::testing {

// Per generated token, the top entries the API reports (for the BF16 decision margins).
inline constexpr int kTopLogprobs = 5;

struct TpModel {
  std::string name;
  std::filesystem::path dir;
  std::vector<std::vector<int32_t>> prompts;
  int max_new_tokens = 24;
};

// stories260K with llama2.c's reference prompt (its 60 tokens are the F32 bar at tp 1).
inline TpModel StoriesTpModel() {
  TpModel m;
  m.name = "stories260K";
  m.dir = StoriesModelDir();
  m.prompts = {LoadExpected().prompt_ids};
  m.max_new_tokens = 60;
  return m;
}

// The generated presets, reshaped to 8 query heads of 16 over 2 KV heads (hidden 128):
// at tp 4 each rank holds 2 query heads sharing one replicated KV head, at tp 2 4 query
// heads and one KV head of its own. Their intermediate size (202) and vocabulary (301)
// split unevenly. F32 weights: with F32 activations only the summation order differs
// between tp sizes. Two prompts, 20 and 5 ids, so 24 new tokens run past tiny-mistral's
// window of 12.
inline const std::vector<std::string>& TinyTpPresets() {
  static const auto* presets =
      new std::vector<std::string>{"tiny-llama3", "tiny-qwen2", "tiny-mistral"};
  return *presets;
}

inline absl::StatusOr<TpModel> MakeTinyTpModel(const std::string& preset,
                                               const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
  config.hidden_size = 128;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 2;
  config.head_dim = 16;
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = DType::kF32;
  options.seed = 34;
  RETURN_IF_ERROR(GenerateRandomCheckpoint(config, options));
  TpModel m;
  m.name = preset;
  m.dir = dir;
  for (int length : {20, 5}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) {
      prompt.push_back(3 + (i * 7919 + length * 131) % (config.vocab_size - 3));
    }
    m.prompts.push_back(std::move(prompt));
  }
  return m;
}

// How the workers run: their flags ("--device=cuda:0") and environment
// ("TESSERA_CUDA_ACTIVATIONS=f32"), the coordinator's --communicator, and the communicator
// name every rank must report joining with at tp > 1 ("shm+host-staged").
struct TpServing {
  std::vector<std::string> worker_flags;
  std::vector<std::string> worker_env;
  std::string communicator = "shm";
  std::string joined_as;
};

// The model served at `tp`, one greedy request per prompt (with the top logprobs of every
// token). Empty, with a test failure carrying the logs, when anything goes wrong.
inline std::vector<UnaryResult> ServeGreedyAtTp(const TpModel& model, int tp,
                                                const TpServing& serving) {
  ClusterOptions options;
  options.model_dir = model.dir;
  options.log_dir = ScratchDir(absl::StrCat(model.name, ".tp", tp));
  options.tp = tp;
  options.kv_memory_mb = 16;
  options.worker_flags = serving.worker_flags;
  options.worker_env = serving.worker_env;
  options.coordinator_flags = {absl::StrCat("--communicator=", serving.communicator)};
  auto cluster = Cluster::Start(std::move(options));
  if (!cluster.ok()) {
    ADD_FAILURE() << model.name << " at tp " << tp << ": " << cluster.status().message();
    return {};
  }
  std::vector<UnaryResult> results;
  for (const std::vector<int32_t>& prompt : model.prompts) {
    v1::GenerateRequest request = GreedyIds(prompt, model.max_new_tokens);
    request.set_logprobs(kTopLogprobs);
    UnaryResult r = RunUnary((*cluster)->api(), request);
    if (!r.status.ok()) {
      ADD_FAILURE() << model.name << " at tp " << tp << ": " << r.status.error_message() << "\n"
                    << (*cluster)->Logs();
      return {};
    }
    results.push_back(std::move(r));
  }
  if (tp > 1) {
    // Proof that the ranks reduced through the communicator under test.
    const std::string logs = (*cluster)->Logs(/*tail_bytes=*/1 << 20);
    const std::string joined = absl::StrCat(" of ", tp, " (", serving.joined_as, ")");
    size_t ranks = 0;
    for (size_t at = logs.find(joined); at != std::string::npos; at = logs.find(joined, at + 1)) {
      ++ranks;
    }
    EXPECT_EQ(ranks, static_cast<size_t>(tp)) << "ranks joined as " << serving.joined_as << "\n"
                                              << logs;
  }
  return results;
}

inline std::string Ids(const std::vector<int32_t>& ids) { return absl::StrJoin(ids, " "); }

// Token for token (F32 activations).
inline void ExpectSameGreedyIds(const std::vector<UnaryResult>& tp1,
                                const std::vector<UnaryResult>& tpn, int tp) {
  ASSERT_EQ(tpn.size(), tp1.size());
  for (size_t p = 0; p < tp1.size(); ++p) {
    EXPECT_EQ(tpn[p].ids(), tp1[p].ids()) << "prompt " << p << "\ntp 1: " << Ids(tp1[p].ids())
                                          << "\ntp " << tp << ": " << Ids(tpn[p].ids());
  }
}

// The gap between the best and second-best logprob at a generated position: the margin
// by which tp 1's greedy choice was decided.
inline float DecisionMargin(const v1::TokenLogprob& position) {
  float best = -INFINITY, second = -INFINITY;
  for (const v1::TopLogprob& t : position.top()) {
    if (t.logprob() > best) {
      second = best;
      best = t.logprob();
    } else if (t.logprob() > second) {
      second = t.logprob();
    }
  }
  return best - second;
}

// BF16 activations: the choices of tp n must be tp 1's wherever tp 1 decided by more than
// `noise` (the most two BF16 runs can move a logit gap), up to the first position decided
// by less (after it the sequences may rightly part); and the first step's logprobs agree
// within `noise`. The generated models are random, their distributions nearly flat (top
// logprobs within a few tenths of each other, about the noise), so for them mostly the
// logprobs are compared; stories260K decides its first tokens clearly.
inline void ExpectGreedyIdsWhileDecided(const std::vector<UnaryResult>& tp1,
                                        const std::vector<UnaryResult>& tpn, int tp, float noise) {
  ASSERT_EQ(tpn.size(), tp1.size());
  for (size_t p = 0; p < tp1.size(); ++p) {
    SCOPED_TRACE(absl::StrCat("prompt ", p, ", tp ", tp));
    const v1::GenerateResponse& a = tp1[p].response;
    const v1::GenerateResponse& b = tpn[p].response;
    ASSERT_EQ(a.logprobs_size(), a.token_ids_size());
    ASSERT_EQ(b.token_ids_size(), a.token_ids_size());
    int decided = 0;
    while (decided < a.token_ids_size() && DecisionMargin(a.logprobs(decided)) > noise) {
      ASSERT_EQ(b.token_ids(decided), a.token_ids(decided))
          << "at position " << decided << " (tp 1's margin " << DecisionMargin(a.logprobs(decided))
          << ", noise " << noise << ")\ntp 1: " << Ids(tp1[p].ids()) << "\ntp " << tp << ": "
          << Ids(tpn[p].ids());
      ++decided;
    }
    std::printf(
        "tp %d, prompt %zu: the first %d of %d tokens decided by more than %.3f, all "
        "equal to tp 1's\n",
        tp, p, decided, a.token_ids_size(), noise);
    ASSERT_GT(a.logprobs_size(), 0);
    for (const v1::TopLogprob& want : a.logprobs(0).top()) {
      for (const v1::TopLogprob& got : b.logprobs(0).top()) {
        if (got.token_id() != want.token_id()) continue;
        EXPECT_LE(std::abs(got.logprob() - want.logprob()), noise) << "token " << want.token_id();
      }
    }
  }
}

// The largest |difference| between the first-step logits of the CPU backend with BF16
// rounding emulated (tests/worker/bf16_emulation.h) and in float32, for the model's first
// prompt: the scale of BF16 noise for this model. cuda_variants_forward_test bounds the
// device's own error by 3 times it plus 1e-3.
inline absl::StatusOr<float> EmulatedBf16LogitError(const TpModel& model) {
  auto first_logits = [&](kernels::Backend* backend) -> absl::StatusOr<std::vector<float>> {
    SingleRankCommunicator comm;
    ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> m, LlamaModel::Load(model.dir, backend, &comm));
    ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, m->CreateKvCache(16, 16));
    SingleSequenceOptions o;
    o.max_new_tokens = 1;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    ASSIGN_OR_RETURN(SingleSequenceResult r,
                     GenerateSingleSequence(*m, *cache, model.prompts[0], o));
    return r.first_logits;
  };
  std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(1);
  ASSIGN_OR_RETURN(std::vector<float> exact, first_logits(cpu.get()));
  // The emulation takes the GEMM with vocab rows for the lm_head; so does every GEMM of
  // that many rows, which none of these models has elsewhere.
  Bf16RoundingBackend emulation(kernels::MakeCpuBackend(1), static_cast<int64_t>(exact.size()));
  ASSIGN_OR_RETURN(std::vector<float> rounded, first_logits(&emulation));
  float worst = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, std::abs(rounded[i] - exact[i]));
  }
  return worst;
}

// Two BF16 runs each within `device_bound` of the float32 logits: a logit gap (and a
// logprob, whose normaliser moves by at most as much as a logit) differs between them by
// at most 4 times that.
inline float Bf16RunToRunNoise(float emulated_error) {
  constexpr float kEmulationFactor = 3.0f;  // As cuda_variants_forward_test.
  constexpr float kFloor = 1e-3f;
  return 4.0f * (kEmulationFactor * emulated_error + kFloor);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_E2E_TP_ONE_DEVICE_H_
