#include "common/structured/constraint_grammar.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/structured/json_schema_grammar.h"
#include "common/structured/regex_grammar.h"
#include "nlohmann/json.hpp"

namespace tessera::structured {

std::string GbnfLiteral(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7F) {
      out += absl::StrFormat("\\x%02X", u);
    } else {
      out += c;  // UTF-8 passes through; the parser decodes it.
    }
  }
  out += '"';
  return out;
}

absl::StatusOr<std::string> ConstraintToGbnf(const OutputConstraint& c) {
  switch (c.kind) {
    case OutputConstraint::Kind::kNone:
      return absl::InvalidArgumentError("no constraint");
    case OutputConstraint::Kind::kJsonSchema: {
      // ordered_json keeps the properties in the order the schema lists them.
      nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(c.text, nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) {
        return absl::InvalidArgumentError("json_schema is not valid JSON");
      }
      return JsonSchemaToGbnf(schema);
    }
    case OutputConstraint::Kind::kJsonObject:
      return JsonObjectGbnf();
    case OutputConstraint::Kind::kRegex: {
      ASSIGN_OR_RETURN(std::string expression, RegexToGbnf(c.text));
      return absl::StrCat("root ::= ", expression, "\n");
    }
    case OutputConstraint::Kind::kChoice: {
      if (c.choices.empty()) return absl::InvalidArgumentError("choice: the list is empty");
      std::string gbnf = "root ::= ";
      for (size_t i = 0; i < c.choices.size(); ++i) {
        if (c.choices[i].empty()) {
          return absl::InvalidArgumentError(absl::StrCat("choice[", i, "] is empty"));
        }
        if (i > 0) gbnf += " | ";
        gbnf += GbnfLiteral(c.choices[i]);
      }
      return gbnf + "\n";
    }
    case OutputConstraint::Kind::kGrammar:
      return c.text;
  }
  return absl::InternalError("unknown constraint kind");
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarCache::Get(const std::string& gbnf) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = index_.find(gbnf); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: a slow grammar does not hold up the others.
  ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> grammar, Grammar::FromGbnf(gbnf));
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(gbnf); it != index_.end()) return it->second->second;
  lru_.emplace_front(gbnf, grammar);
  index_[gbnf] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return grammar;
}

}  // namespace tessera::structured
