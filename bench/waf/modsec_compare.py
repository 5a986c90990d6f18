#!/usr/bin/env python3
"""Side by side: libmodsecurity 3 (PyPI `libmodsecurity`, which bundles the C++ library) and
Rampart's rampart-seclang on the same OWASP CRS rules, the same setup and the same requests.

For each request it reports whether each engine refused it (inbound anomaly score at or above the
threshold, CRS rule 949110) and which CRS rules matched, then the agreement and the time per
request of each. ModSecurity is timed around its `process_*` calls from Python (the library does
the work; the driver's share is measured and printed apart); rampart-seclang is timed in process
by its `corpus` example (engine/seclang/examples/corpus.rs) on the same machine, in the same run.

Bench-only: nothing here is part of the engine or its tests.

    python3 -m venv /tmp/msvenv && /tmp/msvenv/bin/pip install libmodsecurity
    cargo build --release -p rampart-seclang --example corpus
    /tmp/msvenv/bin/python bench/waf/modsec_compare.py --crs /usr/share/modsecurity-crs/rules \\
        --corpus bench/waf/shop-traffic.jsonl --paranoia 1 \\
        --seclang target/release/examples/corpus
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import time

import libmodsecurity as ms  # noqa: E402  (the PyPI wheel)

SKIP = ("REQUEST-910-", "REQUEST-911-", "REQUEST-912-", "REQUEST-920-")


def rules_text(crs_dir, paranoia, threshold):
    setup = (
        'SecRuleEngine On\nSecRequestBodyAccess On\n'
        'SecDefaultAction "phase:1,log,auditlog,pass"\nSecDefaultAction "phase:2,log,auditlog,pass"\n'
        f'SecAction "id:900000,phase:1,pass,nolog,setvar:tx.crs_setup_version=400,'
        f'setvar:tx.paranoia_level={paranoia},setvar:tx.executing_paranoia_level={paranoia},'
        f'setvar:tx.blocking_paranoia_level={paranoia},setvar:tx.detection_paranoia_level={paranoia},'
        f'setvar:tx.inbound_anomaly_score_threshold={threshold},'
        "setvar:'tx.allowed_methods=GET HEAD POST OPTIONS PUT PATCH DELETE'\"\n"
    )
    files = sorted(f for f in glob.glob(os.path.join(crs_dir, "REQUEST-*.conf"))
                   if not os.path.basename(f).startswith(SKIP))
    return setup, files


def modsec_engine(crs_dir, paranoia, threshold):
    m = ms.ModSecurity()
    matched = []
    m.set_rule_message_callback(lambda rm: matched.append(rm.rule_id))
    rs = ms.RulesSet()
    setup, files = rules_text(crs_dir, paranoia, threshold)
    if rs.load(setup) < 0:
        raise SystemExit(rs.get_parser_error())
    cwd = os.getcwd()
    os.chdir(crs_dir)  # @pmFromFile names are relative to the rules
    for f in files:
        if rs.load_from_uri(f) < 0:
            raise SystemExit(rs.get_parser_error())
    os.chdir(cwd)
    return m, rs, matched


def modsec_judge(m, rs, matched, rec):
    matched.clear()
    tx = ms.Transaction(m, rs)
    tx.process_connection("203.0.113.10", 40000, "127.0.0.1", 80)
    tx.process_uri(rec["uri"], rec["method"], "1.1")
    for k, v in rec["headers"].items():
        tx.add_request_header(k, v)
    tx.process_request_headers()
    body = rec.get("body", "")
    if body:
        tx.append_request_body(body.encode("utf-8", "surrogateescape"))
    tx.process_request_body()
    iv = tx.intervention()
    refused = bool(iv and iv.disruptive) or 949110 in matched
    return refused, sorted({i for i in matched if 0 < i < 949000})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crs", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--paranoia", type=int, default=1)
    ap.add_argument("--threshold", type=int, default=5)
    ap.add_argument("--seclang", required=True, help="the corpus example binary of rampart-seclang")
    ap.add_argument("--steady", action="store_true",
                    help="time a second pass of each engine, as a running server meets requests: "
                         "ModSecurity after a first pass over the corpus, rampart-seclang after one "
                         "too (its regexes' lazy automata built) with its value memos emptied "
                         "before each timed request (STEADY=1 of the corpus example)")
    a = ap.parse_args()
    recs = [json.loads(l) for l in open(a.corpus, encoding="utf-8") if l.strip()]

    m, rs, matched = modsec_engine(a.crs, a.paranoia, a.threshold)
    ms_results = {}
    if a.steady:
        for r in recs:
            modsec_judge(m, rs, matched, r)
    t = time.perf_counter()
    for r in recs:
        ms_results[r["id"]] = modsec_judge(m, rs, matched, r)
    t_ms = time.perf_counter() - t
    # The driver's own share: the same calls on a rule set that is only `SecRuleEngine On`.
    empty = ms.RulesSet()
    empty.load("SecRuleEngine On\nSecRequestBodyAccess On\n")
    for _ in range(2 if a.steady else 1):
        t = time.perf_counter()
        for r in recs:
            modsec_judge(m, empty, matched, r)
        driver = time.perf_counter() - t

    env = dict(os.environ, FEATURES="1", SKIP=",".join(s.rstrip("-").replace("REQUEST", "") + "-" for s in SKIP))
    if a.steady:
        env["STEADY"] = "1"
    out = subprocess.run([a.seclang, a.crs, a.corpus, str(a.paranoia), str(a.threshold)],
                         env=env, capture_output=True, text=True, check=True).stdout
    ours = {}
    per_request_us = None
    for line in out.splitlines():
        if line.startswith("F "):
            _, rid, *rest = line.split(" ")
            ids = sorted({int(x.split(":")[0]) for x in (rest[0].split(",") if rest and rest[0] else [])})
            ours[rid] = ids
        elif " rules at PL" in line:
            per_request_us = float(line.split(",")[-1].split("µs")[0].strip().split()[-1])
    refused_ours = {rid: 949110 in ids for rid, ids in ours.items()}
    agree_refusal = sum(refused_ours.get(k) == v[0] for k, v in ms_results.items())
    agree_rules = sum(set(i for i in ours.get(k, []) if i < 949000) == set(v[1]) for k, v in ms_results.items())
    n = len(recs)
    print(f"{n} requests, CRS at paranoia {a.paranoia}, threshold {a.threshold}"
          + (" (steady: second passes, rampart-seclang's value memos emptied per request)" if a.steady else ""))
    print(f"  refused: ModSecurity {sum(v[0] for v in ms_results.values())}, rampart-seclang {sum(refused_ours.values())}")
    print(f"  same refusal decision: {agree_refusal}/{n} ({100 * agree_refusal / n:.1f}%); same matched rules: {agree_rules}/{n} ({100 * agree_rules / n:.1f}%)")
    print(f"  time per request: ModSecurity {1e6 * (t_ms - driver) / n:.1f} µs (driver loop {1e6 * driver / n:.1f} µs removed),"
          f" rampart-seclang {per_request_us} µs -> {((t_ms - driver) / n * 1e6) / per_request_us:.1f}x")
    # The PyPI wheel is built without YAJL, so its ModSecurity leaves JSON bodies unparsed (their
    # fields never reach ARGS): agreement is also given for the requests without one.
    def is_json(r):
        return any(k.lower() == "content-type" and "json" in v.lower() for k, v in r["headers"].items())
    plain = [r["id"] for r in recs if not is_json(r)]
    same = sum(refused_ours.get(k) == ms_results[k][0] for k in plain)
    same_rules = sum(set(i for i in ours.get(k, []) if i < 949000) == set(ms_results[k][1]) for k in plain)
    print(f"  without a JSON body ({len(plain)} requests): same refusal decision {same}/{len(plain)},"
          f" same matched rules {same_rules}/{len(plain)}")
    # Which rules the two disagree on, counted once per request.
    only_ours, only_theirs = collections.Counter(), collections.Counter()
    for k, v in ms_results.items():
        o = set(i for i in ours.get(k, []) if i < 949000)
        only_ours.update(o - set(v[1]))
        only_theirs.update(set(v[1]) - o)
    # SHOW=<rule id>: the requests where the engines disagree on that rule.
    show = int(os.environ.get("SHOW", "0"))
    for k, v in ms_results.items():
        o = set(i for i in ours.get(k, []) if i < 949000)
        if show and (show in o) != (show in v[1]):
            print(f"  {k}: ModSecurity {v[1]}, rampart-seclang {sorted(o)}")
    print("  rules matched by rampart-seclang only (requests):", dict(only_ours.most_common(12)))
    print("  rules matched by ModSecurity only (requests):", dict(only_theirs.most_common(12)))


if __name__ == "__main__":
    main()
