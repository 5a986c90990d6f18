// Shared by the browser tests (not a test file itself).
import net from "node:net";
import { chromium } from "playwright-core";

/** A loopback port nobody listens on now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

/** Debian's headless Chromium (`$CHROMIUM`, else /usr/bin/chromium), quiet and without a sandbox. */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-quic", "--no-first-run"],
  });
}
