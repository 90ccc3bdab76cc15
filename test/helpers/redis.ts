// A real redis-server on a free loopback port, for the Redis store's tests, which run
// against a real server, never a mock. No persistence by default; `persistent: true` turns on an
// fsync-always append-only file so that data survives a SIGKILL (for outage tests).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';

export interface RedisOptions {
  /** `--appendonly yes --appendfsync always` in a temp dir: what was acknowledged survives a SIGKILL. */
  persistent?: boolean;
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
async function spawnRedis(port: number, dir: string, persistent: boolean): Promise<ChildProcess> {
  const args = [
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
      child = await spawnRedis(port, dir, persistent);
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
          child = await spawnRedis(port, dir, persistent);
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
