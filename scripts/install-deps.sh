#!/usr/bin/env bash
# Installs berth's build and test dependencies from Debian 12 packages.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libboost1.81-dev libboost-json1.81-dev
  libyaml-cpp-dev libsqlite3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  procps iproute2 curl python3 tmux
  clang clang-format
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "berth: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
