// Charged only for an answer written to a live connection. Clients send eth_getBlockByHash to a
// gateway in front of a real anvil and reset their connection 0, 1 or 2 ms later, hundreds of
// times. Whether each answer was written before the reset is read from the client's own socket
// at the moment it resets: bytes already read, or waiting in its kernel receive queue
// (/proc/net/tcp). The gateway runs in this process, so nothing of it runs between that look and
// the reset: an answer is either fully in the queue (written first) or its write meets the reset.
// Every try must then be logged 200 and charged (written) or logged 499 and not charged.

import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { postRequest, rawExchange } from './helpers/raw-http.js';
import { until } from './helpers/until.js';

const BLOCK_COST = 80;
const TRIES_PER_DELAY = 70;
const RESET_DELAYS_MS = [0, 1, 2];

const anvil = useSeededAnvil({}, { blocks: 4, txPerBlock: 1 });

const today = (): string => new Date().toISOString().slice(0, 10);
const hex = (port: number): string => port.toString(16).toUpperCase().padStart(4, '0');

/**
 * Bytes in the kernel receive queue of the loopback connection `local` → `remote` (IPv4), from
 * /proc/net/tcp (`tx_queue:rx_queue` in hex); 0 when the connection is not listed.
 */
function receiveQueue(local: number, remote: number): number {
  const wanted = `0100007F:${hex(local)} 0100007F:${hex(remote)}`;
  for (const line of readFileSync('/proc/net/tcp', 'latin1').split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (`${fields[1]} ${fields[2]}` === wanted) return Number.parseInt(fields[4]!.split(':')[1]!, 16);
  }
  return 0;
}

interface Try {
  id: string;
  /** The answer had reached the client (read, or queued in its kernel) when it reset. */
  written: boolean;
}

async function resetAfter(tg: TestGateway, path: string, body: string, id: string, delayMs: number): Promise<Try> {
  let written = false;
  const reset = (socket: Socket): void => {
    written = socket.bytesRead > 0 || receiveQueue(socket.localPort!, tg.gateway.rpcPort) > 0;
    socket.resetAndDestroy();
  };
  // The timed reset is the scenario under test (not a wait for something).
  await rawExchange(tg.gateway.rpcPort, [postRequest(path, body, [`X-Request-Id: ${id}`])], { afterSend: (socket) => setTimeout(() => reset(socket), delayMs) });
  return { id, written };
}

async function settledUsage(tg: TestGateway): Promise<{ credits: number; requests: number; teamUsed: number }> {
  const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: today(), toDay: today() });
  const [peek] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: today() }]);
  return { credits: rows.reduce((sum, row) => sum + row.credits, 0), requests: rows.reduce((sum, row) => sum + row.requests, 0), teamUsed: peek!.teamUsed };
}

describe.each([
  ['forwarded to anvil (settled after the upstream answered)', 0],
  ['served from the block cache (charged at once)', 64 * 1024 * 1024],
])('a client that resets 0, 1 or 2 ms after sending: %s', (_name, cacheBytes) => {
  let tg: TestGateway;
  beforeAll(async () => {
    tg = await startTestGateway({
      networks: [{ id: 'eth', kind: 'evm', chainId: 31337, upstreams: [{ id: 'anvil', url: anvil.node.url }] }],
      config: { cache: { maxBytes: cacheBytes } },
    });
  });
  afterAll(async () => {
    await tg?.close();
  });

  it(`is charged and logged 200 exactly when its answer was written, else logged 499 and not charged (${RESET_DELAYS_MS.length * TRIES_PER_DELAY} tries)`, async () => {
    const path = new URL(tg.url('eth')).pathname;
    const hashes = anvil.seed.blockHashes;
    const before = await settledUsage(tg);
    const tries: Try[] = [];
    for (const delayMs of RESET_DELAYS_MS) {
      for (let index = 0; index < TRIES_PER_DELAY; index += 1) {
        const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hashes[index % hashes.length], index % 2 === 0] });
        tries.push(await resetAfter(tg, path, body, `reset-${cacheBytes}-${delayMs}-${index}`, delayMs));
      }
    }

    const statusOf = (id: string): unknown[] =>
      tg.logLines.map((line) => JSON.parse(line) as { msg: string; requestId?: string; status?: number }).filter((line) => line.msg === 'request' && line.requestId === id).map((line) => line.status);
    await until(() => tries.every((attempt) => statusOf(attempt.id).length > 0), 'a log line for every try');
    const mismatches = tries
      .map((attempt) => ({ ...attempt, logged: statusOf(attempt.id) }))
      .filter((attempt) => attempt.logged.length !== 1 || attempt.logged[0] !== (attempt.written ? 200 : 499));
    expect(mismatches).toEqual([]);

    const written = tries.filter((attempt) => attempt.written).length;
    const after = await settledUsage(tg);
    expect({ credits: after.credits - before.credits, requests: after.requests - before.requests }).toEqual({ credits: written * BLOCK_COST, requests: written });
    // Nothing stays held either: the day's total is the settled usage.
    expect(after.teamUsed - before.teamUsed).toBe(written * BLOCK_COST);
    // The scenario happened: some resets came before the answer was written.
    expect(tries.length - written).toBeGreaterThan(0);
    console.log(`resets 0-2 ms after sending (cache ${cacheBytes > 0 ? 'on' : 'off'}): ${tries.length} tries, ${written} answers written and charged, ${tries.length - written} not written, logged 499, not charged`);
  }, 120_000);
});
