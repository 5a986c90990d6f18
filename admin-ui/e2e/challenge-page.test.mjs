// The challenge page end to end (contract v1.1, forward-auth): a real nginx, configured with the
// documented example (docs/integration/nginx.conf, ports filled in), in front of a toy upstream,
// asks a real `rampart serve` about every request. A rule challenges /members/. Headless Chromium
// opens a members page, gets Rampart's challenge page, solves the proof of work in a Web Worker,
// receives the clearance cookie and lands on the upstream's content. Without the cookie the
// challenge stays; the cookie from another address, and the page's solution sent a second time,
// are refused CHALLENGE_FAILED; neither reaches the upstream.
//
//   node --test admin-ui/e2e/        (needs nginx, Chromium and a release build of rampart)

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import http from "node:http";
import { freePort, launchChromium } from "./support.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const targetDir = process.env.CARGO_TARGET_DIR || join(root, "target");
const BIN = process.env.RAMPART_BIN || join(targetDir, "release", "rampart");
const NGINX = existsSync("/usr/sbin/nginx") ? "/usr/sbin/nginx" : "nginx";
const SHOTS = process.env.SCREENSHOT_DIR || join(here, "screenshots");
const CONTENT = "members area: hello from the upstream";

let engine, nginx, upstream, browser, dir, site;
let upstreamHits = 0;
const consoleErrors = [];


async function waitFor(url, ms = 30000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      await fetch(url);
      return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer`);
}

/** A GET through nginx from `from` (a loopback address), with extra headers. */
function get(path, { from = "127.0.0.1", headers = {} } = {}) {
  return new Promise((ok, fail) => {
    const u = new URL(site + path);
    const r = http.request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, localAddress: from, headers },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (body += c));
        res.on("end", () => ok({ status: res.statusCode, headers: res.headers, body }));
      },
    );
    r.on("error", fail);
    r.end();
  });
}

before(async () => {
  assert.ok(existsSync(BIN), `no engine binary at ${BIN}: build it with cargo build --release -p rampart`);
  dir = mkdtempSync(join(tmpdir(), "rampart-challenge-"));
  mkdirSync(SHOTS, { recursive: true });
  for (const t of ["edge", "gateway", "business"]) mkdirSync(join(dir, "rules", t), { recursive: true });
  writeFileSync(join(dir, "rules", "edge", "members.rhai"), `//! name: members-pow
//! priority: 10
//! owner: e2e
//! description: Browsers prove work before the members pages; a cleared one passes.
if req.path.starts_with("/members/") && !req.cleared {
    challenge("members area", #{difficulty: 12})
}
`);
  const [enginePort, sitePort, upstreamPort] = [await freePort(), await freePort(), await freePort()];
  writeFileSync(join(dir, "rampart.toml"), `
[server]
listen = "127.0.0.1:${enginePort}"
workers = 1
trusted_proxies = ["127.0.0.1"]

[[apps]]
id = "shop"
secret = "challenge-page-secret-0123456789"
accept_unsigned = true

[rules]
dir = "${join(dir, "rules")}"

[decision_log]
dir = "${join(dir, "decisions")}"
`);
  engine = spawn(BIN, ["serve", "--config", join(dir, "rampart.toml")], { stdio: ["ignore", "ignore", "inherit"] });

  upstream = http.createServer((req, res) => {
    // Members pages only (the browser also asks for /favicon.ico, which is not challenged).
    if (req.url.startsWith("/members/")) upstreamHits++;
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(`<!doctype html><title>Members</title><p id="content">${CONTENT}</p>`);
  });
  await new Promise((ok) => upstream.listen(upstreamPort, "127.0.0.1", ok));

  const example = readFileSync(join(root, "docs/integration/nginx.conf"), "utf8")
    .replaceAll("127.0.0.1:8080", `127.0.0.1:${enginePort}`)
    .replaceAll("127.0.0.1:9000", `127.0.0.1:${upstreamPort}`)
    .replaceAll("listen 80;", `listen 127.0.0.1:${sitePort};`);
  for (const d of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(dir, d));
  writeFileSync(join(dir, "nginx.conf"), `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
${example}
}
`);
  nginx = spawn(NGINX, ["-c", join(dir, "nginx.conf"), "-p", dir], { stdio: ["ignore", "ignore", "inherit"] });
  site = `http://127.0.0.1:${sitePort}`;
  await waitFor(`http://127.0.0.1:${enginePort}/readyz`);
  await waitFor(site + "/");

  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  nginx?.kill("SIGTERM");
  engine?.kill("SIGTERM");
  upstream?.close();
});

test("a browser solves the challenge page, gets the clearance cookie and lands on the upstream", async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${m.text()} @ ${page.url()}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`page error: ${e.message}`));
  // The page's own request with the solution, to send it once more afterwards.
  let solution = null;
  page.on("request", (r) => {
    const s = r.headers()["x-rampart-solution"];
    if (s) solution = s;
  });
  const statuses = [];
  page.on("response", (r) => {
    if (r.url().endsWith("/members/home")) statuses.push(r.status());
  });

  const hitsBefore = upstreamHits;
  const first = await page.goto(site + "/members/home");
  assert.ok([401, 403].includes(first.status()), `the challenge page's status: ${first.status()}`);
  assert.match(first.headers()["content-security-policy"], /default-src 'none'/);
  await page.waitForSelector("#content", { timeout: 60000 });
  assert.equal(await page.textContent("#content"), CONTENT);
  await page.screenshot({ path: join(SHOTS, "challenge-solved.png") });

  assert.ok(solution, "the page sent x-rampart-solution");
  // The challenge page, the solution's fetch (allowed: the upstream answered), the reload.
  assert.deepEqual(statuses.slice(1), [200, 200], `statuses: ${statuses}`);
  assert.equal(upstreamHits - hitsBefore, 2, "the solution's fetch and the reload reached the upstream");
  const cookie = (await ctx.cookies()).find((c) => c.name === "rampart_clearance");
  assert.ok(cookie, "the clearance cookie is set");
  assert.ok(cookie.httpOnly, "HttpOnly");
  assert.equal(cookie.path, "/");

  // The cookie lets this address through without a new challenge, from outside the browser too.
  const again = await get("/members/other", { headers: { cookie: `rampart_clearance=${cookie.value}` } });
  assert.equal(again.status, 200);
  assert.equal(again.headers["x-rampart-code"], undefined);
  assert.match(again.body, /hello from the upstream/);

  // Without the cookie: the challenge page again, and nothing reaches the upstream.
  const hits = upstreamHits;
  const bare = await get("/members/home");
  assert.ok([401, 403].includes(bare.status), `status ${bare.status}`);
  assert.equal(bare.headers["x-rampart-code"], "RULE_CHALLENGE");
  assert.match(bare.headers["content-type"], /text\/html/);
  assert.match(bare.body, /Checking your browser/);
  assert.match(bare.body, /"token":"p1\.shop\./);

  // The cookie from another address (another client behind the same nginx): refused.
  const foreign = await get("/members/home", {
    from: "127.0.0.2",
    headers: { cookie: `rampart_clearance=${cookie.value}` },
  });
  assert.equal(foreign.status, 403);
  assert.equal(foreign.headers["x-rampart-code"], "CHALLENGE_FAILED");
  assert.match(foreign.body, /CHALLENGE_FAILED/);

  // The page's solution, sent a second time: used already.
  const reused = await get("/members/home", { headers: { "x-rampart-solution": solution } });
  assert.equal(reused.status, 403);
  assert.equal(reused.headers["x-rampart-code"], "CHALLENGE_FAILED");
  assert.equal(upstreamHits, hits, "no refused request reached the upstream");

  // Pages outside the rule are not challenged.
  const open = await get("/about");
  assert.equal(open.status, 200);
  await ctx.close();
});

test("on a phone, a challenge page that cannot send its solution says so and offers a retry", async () => {
  const r = await get("/members/home");
  const ctx = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
  const page = await ctx.newPage();
  page.on("pageerror", (e) => consoleErrors.push(`page error: ${e.message}`));
  // Serve the page as nginx gave it, but make its solution request fail (a dropped connection).
  await page.route("**/members/home", (route) => {
    if (route.request().headers()["x-rampart-solution"]) return route.abort();
    return route.fulfill({ status: r.status, headers: { "content-type": "text/html; charset=utf-8",
      "content-security-policy": r.headers["content-security-policy"] }, body: r.body });
  });
  await page.goto(site + "/members/home");
  await page.waitForSelector("#status");
  await page.screenshot({ path: join(SHOTS, "challenge-page-phone.png") });
  await page.waitForSelector("#again:not([hidden])", { timeout: 60000 });
  assert.match(await page.textContent("#status"), /could not run|did not pass/);
  await ctx.close();
  assert.deepEqual(consoleErrors.filter((e) => !/net::ERR_FAILED|Failed to fetch|Failed to load resource/.test(e)), []);
});
