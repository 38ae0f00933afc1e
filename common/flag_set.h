#ifndef TESSERA_COMMON_FLAG_SET_H_
#define TESSERA_COMMON_FLAG_SET_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tessera {

// A small flag parser for subcommands (`tessera run --model DIR ...`). Abseil flags are
// process-global, which does not fit a binary whose subcommands take different flags.
// Accepts `--name value`, `--name=value` and, for booleans, `--name`.
class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  void String(const std::string& name, std::string* value, const std::string& help);
  void Int(const std::string& name, int64_t* value, const std::string& help);
  void Float(const std::string& name, double* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[first..argc). Returns an error naming the flag for unknown flags or bad
  // values; sets help_requested() for --help / -h.
  absl::Status Parse(int argc, char** argv, int first = 1);
  bool help_requested() const { return help_requested_; }
  std::string Usage() const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<bool(const std::string&)> set;
  };
  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_FLAG_SET_H_
