// node --test sdk/js/   (Node's own test runner; no dependencies)
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { digest, solve, solution, zeroBits } from "../rampart-pow.mjs";

const pow = JSON.parse(
  readFileSync(fileURLToPath(new URL("../../vectors.json", import.meta.url)), "utf8"),
).pow.vectors;

test("every proof-of-work vector solves to its counter and digest", () => {
  assert.ok(pow.length >= 3);
  for (const t of pow) {
    let calls = 0;
    const c = solve(t.token, t.difficulty, { onProgress: () => { calls++; } });
    assert.equal(c, t.counter, t.token);
    assert.equal(calls, Math.floor(t.counter / 65536), "progress every 65,536 tries");
    assert.equal(digest(t.token, c), t.digest);
    assert.equal(zeroBits(t.token, c), t.zero_bits);
  }
});

test("the SHA-256 here is SHA-256 (against node:crypto, across block boundaries)", () => {
  for (let len = 0; len < 200; len += 7) {
    const token = "t".repeat(len);
    assert.equal(digest(token, 42), createHash("sha256").update(`${token}:42`).digest("hex"));
  }
});

test("a solver can give up, and a challenge object gives the header value", () => {
  assert.equal(solve("never", 32, { onProgress: () => false }), null);
  const t = pow[0];
  assert.equal(solution({ token: t.token, difficulty: t.difficulty }), `${t.token}:${t.counter}`);
  assert.throws(() => solve("x", 0), RangeError);
});
