// Solve times of the JavaScript proof-of-work solver: 21 solves at difficulties 12, 16 and 20.
// Run: node bench/pow-solve.mjs
import { solve } from "../sdk/js/rampart-pow.mjs";
for (const d of [12, 16, 20]) {
  const times = [];
  let tries = 0;
  for (let i = 0; i < 21; i++) {
    const token = `p1.demo.${(i * 7919).toString(16).padStart(16, "0")}.${d}.1700000300000.${i.toString(16).padStart(16, "0")}.bench-token-${i}`;
    const t0 = performance.now();
    const c = solve(token, d);
    times.push(performance.now() - t0);
    tries += c + 1;
  }
  times.sort((a, b) => a - b);
  console.log(`difficulty ${d}: median ${times[10].toFixed(1)} ms, p90 ${times[18].toFixed(1)} ms, ${(tries / times.reduce((a, b) => a + b, 0) * 1000 / 1e6).toFixed(2)} M hashes/s`);
}
