#ifndef TESSERA_TOOLS_TESSERA_MEMFD_FILE_H_
#define TESSERA_TOOLS_TESSERA_MEMFD_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::cli {

// A read-only file that exists only in memory (memfd_create) and that every child `tessera
// serve` starts inherits: secrets (cluster keys, the join secret) never touch a disk, so
// nothing is left behind however serve ends, even by SIGKILL. A child opens it by the
// path child_path() (/proc/self/fd/N: the descriptor keeps its number across fork and
// exec), and may reopen it later (certificate watchers poll their files). The memory goes
// when serve and the last child holding the descriptor are gone.
class MemfdFile {
 public:
  // A sealed memfd holding `content`; `name` shows in /proc/<pid>/fd listings only.
  static absl::StatusOr<MemfdFile> Create(const std::string& name, absl::string_view content);

  MemfdFile(MemfdFile&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  MemfdFile& operator=(MemfdFile&& other) noexcept;
  MemfdFile(const MemfdFile&) = delete;
  MemfdFile& operator=(const MemfdFile&) = delete;
  ~MemfdFile();

  // The path for a child process: /proc/self/fd/N.
  std::string child_path() const;
  // The same file for other processes of this user while serve runs: /proc/<serve>/fd/N.
  std::string outside_path() const;

 private:
  explicit MemfdFile(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_MEMFD_FILE_H_
