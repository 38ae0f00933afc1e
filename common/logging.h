#ifndef TESSERA_COMMON_LOGGING_H_
#define TESSERA_COMMON_LOGGING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Structured log lines on stderr, one event per line, shared by every binary.
// `--log-format text` (default) is for people; `--log-format json` is one JSON object a
// line for log collectors (Loki, Cloud Logging), with the same fields.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

using LogValue = std::variant<std::string, int64_t, double, bool>;
using LogFields = std::vector<std::pair<std::string, LogValue>>;

// Parses the --log-format / --log-level flag values ("text"|"json",
// "debug"|"info"|"warning"|"error") and applies them process-wide.
absl::Status ConfigureLogging(absl::string_view format, absl::string_view level);
void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);
bool LogEnabled(LogLevel level);

// Writes one line: text `2024-05-01T12:00:00.123Z INFO component: message k=v ...`, or
// json `{"ts":"...","level":"info","component":"...","msg":"...","k":v,...}`.
void Log(LogLevel level, absl::string_view component, absl::string_view message,
         const LogFields& fields = {});

// The line Log() would write (without the newline); exposed for tests.
std::string FormatLogLine(LogFormat format, LogLevel level, absl::string_view timestamp,
                          absl::string_view component, absl::string_view message,
                          const LogFields& fields);

}  // namespace tessera

#endif  // TESSERA_COMMON_LOGGING_H_
