#!/usr/bin/env bash
# CI for a rules repository, usable from any CI system: `rules-ci.sh pr` on a pull request,
# `rules-ci.sh merge` after a merge to the main branch. Needs `rampart-rules` on PATH and git.
#
#   pr     validate + test (the ratchet) + diff against the base branch; the diff (text and JSON)
#          is written to $OUT for the CI to keep as an artifact.
#   merge  validate + test, then bundle, sign and promote to a canary. Stable stays a human's
#          approval in the console (or `rampart-rules promote --stage stable` with their token).
#
# Settings (environment):
#   RULES_DIR           rule directory                             (default: rules)
#   BASE_REF            what a pull request is compared with       (default: origin/main)
#   TRAFFIC             recorded traffic for the diff (JSON lines)  (optional)
#   OUT                 artifact directory                          (default: rules-ci-out)
#   RAMPART_BUNDLE_KEY  the secret signing key's text               (merge; a CI secret)
#   RAMPART_ENGINE      the engine's base URL                       (merge)
#   RAMPART_TOKEN       an admin API token with the author role     (merge; a CI secret)
#   CANARY_PERCENT      the canary's share of requesters           (default: 5)
set -euo pipefail

mode="${1:-}"
RULES_DIR="${RULES_DIR:-rules}"
BASE_REF="${BASE_REF:-origin/main}"
OUT="${OUT:-rules-ci-out}"
CANARY_PERCENT="${CANARY_PERCENT:-5}"
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }
need() { [ -n "${!1:-}" ] || { echo "rules-ci: $1 is not set" >&2; exit 2; }; }

step "validate"
rampart-rules validate --rules "$RULES_DIR"
step "test (samples and ratchet)"
rampart-rules test --rules "$RULES_DIR"

case "$mode" in
  pr)
    step "diff against $BASE_REF"
    traffic=()
    if [ -n "${TRAFFIC:-}" ]; then traffic=(--traffic "$TRAFFIC"); fi
    rampart-rules diff --rules "$RULES_DIR" --base "$BASE_REF" "${traffic[@]}" | tee "$OUT/diff.txt"
    rampart-rules diff --rules "$RULES_DIR" --base "$BASE_REF" "${traffic[@]}" --json > "$OUT/diff.json"
    ;;
  merge)
    need RAMPART_BUNDLE_KEY
    need RAMPART_ENGINE
    need RAMPART_TOKEN
    step "bundle and sign"
    rampart-rules bundle --rules "$RULES_DIR" --key-env RAMPART_BUNDLE_KEY --out "$OUT/bundle.json"
    step "promote to a ${CANARY_PERCENT}% canary"
    rampart-rules promote "$OUT/bundle.json" --engine "$RAMPART_ENGINE" --stage "canary:$CANARY_PERCENT"
    ;;
  *)
    echo "usage: rules-ci.sh pr|merge" >&2
    exit 2
    ;;
esac
