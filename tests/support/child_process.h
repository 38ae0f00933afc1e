#ifndef TESSERA_TESTS_SUPPORT_CHILD_PROCESS_H_
#define TESSERA_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::testing {

// Starts `args` with stdout and stderr into `log` and the test's environment, where
// `env` ("NAME=value") replaces or adds variables. The child gets SIGKILL if the test
// process dies (PR_SET_PDEATHSIG). Returns its pid (-1 if fork failed).
inline pid_t SpawnLogged(const std::vector<std::string>& args, const std::filesystem::path& log,
                         const std::vector<std::string>& env = {}) {
  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& v : env) replaced = replaced || v.rfind(name, 0) == 0;
    if (!replaced) env_storage.push_back(entry);
  }
  env_storage.insert(env_storage.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (fd >= 0) ::close(fd);
  return pid;
}

// A child process that is SIGKILLed (and reaped) when this object goes away, and also
// when the test process dies (PR_SET_PDEATHSIG).
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::filesystem::path& log)
      : pid_(SpawnLogged(args, log)), log_(log) {}
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // SIGTERM, then SIGKILL if it has not exited within `grace`; for a child that stops
  // children of its own on SIGTERM (`tessera serve`). Idempotent.
  void Terminate(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    pid_ = -1;
  }

  bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string Log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_CHILD_PROCESS_H_
