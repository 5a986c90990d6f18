// The console in a real browser: Debian's headless Chromium, driven by playwright-core, against a
// real `rampart serve` (built with the console embedded) on a loopback port. One operator story
// from log-in to a stable rule set and its decisions in the explorer, then the phone layout and
// the keyboard. Every page is screenshotted into e2e/screenshots/ (or $SCREENSHOT_DIR); any
// error in the browser console fails the run.
//
//   node --test admin-ui/e2e/        (after ./scripts/console.sh and cargo build --release -p rampart)

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, launchChromium } from "./support.mjs";
import { headers, sign } from "../../sdk/js/rampart-sign.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const targetDir = process.env.CARGO_TARGET_DIR || join(root, "target");
const BIN = process.env.RAMPART_BIN || join(targetDir, "release", "rampart");
const SHOTS = process.env.SCREENSHOT_DIR || join(here, "screenshots");
const SECRET = "e2e-secret-0123456789";
const PASSWORDS = { alice: "alice-pass-1", bob: "bob-pass-2", vera: "vera-pass-3", ada: "ada-pass-4" };

let engine, base, browser, dir;
const consoleErrors = [];


function hash(password) {
  return execFileSync(BIN, ["hash-password"], { input: password + "\n" }).toString().trim();
}

async function waitReady(url, ms = 30000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      if ((await fetch(url + "/readyz")).ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("engine did not become ready");
}

/** A signed `/v1/decide` for `path`, as the app's backend would send it. */
async function decide(path, { user = "u-" + Math.floor(Math.random() * 1e6), country = "DE", device = "desktop", isp = "Telekom", signing = { secret: SECRET }, ip, deviceId, params } = {}) {
  const body = JSON.stringify({ sku: 1042, n: Math.random() });
  const h = await sign({ ...signing, app: "shop", method: "POST", path, body });
  const r = await fetch(base + "/v1/decide", {
    method: "POST",
    body: JSON.stringify({
      app: "shop",
      request: {
        method: "POST", path, body,
        headers: { ...headers(h),
                   "user-agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/148.0", "content-type": "application/json" },
      },
      client: { ip: ip ?? "198.51.100." + (1 + Math.floor(Math.random() * 200)), country, isp, device_type: device,
                device_id: deviceId ?? "dev-" + user },
      user_id: user,
      ...(params ? { params } : {}),
    }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

async function traffic(n, path = "/api/cart/add") {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await decide(path, { country: ["DE", "FR", "US", "BR"][i % 4], device: ["desktop", "mobile", "tablet"][i % 3], isp: ["Telekom", "Orange", "Comcast"][i % 3] }));
  return out;
}

async function newPage(width = 1280, height = 800) {
  const ctx = await browser.newContext({ viewport: { width, height } });
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${m.text()} @ ${page.url()}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`page error: ${e.message} @ ${page.url()}`));
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, name + ".png"), fullPage: true });
}

async function login(page, user) {
  await page.goto(base + "/console/");
  await page.fill("#login-user", user);
  await page.fill("#login-password", PASSWORDS[user]);
  await page.click("#login-submit");
  await page.waitForSelector("#who");
  assert.match(await page.textContent("#who"), new RegExp(user));
}

/** Waits until a log-out has finished: the console forgets the session (and so makes no session
 * check on the next load, which would be a 401) only once the server has answered. */
async function loggedOut(page) {
  await page.waitForSelector("#login-user");
}

async function go(page, slug) {
  await page.click(`#nav-${slug}`);
  await page.waitForFunction((s) => location.hash === "#/" + s, slug);
}

/** Basic-auth admin call from outside the browser (what a script would do). */
async function admin(method, path, user, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: "Basic " + Buffer.from(`${user}:${PASSWORDS[user]}`).toString("base64") },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

before(async () => {
  assert.ok(existsSync(BIN), `no engine binary at ${BIN}: build it with cargo build --release -p rampart`);
  dir = mkdtempSync(join(tmpdir(), "rampart-console-"));
  mkdirSync(SHOTS, { recursive: true });
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  const users = Object.entries({ alice: "author", bob: "approver", vera: "viewer", ada: "admin" })
    .map(([name, role]) => `[[admin.users]]\nname = "${name}"\nrole = "${role}"\npassword_hash = "${hash(PASSWORDS[name])}"\n`)
    .join("\n");
  writeFileSync(join(dir, "rampart.toml"), `
[server]
listen = "127.0.0.1:${port}"
workers = 2

[[apps]]
id = "shop"
secret = "${SECRET}"
window_ms = 5000

[decision_log]
dir = "${join(dir, "decisions")}"

[admin]
allow_unsigned_uploads = true
poll_ms = 200

${users}
`);
  engine = spawn(BIN, ["serve", "--config", join(dir, "rampart.toml")], { stdio: ["ignore", "ignore", "inherit"] });
  await waitReady(base);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  engine?.kill("SIGTERM");
});

test("the console is served with its security headers and only when built", async () => {
  const r = await fetch(base + "/console/");
  assert.equal(r.status, 200);
  const csp = r.headers.get("content-security-policy");
  assert.match(csp, /default-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  assert.equal(r.headers.get("x-frame-options"), "DENY");
  assert.equal(r.headers.get("x-content-type-options"), "nosniff");
  assert.equal(r.headers.get("referrer-policy"), "no-referrer");
  const html = await r.text();
  const wasm = html.match(/\/console\/([\w-]+\.wasm)/);
  assert.ok(wasm, "index.html names the wasm module");
  const w = await fetch(base + "/console/" + wasm[1]);
  assert.equal(w.headers.get("content-type"), "application/wasm");
  // Precompressed at build time (scripts/console.sh), sent to clients that take gzip.
  assert.equal(w.headers.get("content-encoding"), "gzip");
  assert.match(w.headers.get("vary") || "", /accept-encoding/i);
  const plain = await fetch(base + "/console/" + wasm[1], { headers: { "accept-encoding": "identity" } });
  assert.equal(plain.headers.get("content-encoding"), null);
  assert.deepEqual(Buffer.from(await plain.arrayBuffer()), Buffer.from(await w.arrayBuffer()));
  assert.match(w.headers.get("cache-control"), /immutable/);
  const missing = await fetch(base + "/console/nope.js");
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, "NOT_FOUND");
  assert.match(missing.headers.get("content-security-policy"), /frame-ancestors 'none'/);
  const redirect = await fetch(base + "/console", { redirect: "manual" });
  assert.equal(redirect.status, 308);
  assert.equal(redirect.headers.get("x-frame-options"), "DENY");
});

test("an operator story: author a rule, sandbox it, canary it, approve it as someone else, watch it decide", async () => {
  await traffic(30);
  const page = await newPage();
  await page.goto(base + "/console/");
  await page.waitForSelector("#login-user");
  await shot(page, "01-login");

  // A wrong password is refused with its code, shown in the form.
  await page.fill("#login-user", "alice");
  await page.fill("#login-password", "wrong");
  await page.click("#login-submit");
  await page.waitForSelector(".error .code");
  assert.equal(await page.textContent(".error .code"), "UNAUTHENTICATED");
  consoleErrors.length = 0; // the refused log-in is a 401 the browser reports; expected here
  await login(page, "alice");

  // Overview: the charts are there and fill with the traffic.
  await page.waitForSelector("#chart-rate svg path", { state: "attached" });
  await page.waitForFunction(() => Number(document.querySelector("#kpi-n")?.textContent) >= 30, null, { timeout: 15000 });
  await page.waitForSelector("#heat-country svg rect", { state: "attached" });
  // The challenge chart has its three bars (issued, solved, cleared), zero or not.
  await page.waitForFunction(() => document.querySelectorAll("#chart-challenges svg rect").length === 3, null, { timeout: 15000 });
  await shot(page, "02-overview");

  // Rules: author a rule with a syntax error, see it located, fix it.
  await go(page, "rules");
  await page.waitForSelector("#rule-editor");
  await page.fill("#new-file", "legacy-export.rhai");
  await page.click("#new-file-add");
  await page.waitForFunction(() => document.querySelector("#current-file")?.textContent === "edge/legacy-export.rhai");
  const broken = [
    "//! name: legacy-export",
    "//! priority: 50",
    "//! owner: secops",
    "//! description: The retired export endpoint is only probed by scrapers.",
    "if req.path == \"/api/legacy/export\" {",
    "    deny(\"retired endpoint\"",
    "}",
    "",
  ].join("\n");
  await page.fill("#rule-editor", broken);
  await page.click("#validate");
  await page.waitForSelector("#problems li");
  const problem = await page.textContent("#problems li");
  assert.match(problem, /^edge\/legacy-export\.rhai:\d+:\d+/);
  const line = Number(problem.split(":")[1]);
  assert.ok(line >= 6 && line <= 7, `the error is located at the deny call, got line ${line}: ${problem}`);
  assert.equal(await page.textContent(".gutter .ln.err"), String(line));
  await page.waitForSelector(".line.err .inline-err");
  await shot(page, "03-rules-error");
  await page.fill("#rule-editor", broken.replace('"retired endpoint"', '"retired endpoint")'));
  await page.click("#validate");
  await page.waitForFunction(() => /^valid: \d+ rules/.test(document.querySelector("#rules-status")?.textContent || ""));
  assert.equal(await page.$("#problems"), null);
  await page.check("#show-diff");
  await page.waitForSelector("#diff tr.ins");
  await shot(page, "04-rules-diff");
  await page.uncheck("#show-diff");
  await page.fill("#save-message", "deny the retired export endpoint");
  await page.click("#save");
  await page.waitForSelector("#to-sandbox");
  const version = (await page.textContent("#rules-status")).match(/version ([0-9a-f]{16})/)[1];

  // Sandbox: regression against stable, then one sample's trace.
  await page.click("#to-sandbox");
  await page.waitForFunction((v) => document.querySelector("#sandbox-version")?.value === v, version);
  await page.click("#run-regress");
  await page.waitForSelector("#regress-report", { timeout: 60000 });
  assert.match(await page.textContent("#rate-detection"), /%$/);
  await page.click("#failures button.sample");
  await page.waitForSelector("#trace-panel table.trace");
  const steps = await page.$$eval("#trace-panel tr.step th", (ths) => ths.map((t) => t.textContent));
  assert.deepEqual(steps.slice(0, 3), ["lists", "edge", "signature"]);
  assert.ok((await page.$$("#trace-panel tr.rule")).length > 5, "the trace lists the rules it evaluated");
  await page.click("#run-backtest");
  await page.waitForSelector("#backtest-report");
  assert.ok(Number(await page.textContent("#bt-rows")) >= 30);
  await shot(page, "05-sandbox");

  // Rollouts: stage a 50% canary; an author cannot approve (hidden here, refused by the server).
  await go(page, "rollouts");
  await page.waitForSelector("#stage-version");
  await page.selectOption("#stage-version", version);
  await page.fill("#canary-percent", "50");
  // Only requests from Germany and France can land in the canary.
  await page.fill("#canary-countries", "DE, FR");
  await page.click("#stage-canary");
  await page.waitForFunction(() => /canary 50%/.test(document.querySelector("#candidate-stage")?.textContent || ""));
  assert.equal(await page.textContent("#candidate-filter"), "only countries DE, FR");
  assert.equal(await page.$("#approve"), null, "an author sees no approve button");
  const refused = await admin("POST", "/admin/v1/rollout/approve", "alice", { version });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.error.code, "FORBIDDEN");
  await shot(page, "06-rollouts-canary");

  // Both arms answer while the canary runs.
  const canary = await traffic(40, "/api/legacy/export");
  const arms = new Set(canary.map((d) => d.ruleset.arm));
  assert.ok(arms.has("canary") && arms.has("stable"), `both arms served: ${[...arms]}`);
  const countries = ["DE", "FR", "US", "BR"];
  canary.forEach((d, i) => assert.ok(d.ruleset.arm !== "canary" || ["DE", "FR"].includes(countries[i % 4]), `a ${countries[i % 4]} request in the canary`));

  // A second person approves.
  await page.click("#logout");
  await loggedOut(page);
  await login(page, "bob");
  await go(page, "rollouts");
  await page.waitForSelector("#approve");
  // Approval waits until the approver has read the diff against stable.
  assert.ok(await page.$eval("#approve", (b) => b.disabled), "approve before reading the diff");
  const previous = await page.textContent("#stable-version");
  await page.click("#review-diff");
  await page.waitForSelector("#history-diff pre.unified");
  assert.match(await page.textContent("#history-diff"), /legacy-export/);
  await page.waitForFunction(() => !document.querySelector("#approve")?.disabled);
  await page.click("#approve");
  await page.waitForFunction((v) => document.querySelector("#stable-version")?.textContent === v, version);
  await page.waitForFunction(() => document.querySelector("#audit")?.textContent.includes("rollout.approve"));
  await shot(page, "07-rollouts-approved");
  await new Promise((r) => setTimeout(r, 300));
  const after = await traffic(10, "/api/legacy/export");
  assert.ok(after.every((d) => d.code === "RULE_DENY" && d.rule === "legacy-export"), JSON.stringify(after[0]));

  // An earlier stable version is made stable again from the history, then the new one again.
  const reactivate = async (v) => {
    await page.click(`#earlier-stable button[aria-label="Make ${v} stable again"]`);
    await page.waitForFunction((v) => document.querySelector("#stable-version")?.textContent === v, v);
  };
  await reactivate(previous);
  assert.equal((await traffic(1, "/api/legacy/export"))[0].code, "OK");
  await reactivate(version);
  assert.equal((await traffic(1, "/api/legacy/export"))[0].rule, "legacy-export");

  // Decisions explorer: the refusals arrive; open one and trace it.
  await go(page, "decisions");
  await page.fill("#f-rule", "legacy-export");
  // The live refresh (every 3 s) re-renders the page while the filter is typed but not yet
  // applied: what was typed must survive it.
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal(await page.inputValue("#f-rule"), "legacy-export", "the typed filter after a live refresh");
  await page.press("#f-rule", "Enter");
  await page.locator("#f-rule").blur();
  // Wait for the filtered answer, not just any ten rows: the unfiltered table (the canary's 40
  // decisions and the 10 after) is on the page until it arrives.
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("#decision-table tbody tr")];
    return rows.length >= 10 && rows.every((r) => (r.querySelector("td:nth-child(4)")?.textContent || "").includes("legacy-export"));
  }, null, { timeout: 15000 }).catch(async (e) => {
    throw new Error(`the explorer did not show the refusals filtered by rule: ${await page.textContent("#main")}`, { cause: e });
  });
  const codes = await page.$$eval("#decision-table tbody tr td:nth-child(3)", (tds) => tds.map((t) => t.textContent));
  assert.ok(codes.every((c) => c === "RULE_DENY"), codes.join(","));
  await page.click("#decision-table tbody tr:first-child button");
  await page.waitForSelector("#decision-detail");
  // bob (approver) includes author: he may trace.
  await page.click("#trace-decision");
  await page.waitForSelector("#decision-trace table.trace");
  assert.match(await page.textContent("#decision-trace"), /legacy-export/);
  await shot(page, "08-decisions");

  // The overview chart moves while traffic flows.
  await go(page, "overview");
  await page.waitForSelector("#chart-rate svg path", { state: "attached" });
  await new Promise((r) => setTimeout(r, 2500));
  const pending = traffic(150);
  await page.waitForFunction(() => Number(document.querySelector("#kpi-rate")?.textContent) > 0, null, { timeout: 15000 });
  await pending;
  await shot(page, "09-overview-live");

  // Lists: add and remove a block entry.
  await go(page, "lists");
  await page.waitForSelector("#l-value");
  await page.fill("#l-value", "203.0.113.0/24");
  await page.fill("#l-note", "e2e abuse network");
  await page.click("#l-add");
  await page.waitForFunction(() => document.querySelector("#list-block")?.textContent.includes("203.0.113.0/24"));
  await shot(page, "10-lists");
  await page.click("#list-block button.danger");
  await page.waitForFunction(() => !document.querySelector("#list-block")?.textContent.includes("203.0.113.0/24"));

  // Settings: read-only, and no secret anywhere on the page.
  await go(page, "settings");
  await page.waitForSelector("#settings-apps td");
  assert.match(await page.textContent("#settings-apps"), /shop/);
  const text = await page.textContent("body");
  assert.ok(!text.includes(SECRET), "the app secret is not shown");
  assert.ok(!text.includes("$argon2"), "password hashes are not shown");
  await shot(page, "11-settings");

  // A viewer sees no editing controls.
  await page.click("#logout");
  await loggedOut(page);
  await login(page, "vera");
  await go(page, "rules");
  await page.waitForSelector("#rule-editor");
  assert.equal(await page.$("#validate"), null);
  assert.equal(await page.$("#save"), null);
  assert.notEqual(await page.getAttribute("#rule-editor", "readonly"), null);
  await go(page, "rollouts");
  await page.waitForSelector("#history");
  assert.equal(await page.$("#stage-canary"), null);
  await page.context().close();
  assert.deepEqual(consoleErrors, []);
});

test("every page fits a 390-pixel phone screen", async () => {
  const page = await newPage(390, 844);
  await login(page, "alice");
  const titles = { state: "live state" };
  for (const slug of ["overview", "rules", "sandbox", "rollouts", "decisions", "lists", "state", "settings"]) {
    await page.goto(`${base}/console/#/${slug}`);
    await page.waitForFunction((s) => document.querySelector("h1")?.textContent.toLowerCase() === s, titles[slug] ?? slug);
    await new Promise((r) => setTimeout(r, 400));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    const wide = await page.evaluate(() => [...document.querySelectorAll("body *")]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
      .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className?.baseVal ?? e.className}`));
    assert.ok(overflow <= 1, `${slug} overflows the phone screen by ${overflow}px: ${wide.join(", ")}`);
    await shot(page, `phone-${slug}`);
  }
  await page.context().close();
  assert.deepEqual(consoleErrors, []);
});

test("keyboard only: log in, move between pages, use the editor", async () => {
  const page = await newPage();
  await page.goto(base + "/console/");
  await page.waitForSelector("#login-user");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "login-user");
  await page.keyboard.type("alice");
  await page.keyboard.press("Tab");
  await page.keyboard.type(PASSWORDS.alice);
  await page.keyboard.press("Enter");
  await page.waitForSelector("#who");
  // The skip link comes first, then the pages.
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content");
  for (let i = 0; i < 2; i++) await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "nav-rules");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => location.hash === "#/rules");
  await page.waitForSelector("#rule-editor");
  await page.focus("#rule-editor");
  // Tab indents inside the editor; Escape then Tab leaves it.
  const before = await page.inputValue("#rule-editor");
  await page.keyboard.press("Tab");
  assert.equal((await page.inputValue("#rule-editor")).length, before.length + 2);
  assert.equal(await page.evaluate(() => document.activeElement.id), "rule-editor");
  await page.keyboard.press("Escape");
  await page.keyboard.press("Tab");
  assert.notEqual(await page.evaluate(() => document.activeElement.id), "rule-editor");
  // Focus is visible.
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, "none");
  await page.context().close();
  assert.deepEqual(consoleErrors, []);
});

test("live state: look up a subject from a decision, reset its reputation, close a breaker, refill a pool", async () => {
  // A user the gateway refused three times (over its rate limit of 10/s, bursts of 20: 10 points
  // each) is challenged everywhere. No device id, and later requests from another address than
  // the refused ones (which earned points too), so only the user holds the points.
  const who = { user: "greedy-" + Date.now(), ip: "203.0.113.81", deviceId: "" };
  const codes = [];
  while (codes.filter((c) => c === "RATE_LIMITED").length < 3) {
    codes.push((await decide("/api/cart/add", { ...who, ip: "203.0.113.77" })).code);
    assert.ok(codes.length < 40, codes.join(" "));
  }
  // Reputation is learnt after the answer, off the decision path.
  for (let t = Date.now(); ; await new Promise((r) => setTimeout(r, 50))) {
    const s = await admin("GET", `/admin/v1/subjects/user/${who.user}`, "vera");
    if (s.body.reputation.points >= 30) break;
    assert.ok(Date.now() - t < 5000, JSON.stringify(s.body.reputation));
  }
  const challenged = await decide("/api/cart/add", who);
  assert.equal(challenged.action, "challenge", JSON.stringify(challenged));
  assert.equal(challenged.rule, "bad-reputation");

  const page = await newPage();
  await login(page, "alice");
  // From the explorer: the user's name is a link to what the engine remembers of it.
  await go(page, "decisions");
  const link = `#decision-table a.subject[href$="value=${who.user}"]`;
  await page.waitForSelector(link);
  await page.click(link);
  await page.waitForFunction(() => location.hash.startsWith("#/state?kind=user"));
  await page.waitForSelector("#subject-points");
  assert.equal(await page.textContent("#subject-points"), "30 points");
  await page.waitForSelector("#subject-decisions tbody tr");
  assert.match(await page.textContent("#subject-decisions"), /RATE_LIMITED/);
  // The rate limits keyed by the user, as the default rule set derives them.
  await page.waitForSelector("#subject-limits tbody tr");
  assert.match(await page.textContent("#subject-limits"), new RegExp(`user-rate\\s*user:${who.user}`));
  // The hottest keys: the user's limit, refused at least three times.
  await page.waitForSelector("#hot-keys tbody tr");
  const hotRow = await page.$$eval("#hot-keys tbody tr", (rows, key) => rows.map((r) => [...r.cells].map((c) => c.textContent)).find((c) => c[1] === key), `user:${who.user}`);
  assert.ok(hotRow && hotRow[0] === "rate_limit" && Number(hotRow[3]) >= 3, JSON.stringify(hotRow));
  await shot(page, "15-state-subject");
  await page.click("#reset-reputation");
  await page.waitForSelector("#repair-done");
  await page.waitForFunction(() => document.querySelector("#subject-points")?.textContent === "0 points");
  // The next decision is no longer challenged.
  const after = await decide("/api/cart/add", who);
  assert.equal(after.code, "OK", JSON.stringify(after));

  // The search box on every page: an address typed on the overview opens it here.
  await go(page, "overview");
  await page.fill("#search", "203.0.113.77");
  await page.press("#search", "Enter");
  await page.waitForFunction(() => location.hash === "#/state?kind=ip&value=203.0.113.77");
  await page.waitForFunction(() => /ip\s*203\.0\.113\.77/.test(document.querySelector("#subject h2")?.textContent ?? ""));
  await page.waitForSelector("#subject-limits tbody tr");
  assert.match(await page.textContent("#subject-limits"), /ip-rate\s*ip:203\.0\.113\.77/);
  assert.match(await page.textContent("#subject-counters"), /coupon-ip-farming\s*coupon-ip:203\.0\.113\.77\s*distinct items/);

  // The payment route's breaker, forced open and closed from the console.
  const pay = () => decide("/api/payments", { ip: "203.0.113.78", params: { amount: 20, currency: "EUR", attempt: Math.random() } });
  assert.equal((await pay()).code, "OK");
  await page.reload();
  const row = '#breakers tr:has(td:text-is("/api/payments"))';
  await page.waitForSelector(row);
  await page.click(`${row} button`);
  await page.waitForFunction(() => /open/.test(document.querySelector("#repair-done")?.textContent ?? ""));
  await page.waitForSelector(`${row} .badge.deny`);
  assert.equal((await pay()).code, "CIRCUIT_OPEN");
  await page.click(`${row} button`);
  await page.waitForSelector(`${row} .badge.allow`);
  assert.equal((await pay()).code, "OK");

  // A lottery pool that ran out (100 prizes), refilled by one from the console.
  const event = "e2e-refill";
  const draws = [];
  for (let i = 0; i < 100; i++) {
    draws.push(decide("/api/lottery/draw", { user: `winner-${i}`, ip: `203.0.113.${100 + i}`, deviceId: "", params: { event_id: event } }));
    if (draws.length === 10) assert.ok((await Promise.all(draws.splice(0))).every((d) => d.code === "OK"));
  }
  const late = { user: "late-comer", ip: "203.0.113.80", deviceId: "", params: { event_id: event } };
  const lateDraw = (user) => decide("/api/lottery/draw", { ...late, user, params: { event_id: event, attempt: Math.random() } });
  assert.equal((await lateDraw("late-comer")).code, "QUOTA_EXHAUSTED");
  await page.fill("#p-name", `lottery:${event}`);
  await page.click("#p-look");
  await page.waitForFunction(() => document.querySelector("#pool-claimed")?.textContent === "100");
  await page.fill("#p-add", "1");
  await page.click("#p-refill");
  await page.waitForFunction(() => document.querySelector("#pool-refilled")?.textContent === "1");
  assert.equal((await lateDraw("late-comer-2")).code, "OK");
  assert.equal((await lateDraw("late-comer-3")).code, "QUOTA_EXHAUSTED");
  // The winner's subject view lists the pool it holds a claim in; a click looks the pool up.
  await page.fill("#p-name", "");
  await page.evaluate(() => { location.hash = "#/state?kind=user&value=late-comer-2"; });
  await page.waitForSelector("#subject-claims button");
  assert.deepEqual(await page.$$eval("#subject-claims button", (b) => b.map((x) => x.textContent)), [`lottery:${event}`]);
  await page.click("#subject-claims button");
  await page.waitForFunction((name) => document.querySelector("#p-name")?.value === name, `lottery:${event}`);
  await page.waitForFunction(() => document.querySelector("#pool-claimed")?.textContent === "101");
  await page.waitForSelector("#repairs tbody tr");
  assert.deepEqual(
    await page.$$eval("#repairs tbody tr td:nth-child(2)", (tds) => tds.map((t) => t.textContent)),
    ["pool", "breaker", "breaker", "reputation"],
  );
  await shot(page, "16-state-repairs");
  const audit = await admin("GET", "/admin/v1/audit?actor=alice", "vera");
  const actions = audit.body.entries.map((e) => e.action);
  for (const a of ["subject.reputation.reset", "breaker.open", "breaker.close", "pool.refill"]) assert.ok(actions.includes(a), `${a} in ${actions}`);

  // A viewer sees the same page without the repairs.
  await page.click("#logout");
  await loggedOut(page);
  await login(page, "vera");
  await page.goto(`${base}/console/#/state?kind=user&value=${who.user}`);
  await page.waitForSelector("#subject-points");
  assert.equal(await page.$("#reset-reputation"), null);
  assert.equal(await page.$(`${row} button`), null);
  await page.setViewportSize({ width: 390, height: 844 });
  await new Promise((r) => setTimeout(r, 300));
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `the live state page overflows the phone screen by ${overflow}px`);
  await shot(page, "phone-state");
  await page.context().close();
  assert.deepEqual(consoleErrors, []);
});

// Last: it retires the key every other test signs with.
test("signing keys: an admin adds one, sees its secret once, and retires the old one", async () => {
  const page = await newPage();
  await login(page, "ada");
  await go(page, "settings");
  await page.waitForSelector("#keys-table tbody tr[data-key=default]");
  assert.match(await page.textContent("#keys-table tr[data-key=default] .key-state"), /active/);

  // Add k2: the generated secret is shown once, and signs at once.
  await page.fill("#k-id", "k2");
  await page.click("#k-add");
  await page.waitForSelector("#new-key-secret-value");
  const secret = (await page.textContent("#new-key-secret-value")).trim();
  assert.match(secret, /^[0-9a-f]{64}$/);
  await page.waitForSelector("#keys-table tbody tr[data-key=k2]");
  await shot(page, "12-settings-keys-added");
  const signed = await decide("/api/cart/add", { signing: { keys: [{ id: "k2", secret }] } });
  assert.equal(signed.code, "OK", JSON.stringify(signed));
  assert.equal(signed.key_id, "k2");
  // A client mid-roll signs with both; the newer key is credited.
  const roll = await decide("/api/cart/add", { signing: { keys: [{ id: "k2", secret }, { id: "default", secret: SECRET }] } });
  assert.equal(roll.key_id, "k2");
  // Never shown again: not after the notice is dismissed, not after a reload, not in the listing.
  await page.click("#new-key-secret-done");
  assert.equal(await page.$("#new-key-secret"), null);
  await page.reload();
  await page.waitForSelector("#keys-table tbody tr[data-key=k2]");
  assert.ok(!(await page.textContent("body")).includes(secret), "the secret is not shown again");
  assert.ok(!(await page.textContent("body")).includes(SECRET), "no configured secret either");
  const listed = await admin("GET", "/admin/v1/apps/shop/keys", "ada");
  assert.ok(!JSON.stringify(listed.body).includes(secret));
  // Last use is shown (this instance's).
  assert.equal(await page.textContent("#keys-table tr[data-key=k2] .key-uses"), "2");
  assert.notEqual(await page.textContent("#keys-table tr[data-key=k2] .key-last-use"), "—");

  // Retire the old key: two clicks; then it is refused, with the reason when it is named.
  await page.click("#retire-default");
  await shot(page, "13-settings-keys-retire");
  await page.click("#retire-confirm-default");
  await page.waitForSelector("#keys-retired");
  assert.match(await page.textContent("#keys-retired"), /default/);
  assert.match(await page.textContent("#keys-notice"), /retired on every instance/);
  assert.equal(await page.$("#keys-table tbody tr[data-key=default]"), null);
  const old = await decide("/api/cart/add", { signing: { secret: SECRET, keyId: "default" } });
  assert.equal(old.code, "SIGNATURE_INVALID");
  assert.match(old.reasons[0].message, /"default" \(named by x-key-id\) was retired/);
  const audit = await admin("GET", "/admin/v1/audit?action=key", "ada");
  assert.deepEqual(audit.body.entries.map((e) => e.action), ["key.retire", "key.add"]);
  assert.ok(!JSON.stringify(audit.body).includes(secret));
  await shot(page, "14-settings-keys-retired");

  // The keys section fits a phone screen too.
  await page.setViewportSize({ width: 390, height: 844 });
  await new Promise((r) => setTimeout(r, 300));
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `the settings page overflows the phone screen by ${overflow}px`);
  await shot(page, "phone-settings-keys");

  // Others see no key controls, and the server refuses them.
  await page.click("#logout");
  await loggedOut(page);
  await login(page, "bob");
  await go(page, "settings");
  await page.waitForSelector("#keys-admin-only");
  assert.equal(await page.$("#k-add"), null);
  const refused = await admin("POST", "/admin/v1/apps/shop/keys", "bob", {});
  assert.equal(refused.status, 403);
  await page.context().close();
  assert.deepEqual(consoleErrors, []);
});
