// WebSocket fan-out scenario (issue 14): N clients subscribed to `newHeads` on one upstream
// subscription; anvil mines a burst of blocks and every client receives every head. Reports
// events delivered per second (all clients together) and the gateway's CPU per delivered event
// (from /proc, the gateway being its own `node dist/cli.js serve` process with the SQLite store
// and metering on: every event is charged through the ledger).
//
// With --bursts N the blocks come in N bursts of --blocks (`anvil_mine`), each once every reading
// client has the previous one; --non-readers M of the clients stop reading once subscribed (they
// are closed with 1013 when their queue passes its bound). The gateway's RSS is sampled every
// 50 ms: before the first burst and the peak are reported (the growth is what docs/websocket.md
// bounds).
//
// Standalone:  npm run build && node --import tsx bench/ws-fanout.ts [--subscribers 1000] [--blocks 50]
//              [--bursts 5 --non-readers 50 --max-buffered-bytes 1048576]
// From bench/run.ts: `npm run bench -- --only "newHeads fan-out"` runs this scenario alone.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { startAnvil } from '../src/devnet/anvil.js';
import { WebSocket } from '../src/websocket/ws-library.js';
import { startWsProxy } from '../test/helpers/ws-proxy.js';
import { cpuSeconds, rssBytes } from './proc-stats.js';
import { ROOT, freePort, gatewayCommand, runCli } from './local-processes.js';

export const WS_FANOUT_SCENARIO = 'newHeads fan-out over WebSocket';

export interface WsFanoutOptions {
  subscribers: number;
  /** Blocks per burst. */
  blocks: number;
  /** Bursts of `blocks` (default 1). */
  bursts?: number;
  /** Clients that stop reading once subscribed (default 0). */
  nonReaders?: number;
  /** `server.websocket.maxBufferedBytes` of the gateway (default: the gateway's). */
  maxBufferedBytes?: number;
}

export interface WsFanoutResult {
  subscribers: number;
  blocks: number;
  /** Events received by all clients together. */
  delivered: number;
  /** Upstream eth_subscribe calls the gateway made (1 = one shared subscription). */
  upstreamSubscriptions: number;
  seconds: number;
  eventsPerSecond: number;
  /** Gateway CPU (user + system) per delivered event, in microseconds. */
  cpuUsPerEvent: number | undefined;
  gatewayRssBytes: number | undefined;
  bursts: number;
  nonReaders: number;
  /** The gateway's RSS right before the first burst, and the highest sampled until the last burst was read. */
  rssBeforeBytes: number | undefined;
  rssPeakBytes: number | undefined;
  /** Clients the gateway closed (1013 for not reading), readers and non-readers. */
  closedReaders: number;
  closedNonReaders: number;
}

async function rpc(url: string, method: string, params: unknown[]): Promise<unknown> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) });
  return ((await response.json()) as { result?: unknown }).result;
}

export async function runWsFanout(options: WsFanoutOptions): Promise<WsFanoutResult> {
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-ws-bench-'));
  const anvil = await startAnvil();
  let gateway: ChildProcess | undefined;
  const sockets: WebSocket[] = [];
  // Between the gateway and anvil, to count the gateway's eth_subscribe calls.
  const proxy = await startWsProxy(anvil.url.replace(/^http/, 'ws'));
  try {
    const dbFile = join(workDir, 'tollgate.db');
    runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
    const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;
    const port = await freePort();
    const configFile = join(workDir, 'gateway.yaml');
    writeFileSync(
      configFile,
      toYaml({
        server: {
          host: '127.0.0.1',
          port,
          websocket: {
            maxConnectionsPerKey: options.subscribers + 10,
            maxConnections: options.subscribers + 10,
            ...(options.maxBufferedBytes === undefined ? {} : { maxBufferedBytes: options.maxBufferedBytes }),
          },
        },
        admin: { host: '127.0.0.1', port: 0 },
        store: { driver: 'sqlite', path: dbFile },
        networks: [{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: proxy.url }] }],
      }),
    );
    const logFd = openSync(join(workDir, 'gateway.log'), 'a');
    const command = gatewayCommand(configFile, { logLevel: 'warn' });
    gateway = spawn(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', logFd, logFd], env: command.env });
    closeSync(logFd);
    const origin = `127.0.0.1:${port}`;
    for (let tries = 0; ; tries += 1) {
      try {
        if ((await rpc(`http://${origin}/eth/v3/${secret}`, 'eth_chainId', [])) === '0x7a69') break;
      } catch {
        // not listening yet
      }
      if (tries > 200) throw new Error('the gateway did not start');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }

    // Subscribers: each counts the heads it receives (without parsing them: the bench process
    // shares the machine with the gateway and should cost as little as possible).
    const bursts = options.bursts ?? 1;
    const nonReaders = options.nonReaders ?? 0;
    let received = 0;
    let lastAt = 0;
    /** Heads received per reading client (a client the gateway closed stops counting). */
    const readerCounts: number[] = [];
    const closed = { readers: 0, nonReaders: 0 };
    const url = `ws://${origin}/eth/ws/v3/${secret}`;
    for (let opened = 0; opened < options.subscribers; opened += 100) {
      await Promise.all(
        Array.from({ length: Math.min(100, options.subscribers - opened) }, (_, offset) =>
          new Promise<void>((resolve, reject) => {
            const index = opened + offset;
            const reads = index >= nonReaders;
            const socket = new WebSocket(url, { perMessageDeflate: false });
            sockets.push(socket);
            if (reads) readerCounts.push(0);
            const slot = readerCounts.length - 1;
            socket.once('error', reject);
            socket.on('close', () => {
              if (reads) closed.readers += 1;
              else closed.nonReaders += 1;
              if (reads) readerCounts[slot] = Number.POSITIVE_INFINITY;
            });
            socket.on('message', (data: Buffer) => {
              if (data.length > 100 && data.includes('"eth_subscription"')) {
                received += 1;
                lastAt = performance.now();
                if (reads) readerCounts[slot]! += 1;
              } else {
                // Subscribed: a non-reader stops reading here (its socket's TCP window fills).
                if (!reads) (socket as unknown as { _socket: { pause(): void } })._socket.pause();
                resolve();
              }
            });
            socket.once('open', () => socket.send('{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}'));
          }),
        ),
      );
    }

    const cpuBefore = cpuSeconds(gateway.pid);
    const rssBefore = rssBytes(gateway.pid);
    let rssPeak = rssBefore;
    const sampler = setInterval(() => {
      const now = rssBytes(gateway?.pid);
      if (now !== undefined) rssPeak = Math.max(rssPeak ?? 0, now);
    }, 50);
    const started = performance.now();
    const deadline = Date.now() + 120_000 * bursts;
    try {
      for (let burst = 1; burst <= bursts; burst += 1) {
        await rpc(anvil.url, 'anvil_mine', [`0x${options.blocks.toString(16)}`]);
        const wanted = burst * options.blocks;
        // The next burst once every reader still open has this one.
        while (readerCounts.some((count) => count < wanted) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      clearInterval(sampler);
    }
    const cpuAfter = cpuSeconds(gateway.pid);
    const seconds = (lastAt - started) / 1000;
    return {
      subscribers: options.subscribers,
      blocks: options.blocks,
      delivered: received,
      upstreamSubscriptions: proxy.subscribeCalls.length,
      seconds,
      eventsPerSecond: received / seconds,
      cpuUsPerEvent: cpuBefore === undefined || cpuAfter === undefined ? undefined : ((cpuAfter - cpuBefore) / received) * 1e6,
      gatewayRssBytes: rssBytes(gateway.pid),
      bursts,
      nonReaders,
      rssBeforeBytes: rssBefore,
      rssPeakBytes: rssPeak,
      closedReaders: closed.readers,
      closedNonReaders: closed.nonReaders,
    };
  } finally {
    for (const socket of sockets) socket.terminate();
    gateway?.kill('SIGTERM');
    await proxy.kill();
    await anvil.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export function formatWsFanout(result: WsFanoutResult): string {
  const cpu = result.cpuUsPerEvent === undefined ? '?' : result.cpuUsPerEvent.toFixed(1);
  const rss = result.gatewayRssBytes === undefined ? '?' : (result.gatewayRssBytes / 1024 / 1024).toFixed(0);
  const mib = (bytes: number | undefined) => (bytes === undefined ? '?' : (bytes / 1024 / 1024).toFixed(0));
  const bursts =
    result.bursts > 1 || result.nonReaders > 0
      ? `; ${result.bursts} bursts, ${result.nonReaders} non-readers (${result.closedNonReaders} closed), ${result.closedReaders} readers closed; ` +
        `gateway RSS ${mib(result.rssBeforeBytes)} MiB before the bursts, peak ${mib(result.rssPeakBytes)} MiB (growth ${mib((result.rssPeakBytes ?? 0) - (result.rssBeforeBytes ?? 0))} MiB)`
      : '';
  return (
    `${WS_FANOUT_SCENARIO}: ${result.subscribers} subscribers × ${result.blocks} blocks, ${result.upstreamSubscriptions} upstream eth_subscribe; ` +
    `${result.delivered} events in ${result.seconds.toFixed(2)} s = ${Math.round(result.eventsPerSecond)} events/s; ` +
    `gateway CPU ${cpu} µs per delivered event (each charged through the ledger); gateway RSS ${rss} MiB${bursts}`
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({
    options: {
      subscribers: { type: 'string', default: '1000' },
      blocks: { type: 'string', default: '50' },
      bursts: { type: 'string', default: '1' },
      'non-readers': { type: 'string', default: '0' },
      'max-buffered-bytes': { type: 'string' },
    },
  });
  runWsFanout({
    subscribers: Number(values.subscribers),
    blocks: Number(values.blocks),
    bursts: Number(values.bursts),
    nonReaders: Number(values['non-readers']),
    maxBufferedBytes: values['max-buffered-bytes'] === undefined ? undefined : Number(values['max-buffered-bytes']),
  }).then(
    (result) => console.log(formatWsFanout(result)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
