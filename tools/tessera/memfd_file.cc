#include "tools/tessera/memfd_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::cli {

absl::StatusOr<MemfdFile> MemfdFile::Create(const std::string& name, absl::string_view content) {
  // No MFD_CLOEXEC: the children must inherit it through exec.
  const int fd = ::memfd_create(name.c_str(), MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create(", name, "): ", std::strerror(errno)));
  MemfdFile file(fd);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("cannot write the memfd ", name, ": ", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  // Sealed: no child (or anything else holding the descriptor) can change what the
  // others read.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    return absl::InternalError(absl::StrCat("cannot seal the memfd ", name, ": ", std::strerror(errno)));
  }
  return file;
}

MemfdFile& MemfdFile::operator=(MemfdFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

MemfdFile::~MemfdFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string MemfdFile::child_path() const { return absl::StrCat("/proc/self/fd/", fd_); }

std::string MemfdFile::outside_path() const { return absl::StrCat("/proc/", ::getpid(), "/fd/", fd_); }

}  // namespace tessera::cli
