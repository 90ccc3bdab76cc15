// The request scanner (src/jsonrpc/request-scanner.ts) against JSON.parse on generated request
// bodies: any member order and spacing, duplicate and escaped keys, ids written every way JSON
// allows a number or string to be written, params of any shape and depth.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { idTextsByMemberName, scanRequestBody, type ItemSpans } from '../src/jsonrpc/request-scanner.js';

const whitespace = fc.constantFrom('', ' ', '\n', '\t', ' \r\n ');

/** Number texts whose value JSON.parse does not round-trip, and ordinary ones. */
const numberText = fc.oneof(
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((value) => JSON.stringify(value)),
  fc.constantFrom('9007199254740993', '123456789012345678901234567890', '1e-400', '1e400', '-0', '1.0', '1E+2', '-12.500e-3', '0.1e1'),
);
const stringText = fc.oneof(
  fc.string().map((value) => JSON.stringify(value)),
  fc.constantFrom('"\\u0041"', '"a\\"b"', '"\\\\"', '"\\\\\\""', '"é🦀"', '"}]{["'),
);
const idText = fc.oneof(numberText, stringText, fc.constant('null'));
const anyValueText = fc.oneof(fc.json(), idText);

/** A key that JSON.parse reads as `name`, sometimes spelled with escapes. */
function spelled(name: string): fc.Arbitrary<string> {
  const escaped = `"${[...name].map((char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"`;
  return fc.constantFrom(JSON.stringify(name), escaped);
}

const member = fc.oneof(
  fc.tuple(spelled('id'), idText),
  fc.tuple(spelled('params'), fc.json()),
  fc.tuple(spelled('params'), fc.integer({ min: 1, max: 300 }).map((depth) => `${'['.repeat(depth)}${']'.repeat(depth)}`)),
  fc.tuple(fc.constantFrom('"jsonrpc"', '"method"', '"idx"', '"param"', '"i\\u0064x"', '"__proto__"'), anyValueText),
);

const objectText = fc.tuple(fc.array(fc.tuple(member, whitespace, whitespace), { maxLength: 6 }), whitespace).map(
  ([members, end]) => `{${members.map(([[key, value], before, after]) => `${before}${key}${after}:${after}${value}${before}`).join(',')}${end}}`,
);

function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  return 1 + Math.max(0, ...Object.values(value).map(depthOf));
}

/** What the spans must say about one parsed object, read back from the text. */
function check(text: string, value: unknown, spans: ItemSpans): void {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    expect(spans.idStart).toBe(-1);
    return;
  }
  const object = value as Record<string, unknown>;
  if (Object.hasOwn(object, 'id')) {
    const idTextFound = text.slice(spans.idStart, spans.idEnd);
    // The text found is the one JSON.parse kept (the last `id`): same value, read again.
    expect(JSON.parse(idTextFound)).toStrictEqual(object.id);
  } else {
    expect(spans.idStart).toBe(-1);
  }
  if (Object.hasOwn(object, 'params')) {
    expect(JSON.parse(text.slice(spans.paramsStart, spans.paramsEnd))).toStrictEqual(object.params);
    expect(spans.paramsDepth).toBe(depthOf(object.params));
  } else {
    expect(spans.paramsStart).toBe(-1);
  }
}

describe('scanRequestBody', () => {
  it('finds the id and params JSON.parse keeps, in single objects', () => {
    fc.assert(
      fc.property(objectText, whitespace, (object, space) => {
        const text = `${space}${object}${space}`;
        check(text, JSON.parse(text), scanRequestBody(text) as ItemSpans);
      }),
      { numRuns: 2_000 },
    );
  });

  it('finds them item by item in batches, non-objects included', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(objectText, anyValueText), { minLength: 1, maxLength: 8 }), whitespace, (items, space) => {
        const text = `[${space}${items.join(`${space},`)}${space}]`;
        const parsed = JSON.parse(text) as unknown[];
        const spans = scanRequestBody(text) as ItemSpans[];
        expect(spans).toHaveLength(parsed.length);
        parsed.forEach((value, index) => check(text, value, spans[index]!));
      }),
      { numRuns: 1_000 },
    );
  });

  it('keeps the exact text of ids JSON.parse cannot round-trip', () => {
    for (const id of ['9007199254740993', '1e-400', '1e400', '-0', '1.0', '"\\u0041"']) {
      const text = `{"jsonrpc":"2.0","id" : ${id} ,"method":"m"}`;
      const spans = scanRequestBody(text) as ItemSpans;
      expect(text.slice(spans.idStart, spans.idEnd)).toBe(id);
    }
  });

  it('measures depth without recursion, 100,000 levels deep', () => {
    const text = `{"params":${'['.repeat(100_000)}${']'.repeat(100_000)},"id":1}`;
    const spans = scanRequestBody(text) as ItemSpans;
    expect(spans.paramsDepth).toBe(100_000);
    expect(text.slice(spans.idStart, spans.idEnd)).toBe('1');
  });
});

/** The scanner's id texts of the items that have an `id` member, in order. */
function scannedIdTexts(text: string, parsed: unknown[]): string[] {
  const scanned = scanRequestBody(text);
  const spansList = Array.isArray(scanned) ? scanned : [scanned];
  return parsed.flatMap((value, index) => {
    const spans = spansList[index]!;
    return value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, 'id') ? [text.slice(spans.idStart, spans.idEnd)] : [];
  });
}

const withIdCount = (values: unknown[]) => values.filter((value) => value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, 'id')).length;

describe('idTextsByMemberName (the fast path that spares the scan)', () => {
  it('finds exactly the texts the scanner finds, or declines', () => {
    let answered = 0;
    fc.assert(
      fc.property(fc.array(fc.oneof(objectText, anyValueText), { minLength: 1, maxLength: 8 }), fc.boolean(), whitespace, (items, batch, space) => {
        const text = batch || items.length > 1 ? `[${space}${items.join(`${space},`)}${space}]` : `${space}${items[0]!}${space}`;
        const parsed = JSON.parse(text) as unknown;
        const values = Array.isArray(parsed) && text.trimStart().startsWith('[') && (batch || items.length > 1) ? parsed : [parsed];
        const found = idTextsByMemberName(text, withIdCount(values));
        if (found !== undefined) {
          answered += 1;
          expect(found).toStrictEqual(scannedIdTexts(text, values));
        }
      }),
      { numRuns: 3_000 },
    );
    // The generated bodies must exercise the fast path, not only its refusals.
    expect(answered).toBeGreaterThan(300);
  });

  it('answers for request bodies as clients write them, and keeps non-canonical numbers as written', () => {
    const calls = ['1', '"abc"', 'null', '9007199254740993', '1.0', '-0', '1E+2', '"é🦀"', '"}]{["'].map(
      (id, index) => `{"jsonrpc":"2.0","id" :\n${id},"method":"eth_getBlockByHash","params":["0x${index}", {"hydrated":false,"note":"id"}]}`,
    );
    const text = `[${calls.join(', ')}, {"jsonrpc":"2.0","method":"eth_notify","params":[]}]`;
    const values = JSON.parse(text) as unknown[];
    expect(idTextsByMemberName(text, withIdCount(values))).toStrictEqual(['1', '"abc"', 'null', '9007199254740993', '1.0', '-0', '1E+2', '"é🦀"', '"}]{["']);
  });

  it('declines when it could be wrong: a backslash anywhere, an id member in params, a repeated id', () => {
    const declined = [
      '{"jsonrpc":"2.0","id":"a\\"b","method":"m"}',
      '{"jsonrpc":"2.0","i\\u0064":1,"id":2,"method":"m"}',
      '[{"jsonrpc":"2.0","id":1,"method":"m","params":[{"id":7}]}]',
      '[{"jsonrpc":"2.0","method":"m","params":[{"id":7}]},{"jsonrpc":"2.0","id":1,"method":"m"}]',
      '{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}',
    ];
    for (const text of declined) {
      const parsed = JSON.parse(text) as unknown;
      expect(idTextsByMemberName(text, withIdCount(Array.isArray(parsed) ? parsed : [parsed])), text).toBeUndefined();
    }
  });
});
