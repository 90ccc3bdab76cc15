// The hostile-input fuzz suite (docs/security.md): a seeded generator of requests over raw TCP
// and fetch against the real `tollgate serve` process — random bytes, truncated and deep JSON,
// prototype keys, invalid UTF-8, every envelope field with every JSON type, odd ids, mixed
// batches, odd paths and hosts, chunked bodies and mismatched lengths, CL+TE, clients that reset
// or half-close — asserting after every case:
//   - every answer is a JSON-RPC answer (or an empty 204) with a documented status, never a 500;
//   - every echoed id is the exact text of an id the client sent;
//   - the gateway answers a valid call afterwards;
//   - the ledger rises by exactly the price of the calls answered with a result (for clients that
//     left: by what their log lines say they were charged);
// and over the run: no secret in any log line, no unexpected error logged, no reservation left
// behind, RSS bounded.
//
// About 30 s by default; `TOLLGATE_FUZZ_SECONDS=600` runs longer. A failure prints the seed and
// path: `TOLLGATE_FUZZ_SEED=<seed> TOLLGATE_FUZZ_PATH=<path> npx vitest run test/fuzz.test.ts`
// replays it (and its shrinking).

import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { startSampleDasServer, type SampleDasServer } from '../src/devnet/sample-das/index.js';
import { scanRequestBody, type ItemSpans } from '../src/jsonrpc/request-scanner.js';
import { openStore, type Store } from '../src/store/index.js';
import { ensureBuilt } from './helpers/build.js';
import { spawnGateway } from './helpers/spawn-gateway.js';
import { parseResponses, type RawResponse } from './helpers/raw-http.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const BUDGET_MS = Number(process.env.TOLLGATE_FUZZ_SECONDS ?? 30) * 1_000;
const SEED = process.env.TOLLGATE_FUZZ_SEED === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.TOLLGATE_FUZZ_SEED);
const REPLAY_PATH = process.env.TOLLGATE_FUZZ_PATH;

const ADMIN_TOKEN = 'fuzz-admin-token-7c1e9a3f5b2d4e6a';
/** V8 heap limit of the gateway under test, and the RSS it must stay under. */
const HEAP_LIMIT_MB = 160;
const RSS_LIMIT_MB = 400;
const UPSTREAM_QUERY_SECRET = 'fuzzq_4b8d2f6a1c3e5d7f9a0b2c4d';
const UPSTREAM_HEADER_SECRET = 'fuzzh_9e7c5a3b1d2f4e6c8a0b1d3f';
const MAX_BATCH_ITEMS = 100;
/** How long a complete request may take to be answered before the case fails as a hang. */
const ANSWER_TIMEOUT_MS = 5_000;
/** How long to wait for an answer that may never come (incomplete requests). */
const INCOMPLETE_WAIT_MS = 150;
/** Statuses docs/errors.md documents for the RPC listener (500 is a bug, never documented for input). */
const DOCUMENTED_STATUSES = new Set([200, 204, 400, 401, 402, 403, 404, 405, 408, 413, 415, 429, 431, 502, 503, 504]);

/**
 * What each network of the config charges; `undefined`: never charged (-32601). Besides these, a
 * name shaped like a method name is forwarded at the unlisted price, 80 (docs/methods.md): the
 * scripted EVM upstream answers it, the sample DAS upstream answers `-32601`, which is not charged.
 */
const PRICES: Record<'evm' | 'das', Record<string, number | undefined>> = {
  evm: { eth_getBlockByHash: 80, eth_chainId: 5, net_version: 5, eth_call: 80, eth_sign: undefined },
  das: { getAssetsByGroup: 160 },
};
const FORWARDED_NAME = /^[A-Za-z][A-Za-z0-9_]{0,99}$/;
const priceOf = (network: 'evm' | 'das' | undefined, method: string): number | undefined =>
  network === undefined ? undefined : Object.hasOwn(PRICES[network], method) ? PRICES[network][method] : FORWARDED_NAME.test(method) ? 80 : undefined;

// ---------------------------------------------------------------------------------------------
// The process under test

let child: ChildProcess;
let dir: string;
let store: Store;
let teamId: string;
let apiKey: string;
let brokeKey = '';
let rpcPort = 0;
let evm: ScriptedUpstream;
let das: SampleDasServer;
const logLines: string[] = [];
const leaks: string[] = [];
/** Every secret that must never reach a log line; keys also without their `tg_` prefix. */
const secrets: string[] = [];

function rssKb(): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

let adminOrigin = '';
/** How the gateway exited if it did (a crash fails the liveness check with this). */
let exitedWith: string | undefined;

/** The gateway's V8 heap in use, from its own /metrics (prom-client's default metrics). */
async function heapUsedMb(): Promise<number> {
  const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  return Math.round(Number(/^tollgate_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1] ?? Number.NaN) / 1024 / 1024);
}

function watchLine(line: string): void {
  logLines.push(line);
  for (const secret of secrets) if (line.includes(secret)) leaks.push(`${secret} in ${line.slice(0, 300)}`);
}

beforeAll(async () => {
  await ensureBuilt();
  evm = await startScriptedUpstream({
    kind: 'result',
    result: (item: unknown) => {
      const request = item as RpcItem;
      if (request.method === 'eth_getBlockByHash') return { hash: (request.params as string[])[0], number: '0x1', transactions: [] };
      return '0x1';
    },
  });
  das = await startSampleDasServer();
  dir = mkdtempSync(join(tmpdir(), 'tollgate-fuzz-'));
  const dbPath = join(dir, 'fuzz.db');
  store = await openStore({ driver: 'sqlite', path: dbPath });
  const team = await store.createTeam({ name: 'fuzz', dailyCredits: 1_000_000_000_000 });
  teamId = team.id;
  apiKey = (await issueKey(store, { teamId })).secret;
  const config = {
    server: { host: '127.0.0.1', port: 0, maxBatchItems: MAX_BATCH_ITEMS, headersTimeoutMs: 2_000, receiveTimeoutMs: 3_000 },
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    store: { driver: 'sqlite', path: dbPath },
    networks: [
      {
        id: 'evm',
        kind: 'evm',
        chainId: 1,
        baseUrls: ['*/evm'],
        upstreams: [{ id: 'scripted', url: `${evm.url}/?api-key=${UPSTREAM_QUERY_SECRET}`, headers: { 'x-provider-token': UPSTREAM_HEADER_SECRET } }],
        methods: { eth_call: 80 },
        // Scripted blocks are not real blocks: their hash field is what is checked.
        verification: 'off',
        healthCheck: { intervalMs: 0 },
      },
      { id: 'das', kind: 'asset', baseUrls: ['*/das'], upstreams: [{ id: 'sample', url: das.url }], healthCheck: { intervalMs: 0 } },
    ],
  };
  const configPath = join(dir, 'gateway.yaml');
  writeFileSync(configPath, JSON.stringify(config)); // JSON is YAML
  // The heap is capped: V8 otherwise lets it grow for hundreds of MiB before collecting, which
  // hides nothing and proves nothing. Capped, a leak ends the process (and the liveness check).
  const gateway = await spawnGateway(configPath, {
    nodeArgs: [`--max-old-space-size=${HEAP_LIMIT_MB}`],
    // Every line of both streams is checked for secrets; only the listening line is kept.
    keep: (line) => line.msg === 'gateway listening',
    onLine: watchLine,
  });
  child = gateway.child;
  adminOrigin = gateway.adminOrigin;
  rpcPort = Number(new URL(gateway.rpcOrigin).port);
  void gateway.exited.then(({ code, signal }) => (exitedWith = `tollgate serve exited (code ${code}, signal ${signal}): ${gateway.stderr().slice(-3_000)}`));
  // A key issued after start-up, of a team with no credits: its secret must stay out of the logs too.
  const broke = await store.createTeam({ name: 'broke', dailyCredits: 0 });
  brokeKey = (await issueKey(store, { teamId: broke.id })).secret;
  secrets.push(apiKey, apiKey.slice(3), brokeKey, brokeKey.slice(3), ADMIN_TOKEN, UPSTREAM_QUERY_SECRET, UPSTREAM_HEADER_SECRET);
}, 180_000);

afterAll(async () => {
  if (child !== undefined && child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  await store?.close();
  await evm?.close();
  await das?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// Generators. A body is text with id markers (`\u0001<style>:<base64 method>\u0001`) where an id
// value goes; building a case replaces each with an id text unique within the case, so that every
// result in the answers can be priced by its id.

const ID_STYLES: Array<(n: number) => string> = [
  (n) => `${n}`,
  (n) => `"c-${n}"`,
  (n) => `${9007199254740993n + BigInt(n)}`,
  (n) => `${n}e-400`,
  (n) => `${n + 1}e400`,
  (n) => `${n}.0`,
  (n) => `-${n}`,
  (n) => `${n}E+2`,
  (n) => `123456789012345678901234567890${n}`,
  (n) => `0.${n}e-3`,
  (n) => `"\\u0063-${n}-é🦀\\n"`,
  (n) => `"${'x'.repeat(300)}${n}"`,
  (n) => `"${n}\\"}]"`,
];
const NULL_STYLE = -1;
// eslint-disable-next-line no-control-regex -- the marker is a control character no JSON text holds raw
const ID_MARKER = /\u0001(-?\d+):([A-Za-z0-9+/=]*)\u0001/g;

/** The method name the gateway reads: a string, also one generated as "any JSON value". */
const methodText = (method: unknown): string =>
  typeof method === 'string' ? method : typeof (method as { nonString?: unknown } | undefined)?.nonString === 'string' ? (method as { nonString: string }).nonString : '';
const marker = (style: number, method: unknown): string => `\u0001${style}:${Buffer.from(methodText(method)).toString('base64')}\u0001`;

const space = fc.constantFrom('', '', '', ' ', '\n', '\t', ' \r\n ');
const hex = (length: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF'), minLength: length, maxLength: length });
const idStyle = fc.integer({ min: 0, max: ID_STYLES.length - 1 });

/** A JSON object text from members (key text, value text), in the given order and spacing. */
function objectText(members: Array<[string, string]>, gaps: string[]): string {
  const gap = (index: number) => gaps[index % Math.max(1, gaps.length)] ?? '';
  return `{${members.map(([key, value], index) => `${gap(index)}${key}${gap(index + 1)}:${gap(index + 2)}${value}`).join(',')}${gap(members.length)}}`;
}

function shuffled<T>(items: T[], order: number[]): T[] {
  const copy = [...items];
  for (let index = copy.length - 1; index > 0; index -= 1) {
    const other = (order[index % order.length] ?? 0) % (index + 1);
    [copy[index], copy[other]] = [copy[other]!, copy[index]!];
  }
  return copy;
}

const order = fc.array(fc.nat(), { minLength: 1, maxLength: 6 });
const gaps = fc.array(space, { minLength: 1, maxLength: 4 });

/** A valid call on the EVM network. */
const validEvmCall = fc
  .tuple(fc.integer({ min: 0, max: 3 }), hex(64), fc.boolean(), hex(40), idStyle, order, gaps)
  .map(([which, hash, hydrated, address, style, shuffle, spacing]) => {
    const calls: Array<[string, string | undefined]> = [
      ['eth_getBlockByHash', `["0x${hash}",${hydrated}]`],
      ['eth_chainId', hydrated ? '[]' : undefined],
      ['net_version', undefined],
      ['eth_call', `[{"to":"0x${address}","data":"0x${hash.slice(0, 8)}"},"latest"]`],
    ];
    const [method, params] = calls[which]!;
    const members: Array<[string, string]> = [
      ['"jsonrpc"', '"2.0"'],
      ['"id"', marker(style, method)],
      ['"method"', JSON.stringify(method)],
    ];
    if (params !== undefined) members.push(['"params"', params]);
    return objectText(shuffled(members, shuffle), spacing);
  });

/** A valid getAssetsByGroup call (named or positional form) on the asset network. */
const validDasCall = (collections: string[]) =>
  fc
    .tuple(fc.constantFrom(...collections), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 3 }), idStyle, gaps)
    .map(([collection, limit, form, style, spacing]) => {
      const params = [
        JSON.stringify({ groupKey: 'collection', groupValue: collection, limit, page: 1 }),
        JSON.stringify(['collection', collection, null, limit, 2]),
        JSON.stringify({ groupKey: 'collection', groupValue: collection, limit, sortBy: { sortBy: 'id', sortDirection: 'asc' } }),
        JSON.stringify({ groupKey: 'collection', groupValue: collection, limit, displayOptions: { showCollectionMetadata: true } }),
      ][form]!;
      return objectText(
        [
          ['"jsonrpc"', '"2.0"'],
          ['"method"', '"getAssetsByGroup"'],
          ['"params"', params],
          ['"id"', marker(style, 'getAssetsByGroup')],
        ],
        spacing,
      );
    });

const nested = fc.tuple(fc.integer({ min: 1, max: 20_000 }), fc.constantFrom('[', '{"a":'), fc.constantFrom('1', '"x"', 'null', '[]'));
const nestedText = nested.map(([depth, open, leaf]) => `${open.repeat(depth)}${leaf}${(open === '[' ? ']' : '}').repeat(depth)}`);
/** JSON that sets prototype-looking keys. */
const protoText = fc.constantFrom(
  '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}',
  '[{"__proto__":null},{"toString":1,"valueOf":"x","hasOwnProperty":[]}]',
  '{"groupKey":"collection","groupValue":"11111111111111111111111111111111","__proto__":{"limit":5}}',
);
const anyJson = fc.oneof({ weight: 4, arbitrary: fc.json({ maxDepth: 4 }) }, { weight: 1, arbitrary: nestedText }, { weight: 1, arbitrary: protoText });

/** Params a DAS validator must refuse (or accept) without trouble. */
const hostileDasParams = (collections: string[]) =>
  fc.oneof(
    fc.constantFrom(
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], cursor: '2'.repeat(50_000) }),
      JSON.stringify({ groupKey: 'c'.repeat(5_000), groupValue: collections[0] }),
      JSON.stringify({ groupKey: 'collection', groupValue: '3'.repeat(80_000) }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], before: collections[0], cursor: 'abc' }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], limit: 2 ** 32, page: 0 }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], limit: -1 }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], limit: 1.5 }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], options: { x: 'y'.repeat(10_000) } }),
      JSON.stringify({ groupKey: 'collection', groupValue: collections[0], sortBy: { sortBy: 'created' } }),
      JSON.stringify(['collection', collections[0], null, null, null, null, null, null, null, 'extra']),
    ),
    nestedText.map((deep) => `{"groupKey":"collection","groupValue":"${collections[0]}","options":${deep}}`),
  );

/** Every envelope field with every JSON type, and then some. */
const hostileItem = (collections: string[], secretValues: () => string[]) =>
  fc
    .record({
      jsonrpc: fc.oneof({ weight: 5, arbitrary: fc.constant('"2.0"') }, { weight: 1, arbitrary: anyJson }, { weight: 1, arbitrary: fc.constant(undefined) }),
      method: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom('eth_getBlockByHash', 'eth_chainId', 'net_version', 'eth_call', 'getAssetsByGroup') },
        { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }) },
        { weight: 1, arbitrary: fc.constantFrom('__proto__', 'constructor', 'toString', 'hasOwnProperty', '', 'eth_sign', 'x'.repeat(20_000)) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 9 }).map((index) => `secret:${index}`) },
        { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }).map((value) => ({ nonString: value })) },
      ),
      id: fc.oneof(
        { weight: 6, arbitrary: idStyle.map((style) => ({ style })) },
        { weight: 1, arbitrary: fc.constant({ style: NULL_STYLE }) },
        { weight: 1, arbitrary: fc.constant('absent' as const) },
        { weight: 1, arbitrary: fc.constantFrom('{}', '[1]', 'true', 'false', '{"id":1}') },
      ),
      params: fc.oneof(
        { weight: 3, arbitrary: anyJson },
        { weight: 1, arbitrary: hostileDasParams(collections) },
        { weight: 1, arbitrary: hex(64).map((hash) => `["0x${hash}",true]`) },
        { weight: 1, arbitrary: fc.constant(undefined) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 9 }).map((index) => ({ secretParam: index })) },
      ),
      extra: fc.array(fc.tuple(fc.constantFrom('"__proto__"', '"constructor"', '"result"', '"error"', '"idx"', '"\\u0069d"', '"i\\u0064"'), anyJson), { maxLength: 2 }),
      duplicateId: fc.boolean(),
      shuffle: order,
      spacing: gaps,
    })
    .map((plan) => {
      const secretOf = (index: number): string => secretValues()[index % secretValues().length]!;
      const method = typeof plan.method === 'string' ? (plan.method.startsWith('secret:') ? secretOf(Number(plan.method.slice(7))) : plan.method) : plan.method;
      const members: Array<[string, string]> = [];
      if (plan.jsonrpc !== undefined) members.push(['"jsonrpc"', plan.jsonrpc]);
      members.push(['"method"', typeof method === 'string' ? JSON.stringify(method) : JSON.stringify(method.nonString)]);
      if (plan.params !== undefined) {
        members.push(['"params"', typeof plan.params === 'string' ? plan.params : JSON.stringify([secretOf(plan.params.secretParam)])]);
      }
      // An escaped spelling of `id` is the id to JSON.parse: it carries a priced id like any other.
      for (const [key, value] of plan.extra) members.push([key, key.includes('\\u00') && JSON.parse(key) === 'id' ? marker(0, method) : value]);
      const idValue = plan.id === 'absent' ? undefined : typeof plan.id === 'string' ? plan.id : marker(plan.id.style, method);
      const ordered = shuffled(members, plan.shuffle);
      if (idValue !== undefined) {
        // With duplicate `id` members, JSON.parse keeps the last: the first is a decoy. It is a
        // priced id too: byte damage to the last `"id"` key makes the decoy the id.
        if (plan.duplicateId) ordered.unshift(['"id"', marker(1, method)]);
        ordered.push(['"id"', idValue]);
      }
      return objectText(ordered, plan.spacing);
    });

type Network = 'evm' | 'das';

interface BodyPlan {
  text: string;
  network: Network;
}

const bodyFor = (collections: string[], secretValues: () => string[]) => {
  const item = (network: Network) =>
    fc.oneof(
      { weight: 3, arbitrary: network === 'evm' ? validEvmCall : validDasCall(collections) },
      { weight: 3, arbitrary: hostileItem(collections, secretValues) },
      { weight: 1, arbitrary: anyJson },
    );
  const bodyOn = (network: Network) =>
    fc.oneof(
      { weight: 4, arbitrary: item(network) },
      { weight: 3, arbitrary: fc.array(item(network), { minLength: 1, maxLength: 12 }).map((items) => `[${items.join(',')}]`) },
      { weight: 1, arbitrary: fc.array(item(network), { minLength: 95, maxLength: 110 }).map((items) => `[${items.join(',')}]`) },
      { weight: 1, arbitrary: fc.constantFrom('[]', '', ' ', 'null', '[[]]', '{}', '[1,2,3]', '"\\ud800"', '\ufeff{}') },
      { weight: 1, arbitrary: fc.tuple(item(network), fc.nat()).map(([text, cut]) => text.slice(0, cut % Math.max(1, text.length))) },
      { weight: 1, arbitrary: nestedText },
    );
  return fc.constantFrom<Network>('evm', 'das').chain((network) => bodyOn(network).map((text): BodyPlan => ({ text, network })));
};

/** Invalid UTF-8 and other byte-level damage to a body. */
const byteDamage = fc.oneof(
  { weight: 6, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.tuple(fc.nat(), fc.constantFrom<number[]>([0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x80], [0xf4, 0x90, 0x80, 0x80], [0x00])) },
);

interface RequestPlan {
  method: string;
  target: string;
  headers: Array<[string, string]>;
  body: BodyPlan;
  damage: [number, number[]] | undefined;
  framing: 'cl' | 'chunked' | 'cl-short' | 'cl-long' | 'none' | 'cl+te' | 'dup-cl' | 'bad-chunk' | 'te-other';
}

const requestPlan = (collections: string[], secretValues: () => string[]) =>
  fc
    .record({
      method: fc.oneof({ weight: 12, arbitrary: fc.constant('POST') }, { weight: 1, arbitrary: fc.constantFrom('GET', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'post', 'P@ST', 'BREW') }),
      path: fc.oneof(
        { weight: 10, arbitrary: fc.constant('key') },
        { weight: 1, arbitrary: fc.constant('broke') },
        {
          weight: 3,
          arbitrary: fc.constantFrom(
            '/{net}/v2/{bare}',
            '/{bare}',
            '/{net}/v3',
            '/{net}/v3/',
            '/{net}/v3/{key}/extra',
            '/{net}/v3/tg_abcdefghij/{bare}',
            '/{net}/v3/{key}?token={admin}',
            '/{net}/{admin}',
            '/{net}/v3/tg_{bare}#{admin}',
            '/{net}/v3/{key}%2Fx',
            '/{net}/v3/%E0%A4%A',
            '/../{net}/v3/{key}',
            '//{net}//v3//{key}',
            '/nowhere/v3/{key}',
            '*',
            'http://127.0.0.1/{net}/v3/{key}',
            '/{net}/v3/{long}',
            '/{net}/v3/{upstream}',
          ),
        },
      ),
      host: fc.oneof(
        { weight: 8, arbitrary: fc.constant('127.0.0.1') },
        { weight: 1, arbitrary: fc.constantFrom('', 'evil.example', '[::1]:8080', 'x'.repeat(2_000), '{key}', undefined) },
      ),
      contentType: fc.oneof(
        { weight: 8, arbitrary: fc.constant('application/json') },
        { weight: 1, arbitrary: fc.constantFrom('application/json; charset=utf-8', 'text/plain', 'application/jsonx', 'application/vnd.api+json', '', undefined) },
      ),
      requestId: fc.oneof(
        { weight: 6, arbitrary: fc.constant('fresh') },
        { weight: 1, arbitrary: fc.constantFrom('{key}', '{bare}', '{admin}', '{upstream}', 'a b', 'x'.repeat(200), 'ok.id:1-2_3', undefined) },
      ),
      userAgent: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('viem/2.0', '{key}', '{admin}', 'u'.repeat(5_000)) }),
      extraHeaders: fc.oneof(
        { weight: 8, arbitrary: fc.constant([] as Array<[string, string]>) },
        {
          weight: 1,
          arbitrary: fc.constantFrom<Array<[string, string]>>(
            [['Authorization', `Bearer {admin}`]],
            [['Expect', '100-continue']],
            [['Connection', 'close']],
            [['X-Huge', 'h'.repeat(20_000)]],
            [['X-Bad\u0000Name', 'v']],
            [['Content-Encoding', 'gzip']],
            [['X-Forwarded-For', '{key}']],
          ),
        },
      ),
      body: bodyFor(collections, secretValues),
      damage: byteDamage,
      framing: fc.oneof(
        { weight: 14, arbitrary: fc.constant<RequestPlan['framing']>('cl') },
        { weight: 2, arbitrary: fc.constant<RequestPlan['framing']>('chunked') },
        { weight: 1, arbitrary: fc.constantFrom<RequestPlan['framing']>('cl-short', 'cl-long', 'none', 'cl+te', 'dup-cl', 'bad-chunk', 'te-other') },
      ),
    })
    .map((plan): RequestPlan => {
      const headers: Array<[string, string]> = [];
      if (plan.host !== undefined) headers.push(['Host', plan.host]);
      if (plan.contentType !== undefined) headers.push(['Content-Type', plan.contentType]);
      if (plan.requestId !== undefined) headers.push(['X-Request-Id', plan.requestId]);
      if (plan.userAgent !== undefined) headers.push(['User-Agent', plan.userAgent]);
      headers.push(...plan.extraHeaders);
      const target = plan.path === 'key' ? '/{net}/v3/{key}' : plan.path === 'broke' ? '/{net}/v3/{broke}' : plan.path;
      return { method: plan.method, target, headers, body: plan.body, damage: plan.damage, framing: plan.framing };
    });

interface CasePlan {
  kind: 'http' | 'bytes';
  requests: RequestPlan[];
  bytes: Uint8Array;
  /** Writes the bytes in this many pieces. */
  pieces: number;
  after: 'wait' | 'half-close' | 'reset';
  viaFetch: boolean;
}

const casePlan = (collections: string[], secretValues: () => string[]) =>
  fc.oneof(
    {
      weight: 12,
      arbitrary: fc.record({
        kind: fc.constant<'http'>('http'),
        requests: fc.oneof({ weight: 6, arbitrary: fc.array(requestPlan(collections, secretValues), { minLength: 1, maxLength: 1 }) }, { weight: 1, arbitrary: fc.array(requestPlan(collections, secretValues), { minLength: 2, maxLength: 3 }) }),
        bytes: fc.constant(new Uint8Array()),
        pieces: fc.integer({ min: 1, max: 4 }),
        after: fc.oneof({ weight: 10, arbitrary: fc.constant<'wait'>('wait') }, { weight: 1, arbitrary: fc.constantFrom<'half-close' | 'reset'>('half-close', 'reset') }),
        viaFetch: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant<'bytes'>('bytes'),
        requests: fc.constant([] as RequestPlan[]),
        bytes: fc.oneof(fc.uint8Array({ maxLength: 2_048 }), fc.string({ maxLength: 500 }).map((text) => new TextEncoder().encode(`POST /evm/v3/x HTTP/1.1\r\n${text}`))),
        pieces: fc.integer({ min: 1, max: 3 }),
        after: fc.constant<'wait'>('wait'),
        viaFetch: fc.constant(false),
      }),
    },
  );

// ---------------------------------------------------------------------------------------------
// Building a case: placeholders, unique ids, framing

interface BuiltRequest {
  bytes: Buffer;
  network: Network | undefined;
  /** Complete as far as the client is concerned: an answer (or a close) is owed. */
  complete: boolean;
  requestId: string | undefined;
  method: string;
  target: string;
  headers: Array<[string, string]>;
  body: Buffer;
}

interface BuiltCase {
  requests: BuiltRequest[];
  /** Everything to write, in order. */
  bytes: Buffer;
  /** Id text → price of the call that carries it (`undefined`: that call is never charged). */
  prices: Map<string, number | undefined>;
  /** Every id text sent. */
  ids: Set<string>;
}

let caseNumber = 0;

function substitute(text: string, network: Network, caseId: number): string {
  return text
    .replaceAll('{net}', network)
    .replaceAll('{key}', apiKey)
    .replaceAll('{bare}', apiKey.slice(3))
    .replaceAll('{broke}', brokeKey)
    .replaceAll('{admin}', ADMIN_TOKEN)
    .replaceAll('{upstream}', UPSTREAM_QUERY_SECRET)
    .replaceAll('{long}', 'L'.repeat(6_000))
    .replaceAll('fresh', `fz${caseId}`);
}

function buildCase(plan: CasePlan): BuiltCase {
  const caseId = ++caseNumber;
  const prices = new Map<string, number | undefined>();
  const ids = new Set<string>();
  let counter = 0;
  let nullUsed = false;
  const requests: BuiltRequest[] = plan.requests.map((request, index) => {
    const network = request.body.network;
    const target = substitute(request.target, network, caseId);
    // The network that will serve (and charge) this request: the key's own path, any query string.
    // fetch normalises the path as a URL (`/../evm` is `/evm`); raw TCP sends it as it is.
    const servedPath = (path: string) => path.split('?')[0] === `/${network}/v3/${apiKey}`;
    const normalised = target.startsWith('/') ? new URL(target, 'http://127.0.0.1').pathname : target;
    const resolvedNetwork = servedPath(target) || (plan.viaFetch && servedPath(normalised)) ? network : undefined;
    // Byte damage first, so that it can break an id marker (leaving invalid JSON) but never change
    // an id after it was registered. Then the work is done on bytes (latin1: one char per byte).
    let template = Buffer.from(request.body.text, 'utf8');
    if (request.damage !== undefined) {
      const [at, bytes] = request.damage;
      const position = template.length === 0 ? 0 : at % template.length;
      template = Buffer.concat([template.subarray(0, position), Buffer.from(bytes), template.subarray(position)]);
    }
    // Ids: unique within the case, priced by the method of the call that carries them.
    const latin = template.toString('latin1').replace(ID_MARKER, (_match, styleText: string, methodBase64: string) => {
      const method = Buffer.from(methodBase64, 'base64').toString('utf8');
      let style = Number(styleText);
      if (style === NULL_STYLE && nullUsed) style = 0;
      const idText = style === NULL_STYLE ? 'null' : ID_STYLES[style]!(counter++);
      if (style === NULL_STYLE) nullUsed = true;
      // Priced by the name the gateway sees: a secret placeholder becomes the secret (a method name, maybe).
      prices.set(idText, priceOf(resolvedNetwork, substitute(method, network, caseId)));
      ids.add(idText);
      return Buffer.from(idText, 'utf8').toString('latin1');
    });
    // Placeholders and their values are ASCII: substituted in the byte view too.
    const body = Buffer.from(substitute(latin, network, caseId), 'latin1');
    // A client that leaves is checked against its log lines, found by request id: it sends a fresh one.
    const planned = plan.after === 'wait' ? request.headers : [...request.headers.filter(([name]) => name !== 'X-Request-Id'), ['X-Request-Id', 'fresh'] as [string, string]];
    const headers = planned.map(([name, value]): [string, string] => [name, substitute(value, network, caseId).replace(`fz${caseId}`, `fz${caseId}r${index}`)]);
    const requestId = headers.find(([name]) => name === 'X-Request-Id')?.[1];
    const head = [`${request.method} ${target} HTTP/1.1`, ...headers.map(([name, value]) => `${name}: ${value}`)];
    let complete = true;
    let framed: Buffer;
    switch (request.framing) {
      case 'cl':
        framed = Buffer.concat([Buffer.from(`${[...head, `Content-Length: ${body.length}`].join('\r\n')}\r\n\r\n`), body]);
        break;
      case 'chunked': {
        const chunks: Buffer[] = [];
        for (let offset = 0; offset < body.length; offset += 7 + (offset % 13)) {
          const piece = body.subarray(offset, offset + 7 + (offset % 13));
          chunks.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
        }
        framed = Buffer.concat([Buffer.from(`${[...head, 'Transfer-Encoding: chunked'].join('\r\n')}\r\n\r\n`), ...chunks, Buffer.from('0\r\n\r\n')]);
        break;
      }
      case 'cl-short':
        framed = Buffer.concat([Buffer.from(`${[...head, `Content-Length: ${Math.floor(body.length / 2)}`].join('\r\n')}\r\n\r\n`), body]);
        break;
      case 'cl-long':
        framed = Buffer.concat([Buffer.from(`${[...head, `Content-Length: ${body.length + 10}`].join('\r\n')}\r\n\r\n`), body]);
        complete = false;
        break;
      case 'none':
        framed = Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`), body]);
        break;
      case 'cl+te':
        framed = Buffer.concat([Buffer.from(`${[...head, `Content-Length: ${body.length}`, 'Transfer-Encoding: chunked'].join('\r\n')}\r\n\r\n`), Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
        break;
      case 'dup-cl':
        framed = Buffer.concat([Buffer.from(`${[...head, `Content-Length: ${body.length}`, `Content-Length: ${body.length + 1}`].join('\r\n')}\r\n\r\n`), body]);
        break;
      case 'bad-chunk':
        framed = Buffer.concat([Buffer.from(`${[...head, 'Transfer-Encoding: chunked'].join('\r\n')}\r\n\r\nzz\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
        break;
      case 'te-other':
        framed = Buffer.concat([Buffer.from(`${[...head, 'Transfer-Encoding: gzip'].join('\r\n')}\r\n\r\n`), body]);
        break;
    }
    return { bytes: framed, network: resolvedNetwork, complete, requestId, method: request.method, target, headers, body };
  });
  const bytes = plan.kind === 'bytes' ? Buffer.from(plan.bytes) : Buffer.concat(requests.map((request) => request.bytes));
  return { requests, bytes, prices, ids };
}

// ---------------------------------------------------------------------------------------------
// Running a case

interface Exchange {
  responses: RawResponse[];
  closedByServer: boolean;
}

function exchange(bytes: Buffer, pieces: number, expected: number, waitMs: number, after: CasePlan['after']): Promise<Exchange> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const socket = connect(rpcPort, '127.0.0.1');
    const finish = (closedByServer: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const responses = parseResponses(Buffer.concat(chunks).toString('latin1')).filter((response) => response.status >= 200);
      resolve({ responses, closedByServer });
    };
    const timer = setTimeout(() => finish(false), waitMs);
    socket.on('connect', () => {
      const size = Math.ceil(bytes.length / pieces);
      for (let offset = 0; offset < bytes.length; offset += size) socket.write(bytes.subarray(offset, offset + size));
      if (bytes.length === 0) socket.write('');
      if (after === 'half-close') socket.end();
      if (after === 'reset') setImmediate(() => socket.resetAndDestroy());
    });
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (expected > 0) {
        const done = parseResponses(Buffer.concat(chunks).toString('latin1')).filter((response) => response.status >= 200).length;
        if (done >= expected) finish(false);
      }
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
  });
}

/** Sends a built request through fetch (undici) when it is something fetch can send. */
async function viaFetch(request: BuiltRequest): Promise<Exchange | undefined> {
  if (!request.target.startsWith('/') || request.target.includes('#') || request.method !== 'POST') return undefined;
  const headers = new Headers();
  try {
    for (const [name, value] of request.headers) if (!['host', 'content-length', 'transfer-encoding', 'connection', 'expect'].includes(name.toLowerCase())) headers.append(name, value);
  } catch {
    return undefined; // a header fetch refuses to send
  }
  const response = await fetch(`http://127.0.0.1:${rpcPort}${request.target}`, { method: 'POST', headers, body: request.body, signal: AbortSignal.timeout(ANSWER_TIMEOUT_MS) });
  const body = await response.text();
  const map = new Map<string, string>();
  response.headers.forEach((value, name) => map.set(name, value));
  return { responses: [{ status: response.status, headers: map, body }], closedByServer: false };
}

async function settledCredits(): Promise<number> {
  const day = new Date().toISOString().slice(0, 10);
  const rows = await store.usage({ teamId, fromDay: day, toDay: day });
  return rows.reduce((sum, row) => sum + row.credits, 0);
}

function requestLinesFor(requestId: string): Array<Record<string, unknown>> {
  return logLines.filter((line) => line.includes(`"requestId":"${requestId}"`)).map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const started = performance.now();
  while (performance.now() - started < timeoutMs) {
    if (await condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return condition();
}

const figures = {
  cases: 0,
  httpRequests: 0,
  byStatus: new Map<number, number>(),
  byCode: new Map<number, number>(),
  closedWithoutAnswer: 0,
  results: 0,
  creditsCharged: 0,
  leftClients: 0,
  chargedAfterLeaving: 0,
  rssBeforeKb: 0,
  rssMaxKb: 0,
  rssAfterKb: 0,
  heapBeforeMb: 0,
  heapAfterMb: 0,
};

function count<K>(map: Map<K, number>, key: K): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** The JSON-RPC replies of one response body, with each reply's id as the text the gateway wrote. */
function repliesOf(body: string): Array<{ reply: Record<string, unknown>; idText: string }> {
  const parsed = JSON.parse(body) as unknown;
  const list = Array.isArray(parsed) ? parsed : [parsed];
  const spans = scanRequestBody(body);
  const spanList: ItemSpans[] = Array.isArray(spans) ? spans : [spans];
  return list.map((reply, index) => {
    const span = spanList[index]!;
    return { reply: reply as Record<string, unknown>, idText: span.idStart < 0 ? '' : body.slice(span.idStart, span.idEnd) };
  });
}

async function runCase(plan: CasePlan): Promise<void> {
  const built = buildCase(plan);
  figures.cases += 1;
  figures.httpRequests += Math.max(1, built.requests.length);
  const before = await settledCredits();
  // Requests before the first incomplete one are owed an answer; the rest never arrive whole.
  const firstIncomplete = built.requests.findIndex((request) => !request.complete);
  const owed = plan.kind === 'bytes' || plan.after !== 'wait' ? 0 : firstIncomplete < 0 ? built.requests.length : firstIncomplete;
  const allComplete = plan.kind === 'http' && firstIncomplete < 0;
  let result: Exchange | undefined;
  if (plan.viaFetch && built.requests.length === 1 && plan.after === 'wait' && allComplete) result = await viaFetch(built.requests[0]!).catch(() => undefined);
  result ??= await exchange(built.bytes, plan.pieces, owed, owed > 0 ? ANSWER_TIMEOUT_MS : INCOMPLETE_WAIT_MS, plan.after);
  // The bodies as the gateway decodes them (UTF-8, U+FFFD for bytes that are not): what ids are echoed from.
  const sentText = plan.kind === 'bytes' ? built.bytes.toString('utf8') : built.requests.map((request) => request.body.toString('utf8')).join('\n');

  // Every answer is a JSON-RPC answer with a documented status.
  let expected = 0;
  for (const response of result.responses) {
    count(figures.byStatus, response.status);
    expect(response.status, 'never a 500').not.toBe(500);
    expect(DOCUMENTED_STATUSES.has(response.status), `status ${response.status} is documented`).toBe(true);
    if (response.status === 204) {
      expect(response.body).toBe('');
      continue;
    }
    const replies = repliesOf(response.body);
    if (replies.length !== 1 || response.body.trimStart().startsWith('[')) expect(response.status, 'a batch is answered with 200').toBe(200);
    let responseCharge = 0;
    for (const { reply, idText } of replies) {
      expect(reply.jsonrpc).toBe('2.0');
      expect(Object.hasOwn(reply, 'id')).toBe(true);
      expect('result' in reply !== 'error' in reply, 'result or error').toBe(true);
      if (idText !== 'null') expect(built.ids.has(idText) || sentText.includes(idText), `echoed id ${idText.slice(0, 80)} was sent as such`).toBe(true);
      if ('error' in reply) {
        const error = reply.error as { code: unknown; message: unknown };
        expect(Number.isInteger(error.code)).toBe(true);
        expect(typeof error.message).toBe('string');
        count(figures.byCode, error.code as number);
        continue;
      }
      figures.results += 1;
      const price = built.prices.get(idText);
      expect(price, `a result for id ${idText.slice(0, 80)}: a call that is never charged was answered`).toBeTypeOf('number');
      responseCharge += price!;
    }
    if (response.headers.has('x-credits-cost')) expect(Number(response.headers.get('x-credits-cost')), 'X-Credits-Cost is what the results cost').toBe(responseCharge);
    expected += responseCharge;
  }
  if (result.responses.length === 0) figures.closedWithoutAnswer += 1;
  // A complete, well-formed exchange always gets its answers (or a close after a refused one).
  if (plan.after === 'wait' && allComplete && !result.closedByServer) {
    // (More answers than requests is possible: bytes a short Content-Length left over are refused as a request of their own.)
    expect(result.responses.length, 'every complete request is answered or the connection closed').toBeGreaterThanOrEqual(built.requests.length);
  }

  if (plan.after !== 'wait') {
    // A client that left: what was charged is what its log lines say, and it is nothing unless
    // the client left while the charge was being committed.
    figures.leftClients += 1;
    let loggedCredits = 0;
    for (const request of built.requests) {
      if (request.requestId === undefined || !/^fz\d+r\d+$/.test(request.requestId) || request.network === undefined) continue;
      const id = request.requestId;
      await waitFor(() => requestLinesFor(id).length > 0, 2_000);
      for (const line of requestLinesFor(id)) loggedCredits += Number(line.credits ?? 0);
    }
    if (loggedCredits > 0) figures.chargedAfterLeaving += 1;
    expected = loggedCredits;
  }

  // The gateway answers a valid call afterwards (5 credits).
  if (exitedWith !== undefined) throw new Error(`the gateway is not running: ${exitedWith}`);
  const alive = await fetch(`http://127.0.0.1:${rpcPort}/evm/v3/${apiKey}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': `fz${figures.cases}alive` },
    body: '{"jsonrpc":"2.0","id":"alive","method":"eth_chainId"}',
    signal: AbortSignal.timeout(ANSWER_TIMEOUT_MS),
  });
  expect(alive.status).toBe(200);
  expect(await alive.text()).toBe('{"jsonrpc":"2.0","id":"alive","result":"0x1"}');
  expected += 5;

  // The ledger rose by exactly the price of the calls answered.
  let after = await settledCredits();
  if (after !== before + expected) {
    await waitFor(async () => (after = await settledCredits()) === before + expected, 1_000);
  }
  expect(after - before, 'the ledger rose by the price of the calls answered').toBe(expected);
  figures.creditsCharged += expected;
  if (figures.cases % 50 === 0) figures.rssMaxKb = Math.max(figures.rssMaxKb, rssKb());
  expect(leaks, 'no secret in any log line').toEqual([]);
}

describe('fuzz: hostile input over raw TCP and HTTP', () => {
  it(
    `holds every property for ${BUDGET_MS / 1000} s of generated requests (seed ${SEED})`,
    async () => {
      const collections = das.dataset.collections.map((collection) => collection.id);
      const secretValues = () => [apiKey, apiKey.slice(3), brokeKey, ADMIN_TOKEN, UPSTREAM_QUERY_SECRET, UPSTREAM_HEADER_SECRET, `tg_${'Q'.repeat(32)}`, apiKey.replace('tg_', 'tg%5F'), `${apiKey}/${apiKey.slice(3)}`, `x?${ADMIN_TOKEN}`];
      // Warm up before measuring RSS: the first requests load code and fill caches.
      for (let index = 0; index < 50; index++) {
        await fetch(`http://127.0.0.1:${rpcPort}/evm/v3/${apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}' }).then((response) => response.text());
      }
      figures.rssBeforeKb = rssKb();
      figures.rssMaxKb = figures.rssBeforeKb;
      figures.heapBeforeMb = await heapUsedMb();
      process.stdout.write(`fuzz: seed ${SEED}, ${BUDGET_MS / 1000} s (TOLLGATE_FUZZ_SEED=${SEED} replays this run)\n`);
      // The time limit ends fc.assert without waiting for the case it interrupts (fast-check races
      // the run with a timer): that case goes on, its calls holding their reservations.
      let runningCase: Promise<void> | undefined;
      await fc.assert(
        fc.asyncProperty(casePlan(collections, secretValues), (plan) => (runningCase = runCase(plan))),
        {
          seed: SEED,
          path: REPLAY_PATH,
          numRuns: REPLAY_PATH === undefined ? 10_000_000 : 1,
          interruptAfterTimeLimit: BUDGET_MS,
          markInterruptAsFailure: false,
          endOnFailure: REPLAY_PATH === undefined ? false : true,
          // fast-check's own report prints the whole counterexample (megabytes of generated JSON).
          asyncReporter: async (details) => {
            if (!details.failed) return;
            const replay = `TOLLGATE_FUZZ_SEED=${details.seed} TOLLGATE_FUZZ_PATH="${details.counterexamplePath ?? ''}" npx vitest run test/fuzz.test.ts`;
            const example = fc.stringify(details.counterexample);
            throw new Error(
              [
                `fuzz property failed after ${details.numRuns} cases (seed ${details.seed}, shrunk ${details.numShrinks} times)`,
                `replay: ${replay}`,
                `error: ${details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)}`,
                `case (first 3,000 of ${example.length} characters): ${example.slice(0, 3_000)}`,
              ].join('\n'),
            );
          },
        },
      );
      // The interrupted case finishes before the run is judged quiet, and its own checks count.
      await runningCase?.catch((error: unknown) => {
        throw new Error(`the case the time limit interrupted failed (seed ${SEED}, case ${figures.cases}): ${error instanceof Error ? error.message : String(error)}`);
      });
      // Quiet: every reservation settled or refunded, nothing logged as unexpected.
      const day = new Date().toISOString().slice(0, 10);
      const [peek] = await store.applyLedger([{ type: 'peek', teamId, day }]);
      expect(peek!.teamUsed, 'no reservation left behind').toBe(await settledCredits());
      expect(logLines.filter((line) => line.includes('failed unexpectedly')), 'no unexpected error').toEqual([]);
      expect(leaks, 'no secret in any log line').toEqual([]);
      figures.rssAfterKb = rssKb();
      figures.rssMaxKb = Math.max(figures.rssMaxKb, figures.rssAfterKb);
      figures.heapAfterMb = await heapUsedMb();
      const sorted = (map: Map<number, number>) => [...map].sort(([a], [b]) => a - b).map(([key, value]) => `${key}: ${value}`).join(', ');
      process.stdout.write(
        [
          `fuzz figures (seed ${SEED}, ${BUDGET_MS / 1000} s):`,
          `  cases ${figures.cases}, HTTP requests ${figures.httpRequests}, log lines ${logLines.length}`,
          `  answers by status: ${sorted(figures.byStatus)}; connections closed without an answer: ${figures.closedWithoutAnswer}`,
          `  JSON-RPC errors by code: ${sorted(figures.byCode)}; results: ${figures.results}`,
          `  credits charged ${figures.creditsCharged} (ledger checked after every case); clients that left: ${figures.leftClients}, of which charged while leaving: ${figures.chargedAfterLeaving}`,
          `  RSS ${Math.round(figures.rssBeforeKb / 1024)} MiB before, ${Math.round(figures.rssMaxKb / 1024)} MiB at most, ${Math.round(figures.rssAfterKb / 1024)} MiB after; V8 heap in use ${figures.heapBeforeMb} MiB before, ${figures.heapAfterMb} MiB after (limit ${HEAP_LIMIT_MB} MiB)`,
          '',
        ].join('\n'),
      );
      expect(figures.cases).toBeGreaterThan(0);
      // Bounded: with its heap capped the process would have died of a leak (the liveness check
      // after every case); what RSS adds to the heap is buffers and code, bounded too.
      expect(figures.rssMaxKb / 1024, 'RSS (MiB)').toBeLessThan(RSS_LIMIT_MB);
    },
    BUDGET_MS + 120_000,
  );
});
