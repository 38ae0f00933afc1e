#include "common/chat_template/chat_template.h"

#include <cstdint>
#include <ctime>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/jinja_builtins.h"
#include "common/chat_template/jinja_eval.h"
#include "common/chat_template/jinja_parser.h"
#include "common/chat_template/jinja_text.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/gguf_model_dir.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using jinja::Value;

// Python's datetime.strftime for the codes chat templates use; C's strftime agrees on them
// in the C locale.
std::string FormatTime(std::chrono::system_clock::time_point now, const std::string& format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&t, &local);
  std::string out(format.size() * 8 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
  out.resize(n);
  return out;
}

// Hugging Face's continue_final_message: cut the prompt after the last occurrence of the
// final message's content (stripped, since templates often trim it), keeping its leading
// whitespace as the template wrote it and its trailing whitespace only if the template kept it.
absl::StatusOr<std::string> CutAfterFinalMessage(std::string rendered, const std::string& final_content) {
  const std::string stripped = jinja::PyStrip(final_content, std::nullopt, true, true);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message does not appear in the prompt the chat template "
        "renders");
  }
  const std::string lstripped = jinja::PyStrip(final_content, std::nullopt, true, false);
  if (rendered.compare(at, lstripped.size(), final_content) == 0) {
    rendered.resize(at + lstripped.size());
  } else {
    rendered.resize(at + stripped.size());
  }
  return rendered;
}

// JSON as the Python objects json.loads gives a template: dicts keep their key order.
Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      // Python's ints have no bound; past int64 the nearest double is the best on offer.
      if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(j.get<double>());
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::ValueDict items;
      items.reserve(j.size());
      for (const auto& [key, item] : j.items()) items.emplace_back(key, FromJson(item));
      return Value::Dict(std::move(items));
    }
    default:
      return Value::MakeNone();
  }
}

Value MessageValue(const ChatMessage& m) {
  jinja::ValueDict items = {{"role", Value(m.role)}, {"content", Value(m.content)}};
  if (m.fields.is_object()) {
    for (const auto& [key, item] : m.fields.items()) {
      if (key != "role" && key != "content") items.emplace_back(key, FromJson(item));
    }
  }
  return Value::Dict(std::move(items));
}

class JinjaChatTemplate : public ChatTemplate {
 public:
  JinjaChatTemplate(std::string source, jinja::Program program, std::string bos_token, std::string eos_token)
      : source_(std::move(source)),
        program_(std::move(program)),
        bos_token_(std::move(bos_token)),
        eos_token_(std::move(eos_token)) {}

  const std::string& source() const override { return source_; }

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override {
    // The variables Hugging Face's apply_chat_template passes (render_jinja_template).
    jinja::Globals globals;
    jinja::AddStandardGlobals(&globals);
    jinja::ValueList message_values;
    for (const ChatMessage& m : messages) {
      message_values.push_back(MessageValue(m));
    }
    globals["messages"] = Value::List(std::move(message_values));
    globals["add_generation_prompt"] = Value(options.add_generation_prompt);
    globals["bos_token"] = Value(bos_token_);
    globals["eos_token"] = Value(eos_token_);
    globals["tools"] = options.tools.is_null() ? Value::MakeNone() : FromJson(options.tools);
    globals["documents"] = Value::MakeNone();
    if (options.date_string.has_value()) globals["date_string"] = Value(*options.date_string);
    const auto now = options.now.value_or(std::chrono::system_clock::now());
    globals["strftime_now"] = Value::MakeFunction(
        "strftime_now", [now](jinja::Interpreter&, const jinja::CallArgs& args) -> absl::StatusOr<Value> {
          const Value* format = args.Get("format", 0);
          if (format == nullptr || !format->is_string()) return absl::InvalidArgumentError("strftime_now(format) takes a string");
          return Value(FormatTime(now, format->as_string()));
        });
    if (options.continue_final_message && options.add_generation_prompt) {
      return absl::InvalidArgumentError("continue_final_message and add_generation_prompt are mutually exclusive");
    }
    if (options.continue_final_message && messages.empty()) {
      return absl::InvalidArgumentError("continue_final_message needs at least one message");
    }
    jinja::Interpreter interpreter(jinja::RenderLimits{}, std::move(globals));
    absl::StatusOr<std::string> rendered = interpreter.Render(program_);
    if (!rendered.ok() || !options.continue_final_message) return rendered;
    return CutAfterFinalMessage(*std::move(rendered), messages.back().content);
  }

 private:
  std::string source_;
  jinja::Program program_;
  std::string bos_token_;
  std::string eos_token_;
};

// A special token in tokenizer_config.json: a string, or an AddedToken object.
std::string TokenString(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

// tokenizer_config.json's chat_template: a string, or named templates of which Hugging
// Face uses "default".
absl::StatusOr<std::string> TemplateFromConfig(const nlohmann::json& value, const std::filesystem::path& file) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const nlohmann::json& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return absl::NotFoundError(absl::StrCat(file.string(), ": chat_template lists named templates but no \"default\""));
  }
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": chat_template is neither a string nor a list"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromSource(std::string source, std::string bos_token,
                                                                       std::string eos_token) {
  ASSIGN_OR_RETURN(jinja::Program program, jinja::Parse(source));
  return std::unique_ptr<ChatTemplate>(
      new JinjaChatTemplate(std::move(source), std::move(program), std::move(bos_token), std::move(eos_token)));
}

namespace {

// tokenizer_config.json of `dir` as an object; empty when the file is absent.
absl::StatusOr<nlohmann::json> LoadTokenizerConfig(const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path dir, ResolveModelDir(model_path));
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) return nlohmann::json::object();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": not a JSON object"));
  }
  return config;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> FromSourceNamingOrigin(std::string source, const nlohmann::json& config,
                                                                     const std::filesystem::path& origin) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> loaded = ChatTemplate::FromSource(
      std::move(source), TokenString(config, "bos_token"), TokenString(config, "eos_token"));
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), absl::StrCat(origin.string(), ": ", loaded.status().message()));
  }
  return loaded;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::LoadOverride(const std::filesystem::path& dir,
                                                                         const std::filesystem::path& template_file) {
  ASSIGN_OR_RETURN(nlohmann::json config, LoadTokenizerConfig(dir));
  ASSIGN_OR_RETURN(std::string source, ReadFileToString(template_file));
  return FromSourceNamingOrigin(std::move(source), config, template_file);
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path dir, ResolveModelDir(model_path));
  ASSIGN_OR_RETURN(nlohmann::json config, LoadTokenizerConfig(dir));
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  std::string source;
  std::filesystem::path origin;
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  const std::filesystem::path json_path = dir / "chat_template.json";  // Processor-style models.
  if (std::filesystem::exists(jinja_path)) {
    ASSIGN_OR_RETURN(source, ReadFileToString(jinja_path));
    origin = jinja_path;
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    ASSIGN_OR_RETURN(source, TemplateFromConfig(config["chat_template"], config_path));
    origin = config_path;
  } else if (std::filesystem::exists(json_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(json_path));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("chat_template")) {
      return absl::InvalidArgumentError(absl::StrCat(json_path.string(), ": no chat_template in it"));
    }
    ASSIGN_OR_RETURN(source, TemplateFromConfig(j["chat_template"], json_path));
    origin = json_path;
  } else {
    return absl::NotFoundError(absl::StrCat("model folder ", dir.string(),
                                            " has no chat template (no chat_template.jinja and no chat_template "
                                            "in tokenizer_config.json)"));
  }
  return FromSourceNamingOrigin(std::move(source), config, origin);
}

}  // namespace tessera
