#ifndef TESSERA_COMMON_PROGRESS_LINE_H_
#define TESSERA_COMMON_PROGRESS_LINE_H_

#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera {

// A one-line progress report on stderr, redrawn in place on a terminal and printed at
// most every 10% otherwise (so logs stay readable).
class ProgressLine {
 public:
  explicit ProgressLine(std::string label) : label_(std::move(label)) {}

  void Update(uint64_t done, uint64_t total, const std::string& detail = "") {
    const int percent = total == 0 ? 100 : static_cast<int>(100 * done / total);
    const bool tty = isatty_stderr();
    if (!tty && percent / 10 == last_decile_ && done != total) return;
    last_decile_ = percent / 10;
    std::fprintf(stderr, "%s%s: %3d%% %s%s", tty ? "\r" : "", label_.c_str(), percent,
                 detail.c_str(), tty && done != total ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  static bool isatty_stderr();
  std::string label_;
  int last_decile_ = -1;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_PROGRESS_LINE_H_
