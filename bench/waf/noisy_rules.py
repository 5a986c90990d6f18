#!/usr/bin/env python3
"""Recomputes Rampart's CRS exclusions (engine/core/src/waf/crs-exclusions.conf): the CRS rules
that fire on at least a share of benign traffic, at a paranoia level.

It runs rampart-seclang's `corpus` example (FEATURES=1: the rules each request matched) on the
benign requests given (CRS-format JSON lines; records with `split: "validate"` are left out, so
that the validation half stays unseen), counts each rule once per request, and prints the rules at
or below the paranoia level that reach the share, with the share.

    cargo build --release -p rampart-seclang --example corpus
    python3 bench/waf/noisy_rules.py --crs /usr/share/modsecurity-crs/rules \\
        --seclang target/release/examples/corpus \\
        bench/waf/shop-traffic.jsonl rules/samples/benign   # a directory: its *.json samples

Default: paranoia 2, share 0.3%.
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import tempfile

# Files the engine leaves out by default (engine/core/src/waf/crs.rs, DEFAULT_SKIP).
SKIP = "-910-,-911-,-912-,-920-"


def records(path):
    """CRS-format records from a JSON-lines file, or from a directory of rule-set samples."""
    if os.path.isdir(path):
        for f in sorted(glob.glob(os.path.join(path, "**", "*.json"), recursive=True)):
            d = json.load(open(f, encoding="utf-8"))
            r = d["request"]["request"]
            q = r.get("query", "")
            headers = dict(r.get("headers", {}))
            ua = d["request"].get("client", {}).get("user_agent")
            if ua and "user-agent" not in headers:
                headers["user-agent"] = ua
            yield {"id": "sample-" + d["name"], "label": "benign", "paranoia": 1,
                   "method": r.get("method", "GET"), "uri": r.get("path", "/") + ("?" + q if q else ""),
                   "headers": headers, "body": r.get("body") or ""}
    else:
        for line in open(path, encoding="utf-8"):
            if line.strip():
                rec = json.loads(line)
                if rec.get("split") != "validate":
                    yield rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crs", required=True)
    ap.add_argument("--seclang", required=True)
    ap.add_argument("--paranoia", type=int, default=2)
    ap.add_argument("--share", type=float, default=0.003)
    ap.add_argument("benign", nargs="+")
    a = ap.parse_args()
    recs = [r for p in a.benign for r in records(p)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
        corpus = f.name
    env = dict(os.environ, FEATURES="1", SKIP=SKIP)
    out = subprocess.run([a.seclang, a.crs, corpus, str(a.paranoia)], env=env,
                         capture_output=True, text=True, check=True).stdout
    os.unlink(corpus)
    fired = collections.Counter()
    level = {}
    for line in out.splitlines():
        if not line.startswith("F "):
            continue
        parts = line.split(" ")
        seen = set()
        for m in (parts[2].split(",") if len(parts) > 2 and parts[2] else []):
            rid, pl, _sev, *_ = m.split(":")
            rid = int(rid)
            level[rid] = int(pl)
            if rid < 949000 and rid not in seen:
                seen.add(rid)
                fired[rid] += 1
    n = len(recs)
    print(f"# {n} benign requests, paranoia {a.paranoia}, rules firing on >= {100 * a.share:.1f}%")
    for rid, k in fired.most_common():
        if k / n >= a.share and level.get(rid, 1) <= a.paranoia:
            print(f"SecRuleRemoveById {rid}  # paranoia {level[rid]}, {k}/{n} ({100 * k / n:.1f}%)")


if __name__ == "__main__":
    main()
