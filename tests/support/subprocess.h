#ifndef TESSERA_TESTS_SUPPORT_SUBPROCESS_H_
#define TESSERA_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout only; stderr goes to the test log.
};

// Runs a shell command and captures its standard output.
inline CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::string TesseraBinary() { return std::string(TESSERA_BINARY_DIR) + "/bin/tessera"; }

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_SUBPROCESS_H_
