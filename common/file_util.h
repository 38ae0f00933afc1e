#ifndef TESSERA_COMMON_FILE_UTIL_H_
#define TESSERA_COMMON_FILE_UTIL_H_

#include <filesystem>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

// Reads a whole (small) file; NOT_FOUND names the path when it is missing.
absl::StatusOr<std::string> ReadFileToString(const std::filesystem::path& path);

// Writes `contents` to `path` atomically enough for tools (write then rename).
absl::Status WriteStringToFile(const std::filesystem::path& path, absl::string_view contents);

}  // namespace tessera

#endif  // TESSERA_COMMON_FILE_UTIL_H_
