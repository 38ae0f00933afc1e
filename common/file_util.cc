#include "common/file_util.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::string> ReadFileToString(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (!std::filesystem::exists(path)) {
      return absl::NotFoundError(absl::StrCat(path.string(), ": file not found"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path.string(), ": read failed"));
  return ss.str();
}

absl::Status WriteStringToFile(const std::filesystem::path& path, absl::string_view contents) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat(tmp.string(), ": cannot create: ", std::strerror(errno)));
    }
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) return absl::DataLossError(absl::StrCat(tmp.string(), ": write failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path.string(), ": rename failed: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace tessera
