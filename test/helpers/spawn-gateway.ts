// Runs the built CLI (`node dist/cli.js ...`) as a child process and reads its JSON log lines:
// `spawnCli` for any command, `spawnGateway` for `serve --config FILE` up to its "gateway listening"
// line. Every child still running when the test process exits is killed.

import { spawn, type ChildProcess } from 'node:child_process';
import { GATEWAY_ENVIRONMENT, GATEWAY_NODE_FLAGS } from '../../src/startup/node-flags.js';
import { CLI, ROOT } from './build.js';

export type LogLine = Record<string, unknown>;

export interface CliProcess {
  child: ChildProcess;
  /** Every JSON line (stdout and stderr) kept so far, parsed, in order. */
  lines: LogLine[];
  /** Raw stdout and stderr so far (the last 64 KiB of each), for failure messages. */
  stdout(): string;
  stderr(): string;
  output(): string;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The first kept line `predicate` accepts, waiting for it; rejects if the process exits first or after `timeoutMs`. */
  waitForLine(predicate: (line: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
  /** Sends `signal` (SIGTERM) and waits for the exit; SIGKILL after `killAfterMs` if it does not go. */
  stop(signal?: NodeJS.Signals, killAfterMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface SpawnCliOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Arguments for node itself, before the CLI (e.g. `--max-old-space-size=...`), after the gateway's own flags. */
  nodeArgs?: string[];
  /** Start Node without the gateway's flags (src/startup/node-flags.ts), as `node dist/cli.js` alone would. */
  nodeDefaults?: boolean;
  /** Run dist/cli.js itself, as the installed `tollgate` command is run: Node and its flags come from its first line. */
  asCommand?: boolean;
  /** Which JSON lines to keep in `lines` (default: all). Long runs drop per-request lines here. */
  keep?: (line: LogLine) => boolean;
  /** Sees every raw line of both streams, kept or not, JSON or not. */
  onLine?: (line: string, stream: 'stdout' | 'stderr') => void;
}

const TAIL_CHARS = 64 * 1024;
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export function spawnCli(args: string[], options: SpawnCliOptions = {}): CliProcess {
  // Node's flags and allocator setting as the `tollgate` command starts it (its first line), unless
  // a test asks for the defaults; run as the command itself, it sets them on its own.
  const nodeFlags = options.nodeDefaults === true ? [] : GATEWAY_NODE_FLAGS;
  const environment = options.nodeDefaults === true || options.asCommand === true ? {} : GATEWAY_ENVIRONMENT;
  const [command, commandArgs] = options.asCommand === true ? [CLI, args] : [process.execPath, [...nodeFlags, ...(options.nodeArgs ?? []), CLI, ...args]];
  const child = spawn(command, commandArgs, {
    cwd: options.cwd ?? ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...environment, ...(options.env ?? { ...process.env, TOLLGATE_LOG_LEVEL: 'info' }) },
  });
  running.add(child);
  const lines: LogLine[] = [];
  const raw = { stdout: '', stderr: '' };
  const waiters = new Set<() => void>();
  const wake = (): void => {
    for (const waiter of [...waiters]) waiter();
  };

  for (const stream of ['stdout', 'stderr'] as const) {
    let partial = '';
    child[stream]!.setEncoding('utf8').on('data', (chunk: string) => {
      raw[stream] = (raw[stream] + chunk).slice(-TAIL_CHARS);
      const complete = (partial + chunk).split('\n');
      partial = complete.pop()!;
      for (const text of complete) {
        options.onLine?.(text, stream);
        if (!text.startsWith('{')) continue;
        let line: LogLine;
        try {
          line = JSON.parse(text) as LogLine;
        } catch {
          continue;
        }
        if (options.keep === undefined || options.keep(line)) lines.push(line);
      }
      wake();
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
      wake();
    });
  });
  const output = (): string => `stdout:\n${raw.stdout}\nstderr:\n${raw.stderr}`;

  function waitForLine(predicate: (line: LogLine) => boolean, what: string, timeoutMs = 30_000): Promise<LogLine> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const found = lines.find(predicate);
        if (found !== undefined) {
          cleanup();
          resolve(found);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          cleanup();
          reject(new Error(`the process exited (code ${child.exitCode}, signal ${child.signalCode}) before logging ${what}\n${output()}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no log line ${what} within ${timeoutMs} ms\n${output()}`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  }

  async function stop(signal: NodeJS.Signals = 'SIGTERM', killAfterMs = 10_000) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill(signal);
      const killer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
      await exited;
      clearTimeout(killer);
    }
    return exited;
  }

  return { child, lines, stdout: () => raw.stdout, stderr: () => raw.stderr, output, exited, waitForLine, stop };
}

export interface GatewayProcess extends CliProcess {
  rpcOrigin: string;
  adminOrigin: string;
  portalOrigin: string | undefined;
}

/** `tollgate serve --config FILE`, resolved once its "gateway listening" line names the origins. */
export async function spawnGateway(configFile: string, options: SpawnCliOptions & { startTimeoutMs?: number } = {}): Promise<GatewayProcess> {
  const cli = spawnCli(['serve', '--config', configFile], options);
  try {
    const listening = await cli.waitForLine((line) => line.msg === 'gateway listening', '"gateway listening"', options.startTimeoutMs);
    return {
      ...cli,
      rpcOrigin: String(listening.rpc),
      adminOrigin: String(listening.admin),
      portalOrigin: typeof listening.portal === 'string' ? listening.portal : undefined,
    };
  } catch (error) {
    await cli.stop('SIGKILL');
    throw error;
  }
}

/** Kills every child spawned here that is still running and waits for them (an afterEach after a failed test). */
export async function killSpawned(): Promise<void> {
  await Promise.all(
    [...running].map((child) => {
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGKILL');
      return gone;
    }),
  );
}
