// RunHaServer: `berth server --store postgresql://...`, one of several servers sharing a database
// (docs/ha.md). It follows until the Elector (server/leadership.h) gives it the lease, then runs
// the whole Server with its store fenced by the lease's token, and goes back to following when it
// loses the lease. A follower answers every request but GET /v1/health with 503 and where the
// leader is (JSON "leader", header X-Berth-Leader), so clients and agents given a list of servers
// move on to the next; it keeps the same port and unix socket the leader will serve on.
//
// Why followers redirect rather than answer reads: the leader's memory (queue, nodes, running
// attempts, waiting reasons) is the one source of truth for everything but history, and a follower
// reading the database would show a state the leader may already have moved past; a client that
// submits and then lists must see its job. Redirecting keeps one answer per question.
#pragma once

#include <signal.h>

#include <functional>
#include <string>

#include "server/http/server.h"

namespace berth {

struct HaOptions {
  std::string store;  // the postgresql:// URL
  DurationMs lease_ms = 3'000;
  std::string advertise_url;  // "" = this server's own URL (host:port it listens on)
  // Jobs' output lives in the database; the leader deletes that of jobs ended this long ago
  // (0: never).
  DurationMs log_retention_ms = 30LL * 24 * 3'600'000;
};

// Runs until one of `stop_signals` (already blocked) arrives; answers the exit code. `on_listening`
// is called once with this server's URL when it first listens.
int RunHaServer(ServerOptions options, const HaOptions& ha, const sigset_t& stop_signals,
                const std::function<void(const std::string& url)>& on_listening);

}  // namespace berth
