// Client-side signing for Rampart's anti-replay headers, signature v1. No dependencies: Web Crypto
// (browsers, Node ≥ 18, Deno, Bun). Shared test vectors: ../vectors.json.
//
//   import { sign, newNonce } from "./rampart-sign.mjs";
//   const h = await sign({ secret, app: "shop", method: "POST", path: "/api/order/pay",
//                          query: "b=2&a=1", body: JSON.stringify(order) });
//   fetch(url, { method: "POST", body, headers: { "x-timestamp": h.timestamp,
//                "x-nonce": h.nonce, "x-signature": h.signature } });
//
// The canonical string: "v1", app, METHOD (upper-cased), path as sent, the raw query split on "&"
// with empty parts dropped and the parts sorted in byte order (UTF-8 bytes, no decoding), the
// timestamp (Unix ms), the nonce, the lower-case hex SHA-256 of the body — joined by "\n". The
// signature is "v1=" + lower-case hex HMAC-SHA256(secret, canonical).
//
// Keys with ids (an app's secret replaced without a flag day): sign with one key and name it,
//   await sign({ keys: [{ id: "k2", secret }], app, ... })           // x-key-id: k2
// or, while the app rolls from one key to the next, with both (new first): x-signature carries
// one "v1=" entry per key and no key is named; the engine accepts any entry that matches a key
// it holds.
//   const h = await sign({ keys: [{ id: "k2", secret: next }, { id: "k1", secret: old }], ... });
//   fetch(url, { headers: headers(h) });

const encoder = new TextEncoder();
const subtle = globalThis.crypto.subtle;

/** @param {string | Uint8Array | ArrayBuffer | undefined | null} v */
function bytes(v) {
  if (v == null) return new Uint8Array(0);
  if (typeof v === "string") return encoder.encode(v);
  if (v instanceof Uint8Array) return v;
  return new Uint8Array(v);
}

function hex(buf) {
  return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
}

function compareBytes(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) return a[i] - b[i];
  }
  return a.length - b.length;
}

/** The raw query with empty parts dropped and the parts in UTF-8 byte order. */
export function canonicalQuery(query = "") {
  return query
    .split("&")
    .filter((p) => p.length > 0)
    .map((p) => [p, encoder.encode(p)])
    .sort((x, y) => compareBytes(x[1], y[1]))
    .map((x) => x[0])
    .join("&");
}

/** Lower-case hex SHA-256 of the body. */
export async function bodySha256(body) {
  return hex(await subtle.digest("SHA-256", bytes(body)));
}

/** The v1 canonical string. */
export async function canonical({ app, method, path, query = "", body, timestampMs, nonce }) {
  return [
    "v1",
    app,
    method.toUpperCase(),
    path,
    canonicalQuery(query),
    String(timestampMs),
    nonce,
    await bodySha256(body),
  ].join("\n");
}

/** A fresh random nonce: 24 characters of [A-Za-z0-9]. */
export function newNonce() {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let out = "";
  while (out.length < 24) {
    const raw = globalThis.crypto.getRandomValues(new Uint8Array(32));
    for (const b of raw) {
      if (b < 248 && out.length < 24) out += alphabet[b % 62];
    }
  }
  return out;
}

/** Most "v1=" entries the engine reads from one x-signature. */
export const MAX_SIGNATURES = 4;

async function hmacHex(secret, text) {
  const key = await subtle.importKey(
    "raw",
    bytes(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return hex(await subtle.sign("HMAC", key, encoder.encode(text)));
}

/**
 * The anti-replay headers of a request. `timestampMs` defaults to now, `nonce` to a fresh one.
 * Sign with `secret` (naming `keyId` when given), or with `keys`, a list of `{ id, secret }`: one
 * key is named in `keyId`; two to four give one "v1=" entry each, in order, and name none.
 * @returns {Promise<{timestamp: string, nonce: string, signature: string, contentSha256: string,
 *   keyId: string | undefined}>}
 */
export async function sign({ secret, keyId, keys, app, method, path, query = "", body, timestampMs, nonce }) {
  if (keys === undefined) {
    keys = [{ id: keyId, secret }];
  } else if (secret !== undefined || keyId !== undefined) {
    throw new TypeError("give either secret (and keyId) or keys");
  }
  if (keys.length < 1 || keys.length > MAX_SIGNATURES) {
    throw new RangeError(`sign with 1 to ${MAX_SIGNATURES} keys`);
  }
  const ts = timestampMs ?? Date.now();
  const n = nonce ?? newNonce();
  const text = await canonical({ app, method, path, query, body, timestampMs: ts, nonce: n });
  const macs = await Promise.all(keys.map((k) => hmacHex(k.secret, text)));
  return {
    timestamp: String(ts),
    nonce: n,
    signature: macs.map((m) => "v1=" + m).join(","),
    contentSha256: await bodySha256(body),
    keyId: keys.length === 1 ? (keys[0].id ?? undefined) : undefined,
  };
}

/** The headers to send for `sign`'s result: x-key-id only when a key is named. */
export function headers(h) {
  const out = { "x-timestamp": h.timestamp, "x-nonce": h.nonce, "x-signature": h.signature };
  if (h.keyId !== undefined) out["x-key-id"] = h.keyId;
  return out;
}
