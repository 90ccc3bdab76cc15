// A real local Ethereum node (anvil from the npm package `@foundry-rs/anvil`) for
// `npm start` and the test suite; anvil-seed.ts mines blocks carrying transactions on it.

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { request } from 'undici';

export interface AnvilOptions {
  /** TCP port; 0 (the default) lets anvil bind a free port and report it. */
  port?: number;
  /** Interface to bind; default `127.0.0.1`. */
  host?: string;
  /** Interval mining in seconds; default: mine on every transaction (automine). */
  blockTime?: number;
  /** Chain id; default 31337 (`0x7a69`), anvil's own default. */
  chainId?: number;
  /** How long to wait for the node to answer `eth_chainId`, in ms; default 20 000. */
  startupTimeoutMs?: number;
  /** anvil's `--hardfork` (`berlin`, `london`, `shanghai`, `cancun`, `prague`, …); default: anvil's latest. */
  hardfork?: string;
}

export interface AnvilNode {
  /** `http://host:port`, ready for JSON-RPC POSTs. */
  url: string;
  port: number;
  chainId: number;
  /** Process id of the anvil process we spawned (the native binary unless falling back). */
  pid: number;
  /**
   * Where anvil writes the states it moves out of memory (past its 500 most recent blocks),
   * a fresh temporary directory per node; removed once the process has exited.
   */
  statesDir: string;
  /** SIGTERM, then SIGKILL after a short grace; resolves once the process has exited. */
  stop(): Promise<void>;
}

export interface AnvilCommand {
  command: string;
  /** Arguments that precede anvil's own (the wrapper script when falling back to node). */
  prefixArgs: string[];
  /** `native`: the platform binary itself; `wrapper`: `node bin.mjs`, which re-spawns it. */
  kind: 'native' | 'wrapper';
}

const DEFAULT_CHAIN_ID = 31337;
const DEFAULT_STARTUP_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 2_000;
const OUTPUT_TAIL_BYTES = 8_192;

const PLATFORM_PACKAGES: Record<string, Record<string, string>> = {
  darwin: { x64: '@foundry-rs/anvil-darwin-amd64', arm64: '@foundry-rs/anvil-darwin-arm64' },
  linux: { x64: '@foundry-rs/anvil-linux-amd64', arm64: '@foundry-rs/anvil-linux-arm64' },
  win32: { x64: '@foundry-rs/anvil-win32-amd64' },
};

/**
 * Finds the anvil executable the same way `@foundry-rs/anvil/bin.mjs` does, but returns
 * the native binary so we spawn it directly: the wrapper is an extra node process, and a
 * SIGKILL to the wrapper would orphan the real node.
 *
 * Order: `$TOLLGATE_ANVIL_BIN`; `<platform package>/bin/anvil` (the optional dependency);
 * the binary postinstall downloads next to the wrapper when optional deps were skipped;
 * bin.mjs's own last resort `../dist/anvil`; finally `node bin.mjs` itself.
 */
export function resolveAnvilCommand(): AnvilCommand {
  const override = process.env.TOLLGATE_ANVIL_BIN;
  if (override) return { command: override, prefixArgs: [], kind: 'native' };

  const require = createRequire(import.meta.url);
  const binaryName = process.platform === 'win32' ? 'anvil.exe' : 'anvil';
  const candidates: string[] = [];

  const platformPackage = PLATFORM_PACKAGES[process.platform]?.[process.arch];
  if (platformPackage) {
    try {
      candidates.push(require.resolve(`${platformPackage}/bin/${binaryName}`));
    } catch {
      // optional dependency not installed for this platform: try the others
    }
  }

  let wrapperDir: string | undefined;
  try {
    wrapperDir = dirname(require.resolve('@foundry-rs/anvil/package.json'));
    candidates.push(join(wrapperDir, binaryName), join(wrapperDir, '..', 'dist', binaryName));
  } catch {
    // wrapper package missing too; reported below
  }

  const found = candidates.find((path) => existsSync(path));
  if (found) return { command: found, prefixArgs: [], kind: 'native' };

  if (wrapperDir && existsSync(join(wrapperDir, 'bin.mjs'))) {
    return { command: process.execPath, prefixArgs: [join(wrapperDir, 'bin.mjs')], kind: 'wrapper' };
  }
  throw new Error(
    `anvil not found: it is an optional dependency (\`npm install\` without --omit=optional installs the npm package @foundry-rs/anvil; looked for ${candidates.join(', ') || platformPackage || 'a platform package'}), or set TOLLGATE_ANVIL_BIN to an anvil binary`,
  );
}

// Anvil children that are still running. They must not outlive this process:
// - a normal exit (end of `npm start`, an uncaught error, process.exit) runs 'exit' handlers;
// - a terminating signal does not, and vitest stops its fork workers with SIGTERM. While a
//   child is alive we therefore listen for SIGINT/SIGTERM/SIGHUP; if ours is the only
//   listener (the process was going to die), we kill the children and re-raise the signal so
//   the default action still happens. If the application has its own handler (the gateway
//   drains on SIGTERM and reloads on SIGHUP), we leave shutdown to it and the 'exit' hook.
// Each live child maps to its states directory, which goes with it.
const liveChildren = new Map<ChildProcess, string>();
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
let exitHookInstalled = false;

function killAllChildren(): void {
  for (const c of liveChildren.keys()) {
    try {
      c.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  // This process is about to end, so the children's 'exit' events that would remove their
  // directories will never be seen: remove them here (retrying while a dying child's last
  // write lands).
  for (const statesDir of liveChildren.values()) removeStatesDir(statesDir);
}

/** anvil removes nothing of its states directory when it exits, whatever the signal. */
function removeStatesDir(statesDir: string): void {
  try {
    rmSync(statesDir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // Best effort: it is under the system's temporary directory.
  }
}

function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  killAllChildren();
  removeSignalHandlers();
  process.kill(process.pid, signal);
}

function installSignalHandlers(): void {
  for (const sig of FORWARDED_SIGNALS) process.on(sig, onSignal);
}

function removeSignalHandlers(): void {
  for (const sig of FORWARDED_SIGNALS) process.off(sig, onSignal);
}

function trackChild(child: ChildProcess, statesDir: string): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // 'exit' handlers must be synchronous; kill() is.
    process.on('exit', killAllChildren);
  }
  if (liveChildren.size === 0) installSignalHandlers();
  liveChildren.set(child, statesDir);
  const forget = (): void => {
    if (!liveChildren.delete(child)) return;
    removeStatesDir(statesDir);
    // Without children, leave the process's signal behaviour exactly as it was.
    if (liveChildren.size === 0) removeSignalHandlers();
  };
  child.once('exit', forget);
  // A failed spawn (ENOENT, EACCES) emits 'error' and may never emit 'exit'.
  child.once('error', () => {
    if (child.pid === undefined) forget();
  });
}

/** Keeps the last `max` characters of a stream, for error messages. */
class Tail {
  private text = '';
  constructor(private readonly max: number) {}
  push(chunk: string): void {
    this.text += chunk;
    if (this.text.length > this.max) this.text = this.text.slice(-this.max);
  }
  toString(): string {
    return this.text.trim();
  }
}

function urlHost(host: string): string {
  // A wildcard bind is reachable on loopback; IPv6 literals need brackets in a URL.
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

export async function startAnvil(options: AnvilOptions = {}): Promise<AnvilNode> {
  const host = options.host ?? '127.0.0.1';
  const requestedPort = options.port ?? 0;
  const chainId = options.chainId ?? DEFAULT_CHAIN_ID;
  const timeoutMs = options.startupTimeoutMs ?? DEFAULT_STARTUP_TIMEOUT_MS;

  // Port 0: anvil binds an ephemeral port itself and prints "Listening on HOST:PORT", so
  // there is no window in which another process can take a port we picked. That banner
  // is why we do not pass --quiet (it suppresses it); the per-request log lines that
  // follow are drained into a small tail buffer.
  // The command is found first: a missing anvil must not leave a states directory behind.
  const cmd = resolveAnvilCommand();
  // Past its 500 most recent blocks anvil writes each block's state to disk, by default under
  // ~/.foundry/anvil/tmp, and never removes it: every node gets its own directory instead,
  // removed when the node exits.
  const statesDir = mkdtempSync(join(tmpdir(), 'tollgate-anvil-'));
  const args = ['--host', host, '--port', String(requestedPort), '--chain-id', String(chainId), '--cache-path', statesDir];
  if (options.blockTime !== undefined) args.push('--block-time', String(options.blockTime));
  if (options.hardfork !== undefined) args.push('--hardfork', options.hardfork);

  const child = spawn(cmd.command, [...cmd.prefixArgs, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TARGET_TOOL: 'anvil' },
  });
  trackChild(child, statesDir);

  const stdoutTail = new Tail(OUTPUT_TAIL_BYTES);
  const stderrTail = new Tail(OUTPUT_TAIL_BYTES);
  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => stderrTail.push(d));

  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      resolve();
    });
  });
  let spawnError: Error | undefined;
  child.once('error', (err) => {
    spawnError = err;
  });

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    if (stopping) return stopping;
    stopping = (async () => {
      if (exited || child.exitCode !== null || child.signalCode !== null || spawnError) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      await exitPromise;
      clearTimeout(timer);
    })();
    return stopping;
  };

  const describe = (why: string): Error => {
    const out = [
      `anvil (${cmd.command}) ${why}`,
      stderrTail.toString() && `stderr:\n${stderrTail}`,
      stdoutTail.toString() && `stdout (tail):\n${stdoutTail}`,
    ].filter(Boolean);
    return new Error(out.join('\n'));
  };

  const deadline = Date.now() + timeoutMs;
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let buffer = '';
      const timer = setTimeout(
        () => reject(describe(`did not report its listening address within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onData = (d: string): void => {
        stdoutTail.push(d);
        buffer += d;
        const m = /Listening on (\S+):(\d+)/.exec(buffer);
        if (m) {
          clearTimeout(timer);
          resolve(Number(m[2]));
        } else if (buffer.length > 65_536) {
          buffer = buffer.slice(-1024);
        }
      };
      child.stdout!.on('data', onData);
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(describe(`failed to spawn: ${err.message}`));
      });
      // 'close' rather than 'exit': it fires after stderr is drained, so the message has it.
      child.once('close', (code, signal) => {
        clearTimeout(timer);
        reject(describe(`exited before listening (code ${code}, signal ${signal})`));
      });
    });
    // Keep draining stdout (via the tail) so anvil never blocks on a full pipe.
    child.stdout!.removeAllListeners('data');
    child.stdout!.on('data', (d: string) => stdoutTail.push(d));

    const url = `http://${urlHost(host)}:${port}`;
    await waitForChainId(url, chainId, deadline, () => exited, describe);
    return { url, port, chainId, pid: child.pid!, statesDir, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function waitForChainId(
  url: string,
  chainId: number,
  deadline: number,
  exited: () => unknown,
  describe: (why: string) => Error,
): Promise<void> {
  let lastError = 'no answer yet';
  while (Date.now() < deadline) {
    if (exited()) throw describe('exited during start-up');
    try {
      const result = await rpcCall(url, 'eth_chainId', [], Math.min(1_000, deadline - Date.now()));
      if (typeof result === 'string' && Number.parseInt(result, 16) === chainId) return;
      // Something answered, but not our node (a stale process on a reused port?).
      throw describe(`answered eth_chainId with ${JSON.stringify(result)}, expected ${chainId}`);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('anvil (')) throw err;
      lastError = err instanceof Error ? err.message : String(err);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw describe(`did not answer eth_chainId at ${url} in time (last error: ${lastError})`);
}

let rpcId = 0;

/** One JSON-RPC call; throws on transport errors and on JSON-RPC error objects. */
export async function rpcCall(url: string, method: string, params: unknown[], timeoutMs = 10_000): Promise<unknown> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params }),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${method}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
  const body = JSON.parse(text) as { result?: unknown; error?: { code: number; message: string } };
  if (body.error) throw new Error(`${method}: JSON-RPC error ${body.error.code}: ${body.error.message}`);
  return body.result;
}
