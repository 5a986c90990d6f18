// Rampart proof-of-work solver (contract v1.1), for browsers (in a Web Worker), Node ≥ 18, Deno
// and Bun. No dependencies. Shared test vectors: ../vectors.json ("pow").
//
// A `challenge` answer carries {"kind":"pow","algorithm":"sha256","difficulty":D,"token":…}.
// Find a decimal counter c such that SHA-256 of the bytes `token + ":" + c` starts with at least
// D zero bits, then send the request again (new nonce, signed as usual) with
// `x-rampart-solution: <token>:<c>`.
//
//   import { solve, solution } from "./rampart-pow.mjs";
//   const c = solve(challenge.token, challenge.difficulty, { onProgress: (tries) => … });
//
// In a browser, keep the page responsive by solving in a worker:
//
//   import { solveInWorker } from "./rampart-pow.mjs";
//   const c = await solveInWorker(challenge, { onProgress: (tries) => … });
//
// SHA-256 is computed here in plain JavaScript, synchronously: WebCrypto's `digest` is
// asynchronous, and one promise per try is several times slower than this loop.

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const W = new Uint32Array(64);
// The padded message, reused from one hash to the next (tokens are short: one to four blocks).
let M = new Uint8Array(256);

/** SHA-256 of `bytes` (Uint8Array): the first 32-bit word, enough to count up to 32 zero bits,
 * and the whole digest when `full`. */
function sha256(bytes, full) {
  const n = bytes.length;
  const blocks = ((n + 9 + 63) >> 6) << 6;
  if (M.length < blocks) M = new Uint8Array(blocks);
  const m = M;
  m.set(bytes);
  m.fill(0, n, blocks);
  m[n] = 0x80;
  const bits = n * 8;
  m[blocks - 4] = bits >>> 24;
  m[blocks - 3] = bits >>> 16;
  m[blocks - 2] = bits >>> 8;
  m[blocks - 1] = bits;
  let h0 = 0x6a09e667, h1 = 0xbb67ae85, h2 = 0x3c6ef372, h3 = 0xa54ff53a;
  let h4 = 0x510e527f, h5 = 0x9b05688c, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
  for (let off = 0; off < blocks; off += 64) {
    for (let i = 0; i < 16; i++) {
      const j = off + i * 4;
      W[i] = (m[j] << 24) | (m[j + 1] << 16) | (m[j + 2] << 8) | m[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const a = W[i - 15], b = W[i - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
    for (let i = 0; i < 64; i++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (h + S1 + ch + K[i] + W[i]) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
  }
  if (!full) return [h0 >>> 0, h1 >>> 0];
  return [h0, h1, h2, h3, h4, h5, h6, h7].map((x) => (x >>> 0).toString(16).padStart(8, "0")).join("");
}

const utf8 = new TextEncoder();

/** Leading zero bits of SHA-256(`token:counter`). */
export function zeroBits(token, counter) {
  const [w0, w1] = sha256(utf8.encode(`${token}:${counter}`), false);
  return w0 === 0 ? 32 + Math.clz32(w1) : Math.clz32(w0);
}

/** Hex SHA-256 of `token:counter` (for checking against the vectors). */
export function digest(token, counter) {
  return sha256(utf8.encode(`${token}:${counter}`), true);
}

/** The smallest counter solving `token` at `difficulty` (1–32). `onProgress(tries)` is called
 * every 65,536 tries (about 2^difficulty are needed on average); it may return `false` to give
 * up, and `solve` then returns `null`. */
export function solve(token, difficulty, { onProgress } = {}) {
  if (!(difficulty >= 1 && difficulty <= 32)) throw new RangeError("difficulty must be 1–32");
  // The token's bytes are encoded once; only the counter's digits change.
  const prefix = utf8.encode(`${token}:`);
  const buf = new Uint8Array(prefix.length + 20);
  buf.set(prefix);
  for (let c = 0; ; c++) {
    const digits = String(c);
    for (let i = 0; i < digits.length; i++) buf[prefix.length + i] = digits.charCodeAt(i);
    const [w0, w1] = sha256(buf.subarray(0, prefix.length + digits.length), false);
    const bits = w0 === 0 ? 32 + Math.clz32(w1) : Math.clz32(w0);
    if (bits >= difficulty) return c;
    if ((c + 1) % 65536 === 0 && onProgress && onProgress(c + 1) === false) return null;
  }
}

/** The `x-rampart-solution` header value for a challenge object. */
export function solution(challenge, options) {
  const c = solve(challenge.token, challenge.difficulty, options);
  return c === null ? null : `${challenge.token}:${c}`;
}

/** Browsers: solves in a module Web Worker running this file; resolves to the counter. */
export function solveInWorker(challenge, { onProgress } = {}) {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { type: "module" });
    w.onmessage = (e) => {
      if (e.data.progress !== undefined) {
        if (onProgress) onProgress(e.data.progress);
        return;
      }
      w.terminate();
      resolve(e.data.counter);
    };
    w.onerror = (e) => {
      w.terminate();
      reject(e);
    };
    w.postMessage({ token: challenge.token, difficulty: challenge.difficulty });
  });
}

// Inside a worker started by `solveInWorker`: solve what the page sends.
if (typeof WorkerGlobalScope !== "undefined" && globalThis instanceof WorkerGlobalScope) {
  globalThis.onmessage = (e) => {
    const counter = solve(e.data.token, e.data.difficulty, {
      onProgress: (tries) => globalThis.postMessage({ progress: tries }),
    });
    globalThis.postMessage({ counter });
  };
}
