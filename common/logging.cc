#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "info";
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "INFO";
}

std::string NowUtc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

// Text values with spaces, quotes or '=' are quoted so `k=v` pairs stay splittable.
std::string TextValue(const LogValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) {
    if (!s->empty() && s->find_first_of(" \"=\t\n") == std::string::npos) return *s;
    return nlohmann::json(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&v)) return absl::StrFormat("%.6g", *d);
  return std::get<bool>(v) ? "true" : "false";
}

}  // namespace

absl::Status ConfigureLogging(absl::string_view format, absl::string_view level) {
  if (format == "text") {
    SetLogFormat(LogFormat::kText);
  } else if (format == "json") {
    SetLogFormat(LogFormat::kJson);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--log-format must be text or json, got \"", format, "\""));
  }
  if (level == "debug") {
    SetLogLevel(LogLevel::kDebug);
  } else if (level == "info") {
    SetLogLevel(LogLevel::kInfo);
  } else if (level == "warning") {
    SetLogLevel(LogLevel::kWarning);
  } else if (level == "error") {
    SetLogLevel(LogLevel::kError);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level must be debug, info, warning or error, got \"", level, "\""));
  }
  return absl::OkStatus();
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

std::string FormatLogLine(LogFormat format, LogLevel level, absl::string_view timestamp,
                          absl::string_view component, absl::string_view message,
                          const LogFields& fields) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = std::string(timestamp);
    j["level"] = LevelName(level);
    j["component"] = std::string(component);
    j["msg"] = std::string(message);
    for (const auto& field : fields) {
      // Not a structured binding: clang 14 (the fuzzers' compiler) cannot capture one.
      const auto& key = field.first;
      std::visit([&j, &key](const auto& x) { j[key] = x; }, field.second);
    }
    // Invalid UTF-8 (a half token in a message) must not throw out of a log call.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line = absl::StrCat(timestamp, " ", LevelTag(level), " ", component, ": ", message);
  for (const auto& [key, value] : fields) absl::StrAppend(&line, " ", key, "=", TextValue(value));
  return line;
}

void Log(LogLevel level, absl::string_view component, absl::string_view message,
         const LogFields& fields) {
  if (!LogEnabled(level)) return;
  std::string line = FormatLogLine(static_cast<LogFormat>(g_format.load()), level, NowUtc(),
                                   component, message, fields);
  line.push_back('\n');
  // One write per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace tessera
