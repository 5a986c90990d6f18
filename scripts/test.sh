#!/usr/bin/env bash
# The whole test suite: installs what the tests need (skipping what is present), then runs
# formatting, lints and every test. Used by people and by CI (.ci/run) alike.
#
#   ./scripts/test.sh            everything
#   FUZZ_SECONDS=60 ./scripts/test.sh   longer fuzzing (default 10 s per target; 0 skips it)
#   SOAK_MINUTES=30 ./scripts/test.sh   longer soak with faults (default 2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
step() { printf '\n== %s\n' "$*"; }

step "toolchain"
cargo --version
rustc --version

step "services"
# Integration tests start their own servers on loopback ports and stop them: redis-server (one node,
# a 3-master cluster joined with redis-cli --cluster create, and one with replicas), clickhouse-server
# (one server, and a 2 × 2 cluster with ZooKeeper) and nginx. They
# need the binaries.
sudo_cmd=""
if [ "$(id -u)" != "0" ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "installing redis-server (Debian package)"
  $sudo_cmd apt-get install -y --no-install-recommends redis-server >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends redis-server >/dev/null; }
fi
redis-server --version
# The decision-log tests start their own clickhouse-server (run as the package's `clickhouse` user).
if ! command -v clickhouse-server >/dev/null 2>&1 && [ ! -x /usr/sbin/clickhouse-server ]; then
  echo "installing clickhouse-server (Debian package)"
  $sudo_cmd apt-get install -y --no-install-recommends clickhouse-server clickhouse-client >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends clickhouse-server clickhouse-client >/dev/null; }
fi
# The ClickHouse cluster test (2 shards × 2 replicas) runs a standalone ZooKeeper: Debian's
# `zookeeper` package, which brings the Java runtime it needs.
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "installing zookeeper (Debian package, with a Java runtime)"
  $sudo_cmd apt-get install -y --no-install-recommends zookeeper >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends zookeeper >/dev/null; }
fi
# The forward-auth test runs a real nginx (auth_request) in front of a toy upstream.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  echo "installing nginx (Debian package nginx-light)"
  $sudo_cmd apt-get install -y --no-install-recommends nginx-light >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends nginx-light >/dev/null; }
fi
# The edge tier's CRS: Debian's OWASP Core Rule Set (rules and data files, no web server).
if [ ! -d /usr/share/modsecurity-crs/rules ]; then
  echo "installing modsecurity-crs (Debian package: the OWASP Core Rule Set)"
  $sudo_cmd apt-get install -y --no-install-recommends modsecurity-crs >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends modsecurity-crs >/dev/null; }
fi
echo "clickhouse-server: $(dpkg-query -W -f='${Version}' clickhouse-server 2>/dev/null || echo present)"
# The console's browser tests drive Debian's Chromium (test tools cannot download browsers here).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "installing chromium and chromium-driver (Debian packages)"
  $sudo_cmd apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null \
    || { $sudo_cmd apt-get update >/dev/null && $sudo_cmd apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; }
fi
chromium --version

step "console (admin-ui: Yew → wasm with trunk; skipped when unchanged)"
# Before the engine is built: the engine embeds admin-ui/dist.
./scripts/console.sh

step "format"
cargo fmt --all -- --check

step "module layering (no import cycles in rampart-core or rampart)"
python3 scripts/modcycles.py engine/core engine/server

step "lint"
cargo clippy --workspace --all-targets --locked --release -- -D warnings
(cd admin-ui && cargo fmt -- --check && cargo clippy --locked --release --target wasm32-unknown-unknown -- -D warnings)

step "dependencies (cargo deny: licences, bans and duplicate versions, sources)"
if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "installing cargo-deny (once, a few minutes)"
  cargo install cargo-deny --locked --quiet
fi
cargo deny --locked check licenses bans sources
# The advisory database is cloned from GitHub; where GitHub cannot be reached the check is skipped
# (and says so), not failed.
if timeout 20 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
  cargo deny --locked check advisories
else
  echo "cargo deny check advisories: skipped (the RustSec advisory database cannot be fetched here)"
fi

step "tests"
log="$(mktemp)"
trap 'rm -f "$log" "$log.e2e"' EXIT
cargo test --workspace --locked --release 2>&1 | tee "$log"

step "client signing helper (JavaScript, node --test)"
node --test sdk/js/ 2>&1 | tee -a "$log" | tail -n 8
# Count Node's results in the closing line like cargo's.
awk '/^# pass / { p = $3 } /^# fail / { f = $3 } END { printf "test result: node. %d passed; %d failed;\n", p, f }' "$log" >> "$log"

step "browser tests (headless Chromium, playwright-core, real engine: the console; the challenge page behind a real nginx)"
if [ ! -d admin-ui/e2e/node_modules/playwright-core ]; then
  (cd admin-ui/e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
# The release binary `cargo test` built above for the integration tests, with the console
# embedded (a separate `cargo build -p rampart` would resolve other features and rebuild it).
RAMPART_BIN="${CARGO_TARGET_DIR:-target}/release/rampart"
if ! RAMPART_BIN="$RAMPART_BIN" node --test admin-ui/e2e/ >"$log.e2e" 2>&1; then
  cat "$log.e2e"
  exit 1
fi
tail -n 8 "$log.e2e"
awk '/^# pass / { p = $3 } /^# fail / { f = $3 } END { printf "test result: browser. %d passed; %d failed;\n", p, f }' "$log.e2e" >> "$log"
echo "screenshots: admin-ui/e2e/screenshots/"

step "load-test smoke (rampart-load against the baseline; figures are printed, never checked)"
cargo build --release --locked -p rampart-load --quiet
"${CARGO_TARGET_DIR:-target}/release/rampart-load" --engine "$RAMPART_BIN" --only baseline,local \
  --seconds 1 --connections 8 --out "$(mktemp -d)" 2>&1 | grep -E 'req/s' || { echo "rampart-load failed"; exit 1; }

step "soak with faults (2 minutes: Redis state, ClickHouse log, rule set swaps, Redis and ClickHouse restarted)"
# Fails the run when rows logged differ from decisions served, when a request fails other than by
# a declared store policy, or when memory keeps growing; the report is printed either way.
"${CARGO_TARGET_DIR:-target}/release/rampart-load" soak --engine "$RAMPART_BIN" --minutes "${SOAK_MINUTES:-2}" \
  --swap-every 30 2>&1 || { echo "soak failed"; exit 1; }

if [ "$FUZZ_SECONDS" != "0" ]; then
  step "fuzz smoke (${FUZZ_SECONDS}s per target)"
  if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
  fi
  # cargo fuzz needs unstable sanitizer flags; RUSTC_BOOTSTRAP lets the stable toolchain accept
  # them for this build only.
  for target in canonical fingerprint decide waf bundle authz; do
    mkdir -p "fuzz/corpus/$target"
    (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=0 2>&1 | tail -n 3)
  done
fi

step "done"
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
