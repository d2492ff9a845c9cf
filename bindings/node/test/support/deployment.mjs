// A TypeScript SDK deployment from real parts, for the server guard's tests: a redis-server,
// three replicas of replica.mjs (with or without ResumeSafety), nginx in front (idle responses
// cut; a session pinned to the replica that holds it in memory by its id's prefix, the others
// its backups), its configuration the one `mock-cluster nginx-config` renders for the Rust
// real-parts tests. The truth is the tool's own counters in Redis.
//
// Faults come from outside, as in server/tests/real_parts: nginx cutting a call's silent
// response, a rolling restart (SIGTERM drains each replica, a new process takes its port), and
// `kill -9` of the replica running a call.
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { accessSync, chmodSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { freePort } from "./servers.mjs";

/** nginx's `proxy_read_timeout`: a response silent this long is cut. */
export const IDLE_MS = 300;
/** The replicas' claim lease: a killed replica's keys read as lost this long after it died. */
export const LEASE_MS = 800;

const REPLICA = fileURLToPath(new URL("./replica.mjs", import.meta.url));
const running = new Set();
process.on("exit", () => running.forEach((child) => child.kill("SIGKILL")));

function program(name) {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/usr/bin"])) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // next
    }
  }
  throw new Error(`the server guard's deployment tests need ${name} (apt-get install ${name})`);
}

function track(child) {
  running.add(child);
  child.on("exit", () => running.delete(child));
  return child;
}

async function stopped(child, signal = "SIGTERM", ms = 10000) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, "exit");
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  await exited;
  clearTimeout(timer);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A redis-server of the test's own, and the few commands the tests send it. */
export class Redis {
  static async start() {
    const dir = mkdtempSync(join(tmpdir(), "guard-redis-"));
    for (let attempt = 0; attempt < 5; attempt++) {
      const port = await freePort();
      const child = track(
        spawn(program("redis-server"), ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
          stdio: "ignore",
        }),
      );
      const redis = new Redis(child, port, dir);
      for (let i = 0; i < 500 && child.exitCode === null; i++) {
        try {
          if ((await redis.command("PING")) === "PONG") return redis;
        } catch {
          await sleep(20);
        }
      }
      await stopped(child, "SIGKILL");
    }
    throw new Error("redis-server did not start");
  }

  constructor(child, port, dir) {
    this.child = child;
    this.port = port;
    this.dir = dir;
    this.url = `redis://127.0.0.1:${port}`;
  }

  /** One command; its reply as text (`null` for a nil). */
  command(...args) {
    return new Promise((resolve, reject) => {
      const socket = createConnection(this.port, "127.0.0.1");
      let received = Buffer.alloc(0);
      socket.on("data", (chunk) => {
        received = Buffer.concat([received, chunk]);
        const text = received.toString();
        const line = text.indexOf("\r\n");
        if (line < 0) return;
        const head = text.slice(0, line);
        if (head.startsWith("-")) {
          socket.end();
          reject(new Error(head));
        } else if (!head.startsWith("$")) {
          socket.end();
          resolve(head.slice(1));
        } else if (Number(head.slice(1)) < 0) {
          socket.end();
          resolve(null);
        } else if (text.length >= line + 2 + Number(head.slice(1))) {
          socket.end();
          resolve(text.slice(line + 2, line + 2 + Number(head.slice(1))));
        }
      });
      socket.on("error", reject);
      socket.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join(""));
    });
  }

  async stop() {
    await stopped(this.child, "SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** nginx in front of the replicas, with the configuration the Rust real-parts tests use. */
export class Nginx {
  static async start(upstreams) {
    const binary = process.env.MCP_RESUME_MOCK_CLUSTER;
    if (!binary) throw new Error("MCP_RESUME_MOCK_CLUSTER is not set: run the suite through test.sh");
    const dir = mkdtempSync(join(tmpdir(), "guard-nginx-"));
    chmodSync(dir, 0o755); // nginx's workers (run as root: another user) read it
    // A port free when picked may be taken before nginx binds it: nginx then exits, and
    // starts again on another.
    let nginx = null;
    for (let attempt = 0; attempt < 5; attempt++) {
      const port = await freePort();
      const conf = execFileSync(binary, [
        "nginx-config", "--listen", `127.0.0.1:${port}`, "--prefix", dir, "--session-prefixes",
        "--idle-timeout-ms", String(IDLE_MS), ...upstreams.flatMap((p) => ["--upstream", `127.0.0.1:${p}`]),
      ]).toString();
      writeFileSync(join(dir, "nginx.conf"), conf);
      const child = track(spawn(program("nginx"), ["-p", dir, "-c", join(dir, "nginx.conf"), "-e", join(dir, "error.log")], { stdio: "ignore" }));
      nginx = new Nginx(child, port, dir);
      for (let i = 0; i < 500; i++) {
        if (child.exitCode !== null) break;
        if (nginx.#bound() && (await nginx.#listening())) return nginx;
        await sleep(20);
      }
      if (child.exitCode === null) break; // running but not listening: another port would not help
    }
    throw new Error(`nginx did not start:\n${nginx?.log("error.log") ?? ""}`);
  }

  constructor(child, port, dir) {
    this.child = child;
    this.port = port;
    this.dir = dir;
    this.url = `http://127.0.0.1:${port}/mcp`;
  }

  /** nginx wrote its pid file, which it does once its sockets are bound: a port taken by
   * another process is not mistaken for nginx listening. */
  #bound() {
    try {
      return readFileSync(join(this.dir, "nginx.pid"), "utf8").trim() === String(this.child.pid);
    } catch {
      return false;
    }
  }

  #listening() {
    return new Promise((resolve) => {
      const socket = createConnection(this.port, "127.0.0.1");
      socket.on("connect", () => {
        socket.end();
        resolve(true);
      });
      socket.on("error", () => resolve(false));
    });
  }

  log(name) {
    try {
      return readFileSync(join(this.dir, name), "utf8").slice(-4000);
    } catch {
      return "";
    }
  }

  async stop() {
    await stopped(this.child);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** One replica.mjs process on a port of its own. */
export class Replica {
  constructor(args) {
    this.args = args;
    this.child = null;
  }

  static async start(...args) {
    const replica = new Replica(args);
    await replica.start();
    return replica;
  }

  async start() {
    const child = track(spawn(process.execPath, [REPLICA, ...this.args], { stdio: ["pipe", "pipe", "inherit"] }));
    const lines = createInterface({ input: child.stdout });
    const first = await Promise.race([
      once(lines, "line").then(([line]) => line),
      once(child, "exit").then(([code]) => {
        throw new Error(`the replica exited (${code}) before listening`);
      }),
    ]);
    if (!first.startsWith("http://")) throw new Error(`the replica said ${first}`);
    lines.resume();
    this.url = first.trim();
    this.child = child;
  }

  get pid() {
    return this.child?.pid;
  }

  alive() {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  kill9() {
    return stopped(this.child, "SIGKILL");
  }

  /** SIGTERM: it closes its connections, lets the requests in flight finish (their answers
   * stored by the guard, none sent), then exits. */
  drain() {
    return stopped(this.child, "SIGTERM", 15000);
  }

  async stop() {
    if (this.alive()) {
      const exited = once(this.child, "exit");
      this.child.stdin.end();
      await Promise.race([exited, sleep(10000).then(() => this.child.kill("SIGKILL"))]);
    }
  }
}

/** Three replicas behind nginx, sharing `redis`. */
export class Deployment {
  static async start(redis, { guarded, json = false }) {
    // A port free when picked may be taken before the replica binds it: the replica then
    // exits, and starts again on another. Later starts (a restart, a revival) keep the port
    // nginx knows.
    const first = async (i) => {
      for (let attempt = 1; ; attempt++) {
        const port = await freePort();
        const replica = new Replica([
          "--port", String(port), "--redis", redis.url, "--lease-ms", String(LEASE_MS),
          "--session-prefix", `i${i}-`, ...(guarded ? [] : ["--no-guard"]), ...(json ? ["--json"] : []),
        ]);
        try {
          await replica.start();
          return { replica, port };
        } catch (error) {
          if (attempt === 5) throw error;
        }
      }
    };
    const started = await Promise.all([0, 1, 2].map(first));
    const nginx = await Nginx.start(started.map((s) => s.port));
    return new Deployment(redis, started.map((s) => s.replica), nginx, guarded, json);
  }

  constructor(redis, replicas, nginx, guarded, json) {
    this.redis = redis;
    this.replicas = replicas;
    this.nginx = nginx;
    this.guarded = guarded;
    this.json = json;
    this.url = nginx.url;
  }

  /** How many times the tool applied its side effect for `tag`: the truth. */
  async effects(tag) {
    return Number((await this.redis.command("GET", `effects:${tag}`)) ?? 0);
  }

  /** How many runs of the call tagged `tag` reached their end (not killed mid-run). */
  async finished(tag) {
    return Number((await this.redis.command("GET", `done:${tag}`)) ?? 0);
  }

  /** Waits until the call tagged `tag` applied its effect: the replica's pid. */
  async waitEffect(tag) {
    for (let i = 0; i < 1000; i++) {
      const pid = await this.redis.command("GET", `ran:${tag}`);
      if (pid !== null) return Number(pid);
      await sleep(10);
    }
    throw new Error(`the call ${tag} never ran`);
  }

  kill9(pid) {
    return this.replicas.find((r) => r.pid === pid).kill9();
  }

  revive() {
    return Promise.all(this.replicas.filter((r) => !r.alive()).map((r) => r.start()));
  }

  async stop() {
    await this.nginx.stop();
    await Promise.all(this.replicas.map((r) => r.stop()));
  }
}
