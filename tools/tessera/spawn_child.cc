#include "tools/tessera/spawn_child.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace tessera::cli {

pid_t SpawnChild(const std::vector<std::string>& args) {
  // Built before fork: between fork and exec the child may only make async-signal-safe
  // calls, since a lock some other thread held (the allocator's) stays locked there.
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string cannot_run = absl::StrCat("tessera serve: cannot run ", args[0], "\n");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // SIGKILL, not SIGTERM: a coordinator would drain for up to --drain-timeout-seconds,
    // holding its ports long after the serve that owned it is gone.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Serve may have died before prctl took effect; then no signal will ever come.
    if (::getppid() != parent) ::_exit(126);
    ::execv(argv[0], argv.data());
    (void)!::write(STDERR_FILENO, cannot_run.data(), cannot_run.size());
    ::_exit(127);
  }
  return pid;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = ::sigabbrev_np(sig);
    return absl::StrCat("killed by ", abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig),
                        WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace tessera::cli
