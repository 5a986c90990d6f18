#!/usr/bin/env bash
# Builds the operators' console (admin-ui/, Yew → WebAssembly) into admin-ui/dist with trunk, for
# the engine to embed and serve under /console/. Installs the wasm toolchain once (the wasm32
# target, trunk, and the wasm-bindgen CLI of exactly the version admin-ui/Cargo.lock pins; about
# 15 minutes the first time). Skips the build when no file of admin-ui/ changed since the last
# one: each build is kept in a cache outside the checkout under a hash of the console's files, so
# a fresh clone of an unchanged console only copies it.
#
#   ./scripts/console.sh           build if needed
#   CONSOLE_FORCE=1 ./scripts/console.sh   rebuild anyway
set -euo pipefail
cd "$(dirname "$0")/.."

TRUNK_VERSION=0.21.14
cache="${RAMPART_CACHE_DIR:-$HOME/.cache/rampart}/console"
dist=admin-ui/dist

# Everything the build reads, except its own output and the browser tests.
hash=$(find admin-ui -type f -not -path 'admin-ui/dist/*' -not -path 'admin-ui/target/*' -not -path 'admin-ui/e2e/*' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)

# Every file also gzipped beside it (x.wasm.gz), for the engine to embed and serve to clients that
# accept gzip: chosen at build time, so no request pays for compression. gzip -n: no name or time
# in the header, so the same file gives the same bytes.
precompress() {
  for f in "$dist"/*; do
    case "$f" in *.gz) continue ;; esac
    [ -f "$f" ] || continue
    if [ ! -f "$f.gz" ] || [ "$f" -nt "$f.gz" ]; then
      gzip -9 -n -k -f "$f"
    fi
  done
}

if [ -z "${CONSOLE_FORCE:-}" ] && [ -f "$dist/.build-hash" ] && [ "$(cat "$dist/.build-hash")" = "$hash" ]; then
  precompress
  echo "console: up to date ($hash)"
  exit 0
fi
if [ -z "${CONSOLE_FORCE:-}" ] && [ -f "$cache/$hash/index.html" ]; then
  rm -rf "$dist"
  mkdir -p "$dist"
  cp -p "$cache/$hash"/* "$dist"/
  echo "$hash" > "$dist/.build-hash"
  precompress
  echo "console: unchanged since a cached build ($hash), copied"
  exit 0
fi

# The toolchain, each piece only when missing.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  echo "console: adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi
if ! trunk --version 2>/dev/null | grep -q " $TRUNK_VERSION"; then
  echo "console: installing trunk $TRUNK_VERSION (once, several minutes)"
  cargo install trunk --version "$TRUNK_VERSION" --locked --quiet
fi
bindgen=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' admin-ui/Cargo.lock)
if ! wasm-bindgen --version 2>/dev/null | grep -q " $bindgen\$"; then
  echo "console: installing wasm-bindgen-cli $bindgen (once, several minutes)"
  # Without --locked, as its own lock file may pin crates this toolchain cannot build.
  cargo install wasm-bindgen-cli --version "$bindgen" --quiet
fi

echo "console: building ($hash)"
# --offline: trunk must not try to download tools; it uses the ones installed above.
(cd admin-ui && trunk build --offline --release)
echo "$hash" > "$dist/.build-hash"
precompress
mkdir -p "$cache/$hash"
cp -p "$dist"/* "$cache/$hash"/
# Keep the five newest builds.
ls -1dt "$cache"/*/ 2>/dev/null | tail -n +6 | xargs -r rm -rf
du -sh "$dist" | awk '{ print "console: built, " $1 " in admin-ui/dist" }'
for w in "$dist"/*.wasm; do
  echo "console: $(basename "$w"): $(stat -c %s "$w") bytes, $(stat -c %s "$w.gz") gzipped"
done
