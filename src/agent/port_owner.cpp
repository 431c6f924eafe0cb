#include "agent/port_owner.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "common/files.h"
#include "common/strings.h"

namespace berth {

namespace {

constexpr char kListenState[] = "0A";  // TCP_LISTEN, as the tables print it

bool ParseHex32(std::string_view hex, uint32_t* out) {
  if (hex.size() != 8) return false;
  uint32_t v = 0;
  for (char c : hex) {
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<uint32_t>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return false;
    }
  }
  *out = v;
  return true;
}

// "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6). The kernel prints each 32-bit word
// of the address as the host reads it, so the words go back into memory as they are.
bool ParseAddress(std::string_view text, bool v6, sockaddr_storage* out, int* port) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  std::string_view addr = text.substr(0, colon);
  uint32_t p = 0;
  std::string port_hex = std::string(8 - std::min<size_t>(8, text.size() - colon - 1), '0');
  port_hex += text.substr(colon + 1);
  if (!ParseHex32(port_hex, &p) || p > 65535) return false;
  *port = static_cast<int>(p);
  *out = {};
  if (!v6) {
    uint32_t word = 0;
    if (!ParseHex32(addr, &word)) return false;
    auto* sin = reinterpret_cast<sockaddr_in*>(out);
    sin->sin_family = AF_INET;
    std::memcpy(&sin->sin_addr, &word, 4);
    sin->sin_port = htons(static_cast<uint16_t>(p));
    return true;
  }
  if (addr.size() != 32) return false;
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(out);
  sin6->sin6_family = AF_INET6;
  for (size_t i = 0; i < 4; ++i) {
    uint32_t word = 0;
    if (!ParseHex32(addr.substr(i * 8, 8), &word)) return false;
    std::memcpy(reinterpret_cast<char*>(&sin6->sin6_addr) + i * 4, &word, 4);
  }
  sin6->sin6_port = htons(static_cast<uint16_t>(p));
  return true;
}

// The socket inodes process `pid` holds open.
std::set<uint64_t> SocketsOf(const std::string& proc_root, pid_t pid) {
  std::set<uint64_t> inodes;
  const std::string dir = fmt::format("{}/{}/fd", proc_root, pid);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return inodes;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[128];
    ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    std::string_view link(target, static_cast<size_t>(n));
    constexpr std::string_view kPrefix = "socket:[";
    if (link.substr(0, kPrefix.size()) != kPrefix || link.back() != ']') continue;
    try {
      inodes.insert(std::stoull(std::string(link.substr(kPrefix.size()))));
    } catch (...) {
    }
  }
  ::closedir(d);
  return inodes;
}

}  // namespace

std::vector<TcpListener> ParseTcpListeners(std::string_view table, bool v6, int port) {
  std::vector<TcpListener> found;
  for (const std::string& line : Split(std::string(table), '\n')) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    std::vector<std::string> f;
    for (const std::string& word : Split(line, ' ')) {
      if (!word.empty()) f.push_back(word);
    }
    if (f.size() < 10 || f[3] != kListenState) continue;
    TcpListener l;
    int listen_port = 0;
    if (!ParseAddress(f[1], v6, &l.address, &listen_port) || listen_port != port) continue;
    try {
      l.uid = static_cast<uid_t>(std::stoul(f[7]));
      l.inode = std::stoull(f[9]);
    } catch (...) {
      continue;
    }
    found.push_back(l);
  }
  return found;
}

sockaddr_storage ConnectAddressOf(const TcpListener& listener) {
  sockaddr_storage a = listener.address;
  if (a.ss_family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a);
    if (sin->sin_addr.s_addr == htonl(INADDR_ANY)) sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)) sin6->sin6_addr = in6addr_loopback;
  }
  return a;
}

Result<sockaddr_storage> FindRankListener(const std::string& proc_root, int port, uid_t uid,
                                          const std::set<pid_t>* pids) {
  std::vector<TcpListener> listeners;
  for (bool v6 : {false, true}) {
    auto table = ReadFile(proc_root + (v6 ? "/net/tcp6" : "/net/tcp"));
    if (!table) continue;  // a kernel without IPv6
    for (const TcpListener& l : ParseTcpListeners(*table, v6, port)) listeners.push_back(l);
  }
  if (listeners.empty()) {
    return Status::Conflict(fmt::format("nothing listens on port {} of the node", port));
  }
  std::set<uint64_t> held;  // sockets of the rank's processes, read once
  if (pids) {
    for (pid_t pid : *pids) held.merge(SocketsOf(proc_root, pid));
  }
  for (const TcpListener& l : listeners) {
    if (l.uid != uid) continue;
    if (pids && !held.contains(l.inode)) continue;
    return ConnectAddressOf(l);
  }
  return Status::Conflict(fmt::format(
      "port {} is not the job's: {} listens there, but no process of this rank does", port,
      listeners.front().uid == uid ? "another process of its user" : "another user"));
}

}  // namespace berth
