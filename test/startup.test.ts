// Start-up closes what it opened when a later step fails: the disposer stack alone, the gateway
// in this process (its RPC port is free again), and the real CLI (it exits 1 by itself, with no
// handle left open).

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { startGateway } from '../src/gateway.js';
import { createDisposerStack } from '../src/lifecycle/disposer-stack.js';
import { createLogger } from '../src/logging/logger.js';
import { ensureBuilt } from './helpers/build.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { spawnCli } from './helpers/spawn-gateway.js';

const ADMIN_TOKEN = 'startup-admin-token-0123456789';

/** Listens on `port` (0: any) on loopback; resolves with the server, or rejects with the listen error. */
function hold(port = 0): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: Server): number => (server.address() as { port: number }).port;
const release = (server: Server): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

/** A port nothing listens on right now. */
async function freePort(): Promise<number> {
  const server = await hold();
  const port = portOf(server);
  await release(server);
  return port;
}

let upstream: ScriptedUpstream;
let dir: string;
beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-startup-'));
});
afterAll(async () => {
  await upstream?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

function configWith(ports: { rpc: number; admin: number; portal?: number }, db: string): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: ports.rpc },
    admin: { host: '127.0.0.1', port: ports.admin, token: ADMIN_TOKEN },
    ...(ports.portal === undefined ? {} : { portal: { enabled: true, host: '127.0.0.1', port: ports.portal } }),
    store: { driver: 'sqlite', path: join(dir, db) },
    // Health probes on: their timers and the upstream pools must be closed too.
    networks: [{ id: 'evm', kind: 'evm', chainId: 1, baseUrls: ['*/evm'], upstreams: [{ id: 'u', url: upstream.url }], healthCheck: { intervalMs: 1_000 } }],
  };
}

describe('disposer stack', () => {
  it('undoes the registered steps last first, each once, and goes on past a failing one', async () => {
    const undone: string[] = [];
    const failures: string[] = [];
    const stack = createDisposerStack((name, error) => failures.push(`${name}: ${(error as Error).message}`));
    stack.defer('store', () => void undone.push('store'));
    stack.defer('pools', async () => {
      await Promise.resolve();
      undone.push('pools');
    });
    stack.defer('broken', () => {
      throw new Error('boom');
    });
    stack.defer('listener', () => void undone.push('listener'));
    await Promise.all([stack.disposeAll(), stack.disposeAll()]);
    await stack.disposeAll();
    expect(undone).toEqual(['listener', 'pools', 'store']);
    expect(failures).toEqual(['broken: boom']);
    expect(() => stack.defer('late', () => undefined)).toThrow(/already closing/);
  });
});

describe('a start that fails closes what it opened', () => {
  it.each([
    ['the admin port', 'admin'],
    ['the portal port', 'portal'],
  ] as const)('%s taken: startGateway rejects and the RPC and admin ports are free again', async (_, taken) => {
    const blocker = await hold();
    const ports = { rpc: await freePort(), admin: taken === 'admin' ? portOf(blocker) : await freePort(), portal: taken === 'portal' ? portOf(blocker) : undefined };
    const config = parseConfig(configWith(ports, `in-process-${taken}.db`), process.env, 'test config');
    try {
      await expect(startGateway(config, { logger: createLogger({ level: 'silent' }) })).rejects.toThrow(/EADDRINUSE/);
      // Bound again in this very process: the gateway's listeners are closed, not merely abandoned.
      await release(await hold(ports.rpc));
      if (taken === 'portal') await release(await hold(ports.admin));
    } finally {
      await release(blocker);
    }
  });

  it('the CLI with its admin port taken exits 1 by itself, naming the port, with no handle left open', async () => {
    await ensureBuilt();
    const blocker = await hold();
    try {
      const rpcPort = await freePort();
      const configFile = join(dir, 'admin-taken.yaml');
      writeFileSync(configFile, JSON.stringify(configWith({ rpc: rpcPort, admin: portOf(blocker) }, 'cli.db'))); // JSON is YAML
      const cli = spawnCli(['serve', '--config', configFile]);
      const { code, signal } = await cli.exited;
      expect({ code, signal }, cli.output()).toEqual({ code: 1, signal: null });
      expect(cli.stderr()).toContain('EADDRINUSE');
      expect(cli.stderr()).toContain(String(portOf(blocker)));
      // The CLI names whatever a failed start left open before it forces the exit; nothing was.
      expect(cli.stderr()).not.toContain('still open after the failure');
      expect(cli.lines.some((line) => line.msg === 'gateway listening')).toBe(false);
      await release(await hold(rpcPort));
    } finally {
      await release(blocker);
    }
  });
});
