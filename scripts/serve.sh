#!/usr/bin/env bash
# Runs Rampart on its embedded defaults with the console: builds the console when admin-ui/
# changed (scripts/console.sh), then `cargo run --release -p rampart -- serve`. Arguments are
# passed to `rampart serve` (e.g. --config rampart.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/console.sh
exec cargo run --release -p rampart -- serve "$@"
