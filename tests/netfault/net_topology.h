// Nodes of an emulated network on one machine, for the network-fault tests: each node is a
// Linux network namespace with an address of its own, joined to a bridge in the test's
// namespace by a veth pair, so a fault on one node's link leaves every other link as it
// was. The test process reaches every node through its own address on the bridge.
//
// Needs root and iproute2 (nftables for filters, iptables for delays). Every name carries
// the test's pid, and Create() first deletes what tests that no longer run left behind (a
// killed test cannot run its destructor).
#ifndef TESSERA_TESTS_NETFAULT_NET_TOPOLOGY_H_
#define TESSERA_TESTS_NETFAULT_NET_TOPOLOGY_H_

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/child_process.h"

namespace tessera::testing {

// The first of these executables that exists, or empty.
inline std::string FindBinary(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}
// iproute2's `ip` and nftables' `nft`.
inline std::string IpBinary() { return FindBinary({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}); }
inline std::string NftBinary() { return FindBinary({"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"}); }
inline std::string IptablesBinary() {
  return FindBinary({"/usr/sbin/iptables", "/sbin/iptables", "/usr/bin/iptables"});
}
// The userspace packet delayer built beside this test (tests/netfault/net_delay_main.cc).
inline std::string NetDelayBinary() {
  return (std::filesystem::path(TESSERA_BINARY_DIR) / "tests" / "netfault" / "tessera-netdelay").string();
}

// Runs a command (no shell metacharacters in its arguments) and returns its output, or an
// error with that output when it fails.
inline absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& args) {
  const std::string command = absl::StrCat(absl::StrJoin(args, " "), " 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run ", command));
  std::string output;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) return absl::InternalError(absl::StrCat(command, " failed (", status, "): ", output));
  return output;
}

class NetTopology {
 public:
  // Why this machine cannot run the network-fault tests, or OK.
  static absl::Status Supported() {
    if (::geteuid() != 0) return absl::FailedPreconditionError("network namespaces need root");
    if (IpBinary().empty()) return absl::FailedPreconditionError("no iproute2 `ip` binary");
    return absl::OkStatus();
  }

  // `nodes` namespaces on one bridge, every link up.
  static absl::StatusOr<std::unique_ptr<NetTopology>> Create(int nodes) {
    if (absl::Status s = Supported(); !s.ok()) return s;
    SweepLeftovers();
    std::unique_ptr<NetTopology> t(new NetTopology(nodes));
    if (absl::Status s = t->Build(); !s.ok()) return s;
    return t;
  }

  ~NetTopology() {
    for (int i = 0; i < nodes_; ++i) (void)ClearDelay(i);  // Before their namespaces go.
    for (int i = 0; i < nodes_; ++i) {
      // The pair goes with either end, but with the namespace only once the kernel gets to
      // it: deleted here, the names are free for the next topology of this process.
      (void)RunCommand({ip_, "link", "del", HostVeth(i)});
      (void)RunCommand({ip_, "netns", "del", Namespace(i)});
    }
    (void)RunCommand({ip_, "link", "del", Bridge()});
  }
  NetTopology(const NetTopology&) = delete;
  NetTopology& operator=(const NetTopology&) = delete;

  int nodes() const { return nodes_; }
  // The test process's address on the bridge.
  std::string host_address() const { return absl::StrCat(subnet_, ".254"); }
  std::string address(int node) const { return absl::StrCat(subnet_, ".", node + 1); }
  // Prefix that starts a program inside the node's namespace.
  std::vector<std::string> Launcher(int node) const { return {ip_, "netns", "exec", Namespace(node)}; }

  // Takes the node's link down or up (its end on the bridge): packets to and from it are
  // dropped without a word, as when a cable or a switch port fails.
  absl::Status SetLinkUp(int node, bool up) {
    return RunCommand({ip_, "link", "set", HostVeth(node), up ? "up" : "down"}).status();
  }

  // Why packet filters (Partition, SetLoss) cannot run here, or OK.
  static absl::Status FiltersSupported() {
    if (NftBinary().empty()) return absl::FailedPreconditionError("no nftables `nft` binary");
    return absl::OkStatus();
  }

  // Inside the node's namespace, drops every packet to and from the given nodes (and only
  // those), e.g. a worker that still reaches the coordinator but not its peers. Replaces
  // the node's earlier filter.
  absl::Status Partition(int node, const std::vector<int>& from) {
    std::vector<std::string> addresses;
    for (int other : from) addresses.push_back(address(other));
    const std::string set = absl::StrCat("{ ", absl::StrJoin(addresses, ", "), " }");
    return Filter(node, {absl::StrCat("ip saddr ", set, " drop"), absl::StrCat("ip daddr ", set, " drop")});
  }

  // Drops `percent` % of the packets in each direction of the node's link, at random.
  absl::Status SetLoss(int node, int percent) {
    const std::string rule = absl::StrCat("iifname \"eth0\" numgen random mod 100 < ", percent, " drop");
    const std::string out = absl::StrCat("oifname \"eth0\" numgen random mod 100 < ", percent, " drop");
    return Filter(node, {rule, out});
  }

  // Removes the node's filter.
  absl::Status ClearFilter(int node) {
    return RunCommand({ip_, "netns", "exec", Namespace(node), NftBinary(), "delete", "table", "inet", "tsr"})
        .status();
  }

  // Why SetDelay cannot run here, or OK. The kernels these tests meet have no `tc netem`,
  // so a delay is an iptables NFQUEUE rule feeding a userspace delayer.
  static absl::Status DelaySupported() {
    if (IptablesBinary().empty()) return absl::FailedPreconditionError("no `iptables` binary");
    if (::access(NetDelayBinary().c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("no packet delayer at ", NetDelayBinary()));
    }
    return absl::OkStatus();
  }

  // Holds every packet the node sends (or only those to the nodes in `to`) for `delay_ms`
  // plus a uniform jitter of +/- `jitter_ms`, in order: one direction of its link, as
  // `tc qdisc add dev eth0 root netem delay D J` would. Replaces the node's earlier delay.
  absl::Status SetDelay(int node, double delay_ms, double jitter_ms, const std::vector<int>& to = {}) {
    (void)ClearDelay(node);
    const std::filesystem::path log = DelayLog(node);
    std::vector<std::string> args = Launcher(node);
    args.insert(args.end(), {NetDelayBinary(), "--queue", "0", "--delay-ms", absl::StrCat(delay_ms),
                             "--jitter-ms", absl::StrCat(jitter_ms)});
    auto delayer = std::make_unique<Child>(args, log);
    // Rules first would hold packets with nobody to let them go (--queue-bypass covers
    // only a queue nobody listens on), so the delayer must be bound before.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (delayer->Log().find("tessera-netdelay: queue") == std::string::npos) {
      if (!delayer->running() || std::chrono::steady_clock::now() > deadline) {
        return absl::InternalError(absl::StrCat("packet delayer did not start: ", delayer->Log()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    delayers_[node] = std::move(delayer);
    std::vector<std::string> rule = Launcher(node);
    rule.insert(rule.end(), {IptablesBinary(), "-t", "mangle", "-A", "OUTPUT", "-o", "eth0"});
    if (!to.empty()) {
      std::vector<std::string> addresses;
      for (int other : to) addresses.push_back(address(other));
      rule.insert(rule.end(), {"-d", absl::StrJoin(addresses, ",")});
    }
    rule.insert(rule.end(), {"-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"});
    return RunCommand(rule).status();
  }

  // Removes the node's delay; the packets it holds go out first.
  absl::Status ClearDelay(int node) {
    auto it = delayers_.find(node);
    if (it == delayers_.end()) return absl::OkStatus();
    std::vector<std::string> flush = Launcher(node);
    flush.insert(flush.end(), {IptablesBinary(), "-t", "mangle", "-F", "OUTPUT"});
    absl::Status s = RunCommand(flush).status();
    it->second->Terminate(std::chrono::seconds(2));
    delayers_.erase(it);
    std::error_code ignored;
    std::filesystem::remove(DelayLog(node), ignored);
    return s;
  }

 private:
  explicit NetTopology(int nodes) : nodes_(nodes), pid_(::getpid()), ip_(IpBinary()) {
    // A /24 of 10.0.0.0/8 picked by the pid, so tests running side by side do not share one.
    subnet_ = absl::StrCat("10.", 64 + (pid_ >> 8) % 128, ".", pid_ & 0xff);
  }

  // One nftables table in the node's namespace, input and output chains each holding
  // `rules` (both chains get every rule; a rule that names a direction matches only there).
  absl::Status Filter(int node, const std::vector<std::string>& rules) {
    (void)ClearFilter(node);
    std::string script = "table inet tsr {\n";
    for (const char* hook : {"input", "output"}) {
      absl::StrAppend(&script, "  chain ", hook, " {\n    type filter hook ", hook, " priority 0;\n");
      for (const std::string& rule : rules) absl::StrAppend(&script, "    ", rule, "\n");
      absl::StrAppend(&script, "  }\n");
    }
    absl::StrAppend(&script, "}\n");
    const std::string file = absl::StrCat("/tmp/tsr", pid_, "-filter-", node, ".nft");
    {
      std::FILE* f = std::fopen(file.c_str(), "w");
      if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", file));
      std::fputs(script.c_str(), f);
      std::fclose(f);
    }
    auto r = RunCommand({ip_, "netns", "exec", Namespace(node), NftBinary(), "-f", file});
    std::remove(file.c_str());
    return r.status();
  }

  std::string DelayLog(int node) const { return absl::StrCat("/tmp/tsr", pid_, "-delay-", node, ".log"); }
  std::string Namespace(int node) const { return absl::StrCat("tsr", pid_, "n", node); }
  std::string Bridge() const { return absl::StrCat("tsr", pid_, "b"); }
  std::string HostVeth(int node) const { return absl::StrCat("tsr", pid_, "v", node); }
  std::string NodeVeth(int node) const { return absl::StrCat("tsr", pid_, "p", node); }

  absl::Status Build() {
    const std::vector<std::vector<std::string>> bridge = {
        {ip_, "link", "add", Bridge(), "type", "bridge"},
        {ip_, "addr", "add", absl::StrCat(host_address(), "/24"), "dev", Bridge()},
        {ip_, "link", "set", Bridge(), "up"}};
    for (const auto& command : bridge) {
      if (auto r = RunCommand(command); !r.ok()) return r.status();
    }
    for (int i = 0; i < nodes_; ++i) {
      const std::string ns = Namespace(i);
      const std::vector<std::vector<std::string>> node = {
          {ip_, "netns", "add", ns},
          {ip_, "link", "add", HostVeth(i), "type", "veth", "peer", "name", NodeVeth(i)},
          {ip_, "link", "set", NodeVeth(i), "netns", ns},
          {ip_, "link", "set", HostVeth(i), "master", Bridge()},
          {ip_, "link", "set", HostVeth(i), "up"},
          {ip_, "-n", ns, "link", "set", "lo", "up"},
          {ip_, "-n", ns, "link", "set", NodeVeth(i), "name", "eth0"},
          {ip_, "-n", ns, "addr", "add", absl::StrCat(address(i), "/24"), "dev", "eth0"},
          {ip_, "-n", ns, "link", "set", "eth0", "up"}};
      for (const auto& command : node) {
        if (auto r = RunCommand(command); !r.ok()) return r.status();
      }
    }
    return absl::OkStatus();
  }

  // Namespaces and bridges named for test processes that are gone.
  static void SweepLeftovers() {
    const std::string ip = IpBinary();
    auto dead = [](const std::string& pid) { return ::kill(std::stoi(pid), 0) != 0 && errno == ESRCH; };
    const std::regex ns_name("^tsr([0-9]+)n[0-9]+");
    if (auto list = RunCommand({ip, "netns", "list"}); list.ok()) {
      std::istringstream lines(*list);
      std::string line;
      std::smatch m;
      while (std::getline(lines, line)) {
        if (std::regex_search(line, m, ns_name) && dead(m[1].str())) {
          (void)RunCommand({ip, "netns", "del", m[0].str()});
        }
      }
    }
    const std::regex bridge_name("tsr([0-9]+)b[:@]");
    if (auto list = RunCommand({ip, "-o", "link", "show", "type", "bridge"}); list.ok()) {
      std::istringstream lines(*list);
      std::string line;
      std::smatch m;
      while (std::getline(lines, line)) {
        if (std::regex_search(line, m, bridge_name) && dead(m[1].str())) {
          (void)RunCommand({ip, "link", "del", absl::StrCat("tsr", m[1].str(), "b")});
        }
      }
    }
  }

  const int nodes_;
  const pid_t pid_;
  const std::string ip_;
  std::string subnet_;
  std::map<int, std::unique_ptr<Child>> delayers_;  // By node.
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_NETFAULT_NET_TOPOLOGY_H_
