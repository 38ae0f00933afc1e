#include "tools/tessera/coordinator_limit_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::cli {

void CoordinatorLimitFlags::Register(FlagSet& flags) {
  for (size_t i = 0; i < kCoordinatorLimitFlags.size(); ++i) {
    const ForwardedFlag& flag = kCoordinatorLimitFlags[i];
    flags.String(flag.name, &values_[i],
                 absl::StrCat("The coordinator's --", flag.name, " (", flag.what,
                              "), passed on only when given; otherwise the coordinator's default."));
  }
}

absl::Status CoordinatorLimitFlags::Validate() const {
  for (size_t i = 0; i < kCoordinatorLimitFlags.size(); ++i) {
    int64_t ignored;
    if (kCoordinatorLimitFlags[i].is_int && !values_[i].empty() && !absl::SimpleAtoi(values_[i], &ignored)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", kCoordinatorLimitFlags[i].name, " needs an integer, got '", values_[i], "'"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> CoordinatorLimitFlags::Args() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < kCoordinatorLimitFlags.size(); ++i) {
    if (!values_[i].empty()) out.push_back(absl::StrCat("--", kCoordinatorLimitFlags[i].name, "=", values_[i]));
  }
  return out;
}

std::optional<int64_t> CoordinatorLimitFlags::IntValue(const std::string& name) const {
  for (size_t i = 0; i < kCoordinatorLimitFlags.size(); ++i) {
    int64_t value;
    if (name == kCoordinatorLimitFlags[i].name && absl::SimpleAtoi(values_[i], &value)) return value;
  }
  return std::nullopt;
}

}  // namespace tessera::cli
