// getAssetsByGroup validation (the reference DAS server's rules, in its order), both param forms,
// over real HTTP against two asset networks: `das-named` (its upstream declares `params: named`)
// and `das-positional` (`params: positional`), so each upstream's received form is known.

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// Valid public keys (base58, 32 bytes once decoded).
const COLLECTION = 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w';
const ASSET_A = 'So11111111111111111111111111111111111111112';
const ASSET_B = 'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA';
const CURSOR = 'JBdWz4tuy6Cnb3DQe7gJ4yyvU4a3mMV';

const RESULT = { total: 1, limit: 10, page: 2, items: [{ id: ASSET_A, interface: 'V1_NFT' }] };

const PAGINATION_LIMIT = 'Pagination Error. Limit should not be greater than 1000.';
const PAGINATION_NONE = 'Pagination Error. No Pagination Method Selected';
const PAGINATION_ONE = 'Pagination Error. Only one pagination parameter supported per query.';
const SORTING = 'Pagination Sorting Error. Only sorting based on id is supported for this pagination option.';
const pubkeyErr = (value: string) => `Pubkey Validation Err: ${value} is invalid`;

let named: ScriptedUpstream;
let positional: ScriptedUpstream;
let tg: TestGateway;

beforeAll(async () => {
  named = await startScriptedUpstream({ kind: 'result', result: RESULT });
  positional = await startScriptedUpstream({ kind: 'result', result: RESULT });
  tg = await startTestGateway({
    networks: [
      { id: 'das-named', kind: 'asset', upstreams: [{ id: 'named', url: named.url, params: 'named' }] },
      { id: 'das-positional', kind: 'asset', upstreams: [{ id: 'positional', url: positional.url, params: 'positional' }] },
    ],
  });
});

afterAll(async () => {
  await tg?.close();
  await named?.close();
  await positional?.close();
});

beforeEach(() => {
  named.calls.length = 0;
  positional.calls.length = 0;
});

type Expected =
  /** -32602 whose message mentions this text (the field's name). */
  | { invalidParams: string }
  /** -32000 with exactly this message. */
  | { das: string };

interface Case {
  name: string;
  /** Named-object params, or `undefined` when the case only exists in one form. */
  named?: Record<string, unknown>;
  /** Positional params. */
  positional?: unknown[];
  expected: Expected;
}

const g = { groupKey: 'collection', groupValue: COLLECTION };
const sort = (sortBy: unknown, sortDirection?: unknown) => (sortDirection === undefined ? { sortBy } : { sortBy, sortDirection });

const CASES: Case[] = [
  // Rule 1: shapes and JSON types (-32602 naming the field).
  { name: 'groupKey missing', named: { groupValue: COLLECTION }, positional: [null, COLLECTION], expected: { invalidParams: 'groupKey' } },
  { name: 'groupKey not a string', named: { groupKey: 5, groupValue: COLLECTION }, positional: [5, COLLECTION], expected: { invalidParams: 'groupKey' } },
  { name: 'groupValue missing', named: { groupKey: 'collection' }, positional: ['collection'], expected: { invalidParams: 'groupValue' } },
  { name: 'groupValue not a string', named: { groupKey: 'collection', groupValue: 123 }, positional: ['collection', ['x']], expected: { invalidParams: 'groupValue' } },
  { name: 'empty params', named: {}, positional: [], expected: { invalidParams: 'groupKey' } },
  { name: 'limit 1.5', named: { ...g, limit: 1.5 }, positional: ['collection', COLLECTION, null, 1.5], expected: { invalidParams: '`limit`' } },
  { name: 'limit -1', named: { ...g, limit: -1 }, positional: ['collection', COLLECTION, null, -1], expected: { invalidParams: '`limit`' } },
  { name: 'limit "5"', named: { ...g, limit: '5' }, positional: ['collection', COLLECTION, null, '5'], expected: { invalidParams: '`limit`' } },
  { name: 'limit 2^32', named: { ...g, limit: 2 ** 32 }, positional: ['collection', COLLECTION, null, 2 ** 32], expected: { invalidParams: '`limit`' } },
  { name: 'page "2"', named: { ...g, page: '2' }, positional: ['collection', COLLECTION, null, null, '2'], expected: { invalidParams: '`page`' } },
  { name: 'page -3', named: { ...g, page: -3 }, positional: ['collection', COLLECTION, null, null, -3], expected: { invalidParams: '`page`' } },
  { name: 'page true', named: { ...g, page: true }, positional: ['collection', COLLECTION, null, null, true], expected: { invalidParams: '`page`' } },
  { name: 'sortBy a string', named: { ...g, sortBy: 'id' }, positional: ['collection', COLLECTION, 'id'], expected: { invalidParams: '`sortBy`' } },
  { name: 'sortBy.sortBy unknown', named: { ...g, sortBy: sort('price') }, positional: ['collection', COLLECTION, sort('price')], expected: { invalidParams: '`sortBy.sortBy`' } },
  { name: 'sortBy.sortBy missing', named: { ...g, sortBy: { sortDirection: 'asc' } }, positional: ['collection', COLLECTION, { sortDirection: 'asc' }], expected: { invalidParams: '`sortBy.sortBy`' } },
  { name: 'sortBy.sortBy upper case', named: { ...g, sortBy: sort('ID') }, positional: ['collection', COLLECTION, sort('ID')], expected: { invalidParams: '`sortBy.sortBy`' } },
  { name: 'sortDirection unknown', named: { ...g, sortBy: sort('id', 'up') }, positional: ['collection', COLLECTION, sort('id', 'up')], expected: { invalidParams: '`sortBy.sortDirection`' } },
  { name: 'before not a string', named: { ...g, before: 5 }, positional: ['collection', COLLECTION, null, null, null, 5], expected: { invalidParams: '`before`' } },
  { name: 'after not a string', named: { ...g, after: {} }, positional: ['collection', COLLECTION, null, null, null, null, {}], expected: { invalidParams: '`after`' } },
  { name: 'cursor not a string', named: { ...g, cursor: 7 }, positional: ['collection', COLLECTION, null, null, null, null, null, null, 7], expected: { invalidParams: '`cursor`' } },
  { name: 'options not an object', named: { ...g, options: 'yes' }, positional: ['collection', COLLECTION, null, null, null, null, null, 'yes'], expected: { invalidParams: '`options`' } },
  { name: 'displayOptions an array', named: { ...g, displayOptions: [1] }, expected: { invalidParams: '`options`' } },
  { name: 'both options and displayOptions', named: { ...g, options: {}, displayOptions: {} }, expected: { invalidParams: 'displayOptions' } },
  { name: 'unknown named field', named: { ...g, showFungible: true }, expected: { invalidParams: '`showFungible`' } },
  { name: 'too many positional arguments', positional: ['collection', COLLECTION, null, null, 1, null, null, null, null, 'extra'], expected: { invalidParams: 'too many arguments' } },
  // Types are checked before anything else: a bad limit type beats a bad pubkey.
  { name: 'limit "5" with a bad pubkey → the type error', named: { groupKey: 'collection', groupValue: 'nope', limit: '5' }, positional: ['collection', 'nope', null, '5'], expected: { invalidParams: '`limit`' } },

  // Rule 2: the group value is a public key.
  { name: 'groupValue not base58', named: { groupKey: 'collection', groupValue: 'not-a-pubkey' }, positional: ['collection', 'not-a-pubkey'], expected: { das: pubkeyErr('not-a-pubkey') } },
  { name: 'groupValue base58 but 3 bytes', named: { groupKey: 'collection', groupValue: 'abc' }, positional: ['collection', 'abc'], expected: { das: pubkeyErr('abc') } },
  { name: 'groupValue longer than 44 chars', named: { groupKey: 'collection', groupValue: '1'.repeat(45) }, positional: ['collection', '1'.repeat(45)], expected: { das: pubkeyErr('1'.repeat(45)) } },
  { name: 'groupValue empty', named: { groupKey: 'collection', groupValue: '' }, positional: ['collection', ''], expected: { das: pubkeyErr('') } },
  { name: 'bad pubkey with limit 5000 → the pubkey', named: { groupKey: 'collection', groupValue: 'bad0key', limit: 5000 }, positional: ['collection', 'bad0key', null, 5000], expected: { das: pubkeyErr('bad0key') } },

  // Rule 3: limit ≤ 1000.
  { name: 'limit 1001', named: { ...g, limit: 1001 }, positional: ['collection', COLLECTION, null, 1001], expected: { das: PAGINATION_LIMIT } },
  { name: 'limit 5000 with page 0 → the limit', named: { ...g, limit: 5000, page: 0 }, positional: ['collection', COLLECTION, null, 5000, 0], expected: { das: PAGINATION_LIMIT } },

  // Rule 4: page 0.
  { name: 'page 0', named: { ...g, page: 0 }, positional: ['collection', COLLECTION, null, null, 0], expected: { das: PAGINATION_NONE } },
  { name: 'page 0 with before → page 0 first', named: { ...g, page: 0, before: ASSET_A }, positional: ['collection', COLLECTION, null, null, 0, ASSET_A], expected: { das: PAGINATION_NONE } },

  // Rule 5: one pagination parameter.
  { name: 'page with cursor', named: { ...g, page: 1, cursor: CURSOR }, positional: ['collection', COLLECTION, null, null, 1, null, null, null, CURSOR], expected: { das: PAGINATION_ONE } },
  { name: 'page with before', named: { ...g, page: 2, before: ASSET_A }, positional: ['collection', COLLECTION, null, null, 2, ASSET_A], expected: { das: PAGINATION_ONE } },
  { name: 'page with after', named: { ...g, page: 2, after: ASSET_A }, positional: ['collection', COLLECTION, null, null, 2, null, ASSET_A], expected: { das: PAGINATION_ONE } },
  { name: 'before with cursor', named: { ...g, before: ASSET_A, cursor: CURSOR }, positional: ['collection', COLLECTION, null, null, null, ASSET_A, null, null, CURSOR], expected: { das: PAGINATION_ONE } },
  { name: 'after with cursor', named: { ...g, after: ASSET_B, cursor: CURSOR }, positional: ['collection', COLLECTION, null, null, null, null, ASSET_B, null, CURSOR], expected: { das: PAGINATION_ONE } },
  { name: 'page with an invalid before → one-pagination first', named: { ...g, page: 1, before: 'bad!' }, positional: ['collection', COLLECTION, null, null, 1, 'bad!'], expected: { das: PAGINATION_ONE } },

  // Rule 6: keyset modes only sort by id.
  { name: 'cursor with sort created', named: { ...g, cursor: CURSOR, sortBy: sort('created', 'asc') }, positional: ['collection', COLLECTION, sort('created', 'asc'), null, null, null, null, null, CURSOR], expected: { das: SORTING } },
  { name: 'no pagination with sort updated', named: { ...g, sortBy: sort('updated') }, positional: ['collection', COLLECTION, sort('updated')], expected: { das: SORTING } },
  { name: 'before with sort recent_action', named: { ...g, before: ASSET_A, sortBy: sort('recent_action', 'desc') }, positional: ['collection', COLLECTION, sort('recent_action', 'desc'), null, null, ASSET_A], expected: { das: SORTING } },
  { name: 'after with sort none', named: { ...g, after: ASSET_A, sortBy: sort('none') }, positional: ['collection', COLLECTION, sort('none'), null, null, null, ASSET_A], expected: { das: SORTING } },
  { name: 'empty before/after/cursor are absent: cursor mode with sort created', named: { ...g, before: '', after: '', cursor: '', sortBy: sort('created') }, positional: ['collection', COLLECTION, sort('created'), null, null, '', '', null, ''], expected: { das: SORTING } },
  { name: 'sort created with an invalid before → sorting first', named: { ...g, before: 'bad!', sortBy: sort('created') }, positional: ['collection', COLLECTION, sort('created'), null, null, 'bad!'], expected: { das: SORTING } },

  // Rule 7: keyset values.
  { name: 'before not a pubkey (sort id)', named: { ...g, before: 'not-a-key', sortBy: sort('id') }, positional: ['collection', COLLECTION, sort('id'), null, null, 'not-a-key'], expected: { das: pubkeyErr('not-a-key') } },
  { name: 'after base58 but not 32 bytes', named: { ...g, after: 'abc' }, positional: ['collection', COLLECTION, null, null, null, null, 'abc'], expected: { das: pubkeyErr('abc') } },
  { name: 'cursor not base58', named: { ...g, cursor: '0OIl' }, positional: ['collection', COLLECTION, null, null, null, null, null, null, '0OIl'], expected: { das: 'Cursor Validation Err: 0OIl is invalid' } },
  { name: 'cursor with a dash', named: { ...g, cursor: 'abc-def', sortBy: sort('id', 'asc') }, positional: ['collection', COLLECTION, sort('id', 'asc'), null, null, null, null, null, 'abc-def'], expected: { das: 'Cursor Validation Err: abc-def is invalid' } },
];

interface Sent {
  form: 'named' | 'positional';
  network: string;
  params: unknown;
}

function sendsOf(c: Case): Sent[] {
  const sends: Sent[] = [];
  // Each input form goes to both networks: validation must not depend on the upstream's form.
  for (const network of ['das-named', 'das-positional']) {
    if (c.named !== undefined) sends.push({ form: 'named', network, params: c.named });
    if (c.positional !== undefined) sends.push({ form: 'positional', network, params: c.positional });
  }
  return sends;
}

describe('getAssetsByGroup validation: rule, code and message, in the reference order', () => {
  it('has at least 30 cases, each in at least one form', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(30);
    for (const c of CASES) expect(c.named !== undefined || c.positional !== undefined).toBe(true);
  });

  it.each(CASES)('$name', async (c) => {
    let id = 100;
    for (const sent of sendsOf(c)) {
      id += 1;
      const r = await rpc(tg.url(sent.network), { jsonrpc: '2.0', id, method: 'getAssetsByGroup', params: sent.params });
      const where = `${sent.form} params on ${sent.network}`;
      expect(r.status, where).toBe(200);
      expect(r.body.id, where).toBe(id);
      expect(r.body.result, where).toBeUndefined();
      // Invalid requests cost nothing.
      expect(r.headers.get('x-credits-cost'), where).toBe('0');
      if ('das' in c.expected) {
        expect(r.body.error, where).toStrictEqual({ code: -32000, message: c.expected.das });
      } else {
        expect(r.body.error.code, where).toBe(-32602);
        expect(r.body.error.message, where).toContain(c.expected.invalidParams);
      }
    }
    // Invalid requests never reach an upstream.
    expect(named.calls).toHaveLength(0);
    expect(positional.calls).toHaveLength(0);
  });

  it('params missing altogether → -32602, nothing forwarded', async () => {
    const r = await rpc(tg.url('das-named'), { jsonrpc: '2.0', id: 'x', method: 'getAssetsByGroup' });
    expect(r.body).toMatchObject({ id: 'x', error: { code: -32602 } });
    expect(r.body.error.message).toMatch(/params/);
    expect(named.calls).toHaveLength(0);
  });

  it('params: null is params missing → -32602 (not -32600), nothing forwarded', async () => {
    const r = await rpc(tg.url('das-named'), { jsonrpc: '2.0', id: 'n', method: 'getAssetsByGroup', params: null });
    expect(r.body).toMatchObject({ id: 'n', error: { code: -32602 } });
    expect(r.body.error.message).toMatch(/missing params/);
    expect(named.calls).toHaveLength(0);
  });

  it('a batch of invalid items is answered per item and forwards nothing', async () => {
    const r = await rpc(tg.url('das-positional'), [
      { jsonrpc: '2.0', id: 1, method: 'getAssetsByGroup', params: ['collection', 'bad'] },
      { jsonrpc: '2.0', id: 2, method: 'getAssetsByGroup', params: { ...g, page: 0 } },
      { jsonrpc: '2.0', id: 3, method: 'getAssetsByGroup', params: { ...g, limit: 1001 } },
    ]);
    expect(r.body).toStrictEqual([
      { jsonrpc: '2.0', id: 1, error: { code: -32000, message: pubkeyErr('bad') } },
      { jsonrpc: '2.0', id: 2, error: { code: -32000, message: PAGINATION_NONE } },
      { jsonrpc: '2.0', id: 3, error: { code: -32000, message: PAGINATION_LIMIT } },
    ]);
    expect(positional.calls).toHaveLength(0);
  });

  it('an EVM method name on an asset network is not the EVM first-class method: passed through unvalidated at the unlisted price', async () => {
    // Upper-case hex and a missing second argument: the EVM method would refuse or canonicalise them.
    const params = [`0x${'AB'.repeat(32)}`];
    const r = await rpc(tg.url('das-named'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params });
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 1, result: RESULT });
    expect(r.headers.get('x-credits-cost')).toBe('80');
    expect(named.calls).toHaveLength(1);
    expect((named.calls[0]!.body as { method: string; params: unknown }).params).toStrictEqual(params);
  });
});

describe('valid requests reach each upstream in its declared form', () => {
  const OPTIONS = { showFungible: true, showUnverifiedCollections: true, someProviderFlag: 1 };

  async function send(network: string, params: unknown, id: unknown) {
    const r = await rpc(tg.url(network), { jsonrpc: '2.0', id, method: 'getAssetsByGroup', params });
    expect(r.status).toBe(200);
    return r;
  }

  function lastSent(upstream: ScriptedUpstream): RpcItem {
    expect(upstream.calls).toHaveLength(1);
    const body = upstream.calls[0]!.body as RpcItem;
    expect(body).toMatchObject({ jsonrpc: '2.0', method: 'getAssetsByGroup' });
    return body;
  }

  it('named (displayOptions) → named upstream gets an object with `options`, unknown option keys untouched', async () => {
    const params = { ...g, sortBy: sort('created', 'asc'), limit: 10, page: 2, displayOptions: OPTIONS };
    const r = await send('das-named', params, 'helius-sdk');
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 'helius-sdk', result: RESULT });
    expect(r.headers.get('x-credits-cost')).toBe('160');
    const sent = lastSent(named);
    expect(sent.params).toStrictEqual({ ...g, sortBy: { sortBy: 'created', sortDirection: 'asc' }, limit: 10, page: 2, options: OPTIONS });
    expect(sent.id).not.toBe('helius-sdk');
    expect(typeof sent.id).toBe('number');
  });

  it('named → positional upstream gets [groupKey, groupValue, sortBy, limit, page, before, after, options] with trailing nulls trimmed', async () => {
    const params = { ...g, sortBy: sort('id', 'asc'), limit: 10, page: 2, options: OPTIONS };
    const r = await send('das-positional', params, 0);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 0, result: RESULT });
    const sent = lastSent(positional);
    expect(sent.params).toStrictEqual(['collection', COLLECTION, { sortBy: 'id', sortDirection: 'asc' }, 10, 2, null, null, OPTIONS]);
    expect(sent.id).not.toBe(0);
  });

  it('positional with nulls → named upstream gets only the given fields', async () => {
    const uuid = '3f2c1a9e-5b7d-4e8f-9a0b-1c2d3e4f5a6b';
    const r = await send('das-named', ['collection', COLLECTION, null, 50, null, ASSET_A, null, OPTIONS, null], uuid);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: uuid, result: RESULT });
    const sent = lastSent(named);
    expect(sent.params).toStrictEqual({ ...g, limit: 50, before: ASSET_A, options: OPTIONS });
    expect(sent.id).not.toBe(uuid);
  });

  it('positional cursor → positional upstream keeps the nulls before the cursor', async () => {
    const r = await send('das-positional', ['collection', COLLECTION, null, null, null, null, null, null, CURSOR], 987654);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 987654, result: RESULT });
    const sent = lastSent(positional);
    expect(sent.params).toStrictEqual(['collection', COLLECTION, null, null, null, null, null, null, CURSOR]);
    expect(sent.id).not.toBe(987654);
  });

  it('the minimal request: named → positional is just [groupKey, groupValue]', async () => {
    await send('das-positional', { ...g }, 1.5);
    expect(lastSent(positional).params).toStrictEqual(['collection', COLLECTION]);
  });

  it('empty before/after/cursor are absent: page 1 passes and the empties are not forwarded', async () => {
    await send('das-named', { ...g, page: 1, before: '', after: '', cursor: '' }, 1);
    expect(lastSent(named).params).toStrictEqual({ ...g, page: 1 });
    await send('das-positional', ['collection', COLLECTION, null, null, 1, '', '', null, ''], 2);
    expect(lastSent(positional).params).toStrictEqual(['collection', COLLECTION, null, null, 1]);
  });

  it('boundaries are accepted: limit 1000, limit 0, sort created with a page, after with sort id', async () => {
    await send('das-positional', { ...g, limit: 1000, page: 1, sortBy: sort('created', 'desc') }, 'a');
    expect(lastSent(positional).params).toStrictEqual(['collection', COLLECTION, { sortBy: 'created', sortDirection: 'desc' }, 1000, 1]);
    positional.calls.length = 0;
    await send('das-positional', { ...g, limit: 0, after: ASSET_B, sortBy: sort('id') }, 'b');
    expect(lastSent(positional).params).toStrictEqual(['collection', COLLECTION, { sortBy: 'id' }, 0, null, null, ASSET_B]);
  });

  it('the upstream answer (and an upstream JSON-RPC error) are passed through with the client id restored', async () => {
    named.setBehaviour({ kind: 'rpc-error', code: -32004, message: 'group not indexed' });
    try {
      const r = await send('das-named', { ...g }, 'client-id');
      expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 'client-id', error: { code: -32004, message: 'group not indexed' } });
      expect(named.calls).toHaveLength(1);
    } finally {
      named.setBehaviour({ kind: 'result', result: RESULT });
    }
  });

  it('a batch mixing valid and invalid items forwards only the valid ones, each in its upstream form', async () => {
    const r = await rpc(tg.url('das-positional'), [
      { jsonrpc: '2.0', id: 'v', method: 'getAssetsByGroup', params: { ...g, limit: 5 } },
      { jsonrpc: '2.0', id: 'i', method: 'getAssetsByGroup', params: { ...g, limit: 5000 } },
    ]);
    expect(r.body).toStrictEqual([
      { jsonrpc: '2.0', id: 'v', result: RESULT },
      { jsonrpc: '2.0', id: 'i', error: { code: -32000, message: PAGINATION_LIMIT } },
    ]);
    expect(lastSent(positional).params).toStrictEqual(['collection', COLLECTION, null, 5]);
  });
});
