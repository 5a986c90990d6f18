// node --test sdk/js/   (Node's own test runner; no dependencies)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { canonical, canonicalQuery, headers, newNonce, sign } from "../rampart-sign.mjs";

const vectors = JSON.parse(
  readFileSync(fileURLToPath(new URL("../../vectors.json", import.meta.url)), "utf8"),
).vectors;

test("every shared vector signs byte for byte", async () => {
  assert.ok(vectors.length >= 8);
  for (const t of vectors) {
    const req = {
      app: t.app,
      method: t.method,
      path: t.path,
      query: t.query,
      body: t.body,
      timestampMs: t.timestamp_ms,
      nonce: t.nonce,
    };
    assert.equal(await canonical(req), t.canonical, t.name);
    const h = await sign({ secret: t.secret, ...req });
    assert.equal(h.signature, t.signature, t.name);
    assert.equal(h.contentSha256, t.body_sha256, t.name);
    assert.equal(h.timestamp, String(t.timestamp_ms));
  }
});

test("query parts sort by UTF-8 bytes, not UTF-16 units", () => {
  // U+FF61 sorts before U+1F600 in UTF-16 code units but after it in UTF-8 bytes.
  assert.equal(canonicalQuery("b=\u{1F600}&b=\uFF61&&a=1"), "a=1&b=\uFF61&b=\u{1F600}");
});

test("nonces are valid and distinct", () => {
  const a = newNonce();
  assert.match(a, /^[A-Za-z0-9]{24}$/);
  assert.notEqual(a, newNonce());
});

test("every rotation vector signs byte for byte", async () => {
  const { keys, vectors: rotation } = JSON.parse(
    readFileSync(fileURLToPath(new URL("../../vectors.json", import.meta.url)), "utf8"),
  ).rotation;
  assert.ok(rotation.length >= 4);
  const key = (id) => keys.find((k) => k.id === id);
  for (const t of rotation) {
    const h = await sign({
      keys: t.sign_with.map(key),
      app: t.app,
      method: t.method,
      path: t.path,
      query: t.query,
      body: t.body,
      timestampMs: t.timestamp_ms,
      nonce: t.nonce,
    });
    assert.equal(h.signature, t["x-signature"], t.name);
    assert.equal(h.keyId ?? null, t["x-key-id"], t.name);
    assert.equal("x-key-id" in headers(h), t.sign_with.length === 1, t.name);
  }
  // A secret with its id names the key too.
  const one = await sign({ secret: "s", keyId: "k9", app: "a", method: "GET", path: "/" });
  assert.equal(headers(one)["x-key-id"], "k9");
  await assert.rejects(
    sign({ keys: ["a", "b", "c", "d", "e"].map((id) => ({ id, secret: id })), app: "a", method: "GET", path: "/" }),
    RangeError,
  );
});
