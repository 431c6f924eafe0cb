#include "net/peer_identity.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace berth::net {

namespace {

struct Address {
  int family = 0;          // AF_INET or AF_INET6
  uint32_t words[4] = {};  // network byte order, as inet_diag_sockid holds them
};

// Parses an address as the server printed it; an IPv4-mapped IPv6 address becomes IPv4.
bool ParseAddress(const std::string& text, Address* out) {
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out->family = AF_INET;
    out->words[0] = v4.s_addr;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      out->family = AF_INET;
      std::memcpy(&out->words[0], &v6.s6_addr[12], 4);
    } else {
      out->family = AF_INET6;
      std::memcpy(out->words, v6.s6_addr, 16);
    }
    return true;
  }
  return false;
}

bool IsLoopback(const Address& a) {
  if (a.family == AF_INET) return (ntohl(a.words[0]) >> 24) == 127;
  in6_addr v6;
  std::memcpy(v6.s6_addr, a.words, 16);
  return IN6_IS_ADDR_LOOPBACK(&v6);
}

// States in which the socket is a full socket with an owner. TIME_WAIT and request sockets report
// uid 0, which must never be mistaken for root.
bool HasOwner(int state) {
  switch (state) {
    case TCP_ESTABLISHED:
    case TCP_FIN_WAIT1:
    case TCP_FIN_WAIT2:
    case TCP_CLOSE_WAIT:
    case TCP_LAST_ACK:
    case TCP_CLOSING:
      return true;
    default:
      return false;
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// An address from an inet_diag_sockid, IPv4-mapped IPv6 turned into IPv4.
Address FromWire(int family, const uint32_t* words) {
  Address a;
  if (family == AF_INET) {
    a.family = AF_INET;
    a.words[0] = words[0];
    return a;
  }
  in6_addr v6;
  std::memcpy(v6.s6_addr, words, 16);
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    a.family = AF_INET;
    a.words[0] = words[3];
  } else {
    a.family = AF_INET6;
    std::memcpy(a.words, words, 16);
  }
  return a;
}

// `a` (normalized) as the `family` tables spell it: an IPv4 address in AF_INET6 tables is
// IPv4-mapped.
Address ToFamily(const Address& a, int family) {
  if (a.family == family || family == AF_INET) return a;
  Address m;
  m.family = AF_INET6;
  m.words[2] = htonl(0xffff);
  m.words[3] = a.words[0];
  return m;
}

bool Same(const Address& a, const Address& b) {
  return a.family == b.family && std::memcmp(a.words, b.words, sizeof(a.words)) == 0;
}

// NLMSG_OK and NLMSG_NEXT without their signed/unsigned comparisons.
bool MessageFits(const nlmsghdr* h, size_t left) {
  return left >= sizeof(nlmsghdr) && h->nlmsg_len >= sizeof(nlmsghdr) && h->nlmsg_len <= left;
}
nlmsghdr* NextMessage(nlmsghdr* h, size_t* left) {
  size_t step = NLMSG_ALIGN(h->nlmsg_len);
  if (step >= *left) {  // the last one: MessageFits(h, 0) ends the loop
    *left = 0;
    return h;
  }
  *left -= step;
  return reinterpret_cast<nlmsghdr*>(reinterpret_cast<char*>(h) + step);
}

// One by-id lookup (not a dump) of the socket whose local end is `src`:`sport` and remote end
// `dst`:`dport` (normalized addresses), in `family`'s tables.
Result<uint32_t> Lookup(int family, const Address& src, int sport, const Address& dst, int dport,
                        const std::string& what) {
  Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0)
    return Status::Unavailable("cannot open a sock_diag netlink socket: " +
                               std::string(std::strerror(errno)));
  timeval tv{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.nlh.nlmsg_seq = 1;
  msg.req.sdiag_family = static_cast<uint8_t>(family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  msg.req.id.idiag_sport = htons(static_cast<uint16_t>(sport));
  msg.req.id.idiag_dport = htons(static_cast<uint16_t>(dport));
  Address wire_src = ToFamily(src, family), wire_dst = ToFamily(dst, family);
  std::memcpy(msg.req.id.idiag_src, wire_src.words, sizeof(wire_src.words));
  std::memcpy(msg.req.id.idiag_dst, wire_dst.words, sizeof(wire_dst.words));
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent;
  do {
    sent = ::sendto(fd.get(), &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel),
                    sizeof(kernel));
  } while (sent < 0 && errno == EINTR);
  if (sent < 0)
    return Status::Unavailable("sock_diag request for " + what +
                               " failed: " + std::string(std::strerror(errno)));

  alignas(nlmsghdr) char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status::Unavailable("no sock_diag answer for " + what + ": " +
                                 std::string(std::strerror(errno)));
    }
    if (n == 0) return Status::Unavailable("sock_diag socket closed while asking about " + what);
    size_t left = static_cast<size_t>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); MessageFits(h, left);
         h = NextMessage(h, &left)) {
      if (h->nlmsg_seq != msg.nlh.nlmsg_seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        if (err->error == -ENOENT) {
          return Status::NotFound("the kernel knows no TCP connection " + what +
                                  " (the client went away?)");
        }
        return Status::Unavailable("sock_diag lookup of " + what +
                                   " failed: " + std::string(std::strerror(-err->error)));
      }
      if (h->nlmsg_type == NLMSG_DONE) {
        return Status::NotFound("the kernel knows no TCP connection " + what);
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
        return Status::Unavailable("short sock_diag answer for " + what);
      }
      auto* diag = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      // The kernel looked the socket up by this 4-tuple; make sure it is the one we asked for.
      Address got_src = FromWire(diag->idiag_family, diag->id.idiag_src);
      Address got_dst = FromWire(diag->idiag_family, diag->id.idiag_dst);
      if (diag->id.idiag_sport != msg.req.id.idiag_sport ||
          diag->id.idiag_dport != msg.req.id.idiag_dport || !Same(got_src, src) ||
          !Same(got_dst, dst)) {
        return Status::Unavailable("sock_diag answered about another socket than " + what);
      }
      if (!HasOwner(diag->idiag_state)) {
        return Status::NotFound("the client socket of " + what + " is closing (TCP state " +
                                std::to_string(diag->idiag_state) + ") and has no owner");
      }
      return static_cast<uint32_t>(diag->idiag_uid);
    }
  }
}

}  // namespace

Result<uint32_t> LoopbackPeerUid(const PeerInfo& peer) {
  if (peer.transport == PeerInfo::Transport::kUnix)
    return Status::Invalid("LoopbackPeerUid needs a TCP connection, not a unix socket one");
  std::string what = "from " + peer.remote_address + " port " + std::to_string(peer.remote_port) +
                     " to " + peer.local_address + " port " + std::to_string(peer.local_port);
  Address remote, local;
  if (!ParseAddress(peer.remote_address, &remote) || !ParseAddress(peer.local_address, &local))
    return Status::Invalid("cannot parse the addresses of the connection " + what);
  if (!IsLoopback(remote))
    return Status::Invalid("the connection " + what +
                           " does not come from a loopback address, so the kernel cannot say "
                           "which local user made it");
  if (remote.family != local.family)
    return Status::Invalid("the connection " + what + " mixes IPv4 and IPv6 addresses");
  if (peer.remote_port <= 0 || peer.remote_port > 65535 || peer.local_port <= 0 ||
      peer.local_port > 65535)
    return Status::Invalid("the connection " + what + " has no valid ports");
  auto uid = Lookup(remote.family, remote, peer.remote_port, local, peer.local_port, what);
  if (uid.ok() || remote.family != AF_INET || uid.status().code() != Code::kNotFound) return uid;
  // A dual-stack client socket (AF_INET6) that connected to an IPv4 address lives in the IPv6
  // tables under IPv4-mapped addresses.
  auto uid6 = Lookup(AF_INET6, remote, peer.remote_port, local, peer.local_port, what);
  return uid6.ok() ? uid6 : uid;
}

}  // namespace berth::net
