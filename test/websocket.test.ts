// The WebSocket endpoint (docs/websocket.md) against a real anvil, through real
// sockets: viem's webSocket() transport and ethers' WebSocketProvider, requests over the socket
// on the HTTP request path, refused upgrades, and subscriptions (shared, metered, bounded).

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createPublicClient, createWalletClient, http, keccak256, parseAbiItem, stringToBytes, webSocket, type Hash } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { foundry } from 'viem/chains';
import { WebSocketProvider } from 'ethers';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { issueKey } from '../src/admin/key-issuer.js';
import { directRpc } from './helpers/anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startWsProxy, type WsProxy } from './helpers/ws-proxy.js';
import { until } from './helpers/until.js';

// anvil's first dev account (public test key of every anvil).
const DEV_KEY = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80';
// A contract that emits `event Ping()` on every call, written by hand:
//   runtime (39 bytes): PUSH32 keccak256("Ping()") PUSH1 0 PUSH1 0 LOG1 STOP
//                       7f <32-byte topic> 6000 6000 a1 00
//   init    (12 bytes): PUSH1 39 PUSH1 12 PUSH1 0 CODECOPY PUSH1 39 PUSH1 0 RETURN
//                       6027 600c 6000 39 6027 6000 f3      (copies the runtime after it and returns it)
const PING_EVENT = parseAbiItem('event Ping()');

/** Methods the tests call through the gateway (the catalogue prices them; listed for networks without one). */
const METHODS = {
  eth_blockNumber: 80,
  eth_getBlockByNumber: 80,
  eth_getLogs: 255,
  eth_getTransactionCount: 80,
  eth_getTransactionReceipt: 80,
  eth_sendRawTransaction: 80,
  eth_gasPrice: 80,
  eth_maxPriorityFeePerGas: 80,
  eth_feeHistory: 80,
  eth_estimateGas: 300,
  eth_getCode: 80,
  eth_call: 80,
};

interface Client {
  ws: WebSocket;
  messages: any[];
  closed: Promise<{ code: number; reason: string }>;
  /** Waits for the first message (from `from` on) matching `predicate`. */
  next(predicate: (message: any) => boolean, timeoutMs?: number): Promise<any>;
  call(method: string, params?: unknown[]): Promise<any>;
}

let ids = 1000;
function openClient(url: string): Promise<Client> {
  return openClientWith(url, {});
}

function openClientWith(url: string, options: { origin?: string; headers?: Record<string, string> }): Promise<Client> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false, ...options });
    const messages: any[] = [];
    const waiters = new Set<() => void>();
    ws.on('message', (data: Buffer) => {
      messages.push(JSON.parse(data.toString('utf8')));
      for (const waiter of [...waiters]) waiter();
    });
    const closed = new Promise<{ code: number; reason: string }>((done) => ws.on('close', (code, reason) => done({ code, reason: reason.toString() })));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    ws.once('open', () => {
      const client: Client = {
        ws,
        messages,
        closed,
        next(predicate, timeoutMs = 10_000) {
          return new Promise((found, fail) => {
            const check = () => {
              const hit = messages.find(predicate);
              if (hit === undefined) return;
              waiters.delete(check);
              clearTimeout(timer);
              found(hit);
            };
            const timer = setTimeout(() => {
              waiters.delete(check);
              fail(new Error(`no matching message in ${timeoutMs} ms; got ${JSON.stringify(messages).slice(0, 500)}`));
            }, timeoutMs);
            waiters.add(check);
            check();
          });
        },
        async call(method, params = []) {
          const id = ids++;
          ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
          return client.next((message) => message.id === id);
        },
      };
      resolve(client);
    });
  });
}

/** The status and JSON body of a refused upgrade. */
function refusedUpgrade(url: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => {
      ws.close();
      reject(new Error('upgrade accepted'));
    });
    ws.once('error', () => undefined);
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
  });
}

const wsUrl = (gateway: TestGateway, network: string, key = gateway.apiKey) => gateway.url(network, key).replace('http://', 'ws://').replace(`/${network}/v3/`, `/${network}/ws/v3/`);

async function mine(node: AnvilNode, blocks = 1): Promise<void> {
  for (let index = 0; index < blocks; index += 1) await directRpc(node.url, 'evm_mine', []);
}


/** `eth_subscribe` calls answered so far (their request log line is written once the answer is). */
function subscriptionsConfirmed(gateway: TestGateway): number {
  return gateway.logLines.filter((line) => line.includes('"msg":"request"') && line.includes('"eth_subscribe"') && line.includes('"transport":"ws"')).length;
}

/**
 * Mines one more, empty block once `ready` holds and waits for its head at the client: events
 * are delivered in order, so anything still due for earlier blocks (a late duplicate) would have
 * arrived before it. Returns the last block before the sentinel.
 */
async function sentinelBlock(client: Client, headsId: string, ready?: () => boolean): Promise<number> {
  if (ready !== undefined) await until(ready, 'every event before the sentinel', 15_000);
  const last = Number(await directRpc(anvil.url, 'eth_blockNumber', []));
  await until(() => client.messages.some((message) => message.params?.subscription === headsId && Number(message.params.result.number) === last), `head ${last}`, 15_000);
  await mine(anvil, 1);
  await until(() => client.messages.some((message) => message.params?.subscription === headsId && Number(message.params.result.number) === last + 1), 'the sentinel head', 15_000);
  return last;
}

let anvil: AnvilNode;
beforeAll(async () => {
  anvil = await startAnvil();
}, 30_000);
afterAll(async () => {
  await anvil?.stop();
});

async function deployPing(node: AnvilNode): Promise<`0x${string}`> {
  const account = privateKeyToAccount(DEV_KEY);
  const wallet = createWalletClient({ account, chain: foundry, transport: http(node.url) });
  const topic = keccakPing().slice(2);
  const runtime = `7f${topic}60006000a100`;
  const init = `0x6027600c60003960276000f3${runtime}` as const;
  // viem signs locally and sends eth_sendRawTransaction: a raw signed transaction.
  const hash = await wallet.sendTransaction({ data: init as `0x${string}` });
  const receipt = await createPublicClient({ chain: foundry, transport: http(node.url) }).waitForTransactionReceipt({ hash, pollingInterval: 50 });
  return receipt.contractAddress!;
}

async function ping(node: AnvilNode, address: `0x${string}`): Promise<Hash> {
  const account = privateKeyToAccount(DEV_KEY);
  const wallet = createWalletClient({ account, chain: foundry, transport: http(node.url) });
  const hash = await wallet.sendTransaction({ to: address, gas: 30_000n });
  await createPublicClient({ chain: foundry, transport: http(node.url) }).waitForTransactionReceipt({ hash, pollingInterval: 50 });
  return hash;
}

describe('WebSocket endpoint: requests and clients', () => {
  let gateway: TestGateway;
  let proxy: WsProxy;
  beforeAll(async () => {
    proxy = await startWsProxy(anvil.url.replace('http://', 'ws://'));
    gateway = await startTestGateway({
      networks: [{ id: 'eth', kind: 'evm', chainId: anvil.chainId, methods: METHODS, upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: proxy.url }] }],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await proxy?.kill();
  });

  it('answers requests and batches over the socket as over HTTP, ids echoed', async () => {
    const client = await openClient(wsUrl(gateway, 'eth'));
    const answer = await client.call('eth_blockNumber');
    expect(answer.result).toBe(await directRpc(anvil.url, 'eth_blockNumber', []));
    client.ws.send(JSON.stringify([
      { jsonrpc: '2.0', id: 'a', method: 'eth_chainId' },
      { jsonrpc: '2.0', method: 'eth_chainId' },
      { jsonrpc: '2.0', id: 7, method: 'no_such_method' },
      { jsonrpc: '2.0', id: 8, method: 'eth_subscribe', params: ['newHeads'] },
    ]));
    const batch = await client.next((message) => Array.isArray(message));
    expect(batch.map((reply: any) => reply.id)).toEqual(['a', 7, 8]);
    expect(batch[0].result).toBe(`0x${anvil.chainId.toString(16)}`);
    expect(batch[1].error.code).toBe(-32601);
    expect(batch[2].result).toMatch(/^0x[0-9a-f]{32}$/);
    client.ws.send('{"jsonrpc":"2.0","id":1,');
    expect((await client.next((message) => message.error?.code === -32700)).id).toBeNull();
    expect((await client.call('eth_subscribe', ['nope'])).error.code).toBe(-32602);
    const http = await rpc(gateway.url('eth'), { jsonrpc: '2.0', id: 1, method: 'eth_subscribe', params: ['newHeads'] });
    expect(http.body.error.code).toBe(-32601);
    client.ws.close();
  });

  it('hands an Upgrade to anything but WebSocket (h2c) back to HTTP, answered as a plain request', async () => {
    const { port } = new URL(gateway.gateway.rpcOrigin);
    const body = JSON.stringify({ jsonrpc: '2.0', id: 'h2c', method: 'eth_chainId', params: [] });
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1');
      let text = '';
      socket.on('data', (chunk) => {
        text += chunk.toString('utf8');
        if (text.includes('"h2c"')) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('error', reject);
      socket.write(
        `POST /eth/v3/${gateway.apiKey} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
    });
    expect(answer.startsWith('HTTP/1.1 200')).toBe(true);
    expect(answer).toContain(`{"jsonrpc":"2.0","id":"h2c","result":"0x${anvil.chainId.toString(16)}"}`);
  });

  it('answers 1,000 messages sent at once (reading pauses past 256 in progress and resumes)', async () => {
    const client = await openClient(wsUrl(gateway, 'eth'));
    for (let id = 0; id < 1_000; id += 1) client.ws.send(JSON.stringify({ jsonrpc: '2.0', id: `m${id}`, method: 'eth_blockNumber', params: [] }));
    await until(() => client.messages.length >= 1_000, 'every answer', 20_000);
    expect(new Set(client.messages.map((message) => message.id)).size).toBe(1_000);
    expect(client.messages.every((message) => typeof message.result === 'string')).toBe(true);
    client.ws.close();
  }, 30_000);

  it('serves newPendingTransactions: the hash of a transaction sent to the node', async () => {
    const client = await openClient(wsUrl(gateway, 'eth'));
    const id = (await client.call('eth_subscribe', ['newPendingTransactions'])).result as string;
    // Confirmed only once the upstream subscription exists: a transaction sent now is seen.
    expect(proxy.subscribeCalls).toContain('newPendingTransactions');
    const account = privateKeyToAccount(DEV_KEY);
    const wallet = createWalletClient({ account, chain: foundry, transport: http(anvil.url) });
    const hash = await wallet.sendTransaction({ to: account.address, value: 1n });
    const event = await client.next((message) => message.params?.subscription === id);
    expect(event.params.result).toBe(hash);
    expect((await client.call('eth_unsubscribe', [id])).result).toBe(true);
    expect((await client.call('eth_unsubscribe', [id])).result).toBe(false);
    client.ws.close();
  });

  it('refuses an upgrade with the HTTP status and JSON-RPC body of the HTTP path', async () => {
    const invalid = await refusedUpgrade(wsUrl(gateway, 'eth', 'not-a-key'));
    expect(invalid.status).toBe(401);
    expect(invalid.body.error.code).toBe(-32016);
    const notFound = await refusedUpgrade(wsUrl(gateway, 'nowhere'));
    expect(notFound.status).toBe(404);
    expect(notFound.body.error.code).toBe(-32600);
    const noKey = await refusedUpgrade(`${gateway.gateway.rpcOrigin.replace('http', 'ws')}/eth/ws/v3`);
    expect(noKey.status).toBe(401);
    const { secret } = await issueKey(gateway.store, { teamId: gateway.team.id, allowedNetworks: ['elsewhere'] });
    const forbidden = await refusedUpgrade(wsUrl(gateway, 'eth', secret));
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe(-32002);
    // The secret never reaches a log line.
    expect(gateway.logLines.filter((line) => line.includes(gateway.apiKey) || line.includes(secret))).toEqual([]);
  });

  it('checks the key settings at the upgrade (origin, user agent, secret) and the method and address rules per message', async () => {
    const settings = {
      allowedOrigins: ['https://app.example.com'],
      allowedUserAgents: [],
      allowedIps: [],
      allowedMethods: ['eth_blockNumber', 'eth_subscribe', 'eth_unsubscribe'],
      allowedAddresses: ['0x00000000000000000000000000000000000000aa'],
      requireSecret: false,
      requireJwt: false,
      jwtKeys: [],
      jwtAudience: null,
    };
    const { secret } = await issueKey(gateway.store, { teamId: gateway.team.id, settings });
    const url = wsUrl(gateway, 'eth', secret);
    const withOrigin = (origin?: string) =>
      new Promise<{ status: number; body: any } | 'open'>((resolve) => {
        const ws = new WebSocket(url, origin === undefined ? {} : { origin });
        ws.once('open', () => {
          ws.close();
          resolve('open');
        });
        ws.once('error', () => undefined);
        ws.once('unexpected-response', (_req, res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        });
      });
    expect(await withOrigin('https://evil.example.org')).toMatchObject({ status: 403, body: { error: { code: -32002, data: { rule: 'origin' } } } });
    expect(await withOrigin(undefined)).toMatchObject({ status: 403, body: { error: { data: { rule: 'origin' } } } });
    expect(await withOrigin('https://app.example.com')).toBe('open');

    const client = await openClientWith(url, { origin: 'https://app.example.com' });
    expect((await client.call('eth_blockNumber')).result).toMatch(/^0x/);
    expect((await client.call('eth_chainId')).error).toMatchObject({ code: -32002, data: { rule: 'method' } });
    expect((await client.call('eth_subscribe', ['newHeads'])).result).toMatch(/^0x/);
    expect((await client.call('eth_subscribe', ['logs', { address: '0x00000000000000000000000000000000000000bb' }])).error).toMatchObject({ code: -32002, data: { rule: 'address' } });
    expect((await client.call('eth_subscribe', ['logs', { address: '0x00000000000000000000000000000000000000AA' }])).result).toMatch(/^0x/);
    client.ws.close();

    // A key that requires its key secret, made through the admin API (which issues that secret once).
    const created = await fetch(`${gateway.gateway.adminOrigin}/v1/teams/${gateway.team.id}/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ settings: { requireSecret: true } }),
    }).then(async (response) => (await response.json()) as { secret: string; keySecret: string });
    const noSecret = await refusedUpgrade(wsUrl(gateway, 'eth', created.secret));
    expect(noSecret.status).toBe(401);
    expect(noSecret.body.error).toMatchObject({ code: -32016, message: 'invalid API key secret' });
    // The key secret as HTTP Basic credentials (empty user) on the upgrade, as over HTTP.
    const basic = await openClientWith(wsUrl(gateway, 'eth', created.secret), { headers: { authorization: `Basic ${Buffer.from(`:${created.keySecret}`).toString('base64')}` } });
    expect((await basic.call('eth_blockNumber')).result).toMatch(/^0x/);
    basic.ws.close();
  });

  it('viem webSocket(): getBlockNumber, watchBlocks and watchContractEvent see what anvil has', async () => {
    const client = createPublicClient({ chain: foundry, transport: webSocket(wsUrl(gateway, 'eth')) });
    expect(await client.getBlockNumber()).toBe(BigInt(await directRpc(anvil.url, 'eth_blockNumber', []) as string));
    const address = await deployPing(anvil);
    const blocks: Array<{ number: bigint; hash: string }> = [];
    const logs: Array<{ blockHash: string; logIndex: number; transactionHash: string }> = [];
    const confirmedBefore = subscriptionsConfirmed(gateway);
    const stopBlocks = client.watchBlocks({ onBlock: (block) => blocks.push({ number: block.number!, hash: block.hash! }) });
    const stopLogs = client.watchContractEvent({ address, abi: [PING_EVENT], eventName: 'Ping', onLogs: (found) => logs.push(...(found as any[])) });
    // Both eth_subscribe answered (the request log line follows the answer): events are assured from now on.
    await until(() => subscriptionsConfirmed(gateway) >= confirmedBefore + 2, 'both subscriptions confirmed', 10_000);
    const sent: string[] = [];
    for (let index = 0; index < 4; index += 1) sent.push(await ping(anvil, address));
    await until(() => logs.length >= 4 && blocks.length >= 4, 'four blocks and four logs', 10_000);
    stopBlocks();
    stopLogs();
    for (const block of blocks) {
      const canonical = (await directRpc(anvil.url, 'eth_getBlockByNumber', [`0x${block.number.toString(16)}`, false])) as { hash: string };
      expect(block.hash).toBe(canonical.hash);
    }
    expect(logs.map((log) => log.transactionHash)).toEqual(sent);
    const anvilLogs = (await directRpc(anvil.url, 'eth_getLogs', [{ address, fromBlock: '0x0', toBlock: 'latest' }])) as any[];
    expect(logs.map((log) => `${log.blockHash}:${log.logIndex}`)).toEqual(anvilLogs.map((log) => `${log.blockHash}:${Number(log.logIndex)}`));
    await (client.transport as any).getRpcClient?.().then((rpcClient: any) => rpcClient.close());
  });

  it('ethers WebSocketProvider: getBlockNumber and block events', async () => {
    const provider = new WebSocketProvider(wsUrl(gateway, 'eth'));
    try {
      expect(await provider.getBlockNumber()).toBe(Number(await directRpc(anvil.url, 'eth_blockNumber', [])));
      const seen: number[] = [];
      const confirmedBefore = subscriptionsConfirmed(gateway);
      await provider.on('block', (number: number) => seen.push(number));
      await until(() => subscriptionsConfirmed(gateway) > confirmedBefore, 'the subscription confirmed', 10_000);
      const first = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
      await mine(anvil, 3);
      await until(() => seen.includes(first + 2), 'three blocks', 10_000);
      expect(seen.filter((number) => number >= first)).toEqual([first, first + 1, first + 2]);
    } finally {
      await provider.destroy();
    }
  });
});

describe('WebSocket subscriptions: failover, sharing, metering, bounds', () => {
  let gateway: TestGateway;
  const proxies: Record<string, WsProxy> = {};
  beforeAll(async () => {
    const target = anvil.url.replace('http://', 'ws://');
    for (const name of ['a', 'b', 'shared', 'metered', 'c', 'd']) proxies[name] = await startWsProxy(target);
    const network = (id: string, upstreams: Array<{ id: string; wsUrl: string }>) => ({
      id,
      kind: 'evm',
      chainId: anvil.chainId,
      methods: METHODS,
      upstreams: upstreams.map((upstream) => ({ ...upstream, url: anvil.url })),
      subscriptions: { reconnectDelayMs: 200 },
    });
    gateway = await startTestGateway({
      config: { server: { host: '127.0.0.1', port: 0, websocket: { maxConnectionsPerKey: 500, maxBufferedBytes: 256 * 1024 } } },
      networks: [
        network('twin', [{ id: 'a', wsUrl: proxies.a!.url }, { id: 'b', wsUrl: proxies.b!.url }]),
        network('shared', [{ id: 'shared', wsUrl: proxies.shared!.url }]),
        network('metered', [{ id: 'metered', wsUrl: proxies.metered!.url }]),
        network('late', [{ id: 'c', wsUrl: proxies.c!.url }, { id: 'd', wsUrl: proxies.d!.url }]),
      ],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    for (const proxy of Object.values(proxies)) await proxy.kill().catch(() => undefined);
  });

  it('moves to the other upstream when the one carrying the stream dies: every block and log exactly once, in order', async () => {
    const address = await deployPing(anvil);
    const client = await openClient(wsUrl(gateway, 'twin'));
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result as string;
    const logs = (await client.call('eth_subscribe', ['logs', { address }])).result as string;
    await until(() => proxies.a!.subscribeCalls.includes('logs') || proxies.b!.subscribeCalls.includes('logs'), 'upstream subscriptions', 10_000);
    const carrying = proxies.a!.subscribeCalls.includes('logs') ? proxies.a! : proxies.b!;
    const standby = carrying === proxies.a ? proxies.b! : proxies.a!;
    const startBlock = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    const events = (id: string) => client.messages.filter((message) => message.method === 'eth_subscription' && message.params.subscription === id).map((message) => message.params.result);
    const sent: string[] = [];
    // Five blocks (each with one Ping log) while the stream is carried, each seen by the client;
    // the carrying upstream dies; ten more are mined at once, during the move.
    for (let index = 0; index < 5; index += 1) {
      sent.push(await ping(anvil, address));
      await until(() => events(logs).length === sent.length, `log ${index + 1}`, 10_000);
    }
    await carrying.kill();
    for (let index = 0; index < 10; index += 1) sent.push(await ping(anvil, address));
    const lastBlock = await sentinelBlock(client, heads, () => events(logs).length >= sent.length);
    expect(standby.subscribeCalls).toContain('logs');
    const seenHeads = events(heads).filter((head) => Number(head.number) >= startBlock);
    expect(seenHeads.map((head) => Number(head.number))).toEqual(Array.from({ length: lastBlock - startBlock + 2 }, (_, index) => startBlock + index));
    for (const head of seenHeads) {
      expect(head.hash).toBe(((await directRpc(anvil.url, 'eth_getBlockByNumber', [head.number, false])) as { hash: string }).hash);
    }
    const anvilLogs = (await directRpc(anvil.url, 'eth_getLogs', [{ address, fromBlock: `0x${startBlock.toString(16)}`, toBlock: 'latest' }])) as any[];
    expect(events(logs).map((log) => `${log.blockHash}:${log.logIndex}`)).toEqual(anvilLogs.map((log) => `${log.blockHash}:${log.logIndex}`));
    expect(events(logs).map((log) => log.transactionHash)).toEqual(sent);
    client.ws.close();
  }, 60_000);

  it('a logs subscription made just before a move is back-filled from where it started (no log of an earlier block); the head mined during the move arrives at once', async () => {
    const address = await deployPing(anvil);
    const client = await openClient(wsUrl(gateway, 'late'));
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result as string;
    const events = (id: string) => client.messages.filter((message) => message.method === 'eth_subscription' && message.params.subscription === id).map((message) => message.params.result);
    // Three blocks with a Ping log each, before the logs subscription exists; the gateway has seen their heads.
    const before: string[] = [];
    for (let index = 0; index < 3; index += 1) before.push(await ping(anvil, address));
    const headBefore = Number(await directRpc(anvil.url, 'eth_blockNumber', []));
    await until(() => events(heads).some((head) => Number(head.number) === headBefore), 'the last head before the logs subscription', 10_000);
    const logs = (await client.call('eth_subscribe', ['logs', { address }])).result as string;
    const carrying = proxies.c!.subscribeCalls.includes('logs') ? proxies.c! : proxies.d!;
    const standby = carrying === proxies.c ? proxies.d! : proxies.c!;
    expect(carrying.subscribeCalls).toContain('logs');
    // The carrying upstream dies: the next one back-fills the logs the move may have hidden.
    await carrying.kill();
    const after = await ping(anvil, address);
    await until(() => events(logs).some((log) => log.transactionHash === after), 'the log mined after the move', 10_000);
    expect(standby.subscribeCalls).toContain('logs');
    // The head of that block too, without waiting for another block: the new upstream's latest is
    // caught up to once its subscriptions exist.
    const afterBlock = Number(await directRpc(anvil.url, 'eth_blockNumber', []));
    await until(() => events(heads).some((head) => Number(head.number) === afterBlock), 'the head mined during the move', 10_000);
    // Only what was mined after the subscription: the back-fill's margin reaches back into the
    // three earlier blocks, whose logs this subscription never asked for (nor pays for).
    // A block after that one: once its head is here, every event before it has been delivered
    // (one serial queue per network).
    const sentinel = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    await mine(anvil, 1);
    await until(() => events(heads).some((head) => Number(head.number) === sentinel), 'the sentinel head', 15_000);
    expect(events(logs).map((log) => log.transactionHash)).toEqual([after]);
    client.ws.close();
  }, 60_000);

  it('200 clients subscribed to newHeads share one upstream subscription', async () => {
    const clients = await Promise.all(Array.from({ length: 200 }, () => openClient(wsUrl(gateway, 'shared'))));
    const ids = await Promise.all(clients.map(async (client) => (await client.call('eth_subscribe', ['newHeads'])).result as string));
    expect(new Set(ids).size).toBe(200);
    expect(proxies.shared!.subscribeCalls).toEqual(['newHeads']);
    const first = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    await mine(anvil, 2);
    const heads = (client: Client) => client.messages.filter((message) => message.method === 'eth_subscription' && Number(message.params.result.number) >= first);
    await until(() => clients.every((client) => heads(client).length >= 2), 'two heads at every client', 15_000);
    for (const [index, client] of clients.entries()) {
      expect(heads(client).map((message) => [message.params.subscription, Number(message.params.result.number)])).toEqual([[ids[index], first], [ids[index], first + 1]]);
    }
    expect(proxies.shared!.subscribeCalls).toEqual(['newHeads']);
    expect(proxies.shared!.open()).toBe(1);
    await Promise.all(clients.map((client) => {
      client.ws.close();
      return client.closed;
    }));
    // The last client gone: the upstream socket closes too.
    await until(() => proxies.shared!.open() === 0, 'the upstream socket to close', 10_000);
  }, 60_000);

  async function meteredClient(dailyCredits: number) {
    const team = await gateway.store.createTeam({ name: `metered-${Math.random().toString(36).slice(2)}`, dailyCredits });
    const { secret } = await issueKey(gateway.store, { teamId: team.id });
    const client = await openClient(wsUrl(gateway, 'metered', secret));
    const used = async () => {
      const day = new Date().toISOString().slice(0, 10);
      const [result] = await gateway.store.applyLedger([{ type: 'peek', teamId: team.id, day }] as const);
      return result.teamUsed;
    };
    return { client, used };
  }

  it('charges each delivered event its price: newHeads 50 each, logs 300 per block of the subscription', async () => {
    const address = await deployPing(anvil);
    const { client, used } = await meteredClient(1_000_000);
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result;
    const logs = (await client.call('eth_subscribe', ['logs', { address, topics: [keccakPing()] }])).result;
    expect(proxies.metered!.subscribeCalls).toContain('logs');
    expect(await used()).toBe(10);
    // Block 1: one Ping. Block 2: two Pings (mined together). Then one plain block.
    await ping(anvil, address);
    await directRpc(anvil.url, 'evm_setAutomine', [false]);
    const account = privateKeyToAccount(DEV_KEY);
    const wallet = createWalletClient({ account, chain: foundry, transport: http(anvil.url) });
    await wallet.sendTransaction({ to: address, gas: 30_000n });
    await wallet.sendTransaction({ to: address, gas: 30_000n });
    await mine(anvil, 1);
    await directRpc(anvil.url, 'evm_setAutomine', [true]);
    await mine(anvil, 1);
    const count = (id: string) => client.messages.filter((message) => message.params?.subscription === id).length;
    await until(() => count(heads) >= 3 && count(logs) >= 3, 'three heads and three logs', 10_000);
    // A fourth, empty block: once its head is here, anything more for the first three would be too.
    await mine(anvil, 1);
    await until(() => count(heads) >= 4, 'the fourth head', 10_000);
    expect(count(heads)).toBe(4);
    expect(count(logs)).toBe(3);
    expect(await used()).toBe(5 + 5 + 4 * 50 + 2 * 300);
    expect((await client.call('eth_unsubscribe', [logs])).result).toBe(true);
    expect(await used()).toBe(5 + 5 + 4 * 50 + 2 * 300 + 10);
    client.ws.close();
  }, 30_000);

  it('a team that runs out mid-stream gets the final -32005 and close code 4402; undelivered events cost nothing', async () => {
    // eth_subscribe (5) and two heads (100); the third head would need 50 of the 30 left.
    const { client, used } = await meteredClient(5 + 2 * 50 + 30);
    const id = (await client.call('eth_subscribe', ['newHeads'])).result;
    await mine(anvil, 4);
    const closed = await client.closed;
    expect(closed.code).toBe(4402);
    const events = client.messages.filter((message) => message.params?.subscription === id);
    expect(events).toHaveLength(2);
    const final = client.messages.at(-1);
    expect(final.id).toBeNull();
    expect(final.error.code).toBe(-32005);
    expect(final.error.data.reason).toBe('daily_credits_exhausted');
    expect(await used()).toBe(5 + 2 * 50);
  }, 30_000);

  it('closes a client that stops reading with 1013; its send buffer stays bounded', async () => {
    // A contract with 24,000 bytes of code: each eth_getCode answer is ~48 KB of hex.
    const account = privateKeyToAccount(DEV_KEY);
    const wallet = createWalletClient({ account, chain: foundry, transport: http(anvil.url) });
    // init: PUSH2 24000 PUSH1 0 RETURN (returns 24,000 zero bytes of fresh memory as the code)
    const hash = await wallet.sendTransaction({ data: '0x615dc06000f3', gas: 6_000_000n });
    const receipt = await createPublicClient({ chain: foundry, transport: http(anvil.url) }).waitForTransactionReceipt({ hash, pollingInterval: 50 });
    const client = await openClient(wsUrl(gateway, 'metered'));
    const socket = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause();
    const rssBefore = process.memoryUsage().rss;
    for (let index = 0; index < 2_000; index += 1) {
      client.ws.send(JSON.stringify({ jsonrpc: '2.0', id: index, method: 'eth_getCode', params: [receipt.contractAddress, 'latest'] }));
    }
    await until(() => gateway.logLines.some((line) => line.includes('websocket client not reading')), 'the gateway to give up on the client', 30_000);
    const rssGrowth = process.memoryUsage().rss - rssBefore;
    socket.resume();
    const closed = await client.closed;
    expect(closed.code).toBe(1013);
    await until(() => gateway.logLines.some((line) => line.includes('"websocket close"') && line.includes('"slow_client"')), 'the close log line', 10_000);
    const answered = gateway.logLines.filter((line) => line.includes('"transport":"ws"') && line.includes('eth_getCode') && line.includes('"status":200')).length;
    // 2,000 answers would be ~96 MB; the connection was cut long before.
    expect(answered).toBeLessThan(1_000);
    expect(rssGrowth).toBeLessThan(64 * 1024 * 1024);
    // Under ws's 30 s close timeout: a close that needs it means the gateway stopped reading the
    // client's close frame (it once did, with reading paused for messages in progress).
  }, 20_000);
});

describe('WebSocket event queue of a client that stops reading', () => {
  let gateway: TestGateway;
  let proxy: WsProxy;
  beforeAll(async () => {
    proxy = await startWsProxy(anvil.url.replace('http://', 'ws://'));
    gateway = await startTestGateway({
      config: { server: { host: '127.0.0.1', port: 0, websocket: { maxBufferedBytes: 256 * 1024, maxQueuedEvents: 1_000 } } },
      networks: [{ id: 'eth', kind: 'evm', chainId: anvil.chainId, methods: METHODS, upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: proxy.url }] }],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await proxy?.kill();
  });

  it('closes it with 1013 once its queued events pass the bound; the queue is dropped uncharged, the stream it got has no gap', async () => {
    const team = await gateway.store.createTeam({ name: `queue-${Math.random().toString(36).slice(2)}`, dailyCredits: 1_000_000_000 });
    const { secret } = await issueKey(gateway.store, { teamId: team.id });
    const client = await openClient(wsUrl(gateway, 'eth', secret));
    const id = (await client.call('eth_subscribe', ['newHeads'])).result as string;
    const socket = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause();
    const first = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    // Bursts of 1,024 heads (~1.3 MB) until the kernel's socket buffers are full and events wait
    // in the gateway past the bound.
    const overflowed = () => gateway.logLines.some((line) => line.includes('websocket client not reading'));
    for (let bursts = 0; !overflowed(); bursts += 1) {
      if (bursts === 64) throw new Error('the client was never closed');
      await directRpc(anvil.url, 'anvil_mine', ['0x400']);
    }
    const line = JSON.parse(gateway.logLines.find((text) => text.includes('websocket client not reading'))!) as { scope: string; queuedEvents: number; queuedBytes: number };
    expect(line.scope).toBe('connection');
    expect(line.queuedEvents <= 1_000 + 1 && line.queuedBytes <= 256 * 1024 + 2_000).toBe(true);
    socket.resume();
    const closed = await client.closed;
    expect(closed).toMatchObject({ code: 1013, reason: 'event queue full: client not reading' });
    const seen = client.messages.filter((message) => message.params?.subscription === id).map((message) => Number(message.params.result.number));
    expect(seen.length).toBeGreaterThan(0);
    expect(seen).toEqual(Array.from({ length: seen.length }, (_, index) => first + index));
    // Charged for what it was sent, not for what was queued: 5 for the subscription, 50 a head.
    await until(() => gateway.logLines.some((text) => text.includes('"websocket close"') && text.includes('"slow_client"')), 'the close log line', 10_000);
    const [peek] = await gateway.store.applyLedger([{ type: 'peek', teamId: team.id, day: new Date().toISOString().slice(0, 10) }] as const);
    expect(peek.teamUsed).toBe(5 + seen.length * 50);
  }, 120_000);
});

function keccakPing(): string {
  return keccak256(stringToBytes('Ping()'));
}

describe('WebSocket bounds, throughput and metrics', () => {
  let gateway: TestGateway;
  let proxy: WsProxy;
  beforeAll(async () => {
    proxy = await startWsProxy(anvil.url.replace('http://', 'ws://'));
    gateway = await startTestGateway({
      config: {
        server: {
          host: '127.0.0.1',
          port: 0,
          websocket: { maxConnections: 3, maxConnectionsPerKey: 2, maxSubscriptionsPerConnection: 1, maxMessageBytes: 2048, pingIntervalMs: 100, pongTimeoutMs: 300 },
        },
      },
      networks: [{ id: 'eth', kind: 'evm', chainId: anvil.chainId, methods: METHODS, upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: proxy.url }] }],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await proxy?.kill();
  });

  it('bounds connections per key (429) and per process (503), subscriptions per connection, message size (1009)', async () => {
    const first = await openClient(wsUrl(gateway, 'eth'));
    const second = await openClient(wsUrl(gateway, 'eth'));
    const perKey = await refusedUpgrade(wsUrl(gateway, 'eth'));
    expect(perKey.status).toBe(429);
    expect(perKey.body.error).toMatchObject({ code: -32005, data: { reason: 'connection_limit', scope: 'key', limit: 2 } });
    const { secret } = await issueKey(gateway.store, { teamId: gateway.team.id });
    const third = await openClient(wsUrl(gateway, 'eth', secret));
    const full = await refusedUpgrade(wsUrl(gateway, 'eth', secret));
    expect(full.status).toBe(503);
    expect(full.body.error.data).toMatchObject({ reason: 'connection_limit', scope: 'process', limit: 3 });

    expect((await first.call('eth_subscribe', ['newHeads'])).result).toMatch(/^0x/);
    const refused = await first.call('eth_subscribe', ['newPendingTransactions']);
    expect(refused.error).toMatchObject({ code: -32005, data: { reason: 'subscription_limit', limit: 1 } });
    // Two at once on a fresh connection: the one being charged holds its place (it once let both in).
    const both = await Promise.all([third.call('eth_subscribe', ['newHeads']), third.call('eth_subscribe', ['newPendingTransactions'])]);
    expect(both.filter((answer) => answer.result !== undefined)).toHaveLength(1);
    expect(both.filter((answer) => answer.error?.data?.reason === 'subscription_limit')).toHaveLength(1);

    second.ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: ['x'.repeat(4096)] }));
    expect((await second.closed).code).toBe(1009);
    // A connection closed frees its place.
    const again = await openClient(wsUrl(gateway, 'eth'));
    for (const client of [first, third, again]) client.ws.close();
    await Promise.all([first.closed, third.closed, again.closed]);
  });

  it('closes a connection whose client stops answering pings', async () => {
    const client = await openClient(wsUrl(gateway, 'eth'));
    const socket = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause(); // pings are not read, so never answered
    await until(() => gateway.logLines.some((line) => line.includes('"websocket close"') && line.includes('"pong_timeout"')), 'the pong timeout', 10_000);
    socket.resume();
    expect((await client.closed).code).toBe(1006);
  });

  it('closes a listening-only connection (1008) once its key is revoked', async () => {
    const { key, secret } = await issueKey(gateway.store, { teamId: gateway.team.id });
    const client = await openClient(wsUrl(gateway, 'eth', secret));
    expect((await client.call('eth_subscribe', ['newHeads'])).result).toMatch(/^0x/);
    const revoked = await fetch(`${gateway.gateway.adminOrigin}/v1/keys/${key.id}/revoke`, { method: 'POST', headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(revoked.status).toBe(200);
    // No message is sent: the check rides on the pings (every 100 ms here).
    const closed = await client.closed;
    expect(closed.code).toBe(1008);
    await until(() => gateway.logLines.some((line) => line.includes('"websocket close"') && line.includes('"key_invalid"') && line.includes(key.id)), 'the close log line', 5_000);
  });

  it('applies the team throughput limit to requests over the socket', async () => {
    const team = await gateway.store.createTeam({ name: `tps-${Math.random().toString(36).slice(2)}`, dailyCredits: 1_000_000, creditsPerSecond: 100 });
    const { secret } = await issueKey(gateway.store, { teamId: team.id });
    const client = await openClient(wsUrl(gateway, 'eth', secret));
    const answers = await Promise.all([client.call('eth_blockNumber'), client.call('eth_blockNumber')]);
    expect(answers.filter((answer) => answer.result !== undefined)).toHaveLength(1);
    expect(answers.find((answer) => answer.error !== undefined)?.error).toMatchObject({ code: -32005, data: { reason: 'rate_limited' } });
    client.ws.close();
    await client.closed;
  });

  it('exposes connections, subscriptions, upstream subscriptions, events and disconnect reasons as metrics', async () => {
    const client = await openClient(wsUrl(gateway, 'eth'));
    await client.call('eth_subscribe', ['newHeads']);
    expect(proxy.subscribeCalls.length).toBeGreaterThan(0);
    await mine(anvil, 1);
    await client.next((message) => message.method === 'eth_subscription');
    const scrape = async () => (await fetch(`${gateway.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    const text = await scrape();
    expect(text).toMatch(/tollgate_ws_connections\{network="eth"\} 1/);
    expect(text).toMatch(/tollgate_ws_subscriptions\{network="eth",type="newHeads"\} 1/);
    expect(text).toMatch(/tollgate_ws_upstream_subscriptions\{network="eth",type="newHeads"\} 1/);
    expect(text).toMatch(/tollgate_ws_events_delivered_total\{network="eth",type="newHeads"\} [1-9]/);
    expect(text).toMatch(/tollgate_ws_disconnects_total\{reason="message_too_large"\} 1/);
    expect(text).toMatch(/tollgate_ws_disconnects_total\{reason="pong_timeout"\} 1/);
    expect(text).toMatch(/tollgate_ws_upgrades_rejected_total\{status="429"\} 1/);
    client.ws.close();
    await client.closed;
    await until(() => proxy.open() === 0, 'the upstream socket to close', 10_000);
    const after = await scrape();
    expect(after).toMatch(/tollgate_ws_connections\{network="eth"\} 0/);
    expect(after).toMatch(/tollgate_ws_upstream_subscriptions\{network="eth",type="newHeads"\} 0/);
  });
});

describe('WebSocket subscriptions off an upstream that falls silent', () => {
  let gateway: TestGateway;
  const proxies: WsProxy[] = [];
  beforeAll(async () => {
    const target = anvil.url.replace('http://', 'ws://');
    proxies.push(await startWsProxy(target), await startWsProxy(target));
    gateway = await startTestGateway({
      networks: [
        {
          id: 'stall',
          kind: 'evm',
          chainId: anvil.chainId,
          methods: METHODS,
          // Probes (over HTTP) see the chain move on while the carrying socket says nothing.
          healthCheck: { intervalMs: 100 },
          subscriptions: { stallTimeoutMs: 600, reconnectDelayMs: 100 },
          upstreams: proxies.map((proxy, index) => ({ id: `u${index}`, url: anvil.url, wsUrl: proxy.url })),
        },
      ],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    for (const proxy of proxies) await proxy.kill().catch(() => undefined);
  });

  it('moves when the carrying upstream stops sending heads while another is ahead: every block and log once, in order', async () => {
    const address = await deployPing(anvil);
    const client = await openClient(wsUrl(gateway, 'stall'));
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result as string;
    const logs = (await client.call('eth_subscribe', ['logs', { address }])).result as string;
    const carrying = proxies.find((proxy) => proxy.subscribeCalls.includes('logs'))!;
    const other = proxies.find((proxy) => proxy !== carrying)!;
    const startBlock = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    const events = (id: string) => client.messages.filter((message) => message.params?.subscription === id).map((message) => message.params.result);
    const sent: string[] = [];
    for (let index = 0; index < 5; index += 1) {
      sent.push(await ping(anvil, address));
      await until(() => events(logs).length === sent.length, `log ${index + 1}`, 10_000);
    }
    // The carrying upstream falls silent; blocks go on being mined until the stream has moved
    // (the probes see the chain move on: the move needs the head to advance elsewhere).
    carrying.freeze();
    for (let index = 0; index < 3; index += 1) sent.push(await ping(anvil, address));
    await until(() => other.subscribeCalls.includes('logs'), 'the move to the other upstream', 15_000);
    for (let index = 0; index < 5; index += 1) sent.push(await ping(anvil, address));
    const lastBlock = await sentinelBlock(client, heads, () => events(logs).length >= sent.length);
    expect(other.subscribeCalls).toContain('logs');
    expect(gateway.logLines.some((line) => line.includes('subscriptions moving off an upstream') && line.includes('"stalled"'))).toBe(true);
    const seen = events(heads).filter((head) => Number(head.number) >= startBlock).map((head) => Number(head.number));
    expect(seen).toEqual(Array.from({ length: lastBlock - startBlock + 2 }, (_, index) => startBlock + index));
    expect(events(logs).map((log) => log.transactionHash)).toEqual(sent);
    client.ws.close();
  }, 60_000);
});

describe('WebSocket subscriptions across a reorg hidden by an upstream move', () => {
  let gateway: TestGateway;
  let carrying: WsProxy;
  let standby: WsProxy;
  beforeAll(async () => {
    const target = anvil.url.replace('http://', 'ws://');
    carrying = await startWsProxy(target);
    standby = await startWsProxy(target, { refusing: true });
    gateway = await startTestGateway({
      networks: [
        {
          id: 'reorg',
          kind: 'evm',
          chainId: anvil.chainId,
          methods: METHODS,
          subscriptions: { reconnectDelayMs: 100 },
          upstreams: [
            { id: 'carrying', url: anvil.url, wsUrl: carrying.url },
            { id: 'standby', url: anvil.url, wsUrl: standby.url },
          ],
        },
      ],
    });
  });
  afterAll(async () => {
    await gateway?.close();
    await carrying?.kill().catch(() => undefined);
    await standby?.kill().catch(() => undefined);
  });

  it('delivers the new chain from the fork point and the orphaned logs again with removed: true', async () => {
    const address = await deployPing(anvil);
    const client = await openClient(wsUrl(gateway, 'reorg'));
    const heads = (await client.call('eth_subscribe', ['newHeads'])).result as string;
    const logs = (await client.call('eth_subscribe', ['logs', { address }])).result as string;
    expect(carrying.subscribeCalls).toContain('logs');
    const events = (id: string) => client.messages.filter((message) => message.params?.subscription === id).map((message) => message.params.result);
    const first = await ping(anvil, address);
    const snapshot = await directRpc(anvil.url, 'evm_snapshot', []);
    const orphaned = await ping(anvil, address);
    await until(() => events(logs).length === 2, 'two logs', 10_000);
    const forkNumber = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) - 1;
    const orphanedHead = events(heads).at(-1);
    // The carrying upstream dies; while no upstream is reachable the chain reorganises.
    await carrying.kill();
    await directRpc(anvil.url, 'evm_revert', [snapshot]);
    await mine(anvil, 2);
    standby.refuse(false);
    await until(() => standby.subscribeCalls.includes('logs'), 'the move to the standby', 10_000);
    await mine(anvil, 1);
    const tip = Number(await directRpc(anvil.url, 'eth_blockNumber', []));
    await until(() => events(heads).some((head) => Number(head.number) === tip) && events(logs).length >= 3, 'the new chain and the removal', 10_000);
    await sentinelBlock(client, heads);
    const seenLogs = events(logs);
    expect(seenLogs.map((log) => [log.transactionHash, log.removed])).toEqual([
      [first, false],
      [orphaned, false],
      [orphaned, true],
    ]);
    const afterFork = events(heads).filter((head) => Number(head.number) > forkNumber);
    expect(afterFork[0].hash).toBe(orphanedHead.hash);
    const canonical = await Promise.all(
      [forkNumber + 1, forkNumber + 2, forkNumber + 3, forkNumber + 4].map(async (number) => ((await directRpc(anvil.url, 'eth_getBlockByNumber', [`0x${number.toString(16)}`, false])) as { hash: string }).hash),
    );
    expect(afterFork.slice(1).map((head) => head.hash)).toEqual(canonical);
    client.ws.close();
  }, 30_000);
});

describe('WebSocket subscriptions confirmed only once their events are assured', () => {
  let gateway: TestGateway;
  const proxies: Record<string, WsProxy> = {};
  let address: `0x${string}`;
  beforeAll(async () => {
    const target = anvil.url.replace('http://', 'ws://');
    for (const name of ['fresh', 'shared']) proxies[name] = await startWsProxy(target);
    gateway = await startTestGateway({
      networks: ['fresh', 'shared'].map((id) => ({ id, kind: 'evm', chainId: anvil.chainId, methods: METHODS, upstreams: [{ id, url: anvil.url, wsUrl: proxies[id]!.url }] })),
    });
    address = await deployPing(anvil);
  }, 30_000);
  afterAll(async () => {
    await gateway?.close();
    for (const proxy of Object.values(proxies)) await proxy.kill().catch(() => undefined);
  });

  /** A subscriber as a user writes one: the `ws` package by hand, or viem's webSocket transport. */
  interface Subscriber {
    /** Resolves with the id once the gateway confirmed the subscription. */
    subscribe(params: ['newHeads'] | ['logs', { address: `0x${string}` }]): Promise<string>;
    events(id: string): any[];
    close(): Promise<void>;
  }

  async function rawSubscriber(url: string): Promise<Subscriber> {
    const client = await openClient(url);
    const events = (id: string) => client.messages.filter((message) => message.params?.subscription === id).map((message) => message.params.result);
    return {
      async subscribe(params) {
        const answer = await client.call('eth_subscribe', params);
        if (typeof answer.result !== 'string') throw new Error(`eth_subscribe failed: ${JSON.stringify(answer)}`);
        return answer.result as string;
      },
      events,
      async close() {
        client.ws.close();
        await client.closed;
      },
    };
  }

  async function viemSubscriber(url: string): Promise<Subscriber> {
    const client = createPublicClient({ chain: foundry, transport: webSocket(url, { reconnect: false }) });
    const received = new Map<string, any[]>();
    const early: Array<{ id: string; result: unknown }> = [];
    return {
      async subscribe(params) {
        // onData may run before subscribe() resolves (an event right behind the answer): keyed by the id it carries.
        const onData = (data: any) => early.push({ id: data.subscription ?? '', result: data.result });
        const { subscriptionId } = params[0] === 'newHeads' ? await client.transport.subscribe({ params: ['newHeads'], onData }) : await client.transport.subscribe({ params, onData });
        return subscriptionId;
      },
      events(id) {
        for (const { id: owner, result } of early.splice(0)) {
          const list = received.get(owner) ?? [];
          list.push(result);
          received.set(owner, list);
        }
        return received.get(id) ?? [];
      },
      async close() {
        await (await client.transport.getRpcClient()).close();
      },
    };
  }

  /** A block with one Ping log, mined by anvil as the transaction arrives (automine). */
  async function pingNow(): Promise<{ hash: string; number: number }> {
    const hash = (await directRpc(anvil.url, 'eth_sendTransaction', [{ from: privateKeyToAccount(DEV_KEY).address, to: address, gas: '0x7530' }])) as string;
    // anvil answers as soon as the transaction is in its pool; the block follows at once.
    let receipt: { blockNumber: string } | null = null;
    await until(async () => (receipt = (await directRpc(anvil.url, 'eth_getTransactionReceipt', [hash])) as { blockNumber: string } | null) !== null, 'the receipt');
    return { hash, number: Number(receipt!.blockNumber) };
  }

  /**
   * Subscribes to newHeads and logs (in the given order) and mines a block with a log right after
   * each confirmation, then one empty block. Every block mined after a subscription's confirmation
   * reaches it, and every log: once, in order, nothing mined before.
   */
  async function subscribeAndMine(subscriber: Subscriber, headsFirst: boolean): Promise<void> {
    const order = headsFirst ? (['newHeads', 'logs'] as const) : (['logs', 'newHeads'] as const);
    const ids: Record<string, string> = {};
    const mined: Array<{ hash: string; number: number }> = [];
    for (const kind of order) {
      ids[kind] = await subscriber.subscribe(kind === 'newHeads' ? ['newHeads'] : ['logs', { address }]);
      mined.push(await pingNow());
    }
    await directRpc(anvil.url, 'evm_mine', []);
    const last = mined[1]!.number + 1;
    // Delivery is in order on one socket: once the last head is here, a late duplicate would be too.
    await until(() => subscriber.events(ids.newHeads!).some((head) => Number(head.number) === last), `head ${last}`, 10_000);
    // A block mined just before the confirmation may still be on its way to the gateway and come
    // too (as from any node): the stream may start earlier, never later, and has no gap or repeat.
    const headsFrom = headsFirst ? mined[0]!.number : mined[1]!.number;
    const heads = subscriber.events(ids.newHeads!).map((head) => Number(head.number));
    expect(heads[0]).toBeLessThanOrEqual(headsFrom);
    expect(heads).toEqual(Array.from({ length: last - heads[0]! + 1 }, (_, index) => heads[0]! + index));
    const logsFrom = headsFirst ? mined.slice(1) : mined;
    await until(() => subscriber.events(ids.logs!).length >= logsFrom.length, 'the logs', 10_000);
    const logs = subscriber.events(ids.logs!).map((log) => log.transactionHash as string);
    expect(logs.slice(-logsFrom.length)).toEqual(logsFrom.map((block) => block.hash));
    expect(new Set(logs).size).toBe(logs.length);
    expect(logs.length - logsFrom.length).toBeLessThanOrEqual(1);
  }

  it('subscribe and mine at once, 50 times: fresh and shared upstream subscriptions, newHeads and logs, raw ws and viem', async () => {
    // The shared network keeps both upstream subscriptions open all along (this holder), so each
    // newcomer joins existing ones; the fresh network has none left between rounds.
    const holder = await rawSubscriber(wsUrl(gateway, 'shared'));
    const holderHeads = await holder.subscribe(['newHeads']);
    const holderLogs = await holder.subscribe(['logs', { address }]);
    const firstHead = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    for (let round = 0; round < 50; round += 1) {
      const open = round % 4 < 2 ? rawSubscriber : viemSubscriber;
      await until(() => proxies.fresh!.open() === 0, 'the fresh network to hold no upstream subscription', 10_000);
      const fresh = await open(wsUrl(gateway, 'fresh'));
      await subscribeAndMine(fresh, round % 2 === 0);
      await fresh.close();
      const shared = await open(wsUrl(gateway, 'shared'));
      await subscribeAndMine(shared, round % 2 === 1);
      await shared.close();
    }
    // Every fresh round made its own upstream subscriptions; the shared ones were made once.
    expect(proxies.fresh!.subscribeCalls.filter((call) => call === 'logs')).toHaveLength(50);
    expect(proxies.shared!.subscribeCalls.filter((call) => call === 'logs')).toHaveLength(1);
    // The holder saw every head since it subscribed once, in order, and every Ping of the network.
    const tip = Number(await directRpc(anvil.url, 'eth_blockNumber', []));
    await until(() => holder.events(holderHeads).some((head) => Number(head.number) === tip), 'the tip at the holder', 10_000);
    expect(holder.events(holderHeads).map((head) => Number(head.number))).toEqual(Array.from({ length: tip - firstHead + 1 }, (_, index) => firstHead + index));
    const anvilLogs = (await directRpc(anvil.url, 'eth_getLogs', [{ address, fromBlock: `0x${firstHead.toString(16)}`, toBlock: 'latest' }])) as any[];
    expect(holder.events(holderLogs).map((log) => `${log.blockHash}:${log.logIndex}`)).toEqual(anvilLogs.map((log) => `${log.blockHash}:${log.logIndex}`));
    expect(anvilLogs).toHaveLength(200);
    await holder.close();
  }, 180_000);
});

describe('WebSocket subscriptions under bursts of heads: memory bounded, readers complete', () => {
  // The gateway as its own process (`node dist/cli.js serve`, SQLite store, every event charged),
  // so its resident memory is its own. 200 newHeads subscriptions, one per connection: 150
  // clients read, 50 stop reading once subscribed. anvil mines 256 blocks at once, five times.
  const SUBSCRIBERS = 200;
  const NON_READERS = 50;
  const BURSTS = 5;
  const BURST_BLOCKS = 256;
  /** The documented bound (docs/websocket.md#bounds): growth of the gateway's RSS over the bursts. */
  const RSS_GROWTH_BOUND = 100 * 1000 * 1000;
  let child: ChildProcess | undefined;
  let workDir: string;
  let proxy: WsProxy;
  const logLines: string[] = [];

  afterAll(async () => {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await proxy?.kill();
    if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true });
  });

  function rssOf(pid: number): number {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
  }

  async function spawnGateway(): Promise<{ origin: string; secret: string; pid: number }> {
    workDir = mkdtempSync(join(tmpdir(), 'tollgate-ws-bursts-'));
    const cli = join(import.meta.dirname, '..', 'dist', 'cli.js');
    const db = join(workDir, 'tollgate.db');
    execFileSync(process.execPath, [cli, 'teams', 'create', 'bursts', '--daily-credits', '1000000000000', '--db', db]);
    const { secret } = JSON.parse(execFileSync(process.execPath, [cli, 'keys', 'create', '--team', 'bursts', '--db', db], { encoding: 'utf8' })) as { secret: string };
    const config = join(workDir, 'gateway.yaml');
    writeFileSync(
      config,
      toYaml({
        // 1 MiB per connection: a client that stopped reading is closed in the fourth burst; one
        // that reads is at most a burst (~330 KB of heads) behind.
        server: { host: '127.0.0.1', port: 0, websocket: { maxConnectionsPerKey: SUBSCRIBERS, maxBufferedBytes: 1024 * 1024 } },
        admin: { host: '127.0.0.1', port: 0 },
        store: { driver: 'sqlite', path: db },
        networks: [{ id: 'eth', kind: 'evm', chainId: anvil.chainId, baseUrls: ['*/eth'], healthCheck: { intervalMs: 0 }, upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: proxy.url }] }],
      }),
    );
    child = spawn(process.execPath, [cli, 'serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
    const started = child;
    let pending = '';
    const listening = new Promise<string>((resolve, reject) => {
      started.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
        const lines = (pending + chunk).split('\n');
        pending = lines.pop()!;
        for (const line of lines) {
          logLines.push(line);
          if (line.includes('"gateway listening"')) resolve((JSON.parse(line) as { rpc: string }).rpc);
        }
      });
      started.stderr!.setEncoding('utf8').on('data', (chunk: string) => logLines.push(chunk));
      started.once('exit', (code) => reject(new Error(`the gateway exited (${code}): ${logLines.join('\n').slice(-2000)}`)));
    });
    return { origin: await listening, secret, pid: started.pid! };
  }

  it('200 subscriptions, 5 bursts of 256 heads: RSS growth under 100 MB, every reader sees every head once and in order', async () => {
    proxy = await startWsProxy(anvil.url.replace('http://', 'ws://'));
    const gatewayProcess = await spawnGateway();
    const url = `${gatewayProcess.origin.replace('http://', 'ws://')}/eth/ws/v3/${gatewayProcess.secret}`;
    const clients = await Promise.all(Array.from({ length: SUBSCRIBERS }, () => openClient(url)));
    const ids = await Promise.all(clients.map(async (client) => (await client.call('eth_subscribe', ['newHeads'])).result as string));
    expect(new Set(ids).size).toBe(SUBSCRIBERS);
    expect(proxy.subscribeCalls).toEqual(['newHeads']);
    const readers = clients.slice(NON_READERS);
    const nonReaders = clients.slice(0, NON_READERS);
    for (const client of nonReaders) (client.ws as unknown as { _socket: import('node:net').Socket })._socket.pause();
    const closedCodes = new Map<Client, number>();
    for (const client of clients) void client.closed.then(({ code }) => closedCodes.set(client, code));
    const heads = (client: Client) => client.messages.filter((message) => message.method === 'eth_subscription').map((message) => message.params.result);

    const first = Number(await directRpc(anvil.url, 'eth_blockNumber', [])) + 1;
    const baseline = rssOf(gatewayProcess.pid);
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(gatewayProcess.pid))), 50);
    try {
      for (let burst = 1; burst <= BURSTS; burst += 1) {
        await directRpc(anvil.url, 'anvil_mine', [`0x${BURST_BLOCKS.toString(16)}`]);
        const tip = first + burst * BURST_BLOCKS - 1;
        // The next burst once every reader still open has this one.
        await until(
          () => readers.every((client) => closedCodes.has(client) || heads(client).at(-1)?.number === `0x${tip.toString(16)}`),
          `burst ${burst} at every reader`,
          60_000,
        );
      }
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, rssOf(gatewayProcess.pid));
    const growth = peak - baseline;
    const last = first + BURSTS * BURST_BLOCKS - 1;
    console.log(`gateway RSS ${(baseline / 1048576).toFixed(0)} MiB before the bursts, peak ${(peak / 1048576).toFixed(0)} MiB: growth ${(growth / 1048576).toFixed(1)} MiB`);
    expect(growth).toBeLessThan(RSS_GROWTH_BOUND);

    // Every reader: open, every head from the first of the first burst to the last, once, in order, each the parent's child.
    for (const client of readers) {
      expect(closedCodes.has(client)).toBe(false);
      const seen = heads(client);
      expect(seen.map((head) => Number(head.number))).toEqual(Array.from({ length: last - first + 1 }, (_, index) => first + index));
      for (let index = 1; index < seen.length; index += 1) expect(seen[index].parentHash).toBe(seen[index - 1].hash);
    }
    // The non-readers' heads went into their sockets' kernel buffers (several MB on loopback)
    // before any waited in the gateway; once they read again, whatever they get is the start of
    // the stream, contiguous, never a head twice (their queue bound is shown by the test below).
    for (const client of nonReaders) (client.ws as unknown as { _socket: import('node:net').Socket })._socket.resume();
    for (const client of nonReaders) {
      await until(() => closedCodes.has(client) || heads(client).length > 0, 'a non-reader reading again', 30_000);
      const seen = heads(client).map((head) => Number(head.number));
      expect(seen).toEqual(Array.from({ length: seen.length }, (_, index) => first + index));
    }
    for (const client of nonReaders) client.ws.terminate();
    for (const client of readers) client.ws.close();
    await Promise.all(readers.map((client) => client.closed));
  }, 240_000);
});
