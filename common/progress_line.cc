#include "common/progress_line.h"

#include <unistd.h>

namespace tessera {

bool ProgressLine::isatty_stderr() { return ::isatty(2) == 1; }

}  // namespace tessera
