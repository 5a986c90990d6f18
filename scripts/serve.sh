#!/usr/bin/env bash
# Runs Rampart on its embedded defaults with the console: installs Debian's OWASP Core Rule Set
# when missing, builds the console when admin-ui/ changed (scripts/console.sh), then `cargo run
# --release -p rampart -- serve`. Arguments are
# passed to `rampart serve` (e.g. --config rampart.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
# The edge tier runs the OWASP Core Rule Set from Debian's modsecurity-crs when it is installed
# (rules and data files only); without it the CRS is off and `rampart check` says so.
if [ ! -d /usr/share/modsecurity-crs/rules ] && command -v apt-get >/dev/null 2>&1; then
  sudo_cmd=""
  if [ "$(id -u)" != "0" ]; then sudo_cmd="sudo"; fi
  echo "installing modsecurity-crs (Debian package: the OWASP Core Rule Set)"
  $sudo_cmd apt-get install -y --no-install-recommends modsecurity-crs >/dev/null 2>&1 \
    || { $sudo_cmd apt-get update >/dev/null 2>&1 && $sudo_cmd apt-get install -y --no-install-recommends modsecurity-crs >/dev/null 2>&1; } \
    || echo "modsecurity-crs not installed: the edge tier runs without the CRS"
fi
./scripts/console.sh
exec cargo run --release -p rampart -- serve "$@"
