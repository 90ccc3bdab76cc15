// The upstream envelope scanner: finds id/result/error of a JSON-RPC response without parsing the
// result, and refuses anything that is not one well-formed object.

import { describe, expect, it } from 'vitest';
import { scanEnvelope } from '../src/jsonrpc/envelope-scanner.js';

function members(text: string): Record<string, string> | undefined {
  const bytes = Buffer.from(text);
  const spans = scanEnvelope(bytes);
  if (spans === undefined) return undefined;
  const out: Record<string, string> = {};
  for (const [name, span] of Object.entries(spans)) out[name] = bytes.toString('utf8', span.start, span.end);
  return out;
}

describe('scanEnvelope', () => {
  it('returns the exact bytes of id, result and error, whatever the member order and spacing', () => {
    expect(members('{"jsonrpc":"2.0","id":7,"result":{"a":[1,2,{"b":"}"}]}}')).toEqual({ id: '7', result: '{"a":[1,2,{"b":"}"}]}' });
    expect(members(' {\n  "result" : [ "x", null ] ,\n "id": "abc" , "jsonrpc":"2.0" }\n')).toEqual({ result: '[ "x", null ]', id: '"abc"' });
    expect(members('{"id":1,"error":{"code":-32000,"message":"header not found"}}')).toEqual({ id: '1', error: '{"code":-32000,"message":"header not found"}' });
    expect(members('{"id":1,"result":null}')).toEqual({ id: '1', result: 'null' });
    expect(members('{"id":1,"result":-12.5e3}')).toEqual({ id: '1', result: '-12.5e3' });
    expect(members('{}')).toEqual({});
  });

  it('is not fooled by brackets, quotes and keys inside strings, or by multi-byte characters', () => {
    const text = '{"id":2,"result":{"name":"a \\"quoted\\" } ] [ {","emoji":"🦀 ✓","nested":{"id":99,"result":"inner"}}}';
    const found = members(text)!;
    expect(found.id).toBe('2');
    expect(JSON.parse(found.result!)).toEqual({ name: 'a "quoted" } ] [ {', emoji: '🦀 ✓', nested: { id: 99, result: 'inner' } });
  });

  it('refuses what is not one well-formed JSON object', () => {
    for (const text of [
      '',
      '<html>502 Bad Gateway</html>',
      '[{"id":1,"result":1}]',
      '{"id":1,"result":{"a":1}',
      '{"id":1,"result":{"a":1]}}',
      '{"id":1,"result":"unterminated}',
      '{"id":1 "result":1}',
      '{"id":1,"result":1} trailing',
      '{id:1}',
      '{"id":1,}',
    ]) {
      expect(scanEnvelope(Buffer.from(text)), text).toBeUndefined();
    }
  });

  it('agrees with JSON.parse on a large generated result', () => {
    const result = { total: 3, items: Array.from({ length: 2000 }, (_, index) => ({ id: `asset-${index}`, tags: ['a', '{', ']'], value: index * 1.5, ok: index % 2 === 0 })) };
    const text = JSON.stringify({ jsonrpc: '2.0', id: 12345, result });
    const found = members(text)!;
    expect(JSON.parse(found.result!)).toEqual(result);
    expect(found.id).toBe('12345');
  });
});
