// Solve times of the JavaScript proof-of-work solver in headless Chromium, as a challenged browser
// runs it: `solveInWorker` (a module Web Worker), 21 solves at difficulties 12, 16 and 20, the
// median and 90th percentile of each. The same tokens as bench/pow-solve.mjs (Node).
//
// Run (Chromium and the console's e2e dependencies installed, as scripts/test.sh does):
//   node bench/pow-solve-browser.mjs
import http from "node:http";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../admin-ui/e2e/package.json", import.meta.url));
const { chromium } = require("playwright-core");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

const pow = readFileSync(new URL("../sdk/js/rampart-pow.mjs", import.meta.url));
const page = `<!doctype html><meta charset="utf-8"><title>pow</title><script type="module">
import { solveInWorker } from "/rampart-pow.mjs";
window.run = async (d) => {
  const times = [];
  for (let i = 0; i < 21; i++) {
    const token = \`p1.demo.\${(i * 7919).toString(16).padStart(16, "0")}.\${d}.1700000300000.\${i.toString(16).padStart(16, "0")}.bench-token-\${i}\`;
    const t0 = performance.now();
    await solveInWorker({ token, difficulty: d });
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return [times[10], times[18]];
};
window.ready = true;
</script>`;
const server = http.createServer((req, res) => {
  if (req.url === "/rampart-pow.mjs") {
    res.writeHead(200, { "content-type": "text/javascript" });
    res.end(pow);
  } else {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(page);
  }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  const p = await browser.newPage();
  await p.goto(`http://127.0.0.1:${server.address().port}/`);
  await p.waitForFunction(() => window.ready === true);
  console.log(`headless Chromium ${browser.version()}, solveInWorker, 21 solves each`);
  for (const d of [12, 16, 20]) {
    const [median, p90] = await p.evaluate((d) => window.run(d), d);
    console.log(`difficulty ${d}: median ${median.toFixed(1)} ms, p90 ${p90.toFixed(1)} ms`);
  }
} finally {
  await browser.close();
  server.close();
}
