// Which address `berth port-forward` may connect to for a rank (docs/api.md "Port forwarding"):
// a port on this node is reachable only where the rank itself listens on it, so that a forward
// reaches neither another user's service nor the node's own (the agent's, a metrics exporter's).
// The agent reads the kernel's TCP tables (/proc/net/tcp, /proc/net/tcp6) for listening sockets
// on the port, and keeps those of the rank's user that a process of the rank holds open (its
// /proc/PID/fd links name the socket's inode).
//
// Every path is under a root given by the caller ("/proc" on a real host), so that tests build
// the tables and fd links in a temporary directory (tests/unit/agent/port_owner_test.cpp).
//
// Thread-safety: the functions are reentrant; they only read files.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace berth {

// One listening socket of a kernel TCP table.
struct TcpListener {
  sockaddr_storage address{};  // where it listens (the any-address for all of them)
  uid_t uid = 0;
  uint64_t inode = 0;
};

// The sockets of a /proc/net/tcp or /proc/net/tcp6 text (`v6` for the latter) that listen on
// `port`. Lines it cannot read are skipped.
std::vector<TcpListener> ParseTcpListeners(std::string_view table, bool v6, int port);

// The address to connect to for a listener: loopback of its family for the any-address, else its
// own address.
sockaddr_storage ConnectAddressOf(const TcpListener& listener);

// Where a forward to `port` of a rank connects: a listener on the port, owned by `uid`, that one
// of `pids` holds open (any of uid's, when `pids` is null: a node without cgroups cannot tell a
// rank's processes apart). Conflict naming what was found when there is none.
Result<sockaddr_storage> FindRankListener(const std::string& proc_root, int port, uid_t uid,
                                          const std::set<pid_t>* pids);

}  // namespace berth
