#!/usr/bin/env bash
# Installs berth's build and test dependencies from Debian 12 packages.
# Idempotent and non-interactive: packages already present are skipped.
#   --for-tests  also what only the tests use: Debian's chromium (the dashboard's browser tests),
#                prometheus (for promtool, which checks /metrics) and the PostgreSQL server (the
#                tests start their own with initdb/pg_ctl in a temp dir; no service is started), and
#                systemd's systemd-analyze (checks packaging/systemd's units), and what the
#                container tests use: rootless podman (with runc, uidmap, catatonit), Debian's
#                docker-registry (its service is not started) and busybox-static (the image);
#                socat, the peer bench/interactive.py measures sessions against; python3-jsonschema,
#                which checks the API's OpenAPI description (tests/integration/test_openapi.py);
#                python3-venv and python3-pip (with python3-setuptools and python3-wheel), with which
#                tests/integration/test_python_client.py installs the Python client offline; and
#                python3-aiosmtpd and openssl: the mail relay and the HTTPS receiver's certificate of
#                tests/integration/test_notify.py.
set -euo pipefail
for_tests=0
if [ "${1:-}" = "--for-tests" ]; then for_tests=1; fi

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev libboost-json1.81-dev
  libyaml-cpp-dev libsqlite3-dev libpq-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  procps iproute2 curl python3 tmux rsync
  clang clang-format
)
if [ "$for_tests" -eq 1 ]; then
  packages+=(chromium fonts-dejavu-core podman runc uidmap catatonit busybox-static socat
    python3-jsonschema python3-venv python3-pip python3-setuptools python3-wheel python3-aiosmtpd
    openssl)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Packages that come with a system service, which must not start on a build machine: promtool, from
# Debian's prometheus package, checks the server's /metrics page in the tests; postgresql's server
# binaries run the tests' own throw-away clusters.
services=()
if [ "$for_tests" -eq 1 ]; then
  if ! command -v promtool >/dev/null 2>&1; then services+=(prometheus); fi
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then services+=(postgresql); fi
  if ! command -v systemd-analyze >/dev/null 2>&1; then services+=(systemd); fi
  if ! command -v docker-registry >/dev/null 2>&1; then services+=(docker-registry); fi
fi

if [ ${#missing[@]} -eq 0 ] && [ ${#services[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "berth: installing ${missing[*]}" >&2
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#services[@]} -gt 0 ]; then
  # While they install, a policy-rc.d refuses service starts (unless the machine already has one).
  echo "berth: installing ${services[*]} (for the tests; their services are not started)" >&2
  policy=/usr/sbin/policy-rc.d
  ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod 755 "$policy"
    ours=1
  fi
  status=0
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${services[@]}" >/dev/null ||
    status=$?
  if [ "$ours" -eq 1 ]; then "${sudo_cmd[@]}" rm -f "$policy"; fi
  if [ "$status" -ne 0 ]; then exit "$status"; fi
fi
