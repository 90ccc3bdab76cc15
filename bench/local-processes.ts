// What the benches that start their own gateways share: a free loopback port, the built CLI
// (`dist/cli.js`, so run `npm run build` first) for making teams and keys, the command and
// environment every bench starts a gateway with, and a gateway process pinned to one core.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { GATEWAY_ENVIRONMENT, GATEWAY_NODE_FLAGS } from '../src/startup/node-flags.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CLI = join(ROOT, 'dist', 'cli.js');

/** A port free on 127.0.0.1 right now (the OS picks it; the caller binds it next). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Runs `tollgate <args>` to completion and returns its standard output. */
export function runCli(args: string[]): string {
  return execFileSync(process.execPath, [CLI, ...args], { cwd: ROOT, encoding: 'utf8' });
}

/**
 * The core the measured gateways run on (`taskset`), when the machine has it and more than one
 * core: on a small machine the scheduler otherwise places each process differently (beside wrk
 * or not), and that difference outweighs what is measured. wrk and the orchestrator share the
 * other cores.
 */
export const GATEWAY_CPU = cpus().length > 1 && hasTaskset() ? '0' : undefined;

/** Whether processes can be pinned to cores here: `taskset` is installed and there is more than one core. */
export const CAN_PIN = GATEWAY_CPU !== undefined;

/** Moves every thread of process `pid` onto `cores` (`taskset -a -c -p`). */
export function pinProcess(pid: number, cores: string): void {
  execFileSync('taskset', ['-a', '-c', '-p', cores, String(pid)], { stdio: 'ignore' });
}

function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The admin token of the gateways {@link startGateway} starts. */
const ADMIN_TOKEN = 'bench-admin-token-0123456789';

export interface GatewayChild {
  child: ChildProcess;
  pid: number;
  /** The RPC URL of the key: origin + `keyPath`. */
  url: string;
  /** `http://127.0.0.1:<admin port>` */
  adminOrigin: string;
}

/** The bench gateways' Node flags: the `tollgate` command's, or `BENCH_GATEWAY_FLAGS` (space-separated) to measure others. */
export const GATEWAY_FLAGS: readonly string[] = process.env['BENCH_GATEWAY_FLAGS']?.split(/\s+/).filter((flag) => flag !== '') ?? GATEWAY_NODE_FLAGS;

/**
 * How every bench starts a gateway: `node` with {@link GATEWAY_FLAGS}, then `extraFlags`, `cli
 * serve --config <configFile>`, with the command's allocator setting and the log level in its
 * environment: the gateway measured as the command runs it.
 */
export function gatewayCommand(
  configFile: string,
  options: { logLevel: string; extraFlags?: readonly string[]; cli?: string },
): { args: string[]; env: NodeJS.ProcessEnv } {
  return {
    args: [...GATEWAY_FLAGS, ...(options.extraFlags ?? []), options.cli ?? CLI, 'serve', '--config', configFile],
    env: { ...process.env, ...GATEWAY_ENVIRONMENT, TOLLGATE_LOG_LEVEL: options.logLevel },
  };
}

/**
 * `node dist/cli.js serve` with `config` plus its RPC and admin listeners on free ports, logging
 * (at `logLevel`, by default info) to `<dir>/<name>.log`, every thread pinned to {@link GATEWAY_CPU}; resolves
 * once `eth_chainId` at `keyPath` answers 200.
 */
export async function startGateway(options: {
  dir: string;
  name: string;
  config: Record<string, unknown>;
  keyPath: string;
  logLevel?: 'info' | 'warn';
  /** Node flags after the command's own (bench/flags-ab.ts tries them this way). */
  extraFlags?: readonly string[];
}): Promise<GatewayChild> {
  const port = await freePort();
  const adminPort = await freePort();
  const configFile = join(options.dir, `${options.name}.yaml`);
  writeFileSync(
    configFile,
    toYaml({ server: { host: '127.0.0.1', port }, admin: { host: '127.0.0.1', port: adminPort, token: ADMIN_TOKEN }, ...options.config }),
  );
  const logFd = openSync(join(options.dir, `${options.name}.log`), 'a');
  const command = gatewayCommand(configFile, { logLevel: options.logLevel ?? 'info', extraFlags: options.extraFlags });
  const child = spawn(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', logFd, logFd], env: command.env });
  closeSync(logFd);
  const url = `http://127.0.0.1:${port}${options.keyPath}`;
  if (GATEWAY_CPU !== undefined) pinProcess(child.pid!, GATEWAY_CPU);
  const chainId = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] });
  for (let tries = 0; ; tries += 1) {
    const status = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chainId }).then(
      async (response) => (await response.arrayBuffer(), response.status),
      () => undefined,
    );
    if (status === 200) break;
    if (child.exitCode !== null || tries > 200) {
      child.kill('SIGKILL');
      throw new Error(`gateway ${options.name} not ready within 20 s (see ${options.name}.log)`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { child, pid: child.pid!, url, adminOrigin: `http://127.0.0.1:${adminPort}` };
}

/** The gateway's /metrics text, from its admin listener. */
export async function gatewayMetrics(gateway: GatewayChild): Promise<string> {
  return (await fetch(`${gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
}

/** The sum of a labelled counter's series in a /metrics text. */
export function metricSum(text: string, name: string): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}
