// Greedy generation of small generated checkpoints at tp 1, 2 and 4 (threads of this
// process) against the numpy reference forward (tests/reference/numpy_llama.py), which
// follows transformers' modeling code independently of ours: every rope_scaling type at
// positions far beyond original_max_position_embeddings, Qwen2 biases (tied and untied),
// Llama attention_bias, tied Llama 3.2-style embeddings, Mistral and Qwen2 sliding windows
// over sequences longer than the window, Qwen3's q/k norm, and the experts of Mixtral,
// Qwen3-MoE (with a dense layer among the sparse ones) and Qwen2-MoE (with its gated
// shared expert), those also with expert parallelism over 2 and 4 ranks. The shapes split
// unevenly: intermediate 202 and vocab 301 over 2 and 4 ranks, 2 KV heads replicated at
// tp 4.
//
// Tolerance: every step's full-vocabulary logits within 1e-4 * (1 + |ref|) of the float64
// reference (our activations are float32; the worst seen is about 2e-6), and identical
// greedy ids. Checks that the comparison can fail: the reference without top-k
// renormalisation, or without the q/k norms, is not matched.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"
#include "worker/comm/local_communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

constexpr int kBlockSize = 16;

struct Greedy {
  absl::Status status;
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> step_logits;  // Logits before each generated token.
};

// One rank's greedy run: the prompt in chunks of `chunk` tokens (so later chunks attend
// to a cached prefix), then one token per step. The sequence owns blocks 1..n.
Greedy RunRank(const std::filesystem::path& dir, Communicator* comm, bool expert_parallel,
               const std::vector<int32_t>& prompt, int steps, int chunk) {
  Greedy g;
  auto backend = kernels::MakeCpuBackend(1);
  ModelLoadOptions options;
  options.expert_parallel = expert_parallel;
  auto model = LlamaModel::Load(dir, backend.get(), comm, nullptr, options);
  if (!model.ok()) {
    g.status = model.status();
    return g;
  }
  const int total = static_cast<int>(prompt.size()) + steps;
  const int num_blocks = (total + kBlockSize - 1) / kBlockSize + 1;
  auto cache = (*model)->CreateKvCache(num_blocks, kBlockSize);
  if (!cache.ok()) {
    g.status = cache.status();
    return g;
  }
  std::vector<int32_t> blocks(num_blocks - 1);
  std::iota(blocks.begin(), blocks.end(), 1);
  std::vector<int32_t> tokens = prompt;
  std::vector<float> logits;
  auto step = [&](int begin, int end) {
    StepBatch b;
    b.max_blocks_per_seq = static_cast<int>(blocks.size());
    b.AddSequence(tokens, blocks, begin, end, kBlockSize, /*wants_logits=*/true);
    return (*model)->Forward(b, cache->get(), &logits);
  };
  const int n = static_cast<int>(prompt.size());
  for (int begin = 0; begin < n && g.status.ok(); begin += chunk) {
    g.status = step(begin, std::min(n, begin + chunk));
  }
  while (g.status.ok() && static_cast<int>(g.ids.size()) < steps) {
    g.step_logits.push_back(logits);
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    g.ids.push_back(next);
    tokens.push_back(next);
    if (static_cast<int>(g.ids.size()) < steps) {
      g.status = step(static_cast<int>(tokens.size()) - 1, static_cast<int>(tokens.size()));
    }
  }
  return g;
}

std::vector<Greedy> RunWorld(const std::filesystem::path& dir, int world, bool expert_parallel,
                             const std::vector<int32_t>& prompt, int steps, int chunk) {
  auto group = LocalGroup::Create(world, std::chrono::seconds(60));
  std::vector<Greedy> out(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      LocalCommunicator comm(group, rank);
      out[rank] = RunRank(dir, &comm, expert_parallel, prompt, steps, chunk);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

struct Reference {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> step_logits;
};

// Runs the numpy reference on `dir`; fails the test (returns false) when it cannot run.
// `flags` go to the reference as they are (its --no-renormalize and --no-qk-norm).
bool RunReference(const std::filesystem::path& dir, const std::vector<int32_t>& prompt,
                  int steps, const std::string& flags, Reference* ref) {
  const std::filesystem::path out = dir / "reference.json";
  const std::string command = absl::StrCat(
      "python3 ", TESSERA_SOURCE_DIR, "/tests/reference/numpy_llama.py --model ", dir.string(),
      " --prompt-ids ", absl::StrJoin(prompt, ","), " --max-new-tokens ", steps, " --out ",
      out.string(), " ", flags, " 2>&1");
  const testing::CommandResult result = testing::RunCommand(command);
  if (result.exit_code != 0) {
    ADD_FAILURE() << "the numpy reference failed (exit " << result.exit_code
                  << "; scripts/setup.sh installs numpy from requirements-dev.txt):\n"
                  << result.output;
    return false;
  }
  auto text = ReadFileToString(out);
  if (!text.ok()) {
    ADD_FAILURE() << text.status();
    return false;
  }
  const auto j = nlohmann::json::parse(*text);
  ref->ids = j["generated_ids"].get<std::vector<int32_t>>();
  ref->step_logits = j["step_logits"].get<std::vector<std::vector<float>>>();
  return true;
}

struct Case {
  std::string preset;
  std::function<void(ModelConfig*)> adjust;  // Applied to the preset's config.
  int prompt_len;
  int steps;
  int chunk;
  bool write_tied_lm_head = false;
};

// A tensor-parallel world, with or without expert parallelism.
struct World {
  int size;
  bool expert_parallel;
};

// The worst logit error of `got` against `want` (relative to 1 + |want|) over every step;
// infinity when the step counts or sizes differ.
double WorstLogitError(const std::vector<std::vector<float>>& got,
                       const std::vector<std::vector<float>>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    if (got[s].size() != want[s].size()) return INFINITY;
    for (size_t i = 0; i < want[s].size(); ++i) {
      worst = std::max(worst, std::abs(got[s][i] - want[s][i]) / (1.0 + std::abs(want[s][i])));
    }
  }
  return worst;
}

// Generates the case's checkpoint and prompt; false (a failure recorded) when it cannot.
bool Prepare(const Case& c, std::filesystem::path* dir, std::vector<int32_t>* prompt) {
  auto config = PresetConfig(c.preset);
  if (!config.ok()) {
    ADD_FAILURE() << config.status();
    return false;
  }
  if (c.adjust) c.adjust(&*config);
  *dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = *dir;
  options.dtype = DType::kF32;
  options.seed = 3;
  options.write_tied_lm_head = c.write_tied_lm_head;
  if (absl::Status s = GenerateRandomCheckpoint(*config, options); !s.ok()) {
    ADD_FAILURE() << s;
    return false;
  }
  // Token ids spread over the whole vocabulary, deterministic.
  for (int i = 0; i < c.prompt_len; ++i) {
    prompt->push_back(3 + static_cast<int32_t>((i * 7919 + 11) % (config->vocab_size - 3)));
  }
  return true;
}

void ExpectMatchesReference(const Case& c) {
  std::filesystem::path dir;
  std::vector<int32_t> prompt;
  if (!Prepare(c, &dir, &prompt)) return;
  Reference ref;
  if (!RunReference(dir, prompt, c.steps, "", &ref)) return;
  ASSERT_EQ(ref.ids.size(), static_cast<size_t>(c.steps));

  const bool moe = PresetConfig(c.preset)->is_moe();
  std::vector<World> worlds = {{1, false}, {2, false}, {4, false}};
  if (moe) worlds.insert(worlds.end(), {{2, true}, {4, true}});
  for (const World& world : worlds) {
    const std::vector<Greedy> ranks =
        RunWorld(dir, world.size, world.expert_parallel, prompt, c.steps, c.chunk);
    for (int r = 0; r < world.size; ++r) {
      SCOPED_TRACE(absl::StrCat(world.expert_parallel ? "ep " : "tp ", world.size, " rank ", r));
      ASSERT_TRUE(ranks[r].status.ok()) << ranks[r].status;
      EXPECT_EQ(ranks[r].ids, ref.ids);
      const double worst = WorstLogitError(ranks[r].step_logits, ref.step_logits);
      EXPECT_LT(worst, 1e-4) << "worst logit error (relative to 1 + |ref|)";
      if (r == 0) {
        std::printf("%s %d: worst logit error %.2e\n", world.expert_parallel ? "ep" : "tp",
                    world.size, worst);
      }
    }
  }
}

// The reference run with `flags` (a feature turned off) must not be matched: it shows the
// feature changes the output, so ExpectMatchesReference would catch its absence.
void ExpectDiffersFromReference(const Case& c, const std::string& flags) {
  std::filesystem::path dir;
  std::vector<int32_t> prompt;
  if (!Prepare(c, &dir, &prompt)) return;
  Reference ref;
  if (!RunReference(dir, prompt, c.steps, flags, &ref)) return;
  const std::vector<Greedy> ranks = RunWorld(dir, 1, false, prompt, c.steps, c.chunk);
  ASSERT_TRUE(ranks[0].status.ok()) << ranks[0].status;
  const double worst = WorstLogitError(ranks[0].step_logits, ref.step_logits);
  std::printf("against the reference with %s: worst logit error %.2e\n", flags.c_str(), worst);
  EXPECT_GT(worst, 1e-2) << "Tessera matches the reference run with " << flags;
}

// Llama 3.1 rope scaling from an original context of 64: positions up to 200.
TEST(ReferenceForwardTest, Llama3ScaledPastTheOriginalContext) {
  ExpectMatchesReference({"tiny-llama3", nullptr, 170, 30, 64});
}

// Llama 3.2 1B/3B: tied embeddings, no lm_head.weight in the checkpoint.
TEST(ReferenceForwardTest, Llama3ScaledTiedEmbeddings) {
  ExpectMatchesReference(
      {"tiny-llama3", [](ModelConfig* c) { c->tie_word_embeddings = true; }, 100, 12, 100});
}

TEST(ReferenceForwardTest, YarnPastTheOriginalContext) {
  ExpectMatchesReference({"tiny-yarn", nullptr, 150, 20, 50});
}

TEST(ReferenceForwardTest, YarnWithMscaleAndExplicitBetas) {
  ExpectMatchesReference({"tiny-yarn",
                          [](ModelConfig* c) {
                            c->rope_scaling.mscale = 0.707;
                            c->rope_scaling.mscale_all_dim = 1.0;
                            c->rope_scaling.beta_fast = 16;
                            c->rope_scaling.beta_slow = 2;
                          },
                          120, 10, 120});
}

TEST(ReferenceForwardTest, LinearScaling) {
  ExpectMatchesReference({"tiny",
                          [](ModelConfig* c) {
                            c->rope_scaling.type = RopeScaling::Type::kLinear;
                            c->rope_scaling.factor = 4;
                            c->intermediate_size = 202;
                            c->vocab_size = 301;
                            c->num_attention_heads = 4;
                            c->head_dim = 24;
                          },
                          120, 12, 40});
}

TEST(ReferenceForwardTest, DynamicNtkScaling) {
  ExpectMatchesReference({"tiny",
                          [](ModelConfig* c) {
                            c->rope_scaling.type = RopeScaling::Type::kDynamic;
                            c->rope_scaling.factor = 2;
                            c->max_position_embeddings = 128;
                            c->vocab_size = 301;
                            c->num_attention_heads = 4;
                            c->head_dim = 24;
                          },
                          140, 12, 70});
}

TEST(ReferenceForwardTest, Qwen2BiasesTiedEmbeddings) {
  ExpectMatchesReference({"tiny-qwen2", nullptr, 60, 16, 25});
}

TEST(ReferenceForwardTest, Qwen2BiasesUntiedWithYarn) {
  ExpectMatchesReference({"tiny-qwen2",
                          [](ModelConfig* c) {
                            c->tie_word_embeddings = false;
                            c->rope_scaling.type = RopeScaling::Type::kYarn;
                            c->rope_scaling.factor = 4;
                            c->rope_scaling.original_max_position_embeddings = 64;
                          },
                          100, 16, 100});
}

// use_sliding_window with max_window_layers 1: layer 0 full, layer 1 windowed.
TEST(ReferenceForwardTest, Qwen2SlidingWindowOnLaterLayers) {
  ExpectMatchesReference({"tiny-qwen2",
                          [](ModelConfig* c) {
                            c->sliding_window = 9;
                            c->first_window_layer = 1;
                          },
                          50, 16, 20});
}

// Window 12 on every layer; a 50-token prompt in chunks of 20 and 16 decode steps.
TEST(ReferenceForwardTest, MistralSlidingWindowLongerThanTheWindow) {
  ExpectMatchesReference({"tiny-mistral", nullptr, 50, 16, 20});
}

TEST(ReferenceForwardTest, LlamaAttentionBiasOnQkvAndO) {
  ExpectMatchesReference({"tiny-llama3",
                          [](ModelConfig* c) {
                            c->qkv_bias = true;
                            c->o_bias = true;
                          },
                          40, 12, 40});
}

// Qwen3: q/k RMSNorm per head before RoPE, head_dim 32 while hidden / heads is 16.
TEST(ReferenceForwardTest, Qwen3QkNormWithOwnHeadDim) {
  ExpectMatchesReference({"tiny-qwen3", nullptr, 40, 12, 16});
}

// Qwen3's attention_bias: q/k/v biases land before the q/k norm, o's after attention.
TEST(ReferenceForwardTest, Qwen3QkNormAfterAttentionBias) {
  ExpectMatchesReference({"tiny-qwen3",
                          [](ModelConfig* c) {
                            c->qkv_bias = true;
                            c->o_bias = true;
                          },
                          30, 8, 30});
}

// Top 2 of 8 experts, renormalised, window 12 on every layer, prompt longer than it.
TEST(ReferenceForwardTest, MixtralExpertsWithSlidingWindow) {
  ExpectMatchesReference({"tiny-mixtral", nullptr, 40, 12, 16});
}

// Top 3 of 8 renormalised (norm_topk_prob), q/k norm, a dense layer among the sparse ones.
TEST(ReferenceForwardTest, Qwen3MoeWithADenseLayer) {
  ExpectMatchesReference({"tiny-qwen3-moe", nullptr, 40, 12, 16});
}

// Top 4 of 8 not renormalised, the sigmoid-gated shared expert, q/k/v biases.
TEST(ReferenceForwardTest, Qwen2MoeSharedExpert) {
  ExpectMatchesReference({"tiny-qwen2-moe", nullptr, 40, 12, 16});
}

// A tied checkpoint that also stores lm_head.weight (some exports do) loads the same.
TEST(ReferenceForwardTest, TiedWithStoredLmHead) {
  ExpectMatchesReference({"tiny-qwen2", nullptr, 30, 8, 30, /*write_tied_lm_head=*/true});
}

TEST(ReferenceForwardTest, Qwen3WithoutQkNormIsCaught) {
  ExpectDiffersFromReference({"tiny-qwen3", nullptr, 40, 12, 16}, "--no-qk-norm");
}

TEST(ReferenceForwardTest, MixtralWithoutRenormalisationIsCaught) {
  ExpectDiffersFromReference({"tiny-mixtral", nullptr, 40, 8, 16}, "--no-renormalize");
}

TEST(ReferenceForwardTest, Qwen3MoeWithoutRenormalisationIsCaught) {
  ExpectDiffersFromReference({"tiny-qwen3-moe", nullptr, 40, 8, 16}, "--no-renormalize");
}

TEST(ReferenceForwardTest, Qwen3MoeWithoutQkNormIsCaught) {
  ExpectDiffersFromReference({"tiny-qwen3-moe", nullptr, 40, 8, 16}, "--no-qk-norm");
}

// Qwen3-MoE's window applies to every layer (max_window_layers is Qwen2's, not its).
TEST(ReferenceForwardTest, Qwen3MoeSlidingWindowOnEveryLayer) {
  ExpectMatchesReference({"tiny-qwen3-moe",
                          [](ModelConfig* c) {
                            c->sliding_window = 9;
                            c->first_window_layer = 0;
                          },
                          40, 10, 16});
}

// Every layer sparse (decoder_sparse_step 1, no dense layers), prefill in one chunk.
TEST(ReferenceForwardTest, Qwen3MoeAllLayersSparseRenormalisationOff) {
  ExpectMatchesReference({"tiny-qwen3-moe",
                          [](ModelConfig* c) {
                            c->moe.dense_layers.clear();
                            c->moe.normalize_top_k = false;
                          },
                          30, 8, 30});
}

}  // namespace
}  // namespace tessera
