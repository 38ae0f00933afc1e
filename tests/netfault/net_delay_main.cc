// tessera-netdelay: holds every packet that netfilter queues to it (an iptables NFQUEUE
// rule) for a fixed delay plus uniform jitter, then lets it go, so the network-fault tests
// can add latency to one link where the kernel has no `tc netem` (this one has none).
//
// Packets leave in the order they came: a packet waits at least as long as the one before
// it, as on a real link (netem with jitter reorders, which TCP reads as loss). Speaks
// nfnetlink_queue directly (linux/netfilter/nfnetlink_queue.h), so it needs no library.
//
//   tessera-netdelay --queue 0 --delay-ms 50 --jitter-ms 20
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// SIGTERM lets every held packet go before exiting: packets still queued when the socket
// closes are dropped by the kernel.
volatile sig_atomic_t stopping = 0;
void Stop(int) { stopping = 1; }

struct Options {
  int queue = 0;
  double delay_ms = 0;
  double jitter_ms = 0;
};

void Usage(std::FILE* out) {
  std::fprintf(out,
               "usage: tessera-netdelay --queue N --delay-ms D [--jitter-ms J]\n"
               "Holds each packet queued to netfilter queue N (iptables -j NFQUEUE --queue-num N)\n"
               "for D ms plus a uniform jitter in [-J, +J] ms, keeping their order, then accepts it.\n"
               "Needs CAP_NET_ADMIN in the namespace whose packets it delays. Runs until killed.\n");
}

// Appends a netlink attribute (type, payload) to `message`, padded to 4 bytes.
void AddAttribute(std::vector<char>& message, uint16_t type, const void* data, uint16_t size) {
  nlattr attr{};
  attr.nla_len = static_cast<uint16_t>(NLA_HDRLEN + size);
  attr.nla_type = type;
  const size_t at = message.size();
  message.resize(at + NLA_ALIGN(attr.nla_len), 0);
  std::memcpy(message.data() + at, &attr, sizeof(attr));
  std::memcpy(message.data() + at + NLA_HDRLEN, data, size);
}

// A queue message (config or verdict) for `queue`; attributes are appended after it.
std::vector<char> QueueMessage(uint8_t type, int queue, uint16_t flags) {
  std::vector<char> message(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)), 0);
  auto* header = reinterpret_cast<nlmsghdr*>(message.data());
  header->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
  header->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  auto* gen = reinterpret_cast<nfgenmsg*>(message.data() + NLMSG_HDRLEN);
  gen->nfgen_family = AF_UNSPEC;
  gen->version = NFNETLINK_V0;
  gen->res_id = htons(static_cast<uint16_t>(queue));
  return message;
}

bool Send(int fd, std::vector<char> message) {
  reinterpret_cast<nlmsghdr*>(message.data())->nlmsg_len = static_cast<uint32_t>(message.size());
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  return ::sendto(fd, message.data(), message.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
                  sizeof(kernel)) == static_cast<ssize_t>(message.size());
}

// Waits for the kernel's answer to a request sent with NLM_F_ACK; false with a message
// when it reports an error.
bool Acked(int fd, const char* what) {
  char buffer[8192];
  ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
  if (n < 0) {
    std::fprintf(stderr, "tessera-netdelay: %s: %s\n", what, std::strerror(errno));
    return false;
  }
  for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, static_cast<uint32_t>(n));
       h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type != NLMSG_ERROR) continue;
    const int error = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
    if (error != 0) {
      std::fprintf(stderr, "tessera-netdelay: %s: %s\n", what, std::strerror(error));
      return false;
    }
  }
  return true;
}

bool Bind(int fd, int queue) {
  std::vector<char> bind = QueueMessage(NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
  nfqnl_msg_config_cmd command{};
  command.command = NFQNL_CFG_CMD_BIND;
  command.pf = htons(AF_INET);
  AddAttribute(bind, NFQA_CFG_CMD, &command, sizeof(command));
  if (!Send(fd, bind) || !Acked(fd, "binding the queue")) return false;

  // Only the packet's id comes up (no payload), and a queue long enough for a busy link
  // held 100 ms; a full queue lets packets through rather than dropping them.
  std::vector<char> params = QueueMessage(NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
  nfqnl_msg_config_params copy{};
  copy.copy_range = htonl(0);
  copy.copy_mode = NFQNL_COPY_META;
  AddAttribute(params, NFQA_CFG_PARAMS, &copy, sizeof(copy));
  const uint32_t max_length = htonl(65536);
  AddAttribute(params, NFQA_CFG_QUEUE_MAXLEN, &max_length, sizeof(max_length));
  const uint32_t fail_open = htonl(NFQA_CFG_F_FAIL_OPEN);
  AddAttribute(params, NFQA_CFG_FLAGS, &fail_open, sizeof(fail_open));
  AddAttribute(params, NFQA_CFG_MASK, &fail_open, sizeof(fail_open));
  return Send(fd, params) && Acked(fd, "configuring the queue");
}

// The packet ids in a batch of queue messages.
void PacketIds(const char* buffer, ssize_t n, std::vector<uint32_t>& ids) {
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buffer); NLMSG_OK(h, static_cast<uint32_t>(n));
       h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type != ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) continue;
    const char* attrs = static_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(nfgenmsg));
    int left = static_cast<int>(h->nlmsg_len) - NLMSG_HDRLEN - NLMSG_ALIGN(sizeof(nfgenmsg));
    while (left >= NLA_HDRLEN) {
      const auto* attr = reinterpret_cast<const nlattr*>(attrs);
      if (attr->nla_len < NLA_HDRLEN || attr->nla_len > left) break;
      if ((attr->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
        nfqnl_msg_packet_hdr packet;
        std::memcpy(&packet, attrs + NLA_HDRLEN, sizeof(packet));
        ids.push_back(ntohl(packet.packet_id));
        break;
      }
      left -= NLA_ALIGN(attr->nla_len);
      attrs += NLA_ALIGN(attr->nla_len);
    }
  }
}

bool Accept(int fd, int queue, uint32_t id) {
  std::vector<char> verdict = QueueMessage(NFQNL_MSG_VERDICT, queue, 0);
  nfqnl_msg_verdict_hdr header{};
  header.verdict = htonl(NF_ACCEPT);
  header.id = htonl(id);
  AddAttribute(verdict, NFQA_VERDICT_HDR, &header, sizeof(header));
  return Send(fd, verdict);
}

bool ParseOptions(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--queue") {
      options.queue = std::atoi(value);
    } else if (flag == "--delay-ms") {
      options.delay_ms = std::atof(value);
    } else if (flag == "--jitter-ms") {
      options.jitter_ms = std::atof(value);
    } else {
      return false;
    }
  }
  return options.queue >= 0 && options.queue <= 65535 && options.delay_ms >= 0 && options.jitter_ms >= 0 &&
         options.jitter_ms <= options.delay_ms;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseOptions(argc, argv, options)) {
    Usage(stderr);
    return 2;
  }
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) {
    std::fprintf(stderr, "tessera-netdelay: netlink socket: %s\n", std::strerror(errno));
    return 1;
  }
  const int buffer_bytes = 8 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(buffer_bytes));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 || !Bind(fd, options.queue)) {
    return 1;
  }
  struct sigaction on_term{};
  on_term.sa_handler = Stop;
  ::sigaction(SIGTERM, &on_term, nullptr);
  ::sigaction(SIGINT, &on_term, nullptr);
  std::printf("tessera-netdelay: queue %d, %.1f ms +/- %.1f ms\n", options.queue, options.delay_ms,
              options.jitter_ms);
  std::fflush(stdout);

  struct Held {
    Clock::time_point release;
    uint32_t id;
  };
  std::deque<Held> held;
  std::minstd_rand rng(::getpid());
  std::uniform_real_distribution<double> jitter(-options.jitter_ms, options.jitter_ms);
  std::vector<char> buffer(1 << 16);
  std::vector<uint32_t> ids;
  while (true) {
    const Clock::time_point now = Clock::now();
    while (!held.empty() && (stopping || held.front().release <= now)) {
      Accept(fd, options.queue, held.front().id);
      held.pop_front();
    }
    if (stopping) return 0;
    timespec wait{1, 0};
    if (!held.empty()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().release - now).count();
      wait = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    pollfd p{fd, POLLIN, 0};
    if (::ppoll(&p, 1, &wait, nullptr) <= 0) continue;
    ids.clear();
    ssize_t n;
    while ((n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT)) > 0) PacketIds(buffer.data(), n, ids);
    const Clock::time_point arrived = Clock::now();
    for (uint32_t id : ids) {
      const double ms = options.delay_ms + (options.jitter_ms > 0 ? jitter(rng) : 0.0);
      Clock::time_point release = arrived + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
      if (!held.empty() && release < held.back().release) release = held.back().release;
      held.push_back({release, id});
    }
  }
}
