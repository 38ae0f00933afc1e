#include "kernels/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"
#include "cudnn_frontend.h"

// The frontend's dynamic loading reads this handle and never sets it (see the header).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace tessera::kernels {
namespace gpu {
// Defined in cudnn_attention_kernels.cu (which stays free of Abseil and cuDNN, so the
// declaration lives here rather than in launchers.h, the backend's header).
bool LaunchCudnnSdpaMetadata(const int32_t* query_start, const int32_t* context_lens,
                             const int32_t* block_tables, int num_seqs, int max_blocks_per_seq,
                             int graph_batch, int graph_pages, int32_t q_stride,
                             int32_t o_stride, int32_t* seq_len_q, int32_t* seq_len_kv,
                             int32_t* ragged_q, int32_t* ragged_o, int32_t* page_table,
                             cudaStream_t stream, std::string* error);
}  // namespace gpu

namespace {

namespace fe = cudnn_frontend;

// The soname of cuDNN 9; a later major has another ABI and another soname.
constexpr char kCudnnLibrary[] = "libcudnn.so.9";

// Variant-pack ids of the graph's tensors.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidSeqLenQ,
  kUidSeqLenKv,
  kUidRaggedQ,
  kUidRaggedO,
  kUidPageTableK,
  kUidPageTableV,
};

struct CudnnLibrary {
  absl::Status status;
  int64_t version = 0;
};

// Opens libcudnn once per process and publishes it to the frontend only when it is usable:
// the frontend caches each symbol it resolves in a static, so it must never see a null or
// rejected handle.
const CudnnLibrary& LoadCudnn() {
  static const CudnnLibrary* const library = [] {
    auto* lib = new CudnnLibrary;
    dlerror();
    void* handle = dlopen(kCudnnLibrary, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      lib->status = absl::UnavailableError(absl::StrCat(
          "cuDNN is not available: dlopen(", kCudnnLibrary, ") failed: ", why ? why : "unknown"));
      return lib;
    }
    using VersionFn = size_t (*)();
    auto get_version = reinterpret_cast<VersionFn>(dlsym(handle, "cudnnGetVersion"));
    auto get_cudart = reinterpret_cast<VersionFn>(dlsym(handle, "cudnnGetCudartVersion"));
    if (get_version == nullptr || get_cudart == nullptr) {
      lib->status = absl::UnavailableError(
          absl::StrCat(kCudnnLibrary, " lacks cudnnGetVersion/cudnnGetCudartVersion"));
      dlclose(handle);
      return lib;
    }
    lib->version = static_cast<int64_t>(get_version());
    const int64_t cudart = static_cast<int64_t>(get_cudart());
    if (lib->version < CudnnPagedPrefill::kMinCudnnVersion) {
      lib->status = absl::UnavailableError(absl::StrCat(
          "cuDNN ", lib->version, " is too old for paged SDPA with ragged queries (needs ",
          CudnnPagedPrefill::kMinCudnnVersion, ")"));
      dlclose(handle);
      return lib;
    }
    // A cuDNN built for another CUDA major fails in obscure ways on its first launch.
    if (cudart / 1000 != CUDART_VERSION / 1000) {
      lib->status = absl::UnavailableError(absl::StrCat(
          "cuDNN ", lib->version, " was built for CUDA runtime ", cudart,
          ", this binary uses CUDA ", CUDART_VERSION));
      dlclose(handle);
      return lib;
    }
    fe::cudnn_dlhandle = handle;  // Kept open for the process: the frontend caches symbols.
    return lib;
  }();
  return *library;
}

absl::Status CudaError(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// A frontend error as a status: what cuDNN cannot run is Unimplemented (the caller may fall
// back to another kernel), anything else is a failure.
absl::Status FrontendStatus(fe::error_t error, const char* step) {
  if (error.is_good()) return absl::OkStatus();
  const std::string message =
      absl::StrCat("cuDNN SDPA ", step, ": ", error.get_message());
  switch (error.get_code()) {
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

int64_t NextPowerOfTwo(int64_t x, int64_t at_least) {
  int64_t p = at_least;
  while (p < x) p *= 2;
  return p;
}

// Int32 entries of each metadata section are padded to 16 (64 bytes), so every tensor
// cuDNN reads starts aligned.
int64_t AlignInts(int64_t n) { return (n + 15) / 16 * 16; }

// Everything that shapes a compiled graph.
struct GraphKey {
  int batch = 0;        // Bucket of num_seqs.
  int max_q = 0;        // Bucket of the longest query run.
  int max_kv = 0;       // Bucket of the longest context.
  int pages = 0;        // Page-table width: ceil(max_kv / block_size).
  int num_blocks = 0;   // The caches' container.
  int block_size = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int q_stride = 0;
  int window = 0;
  uint32_t scale_bits = 0;  // The softmax scale is compiled into the graph.

  friend bool operator==(const GraphKey& a, const GraphKey& b) {
    return a.batch == b.batch && a.max_q == b.max_q && a.max_kv == b.max_kv &&
           a.pages == b.pages && a.num_blocks == b.num_blocks &&
           a.block_size == b.block_size && a.num_q_heads == b.num_q_heads &&
           a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
           a.q_stride == b.q_stride && a.window == b.window && a.scale_bits == b.scale_bits;
  }
  template <typename H>
  friend H AbslHashValue(H h, const GraphKey& k) {
    return H::combine(std::move(h), k.batch, k.max_q, k.max_kv, k.pages, k.num_blocks,
                      k.block_size, k.num_q_heads, k.num_kv_heads, k.head_dim, k.q_stride,
                      k.window, k.scale_bits);
  }
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

// Where each per-step tensor lives in the metadata buffer (int32 entries).
struct MetadataLayout {
  explicit MetadataLayout(const GraphKey& key)
      : seq_len_q(0),
        seq_len_kv(seq_len_q + AlignInts(key.batch)),
        ragged_q(seq_len_kv + AlignInts(key.batch)),
        ragged_o(ragged_q + AlignInts(key.batch + 1)),
        page_table(ragged_o + AlignInts(key.batch + 1)),
        total(page_table + AlignInts(static_cast<int64_t>(key.batch) * key.pages)) {}
  int64_t seq_len_q, seq_len_kv, ragged_q, ragged_o, page_table, total;
};

// Describes one step shape to cuDNN and compiles it (the header gives the layouts). A
// [rows, 1, cols, 1] int32 tensor is cuDNN's format for the per-sequence inputs.
absl::StatusOr<CachedGraph> BuildGraph(cudnnHandle_t handle, const GraphKey& key,
                                       float scale) {
  const int64_t b = key.batch;
  const int64_t hq = key.num_q_heads;
  const int64_t hkv = key.num_kv_heads;
  const int64_t d = key.head_dim;
  const int64_t sq = key.max_q;
  const int64_t bs = key.block_size;
  const int64_t q_row = key.q_stride;
  const int64_t o_row = hq * d;

  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto int32_tensor = [&](const char* name, int64_t uid, int64_t rows, int64_t cols) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({rows, 1, cols, 1})
                             .set_stride({cols, cols, 1, 1})
                             .set_data_type(fe::DataType_t::INT32));
  };
  auto seq_len_q = int32_tensor("seq_len_q", kUidSeqLenQ, b, 1);
  auto seq_len_kv = int32_tensor("seq_len_kv", kUidSeqLenKv, b, 1);
  auto ragged_q = int32_tensor("ragged_q", kUidRaggedQ, b + 1, 1);
  auto ragged_o = int32_tensor("ragged_o", kUidRaggedO, b + 1, 1);
  // K and V share one table, but each needs its own graph tensor.
  auto table_k = int32_tensor("page_table_k", kUidPageTableK, b, key.pages);
  auto table_v = int32_tensor("page_table_v", kUidPageTableV, b, key.pages);

  // [B, H, S, D] views: a token's row is q_row (o_row) elements, heads are adjacent within
  // it; the batch stride is nominal, the ragged offsets place each sequence.
  auto q = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("q")
                             .set_uid(kUidQ)
                             .set_dim({b, hq, sq, d})
                             .set_stride({sq * q_row, d, q_row, 1})
                             .set_data_type(fe::DataType_t::BFLOAT16));
  q->set_ragged_offset(ragged_q);
  // NHD pages as cuDNN's [num_blocks, kv_heads, block_size, head_dim] container.
  auto cache = [&](const char* name, int64_t uid) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({key.num_blocks, hkv, bs, d})
                             .set_stride({bs * hkv * d, d, hkv * d, 1})
                             .set_data_type(fe::DataType_t::BFLOAT16));
  };
  auto k = cache("k_cache", kUidK);
  auto v = cache("v_cache", kUidV);

  auto attributes = fe::graph::SDPA_attributes()
                        .set_name("paged_prefill")
                        .set_generate_stats(false)
                        .set_attn_scale(scale)
                        .set_padding_mask(true)
                        .set_seq_len_q(seq_len_q)
                        .set_seq_len_kv(seq_len_kv)
                        // Causal with the diagonal at each sequence's bottom right: the
                        // step's queries are the last seq_len_q of seq_len_kv positions.
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT)
                        .set_diagonal_band_right_bound(0)
                        .set_paged_attention_k_table(table_k)
                        .set_paged_attention_v_table(table_v)
                        .set_paged_attention_max_seq_len_kv(key.max_kv);
  if (key.window > 0) attributes.set_diagonal_band_left_bound(key.window);

  try {
    auto outputs = graph->sdpa(q, k, v, std::move(attributes));
    outputs[0]
        ->set_output(true)
        .set_uid(kUidO)
        .set_dim({b, hq, sq, d})
        .set_stride({sq * o_row, d, o_row, 1})
        .set_data_type(fe::DataType_t::BFLOAT16)
        .set_ragged_offset(ragged_o);

    RETURN_IF_ERROR(FrontendStatus(graph->validate(), "validate"));
    RETURN_IF_ERROR(FrontendStatus(graph->build_operation_graph(handle), "operation graph"));
    RETURN_IF_ERROR(
        FrontendStatus(graph->create_execution_plans({fe::HeurMode_t::A}), "heuristics"));
    RETURN_IF_ERROR(FrontendStatus(graph->check_support(), "support check"));
    RETURN_IF_ERROR(FrontendStatus(
        graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "plan build"));
    CachedGraph built;
    RETURN_IF_ERROR(
        FrontendStatus(graph->get_workspace_size(built.workspace_bytes), "workspace size"));
    built.graph = std::move(graph);
    return built;
  } catch (const std::exception& e) {
    // Graph::sdpa throws when no SDPA implementation accepts the attributes.
    const std::string message = absl::StrCat("cuDNN SDPA graph: ", e.what());
    if (std::string_view(e.what()).find("No suitable implementation") != std::string_view::npos) {
      return absl::UnimplementedError(message);
    }
    return absl::InternalError(message);
  }
}

// Makes *buffer hold at least `bytes`. Work already queued on `stream` may still read the
// old buffer, so it is drained before the buffer is freed; growth is rare (buffers only
// grow), so the wait is too.
absl::Status Reserve(size_t bytes, cudaStream_t stream, void** buffer, size_t* capacity) {
  if (bytes <= *capacity) return absl::OkStatus();
  if (*buffer != nullptr) {
    RETURN_IF_ERROR(CudaError(cudaStreamSynchronize(stream), "cuDNN SDPA buffer growth"));
    RETURN_IF_ERROR(CudaError(cudaFree(*buffer), "cudaFree"));
    *buffer = nullptr;
    *capacity = 0;
  }
  RETURN_IF_ERROR(CudaError(cudaMalloc(buffer, bytes),
                            absl::StrCat("cudaMalloc of ", bytes, " bytes for cuDNN SDPA")));
  *capacity = bytes;
  return absl::OkStatus();
}

}  // namespace

struct CudnnPagedPrefill::State {
  cudnnHandle_t handle = nullptr;
  absl::flat_hash_map<GraphKey, CachedGraph> graphs;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* metadata = nullptr;
  size_t metadata_bytes = 0;
};

CudnnPagedPrefill::CudnnPagedPrefill(int64_t cudnn_version)
    : cudnn_version_(cudnn_version), state_(std::make_unique<State>()) {}

CudnnPagedPrefill::~CudnnPagedPrefill() {
  // Graphs hold cuDNN descriptors: release them before the handle.
  state_->graphs.clear();
  if (state_->handle != nullptr) {
    try {
      (void)fe::detail::destroy_handle(state_->handle);
    } catch (const std::exception&) {
      // Unreachable once Create succeeded (the symbol resolved then); a destructor must
      // not throw regardless.
    }
  }
  cudaFree(state_->workspace);
  cudaFree(state_->metadata);
}

absl::StatusOr<std::unique_ptr<CudnnPagedPrefill>> CudnnPagedPrefill::Create() {
  // The library first: opening it needs no device, so machines without one still check
  // that cuDNN is installed and recent enough.
  const CudnnLibrary& library = LoadCudnn();
  if (!library.status.ok()) return library.status;
  int devices = 0;
  const cudaError_t device_error = cudaGetDeviceCount(&devices);
  if (device_error != cudaSuccess || devices == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cuDNN ", library.version, " loaded, but there is no CUDA device: ",
        device_error != cudaSuccess ? cudaGetErrorString(device_error) : "none visible"));
  }

  auto prefill = absl::WrapUnique(new CudnnPagedPrefill(library.version));
  try {
    const cudnnStatus_t status = fe::detail::create_handle(&prefill->state_->handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      prefill->state_->handle = nullptr;
      return absl::UnavailableError(
          absl::StrCat("cudnnCreate: ", fe::detail::get_error_string(status)));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cudnnCreate: ", e.what()));
  }
  return prefill;
}

size_t CudnnPagedPrefill::num_cached_graphs() const { return state_->graphs.size(); }

absl::Status CudnnPagedPrefill::CheckSupported(const KvCacheShape& shape, int num_q_heads,
                                               int q_stride) {
  if (shape.dtype != DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN paged SDPA runs BF16 caches only, not ", DTypeName(shape.dtype),
        " (FP8 caches carry per-row scales cuDNN does not read)"));
  }
  if (shape.head_dim != 64 && shape.head_dim != 128) {
    return absl::UnimplementedError(
        absl::StrCat("cuDNN paged SDPA candidate: head_dim ", shape.head_dim,
                     " is not 64 or 128"));
  }
  if (shape.num_kv_heads <= 0 || num_q_heads <= 0 || num_q_heads % shape.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_q_heads ", num_q_heads,
                                                   " is not a multiple of num_kv_heads ",
                                                   shape.num_kv_heads));
  }
  if (q_stride < num_q_heads * shape.head_dim || q_stride % 8 != 0) {
    // Multiples of 8 BF16 keep every row 16-byte aligned, which cuDNN's loads assume.
    return absl::InvalidArgumentError(absl::StrCat(
        "q_stride ", q_stride, " must be a multiple of 8 and at least num_q_heads * head_dim = ",
        num_q_heads * shape.head_dim));
  }
  if (shape.block_size <= 0 || shape.num_blocks <= 0) {
    return absl::InvalidArgumentError("empty KV cache shape");
  }
  return absl::OkStatus();
}

absl::Status CudnnPagedPrefill::Run(const void* q, int q_stride, const AttentionBatch& batch,
                                    const KvCacheShape& shape, const void* k_cache,
                                    const void* v_cache, int num_q_heads, float scale,
                                    void* out, cudaStream_t stream,
                                    const CudnnHostBatchInfo& host) {
  RETURN_IF_ERROR(CheckSupported(shape, num_q_heads, q_stride));
  if (batch.num_tokens == 0 || batch.num_seqs == 0) return absl::OkStatus();
  if (host.max_query_len <= 0 || host.max_context_len < host.max_query_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host bounds max_query_len ", host.max_query_len, " and max_context_len ",
        host.max_context_len, " do not describe a step with ", batch.num_tokens, " tokens"));
  }
  if (static_cast<int64_t>(batch.max_blocks_per_seq) * shape.block_size <
      host.max_context_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block tables of ", batch.max_blocks_per_seq, " blocks of ", shape.block_size,
        " cannot hold a context of ", host.max_context_len));
  }
  const int o_stride = num_q_heads * shape.head_dim;
  if (static_cast<int64_t>(batch.num_tokens) * std::max(q_stride, o_stride) >
      std::numeric_limits<int32_t>::max()) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN SDPA: ", batch.num_tokens, " tokens overflow the int32 ragged offsets"));
  }

  GraphKey key;
  key.batch = static_cast<int>(NextPowerOfTwo(batch.num_seqs, 1));
  key.max_q = static_cast<int>(NextPowerOfTwo(host.max_query_len, 16));
  key.max_kv = static_cast<int>(NextPowerOfTwo(host.max_context_len, 64));
  key.pages = (key.max_kv + shape.block_size - 1) / shape.block_size;
  key.num_blocks = shape.num_blocks;
  key.block_size = shape.block_size;
  key.num_q_heads = num_q_heads;
  key.num_kv_heads = shape.num_kv_heads;
  key.head_dim = shape.head_dim;
  key.q_stride = q_stride;
  key.window = batch.sliding_window > 0 ? batch.sliding_window : 0;
  std::memcpy(&key.scale_bits, &scale, sizeof(scale));

  State& state = *state_;
  auto it = state.graphs.find(key);
  if (it == state.graphs.end()) {
    ASSIGN_OR_RETURN(CachedGraph built, BuildGraph(state.handle, key, scale));
    it = state.graphs.emplace(key, std::move(built)).first;
  }
  const CachedGraph& graph = it->second;
  RETURN_IF_ERROR(Reserve(static_cast<size_t>(graph.workspace_bytes), stream, &state.workspace,
                          &state.workspace_bytes));
  const MetadataLayout layout(key);
  RETURN_IF_ERROR(Reserve(static_cast<size_t>(layout.total) * sizeof(int32_t), stream,
                          &state.metadata, &state.metadata_bytes));

  int32_t* metadata = static_cast<int32_t*>(state.metadata);
  std::string error;
  if (!gpu::LaunchCudnnSdpaMetadata(
          batch.query_start, batch.context_lens, batch.block_tables, batch.num_seqs,
          batch.max_blocks_per_seq, key.batch, key.pages, q_stride, o_stride,
          metadata + layout.seq_len_q, metadata + layout.seq_len_kv, metadata + layout.ragged_q,
          metadata + layout.ragged_o, metadata + layout.page_table, stream, &error)) {
    return absl::InternalError(error);
  }

  std::unordered_map<int64_t, void*> pack = {
      {kUidQ, const_cast<void*>(q)},
      {kUidK, const_cast<void*>(k_cache)},
      {kUidV, const_cast<void*>(v_cache)},
      {kUidO, out},
      {kUidSeqLenQ, metadata + layout.seq_len_q},
      {kUidSeqLenKv, metadata + layout.seq_len_kv},
      {kUidRaggedQ, metadata + layout.ragged_q},
      {kUidRaggedO, metadata + layout.ragged_o},
      {kUidPageTableK, metadata + layout.page_table},
      {kUidPageTableV, metadata + layout.page_table},
  };
  try {
    const cudnnStatus_t status = fe::detail::set_stream(state.handle, stream);
    if (status != CUDNN_STATUS_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("cudnnSetStream: ", fe::detail::get_error_string(status)));
    }
    // cudnnBackendExecute reports launch failures; faults inside the kernels surface at
    // the caller's next synchronisation, as for any asynchronous launch.
    return FrontendStatus(graph.graph->execute(state.handle, pack, state.workspace), "execute");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cuDNN SDPA execute: ", e.what()));
  }
}

}  // namespace tessera::kernels
