// `tessera eval`: the quality gate. Runs a baseline and a candidate model teacher-forced
// over a text file and compares their next-token distributions (KL divergence, as
// llama.cpp's llama-perplexity --kl-divergence), top-1 agreement and perplexity.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/gguf_model_dir.h"
#include "common/flag_set.h"
#include "common/model_config.h"
#include "common/progress_line.h"
#include "common/checkpoint_quantization.h"
#include "common/quantization.h"
#include "common/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "common/eval_metrics.h"
#include "tools/eval/eval_gate.h"
#include "tools/tessera/commands.h"
#include "worker/backend_factory.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera::cli {
namespace {

// Exit codes: the gate passed, a threshold failed, or the run could not be made.
constexpr int kPass = 0;
constexpr int kThresholdFailed = 1;
constexpr int kUsageOrDataError = 2;

struct EvalFlags {
  std::string model;
  std::string baseline;
  std::string dataset;
  std::string quantization = "none";
  std::string kv_cache_dtype = "auto";
  int64_t context = 256;
  int64_t max_tokens = 0;
  // Negative: the default for the candidate's formats (eval::DefaultThresholds).
  double max_mean_kld = -1;
  // Negative: reported, not gated.
  double min_top1 = -1;
  double max_ppl_increase = -1;
  std::string output;
  int64_t threads = 0;
  bool llama_cpp_chunks = false;
};

int Fail(absl::string_view message) {
  std::fprintf(stderr, "tessera eval: %.*s\n", static_cast<int>(message.size()), message.data());
  return kUsageOrDataError;
}

// The dataset's ids, identical under both models' tokenizers: the comparison is only
// meaningful when both see the same token stream.
absl::StatusOr<std::vector<int32_t>> TokenizeDataset(const EvalFlags& f) {
  auto text = ReadFileToString(f.dataset);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot read --dataset ", f.dataset, ": ",
                                            text.status().message()));
  }
  if (text->empty()) return absl::InvalidArgumentError(absl::StrCat("--dataset ", f.dataset, " is empty"));
  auto candidate_tok = Tokenizer::Load(f.model);
  if (!candidate_tok.ok()) return candidate_tok.status();
  auto baseline_tok = Tokenizer::Load(f.baseline);
  if (!baseline_tok.ok()) return baseline_tok.status();
  if ((*candidate_tok)->vocab_size() != (*baseline_tok)->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizers differ: --model has ", (*candidate_tok)->vocab_size(),
        " tokens, --baseline ", (*baseline_tok)->vocab_size()));
  }
  std::vector<int32_t> ids = (*candidate_tok)->Encode(*text);
  if (ids != (*baseline_tok)->Encode(*text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model and --baseline tokenize ", f.dataset, " differently"));
  }
  if (ids.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset ", f.dataset, " has ", ids.size(), " token(s); at least 2 are needed"));
  }
  return ids;
}

// One model's run over all windows: its per-position scores and the logits of the first
// window (kept to measure how far logits move without holding every window's logits).
struct ModelRun {
  std::vector<PositionScore> scores;
  std::vector<float> first_window_logits;
};

// The baseline's log-probabilities of every scored position, one float row of the
// vocabulary each, in an anonymous temporary file (positions x vocabulary x 4 bytes: the
// baseline and the candidate never share memory): written by the baseline's run, read back
// in the same order by the candidate's, which turns each row into a KL divergence.
class BaselineLogProbs {
 public:
  BaselineLogProbs() : file_(std::tmpfile()) {}
  ~BaselineLogProbs() {
    if (file_ != nullptr) std::fclose(file_);
  }
  absl::Status Write(absl::Span<const float> logits, size_t rows, size_t vocab) {
    row_.resize(vocab);
    for (size_t r = 0; r < rows; ++r) {
      LogSoftmax(logits.subspan(r * vocab, vocab), absl::MakeSpan(row_));
      if (file_ == nullptr || std::fwrite(row_.data(), sizeof(float), vocab, file_) != vocab) {
        return absl::ResourceExhaustedError(
            "cannot write the baseline's log-probabilities to a temporary file (TMPDIR full?)");
      }
    }
    return absl::OkStatus();
  }
  absl::Status Compare(absl::Span<const float> logits, size_t rows, size_t vocab, std::vector<double>* klds) {
    if (!reading_) {
      std::rewind(file_);
      reading_ = true;
    }
    row_.resize(vocab);
    for (size_t r = 0; r < rows; ++r) {
      if (std::fread(row_.data(), sizeof(float), vocab, file_) != vocab) {
        return absl::InternalError("the baseline's log-probabilities end early");
      }
      klds->push_back(KlDivergence(row_, logits.subspan(r * vocab, vocab)));
    }
    return absl::OkStatus();
  }

 private:
  std::FILE* file_;
  std::vector<float> row_;
  bool reading_ = false;
};

absl::StatusOr<ModelRun> RunTeacherForced(const std::filesystem::path& dir,
                                          const ModelLoadOptions& options, int threads,
                                          const std::vector<int32_t>& ids,
                                          const std::vector<eval::Window>& windows,
                                          const std::string& label, BaselineLogProbs* log_probs,
                                          std::vector<double>* klds) {
  auto backend = kernels::MakeCpuBackend(threads);
  SingleRankCommunicator comm;
  auto model = LlamaModel::Load(dir, backend.get(), &comm, nullptr, options);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("loading ", label, " ", dir.string(), ": ", model.status().message()));
  }
  const size_t vocab = (*model)->config().vocab_size;
  const int block_size = 16;
  size_t longest = 0;
  for (const eval::Window& w : windows) longest = std::max(longest, w.length);
  const int blocks = static_cast<int>((longest + block_size - 1) / block_size);
  auto cache = (*model)->CreateKvCache(blocks + 1, block_size);
  if (!cache.ok()) return cache.status();
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b + 1;  // Block 0 stays reserved.

  ModelRun run;
  ProgressLine progress(absl::StrCat("eval ", label));
  std::vector<float> logits;
  for (size_t i = 0; i < windows.size(); ++i) {
    const eval::Window& w = windows[i];
    const absl::Span<const int32_t> tokens(ids.data() + w.begin, w.length);
    // Each window starts at position 0 and overwrites the same blocks: windows are
    // independent sequences, one prefill step each.
    StepBatch batch;
    batch.max_blocks_per_seq = blocks;
    batch.AddSequence(tokens, table, 0, static_cast<int>(w.length), block_size, false);
    for (size_t r = w.first_scored; r + 1 < w.length; ++r) batch.logits_rows.push_back(static_cast<int32_t>(r));
    if (absl::Status s = (*model)->Forward(batch, cache->get(), &logits); !s.ok()) return s;
    if (absl::Status s = eval::ScoreRows(logits, vocab, tokens.subspan(w.first_scored + 1), &run.scores);
        !s.ok()) {
      return s;
    }
    const size_t rows = w.length - 1 - w.first_scored;
    if (absl::Status s = klds == nullptr ? log_probs->Write(logits, rows, vocab)
                                         : log_probs->Compare(logits, rows, vocab, klds);
        !s.ok()) {
      return s;
    }
    if (i == 0) run.first_window_logits = logits;
    progress.Update(i + 1, windows.size(), absl::StrFormat("(%zu/%zu windows)", i + 1, windows.size()));
  }
  return run;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string CpuName(int threads) {
  auto backend = kernels::MakeCpuBackend(threads);
  return DescribeBackend(*backend).name;
}

}  // namespace

int EvalMain(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  EvalFlags f;
  FlagSet flags("tessera eval",
                "The quality gate: runs --baseline and then --model (the candidate, with its\n"
                "--quantization and --kv-cache-dtype) teacher-forced over a UTF-8 text file on the\n"
                "CPU, and compares their next-token distributions: the KL divergence of the\n"
                "candidate's from the baseline's (mean, median, p99, max: what llama.cpp's\n"
                "llama-perplexity --kl-divergence reports), top-1 agreement and perplexity. Prints a\n"
                "JSON report. The baseline's log-probabilities wait in a temporary file (positions x\n"
                "vocabulary x 4 bytes). Either model may be a .gguf file.\n"
                "Exit codes: 0 the gate passes, 1 a threshold fails, 2 usage, load or data error.");
  flags.String("model", &f.model, "Candidate model: a Hugging Face folder or a .gguf file.");
  flags.String("baseline", &f.baseline, "Baseline model, folder or .gguf file (run with its own dtypes).");
  flags.String("dataset", &f.dataset, "Plain UTF-8 text file to score.");
  flags.String("quantization", &f.quantization, "Candidate weights quantized at load time: none, int8 or fp8.");
  flags.String("kv-cache-dtype", &f.kv_cache_dtype, "Candidate KV-cache element type: auto, bf16, fp8 or fp32.");
  flags.Int("context", &f.context, "Tokens per window (clamped to the models' max context).");
  flags.Int("max-tokens", &f.max_tokens, "Positions scored at most (0: the whole dataset).");
  flags.Float("max-mean-kld", &f.max_mean_kld,
              "Largest mean KL divergence (nats) that passes (negative: from llama.cpp's formats on "
              "SmolLM2: int8 0.0075 = 1.5 x Q8_0, fp8 0.077 = Q4_K_M, GPTQ/AWQ 0.154 = 2 x Q4_K_M, "
              "a GGUF file's own types or a float candidate 0.001; plus 0.077 for an fp8 and "
              "0.0075 for a bf16 KV cache).");
  flags.Float("min-top1", &f.min_top1,
              "Least top-1 agreement that passes, in [0, 1] (negative: reported, not gated).");
  flags.Float("max-ppl-increase", &f.max_ppl_increase,
              "Largest relative perplexity increase that passes, 0.02 = 2 % (negative: reported, "
              "not gated).");
  flags.Bool("llama-cpp-chunks", &f.llama_cpp_chunks,
             "Score as llama-perplexity does: non-overlapping windows of --context tokens, each scoring its "
             "second half only, so the figures compare with its --kl-divergence on the same tokens. "
             "Default: overlapping windows that score every token once.");
  flags.String("output", &f.output, "Also write the JSON report to this file.");
  flags.Int("threads", &f.threads, "CPU threads (0: one per core).");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(s.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kPass;
  }
  if (f.model.empty()) return Fail("--model is required (the candidate model folder)");
  if (f.baseline.empty()) return Fail("--baseline is required (the reference model folder)");
  if (f.dataset.empty()) return Fail("--dataset is required (a UTF-8 text file)");
  if (f.context < 2) return Fail(absl::StrCat("--context must be at least 2, got ", f.context));
  if (f.max_tokens < 0) return Fail(absl::StrCat("--max-tokens must be >= 0, got ", f.max_tokens));
  if (f.threads < 0) return Fail(absl::StrCat("--threads must be >= 0, got ", f.threads));
  ModelLoadOptions candidate_options;
  if (auto q = ParseWeightQuantization(f.quantization); q.ok()) {
    candidate_options.quantization = *q;
  } else {
    return Fail(absl::StrCat("--quantization: ", q.status().message()));
  }
  if (auto d = ParseKvCacheDType(f.kv_cache_dtype); d.ok()) {
    candidate_options.kv_cache_dtype = *d;
  } else {
    return Fail(absl::StrCat("--kv-cache-dtype: ", d.status().message()));
  }
  // A pre-quantized candidate (FP8, GPTQ/AWQ) is refused --quantization before the
  // baseline runs, not after.
  auto checkpoint_quantization = LoadCheckpointQuantizationName(f.model);
  if (!checkpoint_quantization.ok()) return Fail(checkpoint_quantization.status().message());
  if (auto s = CheckLoadTimeQuantization(f.quantization, *checkpoint_quantization, f.model); !s.ok()) {
    return Fail(s.message());
  }

  auto candidate_config = ModelConfig::Load(f.model);
  if (!candidate_config.ok()) return Fail(absl::StrCat("--model: ", candidate_config.status().message()));
  auto baseline_config = ModelConfig::Load(f.baseline);
  if (!baseline_config.ok()) return Fail(absl::StrCat("--baseline: ", baseline_config.status().message()));
  if (candidate_config->vocab_size != baseline_config->vocab_size) {
    return Fail(absl::StrCat("vocab sizes differ: --model has ", candidate_config->vocab_size,
                             ", --baseline ", baseline_config->vocab_size));
  }
  auto ids = TokenizeDataset(f);
  if (!ids.ok()) return Fail(ids.status().message());
  const int64_t context = std::min<int64_t>(
      {f.context, candidate_config->max_position_embeddings, baseline_config->max_position_embeddings});
  const std::vector<eval::Window> windows =
      f.llama_cpp_chunks
          ? eval::MakeLlamaCppChunks(ids->size(), static_cast<size_t>(context), static_cast<size_t>(f.max_tokens))
          : eval::MakeWindows(ids->size(), static_cast<size_t>(context), static_cast<size_t>(f.max_tokens));
  if (windows.empty()) {
    return Fail(absl::StrCat(f.dataset, " has ", ids->size(), " tokens: too few for one window of ", context));
  }
  const int threads = static_cast<int>(f.threads);

  // The baseline first, keeping only its per-position scores; its weights are freed
  // before the candidate loads, so peak memory is one model.
  BaselineLogProbs log_probs;
  auto baseline = RunTeacherForced(f.baseline, ModelLoadOptions{}, threads, *ids, windows, "baseline",
                                   &log_probs, nullptr);
  if (!baseline.ok()) return Fail(baseline.status().message());
  std::vector<double> klds;
  auto candidate = RunTeacherForced(f.model, candidate_options, threads, *ids, windows, "candidate",
                                    &log_probs, &klds);
  if (!candidate.ok()) return Fail(candidate.status().message());

  auto comparison = CompareScores(baseline->scores, candidate->scores);
  if (!comparison.ok()) return Fail(comparison.status().message());
  comparison->kld = SummarizeDivergences(klds);
  // A GGUF file is served with its own types: "gguf" unless quantized again at load.
  const std::string weight_format =
      !checkpoint_quantization->empty() ? *checkpoint_quantization
      : (IsGgufFile(f.model) && candidate_options.quantization == WeightQuantization::kNone)
          ? "gguf"
          : f.quantization;
  // The cache counts against the budget where it differs from the baseline's.
  const DType candidate_kv = ResolveKvCacheDType(candidate_options.kv_cache_dtype, candidate_config->torch_dtype);
  const DType baseline_kv = ResolveKvCacheDType(KvCacheDType::kAuto, baseline_config->torch_dtype);
  const std::string kv_format = candidate_kv == baseline_kv ? "auto" : std::string(KvCacheDTypeName(candidate_kv));
  eval::Thresholds thresholds = eval::DefaultThresholds(weight_format, kv_format);
  if (f.max_mean_kld >= 0) thresholds.max_mean_kld = f.max_mean_kld;
  if (f.min_top1 >= 0) thresholds.min_top1 = f.min_top1;
  if (f.max_ppl_increase >= 0) thresholds.max_ppl_increase = f.max_ppl_increase;
  const std::vector<std::string> failures = eval::ThresholdFailures(*comparison, thresholds);
  const double wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::ordered_json report;
  report["model"] = f.model;
  report["baseline"] = f.baseline;
  report["dataset"] = f.dataset;
  report["options"] = {
      {"quantization", std::string(WeightQuantizationName(candidate_options.quantization))},
      // What the candidate's files hold ("fp8", "gptq", ...; "" for a float checkpoint).
      {"checkpoint_quantization", *checkpoint_quantization},
      {"kv_cache_dtype", std::string(KvCacheDTypeName(candidate_options.kv_cache_dtype))},
      {"candidate_kv_cache_dtype", std::string(KvCacheDTypeName(ResolveKvCacheDType(
                                       candidate_options.kv_cache_dtype, candidate_config->torch_dtype)))},
      {"baseline_kv_cache_dtype", std::string(KvCacheDTypeName(ResolveKvCacheDType(
                                      KvCacheDType::kAuto, baseline_config->torch_dtype)))},
      {"context", context},
      {"max_tokens", f.max_tokens},
      {"llama_cpp_chunks", f.llama_cpp_chunks}};
  report["dataset_tokens"] = ids->size();
  report["tokens_evaluated"] = comparison->positions;
  report["windows"] = windows.size();
  report["weight_format"] = weight_format;
  report["kl_divergence"] = {{"mean", comparison->kld.mean},
                             {"median", comparison->kld.median},
                             {"p99", comparison->kld.p99},
                             {"max", comparison->kld.max}};
  report["top1_agreement"] = comparison->top1_agreement;
  report["baseline_perplexity"] = comparison->baseline_perplexity;
  report["candidate_perplexity"] = comparison->candidate_perplexity;
  report["ppl_increase"] = comparison->ppl_increase;
  report["max_abs_logit_diff"] =
      eval::MaxAbsDiff(baseline->first_window_logits, candidate->first_window_logits);
  report["max_abs_logit_diff_positions"] = windows[0].length - 1 - windows[0].first_scored;
  report["thresholds"] = {{"max_mean_kld", thresholds.max_mean_kld},
                          {"min_top1", thresholds.min_top1},
                          {"max_ppl_increase", thresholds.max_ppl_increase}};
  report["pass"] = failures.empty();
  report["failures"] = failures;
  report["wall_seconds"] = wall_seconds;
  report["threads"] = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  report["cpu"] = CpuName(1);
  report["date"] = UtcNow();
  const std::string text = report.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!f.output.empty()) {
    std::ofstream out(f.output);
    out << text;
    if (!out.good()) return Fail(absl::StrCat("cannot write --output ", f.output));
  }
  for (const std::string& failure : failures) std::fprintf(stderr, "tessera eval: FAIL: %s\n", failure.c_str());
  if (!failures.empty()) return kThresholdFailed;
  std::fprintf(stderr, "tessera eval: PASS (mean KL divergence %.5f, p99 %.4f, top-1 %.4f, perplexity %+.2f%%)\n",
               comparison->kld.mean, comparison->kld.p99, comparison->top1_agreement,
               100 * comparison->ppl_increase);
  return kPass;
}

}  // namespace tessera::cli
