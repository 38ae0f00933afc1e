#ifndef TESSERA_TOOLS_TESSERA_SPAWN_CHILD_H_
#define TESSERA_TOOLS_TESSERA_SPAWN_CHILD_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::cli {

// Starts `args` (args[0] is the executable's path) as a child in its own process group, so
// a terminal's Ctrl-C reaches only serve, which stops the children in order. The child
// gets SIGKILL when serve dies, however it dies: call this only from the main thread,
// since the kernel sends that signal when the forking *thread* exits. Returns the pid, or
// -1 when fork fails.
pid_t SpawnChild(const std::vector<std::string>& args);

// Why a child ended, from its waitpid status: "exited with code 3", "killed by SIGKILL".
std::string DescribeWaitStatus(int status);

}  // namespace tessera::cli

#endif  // TESSERA_TOOLS_TESSERA_SPAWN_CHILD_H_
