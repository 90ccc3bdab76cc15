// A real redis-server on a free loopback port, for the Redis store's tests, which run
// against a real server, never a mock. No persistence by default; `persistent: true` turns on an
// fsync-always append-only file so that data survives a SIGKILL (for outage tests).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { until } from './until.js';

export interface RedisOptions {
  /** `--appendonly yes --appendfsync always` in a temp dir: what was acknowledged survives a SIGKILL. */
  persistent?: boolean;
  /** More `redis-server` arguments, e.g. `--cluster-enabled yes` for a one-node cluster (bench controls). */
  serverArgs?: readonly string[];
}

export interface RedisServer {
  /** `redis://127.0.0.1:<port>` */
  url: string;
  port: number;
  /** SIGTERM, then waits for the process to exit. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL (a crash), then waits for the process to exit. */
  kill(): Promise<void>;
  /** Starts the server again on the same port (and data dir), after `kill` or `stop`; waits for PING. */
  restart(): Promise<void>;
}

const READY_TIMEOUT_MS = 10_000;
const running = new Set<ChildProcess>();

// A test file that dies (or forgets afterAll) must not leave redis-servers behind.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

let checkedBinary = false;
function assertRedisServerInstalled(): void {
  if (checkedBinary) return;
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined) {
    throw new Error(
      `redis-server is not on PATH (${(probe.error as NodeJS.ErrnoException).code ?? probe.error.message}): ` +
        'the Redis store tests run a real server; install it (apt-get install redis-server, as .ci/run does)',
    );
  }
  checkedBinary = true;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** One PING over a raw socket; resolves true on `+PONG`. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('utf8');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

class AddressInUseError extends Error {}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Spawns redis-server on `port` and waits until it answers PING. */
async function spawnRedis(port: number, dir: string, persistent: boolean, extraArgs: readonly string[] = []): Promise<ChildProcess> {
  const args = [
    ...extraArgs,
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--dir', dir,
    '--daemonize', 'no',
    '--loglevel', 'warning',
    ...(persistent ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']),
  ];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  child.once('exit', () => running.delete(child));
  let output = '';
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-4_000);
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      if (/Address already in use/i.test(output)) throw new AddressInUseError(output);
      throw new Error(`redis-server exited (${child.exitCode ?? child.signalCode}) before answering PING:\n${output}`);
    }
    if (await ping(port)) return child;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      await exited(child);
      throw new Error(`redis-server on port ${port} did not answer PING within ${READY_TIMEOUT_MS} ms:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export async function startRedis(options: RedisOptions = {}): Promise<RedisServer> {
  assertRedisServerInstalled();
  const persistent = options.persistent ?? false;
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-'));
  let child: ChildProcess | undefined;
  let port = 0;
  // Another process may take the port between our probe and redis-server's bind: pick another.
  for (let attempt = 0; child === undefined; attempt += 1) {
    port = await freePort();
    try {
      child = await spawnRedis(port, dir, persistent, options.serverArgs);
    } catch (error) {
      if (!(error instanceof AddressInUseError) || attempt >= 5) throw error;
    }
  }

  const terminate = async (signal: NodeJS.Signals) => {
    const current = child;
    child = undefined;
    if (current === undefined) return;
    current.kill(signal);
    await exited(current);
  };

  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      await terminate('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
    kill: () => terminate('SIGKILL'),
    async restart() {
      await terminate('SIGTERM');
      // The same port must be used (clients reconnect to it); it may linger briefly in use.
      for (let attempt = 0; ; attempt += 1) {
        try {
          child = await spawnRedis(port, dir, persistent, options.serverArgs);
          return;
        } catch (error) {
          if (!(error instanceof AddressInUseError) || attempt >= 40) throw error;
          await new Promise((resolve) => setTimeout(resolve, 250));
        }
      }
    },
  };
}

/**
 * Registers beforeAll/afterAll hooks in the calling file: one redis-server for the file, killed
 * in afterAll. Read the handle's members inside tests or hooks.
 */
export function useRedis(options: RedisOptions = {}): RedisServer {
  let server: RedisServer | undefined;
  beforeAll(async () => {
    server = await startRedis(options);
  }, 20_000);
  afterAll(async () => {
    await server?.stop();
  });
  const get = (): RedisServer => {
    if (server === undefined) throw new Error('useRedis: redis-server is not started yet (read it inside a test or hook)');
    return server;
  };
  return {
    get url() {
      return get().url;
    },
    get port() {
      return get().port;
    },
    stop: () => get().stop(),
    kill: () => get().kill(),
    restart: () => get().restart(),
  };
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: six redis-servers (three masters, three replicas) on loopback ports

export interface ClusterNode {
  port: number;
  url: string;
  /** SIGKILL (a crash of this node), then waits for the process to exit. */
  kill(): Promise<void>;
  /** Starts a killed node again on its port with its cluster config: it rejoins (a failed-over master as a replica). */
  restart(): Promise<void>;
  /** False once killed, until restarted. */
  running(): boolean;
}

export interface RedisCluster {
  /** Every node's `redis://127.0.0.1:<port>`: seeds for the store's `cluster` setting. */
  seeds: string[];
  nodes: ClusterNode[];
  /** Node timeout the cluster runs with: a master unreachable this long is failed over. */
  nodeTimeoutMs: number;
  /** `CLUSTER NODES` of a live node, parsed: the current masters (connected, serving slots). */
  masters(): Promise<Array<{ id: string; port: number }>>;
  /** `CLUSTER INFO` of a live node says `cluster_state:ok`. */
  healthy(): Promise<boolean>;
  /** The port of the master serving `key`'s slot now (`CLUSTER KEYSLOT` and `CLUSTER NODES` of a live node). */
  masterOf(key: string): Promise<number>;
  /** Connected replicas per master port, from `CLUSTER NODES`. */
  replicasPerMaster(): Promise<Map<number, number>>;
  /**
   * Every live replica has finished its sync and its replication link is up (`INFO replication`).
   * A replica still syncing has no data to fail over with: killing its master then leaves the
   * master's slots unserved.
   */
  replicasSynced(): Promise<boolean>;
  stop(): Promise<void>;
}

/** Every replica among `ports` reports its replication link up and no sync under way. */
async function synced(ports: readonly number[]): Promise<boolean> {
  const infos = await Promise.all(ports.map((port) => command(port, 'INFO', 'replication').catch(() => '')));
  return infos.every((info) => /role:master/.test(info) || (/master_link_status:up/.test(info) && /master_sync_in_progress:0/.test(info)));
}

/** One command over a raw socket (RESP array of bulk strings); resolves with the raw reply text. */
function command(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(2_000, () => {
      socket.destroy();
      reject(new Error(`no reply from 127.0.0.1:${port} to ${args[0]}`));
    });
    socket.once('error', reject);
    socket.once('connect', () => socket.write(`*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('utf8');
      // A bulk string: `$<length>\r\n<payload>\r\n`.
      const match = /^\$(\d+)\r\n/.exec(reply);
      const simple = /^[-+:]/.test(reply) && reply.includes('\r\n');
      if (simple || (match !== null && Buffer.byteLength(reply) >= match[0].length + Number(match[1]) + 2)) {
        socket.destroy();
        if (reply.startsWith('-')) reject(new Error(reply.trim()));
        else resolve(match === null ? reply.slice(1).trim() : reply.slice(match[0].length, match[0].length + Number(match[1])));
      }
    });
  });
}

/**
 * Starts six `redis-server --cluster-enabled yes` in a temp dir (three with `replicasPerMaster:
 * 0`), joins them with `redis-cli --cluster create ... --cluster-replicas 1`, and waits until
 * every node reports `cluster_state:ok`. No persistence: a killed master's writes survive only
 * on its replica.
 */
export async function startRedisCluster(options: { nodeTimeoutMs?: number; replicasPerMaster?: 0 | 1 } = {}): Promise<RedisCluster> {
  assertRedisServerInstalled();
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 1_000;
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-cluster-'));
  const children = new Map<number, ChildProcess>();
  const nodeArgs = (port: number) => ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, String(port), 'nodes.conf'), '--cluster-node-timeout', String(nodeTimeoutMs)];
  const stopAll = async () => {
    await Promise.all([...children.values()].map(async (child) => {
      child.kill('SIGKILL');
      await exited(child);
    }));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const replicasPerMaster = options.replicasPerMaster ?? 1;
    for (let index = 0; index < 3 * (1 + replicasPerMaster); index += 1) {
      for (let attempt = 0; ; attempt += 1) {
        const port = await freePort();
        const nodeDir = join(dir, String(port));
        mkdirSync(nodeDir);
        try {
          children.set(port, await spawnRedis(port, nodeDir, false, nodeArgs(port)));
          break;
        } catch (error) {
          if (!(error instanceof AddressInUseError) || attempt >= 5) throw error;
        }
      }
    }
    const ports = [...children.keys()];
    const create = spawnSync('redis-cli', ['--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', String(replicasPerMaster), '--cluster-yes'], { encoding: 'utf8', timeout: 60_000 });
    if (create.error !== undefined || create.status !== 0) {
      throw new Error(`redis-cli --cluster create failed (is redis-tools installed?): ${create.error?.message ?? ''}\n${create.stdout}\n${create.stderr}`);
    }
    const stateOk = async (port: number) => /cluster_state:ok/.test(await command(port, 'CLUSTER', 'INFO').catch(() => ''));
    await until(async () => (await Promise.all(ports.map(stateOk))).every(Boolean), 'every cluster node to report cluster_state:ok', 30_000);
    await until(() => synced(ports), 'every replica to finish its first sync', 30_000);
  } catch (error) {
    await stopAll();
    throw error;
  }
  const alive = () => [...children].filter(([, child]) => child.exitCode === null && child.signalCode === null).map(([port]) => port);
  const nodes: ClusterNode[] = [...children.keys()].map((port) => ({
    port,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      const child = children.get(port)!;
      child.kill('SIGKILL');
      await exited(child);
    },
    running: () => alive().includes(port),
    async restart() {
      for (let attempt = 0; ; attempt += 1) {
        try {
          children.set(port, await spawnRedis(port, join(dir, String(port)), false, nodeArgs(port)));
          return;
        } catch (error) {
          if (!(error instanceof AddressInUseError) || attempt >= 40) throw error;
          await new Promise((resolve) => setTimeout(resolve, 250));
        }
      }
    },
  }));
  /** `CLUSTER NODES` lines of a live node, split into fields. */
  const clusterNodes = async () =>
    (await command(alive()[0]!, 'CLUSTER', 'NODES'))
      .split('\n')
      .map((line) => line.split(' '))
      .filter((fields) => fields.length >= 8);
  const portOf = (address: string) => Number(address.split(':')[1]!.split('@')[0]);
  return {
    seeds: nodes.map((node) => node.url),
    nodes,
    nodeTimeoutMs,
    async masters() {
      return (await clusterNodes())
        .filter((fields) => fields.length >= 9 && fields[2]!.split(',').includes('master') && !fields[2]!.includes('fail') && fields[7] === 'connected')
        .map((fields) => ({ id: fields[0]!, port: portOf(fields[1]!) }));
    },
    async masterOf(key) {
      const slot = Number((await command(alive()[0]!, 'CLUSTER', 'KEYSLOT', key)));
      for (const fields of await clusterNodes()) {
        if (!fields[2]!.split(',').includes('master') || fields[2]!.includes('fail')) continue;
        for (const range of fields.slice(8)) {
          const [from, to = from] = range.split('-').map(Number);
          if (slot >= from! && slot <= to!) return portOf(fields[1]!);
        }
      }
      throw new Error(`no master serves slot ${slot} (of ${key})`);
    },
    async replicasPerMaster() {
      const lines = await clusterNodes();
      const counts = new Map<number, number>();
      const portById = new Map(lines.map((fields) => [fields[0]!, portOf(fields[1]!)]));
      for (const fields of lines) if (fields[2]!.split(',').includes('master') && !fields[2]!.includes('fail')) counts.set(portOf(fields[1]!), 0);
      for (const fields of lines) {
        const master = portById.get(fields[3]!);
        if (fields[2]!.split(',').includes('slave') && !fields[2]!.includes('fail') && fields[7] === 'connected' && master !== undefined && counts.has(master)) {
          counts.set(master, counts.get(master)! + 1);
        }
      }
      return counts;
    },
    async healthy() {
      return /cluster_state:ok/.test(await command(alive()[0]!, 'CLUSTER', 'INFO').catch(() => ''));
    },
    replicasSynced: () => synced(alive()),
    stop: stopAll,
  };
}

/** Registers beforeAll/afterAll hooks: one Redis Cluster for the calling file. Read it inside tests or hooks. */
export function useRedisCluster(options: { nodeTimeoutMs?: number } = {}): { get(): RedisCluster } {
  let cluster: RedisCluster | undefined;
  beforeAll(async () => {
    cluster = await startRedisCluster(options);
  }, 90_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  return {
    get() {
      if (cluster === undefined) throw new Error('useRedisCluster: the cluster is not started yet (read it inside a test or hook)');
      return cluster;
    },
  };
}
