#include "common/gguf_model_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/gguf_file.h"
#include "common/gguf_hf.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

std::filesystem::path CacheRoot() {
  if (const char* dir = std::getenv("TESSERA_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "tessera";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "tessera";
  }
  return std::filesystem::temp_directory_path() / "tessera-cache";
}

uint64_t Fnv1a(absl::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Writes `contents` unless the file already holds exactly that.
absl::Status WriteIfChanged(const std::filesystem::path& path, const std::string& contents) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto existing = ReadFileToString(path);
    if (existing.ok() && *existing == contents) return absl::OkStatus();
  }
  // Workers of one node start together: each writes under its own name, then renames.
  const std::filesystem::path tmp = absl::StrCat(path.string(), ".tmp-", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) {
      return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp.string(),
                                                      " (set TESSERA_CACHE_DIR to a writable folder)"));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::filesystem::path> Materialize(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(file, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(file.string(), ": ", ec.message()));
  struct stat st {};
  if (stat(canonical.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(canonical.string(), ": cannot stat"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(canonical));
  ASSIGN_OR_RETURN(GgufHfFiles files, GgufToHfFiles(*gguf));

  const uint64_t key = Fnv1a(absl::StrCat(canonical.string(), "|", st.st_size, "|", st.st_mtim.tv_sec,
                                          ".", st.st_mtim.tv_nsec));
  const std::filesystem::path dir =
      CacheRoot() / "gguf" / absl::StrFormat("%s-%016x", canonical.stem().string(), key);
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", dir.string(), " for the documents of ", canonical.string(), ": ", ec.message(),
        " (set TESSERA_CACHE_DIR to a writable folder)"));
  }
  RETURN_IF_ERROR(WriteIfChanged(dir / "config.json", files.config_json));
  RETURN_IF_ERROR(WriteIfChanged(dir / "tokenizer.json", files.tokenizer_json));
  RETURN_IF_ERROR(WriteIfChanged(dir / "tokenizer_config.json", files.tokenizer_config_json));
  const std::filesystem::path link = dir / kGgufLinkName;
  if (std::filesystem::read_symlink(link, ec) != canonical) {
    // Another process may be making the same link: a link made under a unique name and
    // renamed over the old one is never seen half-made.
    const std::filesystem::path tmp = dir / absl::StrCat(".link-", getpid());
    std::filesystem::remove(tmp, ec);
    std::filesystem::create_symlink(canonical, tmp, ec);
    if (!ec) std::filesystem::rename(tmp, link, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot link ", link.string(), " to ", canonical.string(), ": ", ec.message()));
    }
  }
  return dir;
}

}  // namespace

bool IsGgufFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

absl::StatusOr<std::filesystem::path> ResolveModelDir(const std::filesystem::path& path) {
  if (!IsGgufFile(path)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path.string(), " is a file but not a GGUF file (its first bytes are not \"GGUF\"); a model is "
          "a Hugging Face folder or a .gguf file"));
    }
    return path;
  }
  static std::mutex mu;
  static auto* resolved = new std::map<std::string, std::filesystem::path>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = resolved->find(path.string()); it != resolved->end()) return it->second;
  ASSIGN_OR_RETURN(std::filesystem::path dir, Materialize(path));
  resolved->emplace(path.string(), dir);
  return dir;
}

}  // namespace tessera
