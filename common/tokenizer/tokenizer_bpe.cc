#include "common/tokenizer/tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode_util.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Splits one entry of `model.merges`: either "left right" (tokenizers < 0.20) or
// ["left", "right"].
bool SplitMerge(const Json& entry, std::string* left, std::string* right) {
  if (entry.is_string()) {
    const std::string& s = entry.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return false;
    *left = s.substr(0, space);
    *right = s.substr(space + 1);
  } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
             entry[1].is_string()) {
    *left = entry[0].get<std::string>();
    *right = entry[1].get<std::string>();
  } else {
    return false;
  }
  return !left->empty() && !right->empty();
}

// The byte of a byte-fallback piece spelled exactly as Hugging Face looks it up
// (`<0x0A>`, upper-case hex), or -1.
int ParseBytePiece(absl::string_view piece) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = hex(piece[3]);
  const int lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const Json& model, absl::string_view source) {
  if (!model.is_object()) return Invalid(source, "field \"model\" must be an object");
  BpeModel m;

  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object() || vocab->empty()) {
    return Invalid(source, "field \"model.vocab\" is missing or not a non-empty object");
  }
  int64_t max_id = -1;
  for (const auto& [piece, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
      return Invalid(source, absl::StrCat("field \"model.vocab\": id of piece \"", piece,
                                          "\" must be a non-negative integer, got ", id.dump()));
    }
    max_id = std::max(max_id, id.get<int64_t>());
  }
  if (max_id >= static_cast<int64_t>(vocab->size()) * 2 + 1024) {
    // A handful of holes is harmless; a huge id would make pieces_ absurdly large.
    return Invalid(source, absl::StrCat("field \"model.vocab\": id ", max_id,
                                        " is far beyond the vocabulary size ", vocab->size()));
  }
  m.pieces_.assign(max_id + 1, std::string());
  m.vocab_.reserve(vocab->size());
  std::vector<bool> seen(max_id + 1, false);
  m.byte_ids_.fill(-1);
  m.byte_of_id_.assign(max_id + 1, -1);
  for (const auto& [piece, id_json] : vocab->items()) {
    const int32_t id = static_cast<int32_t>(id_json.get<int64_t>());
    if (seen[id]) {
      return Invalid(source, absl::StrCat("field \"model.vocab\": id ", id, " is used by both \"",
                                          m.pieces_[id], "\" and \"", piece, "\""));
    }
    seen[id] = true;
    m.pieces_[id] = piece;
    m.vocab_.emplace(piece, id);
    m.max_piece_bytes_ = std::max(m.max_piece_bytes_, piece.size());
    if (const int byte = ParseBytePiece(piece); byte >= 0) {
      m.byte_ids_[byte] = id;
      m.byte_of_id_[id] = static_cast<int16_t>(byte);
    }
  }

  const auto read_bool = [&](const char* key, bool* out) -> absl::Status {
    auto it = model.find(key);
    if (it == model.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_boolean()) {
      return Invalid(source, absl::StrCat("field \"model.", key, "\" must be a boolean, got ",
                                          it->dump()));
    }
    *out = it->get<bool>();
    return absl::OkStatus();
  };
  absl::Status status;
  status.Update(read_bool("byte_fallback", &m.byte_fallback_));
  status.Update(read_bool("fuse_unk", &m.fuse_unk_));
  status.Update(read_bool("ignore_merges", &m.ignore_merges_));
  if (!status.ok()) return status;

  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->empty())) {
      return absl::UnimplementedError(
          absl::StrCat(source, ": field \"model.", key, "\" = ", it->dump(),
                       " is not supported (only Llama-style BPE without word affixes)"));
    }
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number()) {
      return Invalid(source, absl::StrCat("field \"model.dropout\" must be a number, got ",
                                          it->dump()));
    }
    // Dropout is a training-time regulariser; inference always takes every merge.
  }

  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) {
      return Invalid(source,
                     absl::StrCat("field \"model.unk_token\" must be a string, got ", it->dump()));
    }
    m.unk_id_ = m.IdForPiece(it->get<std::string>());
    if (m.unk_id_ < 0) {
      return Invalid(source, absl::StrCat("field \"model.unk_token\": ", it->dump(),
                                          " is not in model.vocab"));
    }
  }

  auto merges = model.find("merges");
  if (merges == model.end() || merges->is_null()) {
    return Invalid(source, "field \"model.merges\" is missing");
  }
  if (!merges->is_array()) return Invalid(source, "field \"model.merges\" must be an array");
  m.merges_.reserve(merges->size());
  std::string left, right;
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const Json& entry = (*merges)[rank];
    if (!SplitMerge(entry, &left, &right)) {
      return Invalid(source, absl::StrCat("field \"model.merges\"[", rank,
                                          "] must be \"left right\" or [left, right], got ",
                                          entry.dump()));
    }
    const int32_t left_id = m.IdForPiece(left);
    const int32_t right_id = m.IdForPiece(right);
    const int32_t new_id = m.IdForPiece(left + right);
    if (left_id < 0 || right_id < 0 || new_id < 0) {
      return Invalid(source, absl::StrCat("field \"model.merges\"[", rank, "] ", entry.dump(),
                                          " uses a piece that is not in model.vocab"));
    }
    for (int32_t operand : {left_id, right_id}) {
      if (operand == m.unk_id_ || m.ByteForId(operand) >= 0) m.cuttable_ = false;
    }
    // The first occurrence wins, like Hugging Face's HashMap::insert of the lower rank.
    m.merges_.emplace(PairKey(left_id, right_id),
                      Merge{static_cast<int32_t>(rank), new_id});
  }
  return m;
}

int32_t BpeModel::IdForPiece(absl::string_view piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& BpeModel::PieceForId(int32_t id) const {
  static const std::string* const kEmpty = new std::string();
  if (id < 0 || id >= size()) return *kEmpty;
  return pieces_[id];
}

int BpeModel::ByteForId(int32_t id) const {
  if (id < 0 || id >= size()) return -1;
  return byte_of_id_[id];
}

bool BpeModel::IsSafeCut(absl::string_view word, size_t pos) const {
  if (pos == 0 || pos >= word.size()) return false;
  // The characters on both sides must be pieces themselves: byte fallback and unknown
  // characters (fused with their neighbours) stay inside one chunk.
  size_t left = pos - 1;
  while (left > 0 && (static_cast<uint8_t>(word[left]) & 0xC0) == 0x80) --left;
  if (IdForPiece(word.substr(left, pos - left)) < 0) return false;
  if (IdForPiece(word.substr(pos, Utf8CharLength(word, pos))) < 0) return false;
  // A merge across `pos` would make a piece spanning it; every piece is at most
  // max_piece_bytes_ long, so only spans starting that close need a look.
  const size_t first = pos > max_piece_bytes_ ? pos - max_piece_bytes_ + 1 : 0;
  for (size_t begin = first; begin < pos; ++begin) {
    const size_t last = std::min(word.size(), begin + max_piece_bytes_);
    for (size_t end = pos + 1; end <= last; ++end) {
      if (vocab_.contains(word.substr(begin, end - begin))) return false;
    }
  }
  return true;
}

void BpeModel::EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  // Long enough to make the per-symbol bookkeeping of a chunk small, short enough that
  // a cut is found within a few chunks of ordinary text.
  constexpr size_t kChunkBytes = 16 << 10;
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = IdForPiece(word); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  if (word.size() <= kChunkBytes || !cuttable_) {
    EncodeChunk(word, ids);
    return;
  }
  size_t start = 0;
  for (size_t pos = kChunkBytes; pos < word.size(); ++pos) {
    if ((static_cast<uint8_t>(word[pos]) & 0xC0) == 0x80 || !IsSafeCut(word, pos)) continue;
    EncodeChunk(word.substr(start, pos - start), ids);
    start = pos;
    pos = start + kChunkBytes - 1;
  }
  EncodeChunk(word.substr(start), ids);
}

void BpeModel::EncodeChunk(absl::string_view word, std::vector<int32_t>* ids) const {
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  int32_t pending_unk_len = 0;  // Bytes of unknown characters not yet emitted.
  const auto flush_unk = [&] {
    if (pending_unk_len > 0) symbols.push_back(unk_id_);
    pending_unk_len = 0;
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = Utf8CharLength(word, pos);
    const absl::string_view ch = word.substr(pos, len);
    pos += len;
    if (const int32_t id = IdForPiece(ch); id >= 0) {
      flush_unk();
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        flush_unk();
        for (char c : ch) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;
    if (!fuse_unk_) flush_unk();
    pending_unk_len += static_cast<int32_t>(len);
  }
  flush_unk();
  MergeSymbols(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  // A word that could not be cut must not leave its size pinned to this thread.
  if (symbols.capacity() > (size_t{1} << 16)) std::vector<int32_t>().swap(symbols);
}

void BpeModel::MergeSymbols(std::vector<int32_t>* symbols) const {
  constexpr size_t kShortWord = 64;
  std::vector<int32_t>& s = *symbols;
  if (s.size() < 2) return;
  if (s.size() > kShortWord) {
    MergeLongWord(symbols);
    return;
  }
  // Short words (nearly all): rescan the pair ranks, updating only the pairs a merge
  // touched. No allocation, and cheaper than a heap at these sizes.
  constexpr int32_t kNone = INT32_MAX;
  std::array<int32_t, kShortWord> rank;
  std::array<int32_t, kShortWord> merged;
  size_t n = s.size();
  const auto look = [&](size_t i) {
    const Merge* m = FindMerge(s[i], s[i + 1]);
    rank[i] = m == nullptr ? kNone : m->rank;
    merged[i] = m == nullptr ? -1 : m->new_id;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    s[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      s[i] = s[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) look(best);
    if (best > 0) look(best - 1);
  }
  s.resize(n);
}

void BpeModel::MergeLongWord(std::vector<int32_t>* symbols) const {
  // Symbols form a doubly linked list over a vector so that a merge is O(1) and stale
  // queue entries can be recognised (alive == false marks a symbol merged into its left).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> list;
  list.reserve(symbols->size());
  for (size_t i = 0; i < symbols->size(); ++i) {
    list.push_back(Symbol{(*symbols)[i], static_cast<int32_t>(i) - 1,
                          i + 1 < symbols->size() ? static_cast<int32_t>(i + 1) : -1, true});
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    // Lowest rank first; on ties the leftmost pair, as Hugging Face's BinaryHeap does.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(list.size());
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(heap_storage));
  for (size_t i = 0; i + 1 < list.size(); ++i) {
    if (const Merge* m = FindMerge(list[i].id, list[i + 1].id)) {
      queue.push(Candidate{m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = list[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const Symbol right = list[cur.next];
    // The entry is stale when either side has been merged since it was queued.
    const Merge* m = FindMerge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    list[cur.next].alive = false;
    cur.id = top.new_id;
    cur.next = right.next;
    if (right.next >= 0) list[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* pm = FindMerge(list[cur.prev].id, cur.id)) {
        queue.push(Candidate{pm->rank, cur.prev, pm->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const Merge* nm = FindMerge(cur.id, list[cur.next].id)) {
        queue.push(Candidate{nm->rank, top.pos, nm->new_id});
      }
    }
  }
  symbols->clear();
  for (int32_t i = list.empty() ? -1 : 0; i >= 0; i = list[i].next) symbols->push_back(list[i].id);
}

}  // namespace tessera
