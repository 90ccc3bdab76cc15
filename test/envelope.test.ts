// Request bodies and batch answers (src/jsonrpc/envelope.ts). parseBody reads most bodies in one
// JSON.parse, finding ids by their member names, and falls back to the scanner otherwise: both
// ways must read every body alike. serialiseBatch builds the body in one allocation: it must be
// the replies' JSON, ids and result bytes exactly as given.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GatewayError, toJsonRpcError } from '../src/errors.js';
import { idText, parseBody, serialiseBatch, type IdText, type Reply } from '../src/jsonrpc/envelope.js';

const LIMITS = { maxBatchItems: 100, maxParamsDepth: 4, maxParamsBytes: 64 * 1024 };

const idTexts = fc.constantFrom('1', '0', '-0', '1.0', '1E+2', '9007199254740993', '"abc"', '"é🦀"', '"}]{["', 'null', '[1]', '{"a":1}', 'true');
const paramsTexts = fc.oneof(
  fc.json({ maxDepth: 6 }).filter((text) => !text.includes('\\')),
  fc.constantFrom('[["x"]]', '[[[[["too deep"]]]]]', '{"id":7}', 'null', '"scalar"'),
);
const item = fc.record(
  {
    jsonrpc: fc.constantFrom('"2.0"', '"1.0"'),
    id: idTexts,
    method: fc.constantFrom('"eth_chainId"', '""', '7', '"getAssetsByGroup"'),
    params: paramsTexts,
  },
  { requiredKeys: ['jsonrpc', 'method'] },
).map((members) => `{${Object.entries(members).map(([key, value]) => `"${key}" : ${value}`).join(', ')}}`);

/** The same request with a member nothing reads, spelled with an escape: the body now takes the scanner's way. */
const withEscape = (itemText: string) => itemText.replace(/^\{/, '{"note":"\\u0041",');

describe('parseBody', () => {
  it('reads a body in one pass exactly as the scanner reads it', () => {
    let batches = 0;
    fc.assert(
      fc.property(fc.array(fc.oneof({ weight: 8, arbitrary: item }, { weight: 1, arbitrary: fc.constantFrom('1', '"x"', '[]') }), { minLength: 1, maxLength: 6 }), fc.boolean(), (items, single) => {
        const asBody = (texts: string[]) => Buffer.from(single && texts.length === 1 ? texts[0]! : `[${texts.join(',')}]`);
        const onePass = parseBody(asBody(items), LIMITS);
        const scanned = parseBody(asBody(items.map(withEscape)), LIMITS);
        if (onePass.kind === 'batch') batches += 1;
        expect(JSON.stringify(onePass, replacer)).toBe(JSON.stringify(scanned, replacer));
      }),
      { numRuns: 2_000 },
    );
    expect(batches).toBeGreaterThan(500);
  });

  it('keeps each id as written, and bounds params depth and size on either way', () => {
    const body = Buffer.from('[{"jsonrpc":"2.0","id":1.0,"method":"m","params":[[[[["deep"]]]]]},{"jsonrpc":"2.0","id":-0,"method":"m","params":[]}]');
    const parsed = parseBody(body, LIMITS);
    expect(parsed.kind).toBe('batch');
    if (parsed.kind !== 'batch') return;
    const [first, second] = parsed.items;
    expect(first).toMatchObject({ kind: 'call', id: '1.0' });
    expect(first?.kind === 'call' ? first.paramsError?.message : undefined).toMatch(/nests deeper than 4 levels/);
    expect(second).toMatchObject({ kind: 'call', id: '-0', paramsError: undefined });
    // A body larger than the params bound takes the scanner's way, which measures each params.
    const large = Buffer.from(`{"jsonrpc":"2.0","id":2,"method":"m","params":["${'a'.repeat(200)}"]}`);
    const bounded = parseBody(large, { ...LIMITS, maxParamsBytes: 100 });
    expect(bounded.kind === 'single' && bounded.item.kind === 'call' ? bounded.item.paramsError?.message : undefined).toMatch(/params are 204 bytes, at most 100/);
  });
});

/** Errors compared by code and message (their stacks differ). */
function replacer(_key: string, value: unknown): unknown {
  return value instanceof GatewayError ? { code: value.code, message: value.message } : value;
}

describe('serialiseBatch', () => {
  const reply = fc.oneof(
    fc.record({ id: idTexts.map((text) => text as IdText), result: fc.json().map((text) => Buffer.from(text)) }),
    fc.record({ id: idTexts.map((text) => text as IdText), result: fc.json() }),
    idTexts.map((text): Reply => ({ id: text as IdText, error: toJsonRpcError(new GatewayError('TG_ERR_INVALID_REQUEST', 'Invalid Request: é 🦀 "quoted"')) })),
  );

  it('writes the replies as a JSON array, ids and result bytes exactly as given', () => {
    fc.assert(
      fc.property(fc.array(reply, { minLength: 1, maxLength: 8 }), (replies) => {
        const expected = `[${replies
          .map((one) => ('result' in one ? `{"jsonrpc":"2.0","id":${one.id},"result":${one.result.toString()}}` : `{"jsonrpc":"2.0","id":${one.id},"error":${JSON.stringify(one.error)}}`))
          .join(',')}]`;
        expect(serialiseBatch(replies).toString('utf8')).toBe(expected);
      }),
      { numRuns: 2_000 },
    );
    expect(serialiseBatch([{ id: idText('é'), result: '"🦀"' }]).toString('utf8')).toBe('[{"jsonrpc":"2.0","id":"é","result":"🦀"}]');
  });
});
