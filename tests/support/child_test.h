#ifndef TESSERA_TESTS_SUPPORT_CHILD_TEST_H_
#define TESSERA_TESTS_SUPPORT_CHILD_TEST_H_

// Runs one (disabled) test case of the running test binary in a child process, for tests
// of multi-process shapes such as one collective rank per process.
//
// Why not a bare fork(): the parent usually has threads by then (a rendezvous store
// server, gRPC, Gloo), and a forked child inherits their locks in whatever state they were
// in. A child that then allocates can deadlock, which ASan's allocator does in about one
// run in six. So the child execs /proc/self/exe at once, calling only async-signal-safe
// functions between fork and exec, and starts with no threads and fresh locks.
//
// The child dies with the parent (PR_SET_PDEATHSIG, checked against a parent that died
// before the prctl), and the ChildTest destructor kills and reaps a child that is still
// running, so an ASSERT that returns early from the parent leaves no orphan behind.
//
//   Parent:  auto child = ChildTest::Start("Suite.DISABLED_ChildRank", {"MY_PORT=123"});
//            ... ; EXPECT_EQ(child->Wait(std::chrono::seconds(30)), 0);
//   Child:   TEST(Suite, DISABLED_ChildRank) { if (!ChildTest::InChild()) GTEST_SKIP(); ... }

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace tessera::testing {

class ChildTest {
 public:
  // Set in the child's environment so its test body knows it was started by a parent.
  static constexpr char kMarker[] = "TESSERA_CHILD_TEST";

  static bool InChild() { return std::getenv(kMarker) != nullptr; }

  // Starts `--gtest_filter=<test_name>` of this binary with `extra_env` ("NAME=value")
  // added to the environment. Its output goes to this process's stdout/stderr.
  static absl::StatusOr<std::unique_ptr<ChildTest>> Start(const std::string& test_name,
                                                          const std::vector<std::string>& extra_env) {
    // Everything is allocated before fork: the child may only make async-signal-safe calls.
    std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                     absl::StrCat("--gtest_filter=", test_name)};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    env.push_back(absl::StrCat(kMarker, "=1"));
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // The parent died before the prctl.
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    return std::unique_ptr<ChildTest>(new ChildTest(pid));
  }

  ~ChildTest() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildTest(const ChildTest&) = delete;
  ChildTest& operator=(const ChildTest&) = delete;

  // The child's exit code once it exits within `timeout`; otherwise it is killed and the
  // status says why (a hang, or death by a signal).
  absl::StatusOr<int> Wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return absl::FailedPreconditionError("child already waited for");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int wstatus = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid_, &wstatus, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const pid_t pid = pid_;
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    pid_ = -1;
    if (done == 0) return absl::DeadlineExceededError(absl::StrCat("child ", pid, " did not exit"));
    if (done < 0) return absl::InternalError(absl::StrCat("waitpid failed for child ", pid));
    if (WIFSIGNALED(wstatus)) {
      return absl::InternalError(absl::StrCat("child ", pid, " died of signal ", WTERMSIG(wstatus)));
    }
    return WEXITSTATUS(wstatus);
  }

 private:
  explicit ChildTest(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_CHILD_TEST_H_
