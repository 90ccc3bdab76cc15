// The envelope scanner's JSON validation against JSON.parse, on generated documents: valid ones
// (as JSON.stringify writes them, and as the grammar allows but JSON.stringify never writes) and
// corrupted ones. For UTF-8 input the validator must accept exactly what JSON.parse accepts, alone
// (`isValidJson`) and as the result of an envelope (`scanEnvelope`); bytes that are not UTF-8 are
// refused. The runs are seeded: a failure prints the seed and the counterexample (fast-check), and
// FC_SEED=<seed> replays it.

import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isValidJson, scanEnvelope } from '../src/jsonrpc/envelope-scanner.js';

const seed = process.env.FC_SEED === undefined ? 0x7011_6a7e : Number(process.env.FC_SEED);
const runs = { seed, numRuns: 400 };

const utf8 = new TextEncoder();

// ---------------------------------------------------------------------------------------------
// Valid documents

/** One character of a string value: anything, with the characters JSON has to escape made likely. */
const stringUnit = fc.oneof(
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }),
  fc.constantFrom('"', '\\', '/', '\u007f', '\u2028', '\ufeff'),
  fc.integer({ min: 0, max: 0x1f }).map((code) => String.fromCharCode(code)),
  // Lone surrogates: JSON.stringify writes them as \uXXXX escapes.
  fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code)),
);

/** What JSON.stringify writes, with each of its indentations. */
const stringifiedText = fc
  .tuple(fc.jsonValue({ maxDepth: 6, stringUnit }), fc.constantFrom(undefined, 1, 2, '\t', '\r\n'))
  .map(([value, indent]) => JSON.stringify(value, null, indent));

const whitespace = fc.string({ unit: fc.constantFrom(' ', '\t', '\n', '\r'), maxLength: 2 });
const digits = (minLength: number, maxLength: number) => fc.string({ unit: fc.constantFrom(...'0123456789'), minLength, maxLength });

/** Numbers in every form of the grammar: `-0`, `0.000`, `1E+02`, `12e-0005`, 40-digit integers. */
const numberText = fc
  .tuple(
    fc.constantFrom('', '-'),
    fc.oneof(fc.constant('0'), fc.tuple(fc.constantFrom(...'123456789'), digits(0, 40)).map(([first, rest]) => first + rest)),
    fc.option(digits(1, 20).map((fraction) => `.${fraction}`), { nil: '' }),
    fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), digits(1, 5)).map((parts) => parts.join('')), { nil: '' }),
  )
  .map((parts) => parts.join(''));

const hexDigit = fc.constantFrom(...'0123456789abcdefABCDEF');

/** Strings with every escape, including `\/` and upper-case `\uXXXX`, which JSON.stringify never writes. */
const stringText = fc
  .array(
    fc.oneof(
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }).filter((char) => char !== '"' && char !== '\\' && char >= ' '),
      fc.constantFrom('\\"', '\\\\', '\\/', '\\b', '\\f', '\\n', '\\r', '\\t'),
      fc.string({ unit: hexDigit, minLength: 4, maxLength: 4 }).map((hex) => `\\u${hex}`),
    ),
    { maxLength: 12 },
  )
  .map((parts) => `"${parts.join('')}"`);

/** JSON text built from the grammar, with whitespace between any two tokens. */
const { value: grammarValue } = fc.letrec<{ value: string; array: string; object: string }>((tie) => ({
  value: fc.oneof(
    { maxDepth: 8, depthSize: 'small', withCrossShrink: true },
    fc.constantFrom('true', 'false', 'null'),
    numberText,
    stringText,
    tie('array'),
    tie('object'),
  ),
  array: fc.oneof(
    whitespace.map((space) => `[${space}]`),
    fc
      .array(fc.tuple(whitespace, tie('value'), whitespace), { minLength: 1, maxLength: 5 })
      .map((items) => `[${items.map((parts) => parts.join('')).join(',')}]`),
  ),
  object: fc.oneof(
    whitespace.map((space) => `{${space}}`),
    fc
      .array(fc.tuple(whitespace, stringText, whitespace, fc.constant(':'), whitespace, tie('value'), whitespace), { minLength: 1, maxLength: 5 })
      .map((members) => `{${members.map((parts) => parts.join('')).join(',')}}`),
  ),
}));
const grammarText = fc.tuple(whitespace, grammarValue, whitespace).map((parts) => parts.join(''));

/** A value at the bottom of up to 2,000 nested arrays and objects. */
const deeplyNestedText = fc
  .tuple(fc.array(fc.constantFrom('array', 'object'), { minLength: 1, maxLength: 2000 }), fc.jsonValue({ maxDepth: 1 }))
  .map(([containers, leaf]) => {
    let text = JSON.stringify(leaf);
    for (const container of containers) text = container === 'array' ? `[${text}]` : `{"k":${text}}`;
    return text;
  });

const validText = fc.oneof(stringifiedText, grammarText, deeplyNestedText);

// ---------------------------------------------------------------------------------------------
// Corruptions

/** Bytes that matter to a JSON parser or to UTF-8, and sometimes any byte at all. */
const interestingByte = fc.oneof(
  fc.constantFrom(...utf8.encode('{}[],:"\\ \t\n\r0123456789-+.eEtrufalsn/bu'), 0x00, 0x1f, 0x7f, 0x80, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xf0, 0xf4, 0xf5, 0xff),
  fc.integer({ min: 0, max: 255 }),
);

type Corruption =
  | { kind: 'delete'; at: number }
  | { kind: 'insert'; at: number; byte: number }
  | { kind: 'replace'; at: number; byte: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'duplicate'; at: number; length: number }
  | { kind: 'mangle-literal'; which: number; edit: 'drop' | 'upper' | 'extra' | 'prefix'; offset: number }
  | { kind: 'confuse'; which: number; choice: number }
  | { kind: 'unescape'; which: number };

/**
 * For a byte that carries syntax, bytes a broken serialiser might write instead: near misses that
 * a uniformly chosen replacement would rarely produce (`,` for `:`, `+1`, `\x`, a vertical tab).
 */
const CONFUSABLE = new Map<number, Uint8Array[]>(
  Object.entries({
    ':': [',', ';', '='],
    ',': [':', ';'],
    '{': ['[', '('],
    '[': ['{', '('],
    '}': [']', ')'],
    ']': ['}', ')'],
    '"': ["'", '`'],
    '\\': ['/', '|'],
    '-': ['+', '_'],
    '.': [',', 'e'],
    e: ['E', '.', 'x'],
    E: ['e', '.', 'x'],
    '0': ['+', '.', '-'],
    '1': ['+', '.', '-'],
    n: ['x', 'a', 'U', 'N'],
    t: ['x', 'a', 'U', 'T'],
    u: ['x', 'U', 'X'],
    ' ': ['\v', '\f', '\u00a0'],
    '\n': ['\v', '\u2028'],
  }).map(([from, to]) => [from.charCodeAt(0), to.map((replacement) => utf8.encode(replacement))]),
);

const corruption: fc.Arbitrary<Corruption> = fc.oneof(
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), byte: interestingByte }),
  fc.record({ kind: fc.constant('replace' as const), at: fc.nat(), byte: interestingByte }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('duplicate' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 8 }) }),
  fc.record({ kind: fc.constant('confuse' as const), which: fc.nat(), choice: fc.nat() }),
  fc.record({ kind: fc.constant('confuse' as const), which: fc.nat(), choice: fc.nat() }),
  fc.record({ kind: fc.constant('unescape' as const), which: fc.nat() }),
  fc.record({
    kind: fc.constant('mangle-literal' as const),
    which: fc.nat(),
    edit: fc.constantFrom('drop' as const, 'upper' as const, 'extra' as const, 'prefix' as const),
    offset: fc.nat(),
  }),
);

/** `bytes` changed as `change` says; texts are read as Latin-1, one character per byte. */
function corrupt(bytes: Uint8Array, change: Corruption): Uint8Array {
  /** `n` brought into 0..count-1 (0 when count is 0). */
  const within = (n: number, count: number) => n % Math.max(count, 1);
  switch (change.kind) {
    case 'delete': {
      const at = within(change.at, bytes.length);
      return Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1)]);
    }
    case 'insert': {
      const at = within(change.at, bytes.length + 1);
      return Buffer.concat([bytes.subarray(0, at), Uint8Array.of(change.byte), bytes.subarray(at)]);
    }
    case 'replace': {
      const copy = Uint8Array.from(bytes);
      if (copy.length > 0) copy[within(change.at, bytes.length)] = change.byte;
      return copy;
    }
    case 'truncate':
      return bytes.subarray(0, within(change.at, bytes.length));
    case 'duplicate': {
      const at = within(change.at, bytes.length);
      return Buffer.concat([bytes.subarray(0, at + change.length), bytes.subarray(at)]);
    }
    case 'confuse': {
      const positions = [...bytes.keys()].filter((index) => CONFUSABLE.has(bytes[index]!));
      const position = positions[within(change.which, positions.length)];
      if (position === undefined) return bytes;
      const replacements = CONFUSABLE.get(bytes[position]!)!;
      const replacement = replacements[change.choice % replacements.length]!;
      return Buffer.concat([bytes.subarray(0, position), replacement, bytes.subarray(position + 1)]);
    }
    case 'unescape': {
      // The control character an escape stands for, written raw, as a careless serialiser would.
      const text = Buffer.from(bytes).toString('latin1');
      const escapes = [...text.matchAll(/\\([bfnrt]|u00[01][0-9a-fA-F])/g)];
      const found = escapes[within(change.which, escapes.length)];
      if (found === undefined) return bytes;
      const raw = JSON.parse(`"${found[0]}"`) as string;
      return Buffer.from(text.slice(0, found.index) + raw + text.slice(found.index + found[0].length), 'latin1');
    }
    case 'mangle-literal': {
      const text = Buffer.from(bytes).toString('latin1');
      const literals = [...text.matchAll(/true|false|null/g)];
      const found = literals[within(change.which, literals.length)];
      if (found === undefined) return bytes;
      const word = found[0];
      const offset = change.offset % word.length;
      const mangled =
        change.edit === 'drop'
          ? word.slice(0, offset) + word.slice(offset + 1)
          : change.edit === 'upper'
            ? word.slice(0, offset) + word[offset]!.toUpperCase() + word.slice(offset + 1)
            : change.edit === 'extra'
              ? word.slice(0, offset + 1) + 'e' + word.slice(offset + 1)
              : `${word[0]}${word}`;
      return Buffer.from(text.slice(0, found.index) + mangled + text.slice(found.index + word.length), 'latin1');
    }
  }
}

const corruptedBytes = fc
  .tuple(validText, fc.array(corruption, { minLength: 1, maxLength: 3 }))
  .map(([text, changes]) => changes.reduce(corrupt, utf8.encode(text)));

/** Random bytes, and random soups of JSON's own characters (which are valid now and then). */
const randomBytes = fc.oneof(
  fc.uint8Array({ maxLength: 64 }),
  fc.string({ unit: fc.constantFrom(...'{}[],:"\\ 0123456789-+.eEtruefalsn'), maxLength: 40 }).map((text) => utf8.encode(text)),
);

// ---------------------------------------------------------------------------------------------
// The oracle

const envelopeStart = utf8.encode('{"jsonrpc":"2.0","id":1,"result":');
const envelopeEnd = utf8.encode('}');

function parses(bytes: Uint8Array): boolean {
  try {
    JSON.parse(Buffer.from(bytes).toString('utf8'));
    return true;
  } catch {
    return false;
  }
}

function isJsonWhitespace(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

/** `document` without the JSON whitespace around it. */
function trimmed(document: Uint8Array): Uint8Array {
  let start = 0;
  let end = document.length;
  while (start < end && isJsonWhitespace(document[start])) start += 1;
  while (end > start && isJsonWhitespace(document[end - 1])) end -= 1;
  return document.subarray(start, end);
}

/** Checks `isValidJson` on the document and `scanEnvelope` on it as an envelope's result. */
function agreesWithJsonParse(document: Uint8Array): void {
  const envelope = Buffer.concat([envelopeStart, document, envelopeEnd]);
  const spans = scanEnvelope(envelope);
  const valid = isValidJson(document);
  if (!isUtf8(document)) {
    expect(valid).toBe(false);
    expect(spans).toBeUndefined();
    return;
  }
  expect(valid).toBe(parses(document));
  expect(spans !== undefined).toBe(parses(envelope));
  if (valid) {
    expect(spans!.id).toEqual({ start: envelopeStart.length - '1,"result":'.length, end: envelopeStart.length - ',"result":'.length });
    expect(Buffer.from(envelope.subarray(spans!.result!.start, spans!.result!.end))).toEqual(Buffer.from(trimmed(document)));
  }
}

// ---------------------------------------------------------------------------------------------

describe('isValidJson and scanEnvelope against JSON.parse', () => {
  it('accept every valid document', () => {
    fc.assert(
      fc.property(validText, (text) => {
        const document = utf8.encode(text);
        expect(isValidJson(document)).toBe(true);
        agreesWithJsonParse(document);
      }),
      runs,
    );
  });

  it('agree with JSON.parse on corrupted documents', () => {
    fc.assert(fc.property(corruptedBytes, agreesWithJsonParse), { ...runs, numRuns: 2000 });
  });

  it('agree with JSON.parse on random bytes', () => {
    fc.assert(fc.property(randomBytes, agreesWithJsonParse), runs);
  });
});

describe('UTF-8', () => {
  const invalidSequences = [
    [0x80], // a continuation byte with no lead
    [0xbf],
    [0xc0, 0xaf], // overlong encodings of '/'
    [0xe0, 0x80, 0xaf],
    [0xf0, 0x80, 0x80, 0xaf],
    [0xc1, 0xbf],
    [0xed, 0xa0, 0x80], // a UTF-16 surrogate (U+D800) encoded as if it were a character
    [0xed, 0xbf, 0xbf],
    [0xf4, 0x90, 0x80, 0x80], // above U+10FFFF
    [0xf5],
    [0xff],
    [0xe2, 0x82], // a sequence cut short
    [0xf0, 0x9f, 0x98],
    [0xc3],
  ].map((sequence) => Uint8Array.from(sequence));
  const where = fc.constantFrom('string', 'name', 'top-level string');

  function embed(sequence: Uint8Array, place: 'string' | 'name' | 'top-level string', document: string): Uint8Array {
    const [before, after] =
      place === 'string' ? [`[${document},"a`, 'b"]'] : place === 'name' ? ['{"a', `b":${document}}`] : ['"a', 'b"'];
    return Buffer.concat([utf8.encode(before), sequence, utf8.encode(after)]);
  }

  it('refuses invalid sequences wherever they sit, and accepts the same document with a valid one', () => {
    fc.assert(
      fc.property(fc.constantFrom(...invalidSequences), where, stringifiedText, (sequence, place, document) => {
        const invalid = embed(sequence, place, document);
        expect(isUtf8(invalid)).toBe(false);
        expect(isValidJson(invalid)).toBe(false);
        expect(scanEnvelope(Buffer.concat([envelopeStart, invalid, envelopeEnd]))).toBeUndefined();
        const valid = embed(utf8.encode('é🦀'), place, document);
        expect(isValidJson(valid)).toBe(true);
        expect(scanEnvelope(Buffer.concat([envelopeStart, valid, envelopeEnd]))).toBeDefined();
      }),
      runs,
    );
  });

  it('refuses random byte sequences that are not UTF-8', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 6 }), where, (sequence, place) => {
        const document = embed(sequence, place, '1');
        fc.pre(!isUtf8(document));
        expect(isValidJson(document)).toBe(false);
        expect(scanEnvelope(Buffer.concat([envelopeStart, document, envelopeEnd]))).toBeUndefined();
      }),
      runs,
    );
  });
});

describe('deep nesting', () => {
  const depth = 100_000;

  it('answers for 100,000 levels without recursion', () => {
    const arrays = '['.repeat(depth) + ']'.repeat(depth);
    const objects = '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
    const mixed = '[{"a":'.repeat(depth / 2) + 'null' + '}]'.repeat(depth / 2);
    for (const text of [arrays, objects, mixed]) {
      expect(isValidJson(utf8.encode(text))).toBe(true);
      expect(scanEnvelope(Buffer.concat([envelopeStart, utf8.encode(text), envelopeEnd]))).toBeDefined();
    }
    for (const text of ['['.repeat(depth), arrays.slice(0, -1), `${'['.repeat(depth)}}${']'.repeat(depth - 1)}`, objects.replace('1}', '1,}')]) {
      expect(isValidJson(utf8.encode(text))).toBe(false);
      expect(scanEnvelope(Buffer.concat([envelopeStart, utf8.encode(text), envelopeEnd]))).toBeUndefined();
    }
  });

  it('still validates small documents after a deep one', () => {
    expect(isValidJson(utf8.encode('['.repeat(depth) + ']'.repeat(depth)))).toBe(true);
    expect(isValidJson(utf8.encode('[[1],{"a":[2]}]'))).toBe(true);
    expect(isValidJson(utf8.encode('[[1],{"a":[2}]]'))).toBe(false);
  });
});
