// Shared by the browser tests (not a test file itself).
import net from "node:net";

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
