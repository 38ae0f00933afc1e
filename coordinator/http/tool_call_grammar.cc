#include "coordinator/http/tool_call_grammar.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/structured/constraint_grammar.h"
#include "common/structured/json_schema_grammar.h"
#include "coordinator/http/openai_request.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
absl::StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const std::vector<ToolFunction>& functions,
                                            const std::vector<size_t>& tool_indices, bool parallel) {
  // Llama 3.1's template spells the arguments "parameters"; the others "arguments".
  const char* args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  std::vector<std::string> alternatives;
  std::string rules;
  for (size_t i : tool_indices) {
    const ToolFunction& f = functions[i];
    structured::JsonGrammarOptions options;
    options.root_rule = absl::StrCat("tool", i, "-args");
    options.rule_prefix = absl::StrCat("tool", i, "-args-");
    std::string args;
    if (f.parameters.is_null()) {
      args = structured::JsonObjectGbnf(options);
    } else {
      absl::StatusOr<std::string> schema = structured::JsonSchemaToGbnf(f.parameters, options);
      if (!schema.ok()) {
        const std::string param = absl::StrCat("tools[", i, "].function.parameters");
        absl::Status s(schema.status().code(), absl::StrCat(param, ": ", schema.status().message()));
        s.SetPayload(kParamPayload, absl::Cord("tools"));
        return s;
      }
      args = *std::move(schema);
    }
    const std::string call_rule = absl::StrCat("tool-call-", i);
    // The spaces the templates write are optional: a tokenizer whose pieces cannot end
    // or start with one must still be able to write the call.
    absl::StrAppend(&rules, call_rule, " ::= \"{\" tool-sp \"\\\"name\\\"\" tool-sp \":\" tool-sp ",
                    structured::GbnfLiteral(absl::StrCat("\"", f.name, "\"")), " tool-sp \",\" tool-sp ",
                    structured::GbnfLiteral(absl::StrCat("\"", args_key, "\"")), " tool-sp \":\" tool-sp ", options.root_rule,
                    " tool-sp \"}\"\n", args, "\n");
    alternatives.push_back(call_rule);
  }
  std::string root;
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      root = parallel ? "root ::= call (\";\" tool-sp call)*" : "root ::= call";
      break;
    case ToolCallFormat::kHermes:
      root = absl::StrCat("root ::= block", parallel ? " (\"\\n\" block)*" : "", "\n",
                          "block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"");
      break;
    case ToolCallFormat::kMistral:
      root = absl::StrCat("root ::= \"[TOOL_CALLS]\"? tool-sp \"[\" call", parallel ? " (\",\" tool-sp call)*" : "",
                          " \"]\"");
      break;
  }
  return absl::StrCat(root, "\ncall ::= ", absl::StrJoin(alternatives, " | "), "\ntool-sp ::= \" \"?\n", rules);
}

absl::StatusOr<std::string> ToolChoiceGrammar(ToolCallFormat format, const ToolRequest& tools) {
  std::vector<size_t> indices;
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    if (tools.choice == ToolChoice::kRequired || tools.functions[i].name == tools.named) indices.push_back(i);
  }
  if (indices.empty() || (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kNamed)) {
    return absl::InvalidArgumentError("a tool-call grammar needs tool_choice \"required\" or a named function");
  }
  return ToolCallGrammar(format, tools.functions, indices,
                         tools.choice == ToolChoice::kRequired && tools.parallel_tool_calls);
}

}  // namespace tessera::http
