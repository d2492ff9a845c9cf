// The servers the suite runs, as child processes on 127.0.0.1: the mock cluster (its oracle
// says what really ran), the TypeScript SDK v1 server of tests/interop and the v2 server of
// tests/interop-modern (each logs what it saw, one JSON object per line). Tests assert on
// what those report, not on what a client believed.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO = fileURLToPath(new URL("../../../../", import.meta.url));

// A test process that ends without stopping its servers (a failed assertion, a crash) takes
// them along.
const running = new Set();
process.on("exit", () => running.forEach((child) => child.kill()));

/** A child process whose first stdout line is its URL. */
class Process {
  constructor(child, url) {
    this.child = child;
    this.url = url;
    this.base = url.replace(/\/mcp$/, "");
  }

  static async start(command, args, stderr = "inherit") {
    const child = spawn(command, args, { stdio: ["pipe", "pipe", stderr] });
    running.add(child);
    child.on("exit", () => running.delete(child));
    const lines = createInterface({ input: child.stdout });
    const first = await Promise.race([
      once(lines, "line").then(([line]) => line),
      once(child, "exit").then(([code]) => {
        throw new Error(`${command} ${args.join(" ")} exited (${code}) before printing its URL`);
      }),
    ]);
    if (!first.startsWith("http://")) throw new Error(`${command}: unexpected first line ${first}`);
    return { child, lines, url: first.trim() };
  }

  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, "exit");
    this.child.kill("SIGINT");
    await exited;
  }
}

/** The `mock-cluster` binary (`$MCP_RESUME_MOCK_CLUSTER`, which test.sh sets). */
export class Cluster extends Process {
  static async start(preset, ...args) {
    const binary = process.env.MCP_RESUME_MOCK_CLUSTER;
    if (!binary) throw new Error("MCP_RESUME_MOCK_CLUSTER is not set: run the suite through test.sh");
    const { child, lines, url } = await Process.start(binary, [
      "--listen", "127.0.0.1:0", "--preset", preset, "--instances", "3", ...args,
    ], "ignore");
    lines.resume();
    return new Cluster(child, url);
  }

  /**
   * What the cluster recorded. An execution is recorded when it starts, so once the calls
   * of a test have ended (as sequential calls have) it holds every one of them.
   */
  async oracle() {
    const response = await fetch(`${this.base}/admin/oracle`);
    if (!response.ok) throw new Error(`oracle: HTTP ${response.status}`);
    return response.json();
  }
}

/**
 * `Cluster.start` arguments telling the oracle what the test's clients negotiate: it then
 * flags any execution under other client capabilities as `wrong_capability` (without them, a
 * client sending the wrong ones would go unseen).
 */
export const expecting = (capabilities) => ["--expect-client-capabilities", JSON.stringify(capabilities)];

/** A free port of 127.0.0.1 (for a server that must come back at the same URL). */
export async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A TypeScript SDK server script logging one JSON event per line. */
export class LoggingServer extends Process {
  #waiters = [];
  #script;
  #args;

  constructor(child, url, lines, script, args) {
    super(child, url);
    this.events = [];
    this.#script = script;
    this.#args = args;
    this.#listen(lines);
  }

  #listen(lines) {
    lines.on("line", (line) => {
      const event = JSON.parse(line);
      this.events.push(event);
      this.#waiters = this.#waiters.filter((w) => !w(event));
    });
  }

  /**
   * Kills the server (SIGKILL: it dies mid-call, as a crashed or redeployed one does) and
   * starts the same script again; `events` goes on with the new process's log. Start it with
   * `--port` for it to come back at the same URL.
   */
  async restart() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = once(this.child, "exit");
      this.child.kill("SIGKILL");
      await exited;
    }
    const { child, lines, url } = await Process.start(process.execPath, [this.#script, ...this.#args]);
    this.child = child;
    this.url = url;
    this.#listen(lines);
  }

  /** tests/interop/ts-server.mjs (TypeScript SDK v1, legacy era) with `args`. */
  static v1(...args) {
    return LoggingServer.#start(`${REPO}/tests/interop/ts-server.mjs`, args);
  }

  /**
   * `v1` on a port of its own (`--port`), so that `restart` brings it back at the same URL.
   * A port found free can be taken before the server binds it (by any process's outgoing
   * connection, on a machine running many tests): a server that exits before printing its
   * URL is started again on another port, a few times.
   */
  static async v1OnFixedPort(...args) {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await LoggingServer.v1("--port", String(await freePort()), ...args);
      } catch (error) {
        if (attempt >= 5 || !/before printing its URL/.test(String(error))) throw error;
      }
    }
  }

  /** tests/interop-modern/server.mjs (TypeScript SDK v2, 2026-07-28 only by default). */
  static v2(...args) {
    return LoggingServer.#start(`${REPO}/tests/interop-modern/server.mjs`, args);
  }

  static async #start(script, args) {
    const { child, lines, url } = await Process.start(process.execPath, [script, ...args]);
    return new LoggingServer(child, url, lines, script, args);
  }

  /** Where the log is now: `find` and `waitFor` from here see only what comes after. */
  mark() {
    return this.events.length;
  }

  /** The events logged since `mark` named `ev` and matching `predicate`. */
  find(mark, ev, predicate = () => true) {
    return this.events.slice(mark).filter((e) => e.ev === ev && predicate(e));
  }

  /** The first event since `mark` named `ev` matching `predicate`, logged already or later. */
  waitFor(mark, ev, predicate = () => true, timeoutMs = 10_000) {
    const seen = this.find(mark, ev, predicate)[0];
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${ev} event within ${timeoutMs} ms`)), timeoutMs);
      this.#waiters.push((event) => {
        if (event.ev !== ev || !predicate(event)) return false;
        clearTimeout(timer);
        resolve(event);
        return true;
      });
    });
  }

  /**
   * Kills the server in the middle of a `tool` call started since `mark` and starts it again:
   * once the tool runs and the call's event stream has its first event out (the head is
   * logged as it is written, the event a moment later: an admin round trip through the
   * server's event loop lets it go), so that a client holds an event id to resume from.
   * Returns where the restarted server's log begins.
   */
  async restartMidCall(mark, tool = "block") {
    await this.waitFor(mark, "tool", (e) => e.name === tool);
    await this.waitFor(mark, "http_head", (e) => e.tool === tool);
    await this.synced(mark);
    const restarted = this.mark();
    await this.restart();
    return restarted;
  }

  /** Resolves once every line the server logged before this call has been read. */
  async synced(mark) {
    const marks = () => this.find(mark, "admin", (e) => e.path === "/admin/mark").length;
    const before = marks();
    // The server logs the mark before it answers: once the mark's line is read, so is every
    // line before it.
    await this.admin("/admin/mark");
    if (marks() === before) await this.waitFor(this.mark(), "admin", (e) => e.path === "/admin/mark");
  }

  /** POSTs an admin route; its JSON reply. */
  async admin(path, body = {}) {
    const response = await fetch(`${this.base}${path}`, { method: "POST", body: JSON.stringify(body) });
    return response.json();
  }

  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    // The scripts exit when their stdin closes.
    const exited = once(this.child, "exit");
    this.child.stdin.end();
    await exited;
  }
}
