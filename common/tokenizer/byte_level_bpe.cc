#include "common/tokenizer/byte_level_bpe.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/tokenizer/byte_level_alphabet.h"
#include "common/tokenizer/vocabulary.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// The decoder must undo the byte-level spelling: ByteLevel, alone or in a Sequence.
absl::Status CheckDecoder(const Json& decoder, absl::string_view source) {
  const auto type_of = [](const Json& j) -> std::string {
    auto it = j.is_object() ? j.find("type") : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string type = type_of(decoder);
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array()) {
    for (const Json& step : decoder["decoders"]) {
      if (type_of(step) != "ByteLevel") {
        return absl::UnimplementedError(absl::StrCat(
            source, ": field \"decoder\": step ", step.dump(),
            " is not supported in a byte-level tokenizer (only ByteLevel)"));
      }
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      source, ": field \"decoder\" must be ByteLevel for a byte-level tokenizer, got ",
      decoder.dump()));
}

// Pre-tokens repeat (" the", ","): a per-thread map from a pre-token's bytes to its ids
// skips the byte mapping and the merges. Bounded by clearing when full (16k entries, about
// 1.5 MB a thread).
constexpr size_t kMaxCachedPreTokenBytes = 32;
constexpr size_t kMaxCacheEntries = 1 << 14;

struct PreTokenCache {
  uint64_t owner = 0;
  absl::flat_hash_map<std::string, std::vector<int32_t>> ids;
};

PreTokenCache& ThreadCache(uint64_t owner) {
  thread_local PreTokenCache cache;
  if (cache.owner != owner || cache.ids.size() >= kMaxCacheEntries) {
    cache.ids.clear();
    cache.owner = owner;
  }
  return cache;
}

uint64_t NextCacheOwner() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(BpeModel model, AddedTokens added,
                                             UnicodeNormalizer normalizer,
                                             ByteLevelPreTokenizer pre_tokenizer)
    : model_(std::move(model)),
      added_(std::move(added)),
      normalizer_(std::move(normalizer)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      cache_owner_(NextCacheOwner()) {}

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> ByteLevelBpeTokenizer::Create(
    const Json& tokenizer, const Json& config, absl::string_view tokenizer_source,
    absl::string_view config_source) {
  const Json null_json;
  auto field = [&](const char* key) -> const Json& {
    auto it = tokenizer.find(key);
    return it == tokenizer.end() ? null_json : *it;
  };
  ASSIGN_OR_RETURN(UnicodeNormalizer normalizer,
                   UnicodeNormalizer::FromJson(field("normalizer"), tokenizer_source));
  ASSIGN_OR_RETURN(ByteLevelPreTokenizer pre_tokenizer,
                   ByteLevelPreTokenizer::FromJson(field("pre_tokenizer"), tokenizer_source));
  RETURN_IF_ERROR(CheckDecoder(field("decoder"), tokenizer_source));
  ASSIGN_OR_RETURN(BpeModel model, BpeModel::FromJson(field("model"), tokenizer_source));
  if (model.byte_fallback()) {
    return absl::UnimplementedError(absl::StrCat(
        tokenizer_source, ": field \"model.byte_fallback\" is true in a byte-level tokenizer "
                          "(every byte already has a piece)"));
  }
  ASSIGN_OR_RETURN(AddedTokens added, AddedTokens::FromJson(field("added_tokens"), tokenizer_source));
  std::unique_ptr<ByteLevelBpeTokenizer> t(
      new ByteLevelBpeTokenizer(std::move(model), std::move(added), std::move(normalizer),
                                std::move(pre_tokenizer)));

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  for (int b = 0; b < 256; ++b) t->byte_ids_[b] = t->model_.IdForPiece(alphabet.CharForByte(b));
  t->piece_bytes_.resize(t->model_.size());
  for (int32_t id = 0; id < t->model_.size(); ++id) {
    const std::string& piece = t->model_.PieceForId(id);
    std::string bytes;
    bytes.reserve(piece.size());
    // A piece outside the alphabet (none in real files) decodes to its own spelling, as
    // Hugging Face's ByteLevel decoder does.
    if (!alphabet.Decode(piece, &bytes)) bytes = piece;
    t->piece_bytes_[id] = std::move(bytes);
  }

  t->vocab_size_ = t->model_.size();
  for (const AddedToken& a : t->added_.tokens()) t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  const ByteLevelBpeTokenizer* self = t.get();
  ASSIGN_OR_RETURN(t->specials_,
                   ResolveSpecialTokens(
                       tokenizer, config,
                       [self](absl::string_view piece) { return self->IdForPiece(piece); },
                       tokenizer_source, config_source));
  for (const auto* ids : {&t->specials_.prefix_ids, &t->specials_.suffix_ids}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= t->vocab_size_) {
        return Invalid(tokenizer_source, absl::StrCat("field \"post_processor\": special token id ",
                                                      id, " is outside the vocabulary of ",
                                                      t->vocab_size_));
      }
    }
  }
  return t;
}

void ByteLevelBpeTokenizer::EncodeUncached(absl::string_view pre_token,
                                           std::vector<int32_t>* ids) const {
  if (model_.ignore_merges()) {
    thread_local std::string spelled;
    spelled.clear();
    ByteLevelAlphabet::Get().Encode(pre_token, &spelled);
    if (const int32_t id = model_.IdForPiece(spelled); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  bool previous_unk = false;
  for (char c : pre_token) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      symbols.push_back(id);
      previous_unk = false;
    } else if (model_.unk_id() >= 0) {
      // A vocabulary trained without the full alphabet: Hugging Face's unknown handling.
      if (!(previous_unk && model_.fuse_unk())) symbols.push_back(model_.unk_id());
      previous_unk = true;
    }
  }
  model_.MergeSymbols(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

void ByteLevelBpeTokenizer::EncodePreToken(absl::string_view pre_token,
                                           std::vector<int32_t>* ids) const {
  if (pre_token.size() > kMaxCachedPreTokenBytes) {
    EncodeUncached(pre_token, ids);
    return;
  }
  PreTokenCache& cache = ThreadCache(cache_owner_);
  auto it = cache.ids.find(pre_token);
  if (it == cache.ids.end()) {
    std::vector<int32_t> encoded;
    EncodeUncached(pre_token, &encoded);
    it = cache.ids.emplace(std::string(pre_token), std::move(encoded)).first;
  }
  ids->insert(ids->end(), it->second.begin(), it->second.end());
}

std::vector<int32_t> ByteLevelBpeTokenizer::Encode(absl::string_view text,
                                                   const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) {
    ids.insert(ids.end(), specials_.prefix_ids.begin(), specials_.prefix_ids.end());
  }
  for (const AddedTokens::Segment& segment : added_.Split(text, options.parse_special_tokens, &options.plain_ranges)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    if (normalizer_.empty()) {
      EncodeSegment(segment.text, &ids);
    } else {
      EncodeSegment(normalizer_.Apply(segment.text), &ids);
    }
  }
  if (options.add_special_tokens) {
    ids.insert(ids.end(), specials_.suffix_ids.begin(), specials_.suffix_ids.end());
  }
  return ids;
}

void ByteLevelBpeTokenizer::EncodeSegment(absl::string_view segment,
                                          std::vector<int32_t>* ids) const {
  const size_t before = ids->size();
  absl::Status status = pre_tokenizer_.Split(
      segment, [&](absl::string_view pre_token) { EncodePreToken(pre_token, ids); });
  if (!status.ok()) {
    // Only a regex engine failure gets here; the segment as one word still encodes to
    // ids that decode to the same text.
    Log(LogLevel::kError, "tokenizer", "pre-tokenizer failed; encoding the text unsplit",
        {{"error", std::string(status.message())}});
    ids->resize(before);
    EncodeUncached(segment, ids);
  }
}

std::string ByteLevelBpeTokenizer::Decode(const std::vector<int32_t>& ids,
                                          bool skip_special_tokens) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;  // Nothing sensible to print.
    if (skip_special_tokens && IsSpecial(id)) continue;
    if (const AddedToken* added = added_.FindById(id)) {
      text += added->content;
    } else if (id < static_cast<int32_t>(piece_bytes_.size())) {
      text += piece_bytes_[id];
    }
  }
  return text;
}

bool ByteLevelBpeTokenizer::IsSpecial(int32_t id) const {
  return BpeVocabulary{model_, added_}.IsSpecial(specials_, id);
}

std::string ByteLevelBpeTokenizer::PieceForId(int32_t id) const {
  return BpeVocabulary{model_, added_}.PieceForId(id);
}

int32_t ByteLevelBpeTokenizer::IdForPiece(absl::string_view piece) const {
  return BpeVocabulary{model_, added_}.IdForPiece(piece);
}

}  // namespace tessera
