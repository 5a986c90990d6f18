#!/usr/bin/env python3
"""What the decision's Redis script costs Redis, isolated from the engine.

Sends the anti-replay + limits script (`ANTI_REPLAY_LIMITS`, read from scripts.rs) with the load
test's shop arguments -- a compact-mode nonce, a fingerprint, two GCRA limits and a distinct
count, a fresh nonce, token and user each call -- from C connections in lock step (one call per
connection per turn), and prints Redis's CPU per call (`INFO cpu`) and each command's time
(`INFO commandstats`). Redis must already run, alone on its core; the script flushes it.

    taskset -c 0 redis-server --port 6399 --save '' --appendonly no --daemonize yes
    taskset -c 1 python3 bench/redis/script_cost.py --port 6399

`--pipeline N` writes N calls at a time on each connection (what coalescing concurrent decisions
would give Redis); `--no-limits` sends the anti-replay step alone (the nonce and the fingerprint,
no planned limit), to see what the limits cost.

`--prev-window` fills the distinct counts' previous windows first (each user's device seen in
the last window too: the count is then a union of two keys).

`--layout bitfield` sends the probes as the standard layout's `BITFIELD SET u1 <bit> 1`
arguments, for a scripts.rs of a revision before the blocked layout (`git show REV:path > f`).
"""
import argparse
import os
import random
import re
import socket
import time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=6379)
ap.add_argument("--scripts", default="engine/server/src/redis_state/scripts.rs")
ap.add_argument("--layout", choices=["block", "bitfield"], default="block")
ap.add_argument("--calls", type=int, default=30000)
ap.add_argument("--connections", type=int, default=8)
ap.add_argument("--block-bytes", type=int, default=128)
ap.add_argument("--pipeline", type=int, default=1, help="calls per write on each connection")
ap.add_argument("--no-limits", action="store_true", help="the nonce and fingerprint only")
ap.add_argument("--k", type=int, default=18, help="probes per nonce (20 for the standard layout)")
ap.add_argument("--prev-window", action="store_true",
                help="the distinct counts' previous windows hold an item (a key seen last window)")
a = ap.parse_args()

text = open(a.scripts).read()
script = re.search(r'ANTI_REPLAY_LIMITS: LazyLock<Script>.*?r#"(.*?)"#', text, re.S).group(1)
if a.layout == "block":
    pre = re.search(r'const BLOOM_LUA: &str = r#"(.*?)"#', text, re.S).group(1)
    script = (pre + script).replace("@B", str(a.block_bytes))
else:
    a.k = 20 if a.k == 18 else a.k


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for x in args:
        x = x if isinstance(x, bytes) else str(x).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)


def reply(f):
    line = f.readline()
    t = line[:1]
    if t == b"*":
        n = int(line[1:])
        return [reply(f) for _ in range(n)] if n >= 0 else None
    if t == b"$":
        n = int(line[1:])
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b"-":
        raise RuntimeError(line)
    return line[1:].strip()


ctl = socket.create_connection(("127.0.0.1", a.port))
ctl_f = ctl.makefile("rb")


def cmd(*args):
    ctl.sendall(enc(*args))
    return reply(ctl_f)


cmd("FLUSHALL")
sha = cmd("SCRIPT", "LOAD", script).decode()
SIZE = 65536


def call():
    tok = os.urandom(8).hex()
    u = random.randrange(20000)
    keys = ["nb:{a:1:0}", "nb:{a:1:0}:t:" + tok, "f:" + tok, "g:{u%d}" % u, "g:{ip%d}" % u,
            "d:{u%d}:1" % u, "d:{u%d}:0" % u]
    args = ["b", tok, 20000, SIZE, 500, 5000, int(time.time() * 1000), 3,
            "g", "1000", "5000", "g", "100", "2000", "d", "dev%d" % u, "60000"]
    if a.no_limits:
        keys = keys[:3]
        args = args[:7] + [0]
    if a.layout == "bitfield":
        for _ in range(a.k):
            args += ["SET", "u1", random.randrange(SIZE * 8), 1]
    else:
        block = random.randrange(SIZE // a.block_bytes)
        bits = sorted(set(random.randrange(a.block_bytes * 8) for _ in range(a.k)))
        args += [block * a.block_bytes, bytes(x for b in bits for x in (b // 8, 1 << (b % 8)))]
    return enc("EVALSHA", sha, len(keys), *keys, *args)


def cpu():
    info = cmd("INFO", "cpu").decode()
    return sum(float(re.search(k + r":([\d.]+)", info).group(1))
               for k in ("used_cpu_user", "used_cpu_sys"))


socks = [socket.create_connection(("127.0.0.1", a.port)) for _ in range(a.connections)]
files = [s.makefile("rb") for s in socks]
calls = [call() for _ in range(a.calls)]
if a.prev_window:
    for u in range(20000):
        cmd("PFADD", "d:{u%d}:0" % u, "old-dev%d" % u)
cmd("CONFIG", "RESETSTAT")
c0, t0 = cpu(), time.time()
per_turn = a.connections * a.pipeline
for i in range(0, a.calls, per_turn):
    batch = calls[i:i + per_turn]
    writes = [batch[j:j + a.pipeline] for j in range(0, len(batch), a.pipeline)]
    for s, w in zip(socks, writes):
        s.sendall(b"".join(w))
    for f, w in zip(files, writes):
        for _ in w:
            reply(f)
c1, t1 = cpu(), time.time()
print("%s layout%s, %d calls from %d connections, %d per write: Redis CPU %.1f µs per call, "
      "wall %.1f µs" % (a.layout, ", no limits" if a.no_limits else "", a.calls, a.connections,
                        a.pipeline, (c1 - c0) / a.calls * 1e6, (t1 - t0) / a.calls * 1e6))
for line in cmd("INFO", "commandstats").decode().splitlines():
    m = re.match(r"cmdstat_(\w+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)", line)
    if m and m.group(1) not in ("info", "config", "flushall", "script"):
        print("  %-9s %5.2f per call × %6.2f µs" % (m.group(1), int(m.group(2)) / a.calls,
                                                    float(m.group(3))))
