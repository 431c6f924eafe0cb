"""Where the server is and who we are to it, found exactly as the ``berth`` command line finds them
(src/cli/connection.cpp, ``Connection::Connect``):

1. the token: the ``token`` argument, else ``BERTH_TOKEN``, else the file ``BERTH_TOKEN_FILE`` names;
2. the server: the ``server`` argument (the CLI's ``--server``), else ``BERTH_SERVER``;
3. the login ``berth login`` saved in ``BERTH_HOME/config`` (JSON: ``server``, ``token``,
   ``tls_fingerprint``), when no server was named or the one named is the saved one: its server, its
   pinned TLS fingerprint, and its token unless one was given;
4. with still no server: the local cluster of ``BERTH_HOME`` through its unix socket
   (``BERTH_HOME/server/berth.sock``, where the kernel says who we are) when its socket and
   ``local.json`` are there; else, on a node of a real cluster (a ``berth agent`` runs here and
   ``BERTH_HOME`` is not set), the CLI's refusal naming that cluster's socket; else the local cluster's
   TCP URL from ``local.json`` when its server answers.

``BERTH_HOME`` defaults to ``~/.berth``. ``BERTH_TLS_FINGERPRINT`` pins over the login's fingerprint. A
token is never sent over plain HTTP to a host off this machine. Unlike the CLI, the client never starts
a local cluster itself: with nothing found it raises :class:`berth.ConfigError` saying what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional

from .errors import ConfigError
from .transport import is_loopback_host, parse_url


def berth_home(env: Mapping[str, str] = os.environ) -> str:
    """BERTH_HOME, default ~/.berth (/tmp/.berth without a HOME)."""
    home = env.get("BERTH_HOME")
    if home:
        return home
    return (env.get("HOME") or "/tmp") + "/.berth"


@dataclass(frozen=True)
class LoginConfig:
    """What ``berth login`` saved in BERTH_HOME/config."""

    server: str = ""
    token: str = ""
    tls_fingerprint: str = ""


def read_login_config(home: str) -> Optional[LoginConfig]:
    """The saved login under `home`, None when there is none (or it cannot be read)."""
    path = os.path.join(home, "config")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None

    def text(key: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) else ""

    return LoginConfig(server=text("server"), token=text("token"),
                       tls_fingerprint=text("tls_fingerprint"))


@dataclass(frozen=True)
class NodeAgent:
    """A ``berth agent`` of a real cluster running on this machine (not a local cluster's own)."""

    pid: int
    state_dir: str
    server: str
    user_socket: str  # where its users reach the cluster ("" when it serves none)


def find_node_agent(proc: str = "/proc") -> Optional[NodeAgent]:
    """The first berth agent found in `proc`'s command lines, as the CLI's FindNodeAgent."""
    try:
        names = os.listdir(proc)
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        while argv and not argv[-1]:
            argv.pop()
        if len(argv) < 2 or argv[1] != "agent":
            continue
        if os.path.basename(argv[0]) not in ("berth", "berth-daemon"):
            continue
        agent = _agent_of(int(name), argv)
        if agent is not None:
            return agent
    return None


def _agent_of(pid: int, argv: List[str]) -> Optional[NodeAgent]:
    def flag(name: str) -> str:
        for i in range(2, len(argv)):
            if argv[i] == name and i + 1 < len(argv):
                return argv[i + 1]
            if argv[i].startswith(name + "="):
                return argv[i][len(name) + 1:]
        return ""

    state_dir = flag("--state-dir")
    # A local cluster's own agents (any user's) live in BERTH_HOME/agents/local-N.
    parent = os.path.basename(os.path.dirname(state_dir.rstrip("/")))
    if parent == "agents" and os.path.basename(state_dir.rstrip("/")).startswith("local-"):
        return None
    socket = flag("--user-socket")
    user_socket = ""
    if socket != "-":
        user_socket = socket or (state_dir + "/berth.sock" if state_dir else "")
    return NodeAgent(pid=pid, state_dir=state_dir, server=flag("--server"), user_socket=user_socket)


@dataclass(frozen=True)
class ServerChoice:
    """The server(s) to talk to and how."""

    urls: List[str]
    token: str
    tls_fingerprint: str
    source: str  # where it came from: "argument", "BERTH_SERVER", "login", "local cluster"
    local_home: str = ""  # the BERTH_HOME of the local cluster, when that is what was found


def local_socket_path(home: str) -> str:
    """The local cluster's unix socket under BERTH_HOME."""
    return os.path.join(home, "server", "berth.sock")


def choose_server(server: Optional[str] = None, token: Optional[str] = None,
                  tls_fingerprint: Optional[str] = None,
                  env: Mapping[str, str] = os.environ,
                  local_health: Optional[Callable[[str], bool]] = None) -> ServerChoice:
    """Finds the server as the CLI does (see the module's docstring). `local_health(url)` says
    whether a local cluster's server answers at a TCP URL (only asked when its socket is missing)."""
    token = token or env.get("BERTH_TOKEN") or ""
    if not token and env.get("BERTH_TOKEN_FILE"):
        token = _read_token_file(env["BERTH_TOKEN_FILE"])
    url = server or ""
    source = "argument" if url else ""
    if not url and env.get("BERTH_SERVER"):
        url, source = env["BERTH_SERVER"], "BERTH_SERVER"
    home = berth_home(env)
    fingerprint = ""
    login = read_login_config(home)
    if login is not None and login.server and (not url or url == login.server):
        url, source = login.server, source or "login"
        fingerprint = login.tls_fingerprint
        token = token or login.token
    local_home = ""
    if not url:
        url = _local_cluster_url(home, env, local_health)
        source, local_home = "local cluster", home
    urls = [u.strip() for u in url.split(",") if u.strip()]
    if not urls:
        raise ConfigError("server: no URL given")
    for each in urls:
        parsed = parse_url(each)
        if token and parsed.scheme == "http" and not is_loopback_host(parsed.host):
            raise ConfigError(f"refusing to send your token over plain HTTP to {parsed.host}: "
                              "use the server's https:// URL")
    fingerprint = tls_fingerprint or env.get("BERTH_TLS_FINGERPRINT") or fingerprint
    return ServerChoice(urls=urls, token=token, tls_fingerprint=fingerprint, source=source,
                        local_home=local_home)


def _read_token_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        raise ConfigError(f"BERTH_TOKEN_FILE: cannot read {path}: {e.strerror}") from e


def _local_cluster_url(home: str, env: Mapping[str, str],
                       local_health: Optional[Callable[[str], bool]]) -> str:
    """The local cluster's URL (its unix socket where it has one), or ConfigError saying what to
    do when there is none."""
    state_path = os.path.join(home, "local.json")
    socket_path = local_socket_path(home)
    if os.path.exists(socket_path) and os.path.exists(state_path):
        return "unix:" + socket_path
    if not env.get("BERTH_HOME"):
        agent = find_node_agent()
        if agent is not None:
            where = "unix:" + agent.user_socket if agent.user_socket else agent.server
            raise ConfigError(
                f"this machine runs a berth agent (pid {agent.pid}, state dir "
                f"{agent.state_dir or '-'}): its cluster is reached with server='{where}' (or export "
                f"BERTH_SERVER={where}); `berth local up` starts a private cluster here anyway")
    recorded = _recorded_local_server(state_path)
    if recorded and local_health is not None and local_health(recorded):
        return recorded
    raise ConfigError(
        f"no berth server configured (server=, BERTH_SERVER, `berth login`) and no local cluster "
        f"running under {home}: `berth local up` starts one")


def _recorded_local_server(state_path: str) -> str:
    try:
        with open(state_path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    server = data.get("server") if isinstance(data, dict) else None
    return server if isinstance(server, str) else ""
