#include "common/flag_set.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tessera {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, value->empty() ? "" : "\"" + *value + "\"", false,
                    [value](const std::string& s) {
                      *value = s;
                      return true;
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* value, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*value), false, [value](const std::string& s) {
                      char* end = nullptr;
                      errno = 0;
                      const long long v = std::strtoll(s.c_str(), &end, 10);
                      if (s.empty() || *end != '\0' || errno != 0) return false;
                      *value = v;
                      return true;
                    }});
}

void FlagSet::Float(const std::string& name, double* value, const std::string& help) {
  std::ostringstream def;
  def << *value;
  flags_.push_back({name, help, def.str(), false, [value](const std::string& s) {
                      char* end = nullptr;
                      errno = 0;
                      const double v = std::strtod(s.c_str(), &end);
                      if (s.empty() || *end != '\0' || errno != 0) return false;
                      *value = v;
                      return true;
                    }});
}

void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, *value ? "true" : "false", true, [value](const std::string& s) {
                      if (s == "true" || s == "1" || s.empty()) {
                        *value = true;
                      } else if (s == "false" || s == "0") {
                        *value = false;
                      } else {
                        return false;
                      }
                      return true;
                    }});
}

absl::Status FlagSet::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (auto& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " for '", command_, "' (see --help)"));
    }
    if (!has_value && !flag->is_bool) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (!flag->set(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid value \"", value, "\" for flag --", name));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("Usage: ", command_, " [flags]\n\n", summary_, "\n\nFlags:\n");
  for (const auto& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, f.is_bool ? "" : " VALUE", "\n      ", f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default: ", f.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help\n      Show this help.\n");
  return out;
}

}  // namespace tessera
