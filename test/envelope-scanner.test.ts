// The upstream envelope scanner: finds id/result/error of a JSON-RPC response without parsing the
// result, and refuses anything that is not one valid JSON object (RFC 8259, UTF-8), since the
// result's bytes reach clients unchanged. test/json-validator.test.ts compares it with JSON.parse
// on generated documents; here, one example of each rule.

import { describe, expect, it } from 'vitest';
import { isValidJson, scanEnvelope } from '../src/jsonrpc/envelope-scanner.js';

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

  it('refuses a result that is balanced but not JSON (`tru`), which used to reach clients', () => {
    expect(scanEnvelope(Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"a":tru}}'))).toBeUndefined();
    expect(members('{"jsonrpc":"2.0","id":1,"result":{"a":true}}')).toEqual({ id: '1', result: '{"a":true}' });
  });
});

/** Whether JSON.parse accepts the text, to keep the examples below honest. */
function parses(text: string | Buffer): boolean {
  try {
    JSON.parse(text.toString());
    return true;
  } catch {
    return false;
  }
}

/**
 * Checks each result alone (`isValidJson`) and inside an envelope (`scanEnvelope`); an accepted
 * result's span must be its exact bytes.
 */
function expectResults(results: Array<string | Buffer>, accepted: boolean): void {
  for (const result of results) {
    const bytes = Buffer.isBuffer(result) ? result : Buffer.from(result);
    const envelope = Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"result":'), bytes, Buffer.from('}')]);
    const label = JSON.stringify(bytes.toString('latin1'));
    expect(parses(bytes), `JSON.parse of ${label}`).toBe(accepted);
    expect(isValidJson(bytes), label).toBe(accepted);
    const spans = scanEnvelope(envelope);
    if (!accepted) {
      expect(spans, label).toBeUndefined();
    } else {
      expect(spans, label).toBeDefined();
      expect(envelope.subarray(spans!.result!.start, spans!.result!.end).toString('latin1'), label).toBe(bytes.toString('latin1').trim());
    }
  }
}

describe('JSON validation, one rule at a time', () => {
  it('literals are exactly true, false and null', () => {
    expectResults(['true', 'false', 'null', '[true,false,null]', '{"t":true}'], true);
    expectResults(['tru', 'True', 'TRUE', 'nul', 'nulll', 'falsey', 'f', '[true false]', 'NaN', 'Infinity', 'undefined', '[t]'], false);
  });

  it('numbers follow -?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?', () => {
    expectResults(['0', '-0', '7', '-12', '12.5', '-0.001', '0.0', '1e5', '1E5', '1e+5', '1e-05', '-1.5E-300', '123456789012345678901234567890', '1e400'], true);
    expectResults(['01', '-01', '00', '+1', '1.', '.5', '-', '-.5', '1e', '1e+', '1E-', '1.e5', '0x10', '1.2.3', '--1', '1_000', '-Infinity', '1 2', '[1-2]', '[1e5e5]'], false);
  });

  it('strings take only the eight one-character escapes and \\uXXXX, and no raw control byte', () => {
    expectResults(['""', '"\\""', '"\\\\"', '"\\/"', '"\\b\\f\\n\\r\\t"', '"\\u00e9\\u00C9"', '"\\ud83e\\udd80"', '"\\udead"', '"\u007f"', '"é🦀✓"'], true);
    expectResults(['"\\x41"', "\"\\'\"", '"\\a"', '"\\0"', '"\\U0041"', '"\\u12"', '"\\u12G4"', '"\\u"', '"\\"', '"abc', "'abc'"], false);
    const controls = Array.from({ length: 0x20 }, (_, byte) => Buffer.from([0x22, 0x61, byte, 0x62, 0x22]));
    expectResults(controls, false);
  });

  it('whitespace is space, tab, CR and LF, nothing else', () => {
    expectResults([' 1', '1 ', '\t[\r\n1 ,\t2\n]\r', '{ "a" : 1 }'], true);
    expectResults(['\v1', '[1,\f2]', '\u00a01', '[1,\u20282]', '\ufeff1', '[1\u00002]'], false);
  });

  it('objects and arrays need their commas and colons, and no trailing comma', () => {
    expectResults(['[]', '{}', '[ ]', '{ }', '[[],{}]', '{"a":{"b":[1,{"c":null}]}}', '{"a":1,"a":2}'], true);
    expectResults(['[1,]', '{"a":1,}', '[,1]', '[1,,2]', '[,]', '{,}', '{"a"}', '{"a":}', '{"a" 1}', '{"a":1 "b":2}', '{"a"::1}', '{1:2}', "{'a':1}", '{a:1}', '[1 2]', '[1:2]', '{"a",1}', '[}', '{]', '[', ']', '[[]', '[]]'], false);
  });

  it('nothing but whitespace follows the value', () => {
    expectResults(['1 \n', '{} '], true);
    expectResults(['1 2', '{}{}', '[]x', '"a""b"', 'null,'], false);
    for (const text of ['{"id":1,"result":1} x', '{"id":1,"result":1}{}', '{"id":1,"result":1}\u0000', '{"id":1,"result":1},']) {
      expect(scanEnvelope(Buffer.from(text)), text).toBeUndefined();
    }
    expect(scanEnvelope(Buffer.from('{"id":1,"result":1}\r\n'))).toEqual({ id: { start: 6, end: 7 }, result: { start: 17, end: 18 } });
  });

  it('bytes are UTF-8', () => {
    const invalid = [[0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0xff]];
    // A Latin-1 'é' (0xE9): decoded, it becomes U+FFFD and JSON.parse accepts it; the scanner refuses.
    const latin1 = Buffer.from('"\xe9"', 'latin1');
    expect(parses(latin1)).toBe(true);
    expect(isValidJson(latin1)).toBe(false);
    for (const sequence of invalid) {
      const bytes = Buffer.concat([Buffer.from('"a'), Buffer.from(sequence), Buffer.from('b"')]);
      expect(isValidJson(bytes)).toBe(false);
      expect(scanEnvelope(Buffer.concat([Buffer.from('{"id":1,"result":'), bytes, Buffer.from('}')]))).toBeUndefined();
    }
  });
});
