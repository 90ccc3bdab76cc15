// Differential testing of the JSON validators against the reference: `TextDecoder` (fatal, BOM
// kept) then `JSON.parse`. Used by test/json-differential.test.ts (a seeded run in `npm test`) and
// bench/json-fuzz.ts (a long run). Each case is checked with the validator in use
// (`isValidJson`, `scanEnvelope`: WebAssembly SIMD where available) and with the JavaScript scan,
// and the spans of the two must be the same numbers.

import { isDeepStrictEqual } from 'node:util';
import { isValidJson, scanEnvelope, type EnvelopeSpans } from '../../src/jsonrpc/envelope-scanner.js';
import { jsIsValidJson, jsScanEnvelope } from '../../src/jsonrpc/js-envelope-scanner.js';
import { generateSampleDataset } from '../../src/devnet/sample-das/index.js';

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** What the reference makes of the bytes: undefined when they are not JSON text in UTF-8. */
function referenceParse(bytes: Uint8Array): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(decoder.decode(bytes)) };
  } catch {
    return undefined;
  }
}

/** A small seeded generator (mulberry32): the same seed gives the same cases. */
export function createRandom(seed: number): { next(): number; int(limit: number): number; pick<T>(items: readonly T[]): T } {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let mixed = state;
    mixed = Math.imul(mixed ^ (mixed >>> 15), mixed | 1);
    mixed ^= mixed + Math.imul(mixed ^ (mixed >>> 7), mixed | 61);
    return ((mixed ^ (mixed >>> 14)) >>> 0) / 4294967296;
  };
  const int = (limit: number): number => Math.floor(next() * limit);
  return { next, int, pick: (items) => items[int(items.length)]! };
}

export interface Disagreement {
  kind: string;
  text: string;
  detail: string;
}

const MEMBERS = ['id', 'result', 'error'] as const;

/** Checks one case; returns what disagreed, if anything. */
export function checkCase(kind: string, bytes: Uint8Array): Disagreement | undefined {
  const disagree = (detail: string): Disagreement => ({ kind, detail, text: JSON.stringify(Buffer.from(bytes).toString('latin1').slice(0, 400)) });
  const reference = referenceParse(bytes);
  const valid = reference !== undefined;
  if (isValidJson(bytes) !== valid) return disagree(`isValidJson says ${!valid}, the reference ${valid}`);
  if (jsIsValidJson(bytes) !== valid) return disagree(`the JavaScript scan says ${!valid}, the reference ${valid}`);
  const isObject = reference !== undefined && reference.value !== null && typeof reference.value === 'object' && !Array.isArray(reference.value);
  const spans = scanEnvelope(bytes);
  const jsSpans = jsScanEnvelope(bytes);
  if ((spans !== undefined) !== isObject) return disagree(`scanEnvelope ${spans === undefined ? 'refused' : 'accepted'} it; the reference's value ${isObject ? 'is' : 'is not'} an object`);
  if (!isDeepStrictEqual(spans, jsSpans)) return disagree(`spans ${JSON.stringify(spans)}, the JavaScript scan's ${JSON.stringify(jsSpans)}`);
  if (spans === undefined) return undefined;
  const object = reference!.value as Record<string, unknown>;
  for (const member of MEMBERS) {
    const span = (spans as EnvelopeSpans)[member];
    if ((span !== undefined) !== Object.hasOwn(object, member)) return disagree(`${member}: span ${JSON.stringify(span)}, in the parsed object: ${Object.hasOwn(object, member)}`);
    if (span === undefined) continue;
    const text = Buffer.from(bytes.buffer, bytes.byteOffset + span.start, span.end - span.start).toString('utf8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return disagree(`${member}: its span's text does not parse: ${text.slice(0, 100)}`);
    }
    // The span must hold exactly the member's value (compared as re-serialised text; a value
    // nested too deeply for JSON.stringify's recursion is covered by the spans check above).
    let same: boolean;
    try {
      same = JSON.stringify(parsed) === JSON.stringify(object[member]);
    } catch {
      continue;
    }
    if (!same) return disagree(`${member}: the span's value differs from JSON.parse's`);
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Cases

/** getAssetsByGroup answers from the sample DAS data set, compact and indented, small and several windows long. */
export function realPages(): Buffer[] {
  const dataset = generateSampleDataset({ seed: 7, assetsPerCollection: [12] });
  const pages: Buffer[] = [];
  for (const count of [1, 2, 5, 12]) {
    const result = { total: count, limit: count, page: 1, items: dataset.assets.slice(0, count) };
    pages.push(Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: count, result })));
    pages.push(Buffer.from(JSON.stringify({ id: `req-${count}`, result, jsonrpc: '2.0' }, null, count % 2 === 0 ? 2 : '\t')));
  }
  pages.push(Buffer.from('{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"Invalid params: limit","data":{"max":1000}}}'));
  return pages;
}

/** Bytes a mutation inserts or writes: the grammar's characters, escapes' letters, controls, UTF-8 lead and continuation bytes. */
const MUTATION_BYTES = Buffer.from('"\\{}[],:0123456789-+.eEtrufalsn \t\r\nu/bx\x00\x01\x1f\x7f', 'latin1');
const HIGH_BYTES = [0x80, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff];

function mutationByte(random: ReturnType<typeof createRandom>): number {
  const draw = random.next();
  if (draw < 0.8) return MUTATION_BYTES[random.int(MUTATION_BYTES.length)]!;
  return draw < 0.9 ? random.pick(HIGH_BYTES) : random.int(256);
}

/** A page with one to three small edits: a byte replaced, inserted or deleted, a slice repeated, the end cut. */
export function mutate(page: Buffer, random: ReturnType<typeof createRandom>): Buffer {
  let bytes = Buffer.from(page);
  const edits = 1 + random.int(3);
  for (let edit = 0; edit < edits; edit += 1) {
    const at = random.int(bytes.length + 1);
    const choice = random.int(10);
    if (choice < 4 && at < bytes.length) {
      bytes[at] = mutationByte(random);
    } else if (choice < 7) {
      bytes = Buffer.concat([bytes.subarray(0, at), Buffer.from([mutationByte(random)]), bytes.subarray(at)]);
    } else if (choice < 9) {
      bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(Math.min(at + 1 + random.int(3), bytes.length))]);
    } else {
      bytes = random.next() < 0.5 ? bytes.subarray(0, at) : Buffer.concat([bytes.subarray(0, at), bytes.subarray(at, at + 1 + random.int(40)), bytes.subarray(at)]);
    }
  }
  return bytes;
}

const TOKENS = ['{', '}', '[', ']', ',', ':', ' ', '\n', '"', '"a"', '"id"', '"result"', '"error"', '"r\\u0065sult"', '"\\u0069d"', '1', '-0', '2.5e-3', '01', 'true', 'fals', 'null', '\\', '"\\n"', '"\\x"', 'é', '"é"', '\u2028'];

/** A short text of JSON-ish tokens, mostly almost valid. */
export function randomText(random: ReturnType<typeof createRandom>): Buffer {
  let text = random.next() < 0.6 ? '{' : '';
  const count = random.int(40);
  for (let index = 0; index < count; index += 1) text += random.pick(TOKENS);
  if (random.next() < 0.5) text += '}';
  return Buffer.from(text);
}

const NAMES = ['"id"', '"result"', '"error"', '"jsonrpc"', '"r\\u0065sult"', '"\\u0069d"', '"\\u0069\\u0064"', '"\\u0065rror"', '"resul\\u0074"', '"re\\/sult"', '"ids"', '"resul"', '"results"', '"i\\u0064x"', '"\\u0000"', '"\\"id"', '"é"'];
const VALUES = ['1', '"x"', 'null', '{"result":1}', '[1,{"id":2}]', '-0.5e3', 'true', '"\\u0022"', '{}', '[]'];
const SPACES = ['', ' ', '\n', '\t ', '\r\n'];

/** A valid envelope whose member names are spelled in many ways (escaped, near misses, repeated). */
export function randomEnvelope(random: ReturnType<typeof createRandom>): Buffer {
  const members: string[] = [];
  const count = random.int(6);
  for (let index = 0; index < count; index += 1) {
    members.push(`${random.pick(SPACES)}${random.pick(NAMES)}${random.pick(SPACES)}:${random.pick(SPACES)}${random.pick(VALUES)}${random.pick(SPACES)}`);
  }
  return Buffer.from(`${random.pick(SPACES)}{${members.join(',')}}${random.pick(SPACES)}`);
}

/** What is put across a block boundary: every escape, UTF-8 sequences good and bad, literals, numbers, structure. */
const STRADDLERS: Array<{ inString: boolean; bytes: Buffer }> = [
  ...['\\"', '\\\\', '\\/', '\\b', '\\f', '\\n', '\\r', '\\t', '\\u00e9', '\\uD83E\\uDD80', '\\udead', '\\\\\\"', '\\\\\\\\', '\\x', '\\u12G4', '\\u', '\\', '\\\\\\'].map((text) => ({ inString: true, bytes: Buffer.from(text) })),
  ...[[0xc3, 0xa9], [0xe2, 0x9c, 0x93], [0xf0, 0x9f, 0xa6, 0x80], [0xc3], [0xe2, 0x9c], [0xf0, 0x9f, 0xa6], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0x80], [0x1f], [0x09]].map((sequence) => ({ inString: true, bytes: Buffer.from(sequence) })),
  ...['true', 'false', 'null', 'tru', 'nul', 'falsee', '-12.5e+30', '0', '-0.0', '1.', '1e', '01', '[]', '{}', '[1,2]', '{"a":1}', '[1,]', '"x"', ' '].map((text) => ({ inString: false, bytes: Buffer.from(text) })),
];

/** Offsets around which a straddler is placed: 64-byte blocks and the validator's 16 KiB windows. */
const BOUNDARIES = [64, 128, 16 * 1024];

/** Every straddler at every offset within 6 bytes of each boundary, inside a string or as a value. */
export function* boundaryCases(): Generator<Buffer> {
  for (const boundary of BOUNDARIES) {
    for (const straddler of STRADDLERS) {
      for (let shift = -6; shift <= 2; shift += 1) {
        const start = boundary + shift;
        if (straddler.inString) {
          // {"id":1,"result":"xxx<straddler>yyy"}
          const head = '{"id":1,"result":"';
          const fill = 'x'.repeat(start - head.length);
          yield Buffer.concat([Buffer.from(head + fill), straddler.bytes, Buffer.from('yy"}')]);
          // the same as a member name
          const nameHead = '{"id":1,"';
          yield Buffer.concat([Buffer.from(nameHead + 'x'.repeat(start - nameHead.length)), straddler.bytes, Buffer.from('":0,"result":2}')]);
        } else {
          // {"id":1,"result":[<spaces><straddler>]}
          const head = '{"id":1,"result":[';
          yield Buffer.concat([Buffer.from(head + ' '.repeat(start - head.length)), straddler.bytes, Buffer.from(']}')]);
          yield Buffer.concat([Buffer.from(head + ' '.repeat(start - head.length)), straddler.bytes, Buffer.from('}')]);
          // a member value at the top level, then its span's end is found across the boundary
          const top = '{"id":1,"pad":"';
          yield Buffer.concat([Buffer.from(top + 'p'.repeat(start - top.length - 11) + '","result":'), straddler.bytes, Buffer.from(' }')]);
        }
      }
    }
  }
}

/**
 * Ends of an object, valid and broken at each of a member's tokens: name, colon, value (string,
 * scalar, object, array), then comma or closing brace. The WebAssembly validator checks a run of
 * such members four tokens at a time within its 16 KiB windows of tokens.
 */
const MEMBER_RUNS = [
  '"a":1,"b":"x","c":true,"d":null,"e":-2.5}',
  '"a":{"b":1,"c":"y"},"d":[1,"z"],"e":2}',
  '"a":"x"}',
  '"a":{}}',
  '"a":[]}',
  '"a":1,"b":{"c":{"d":2}},"e":3}',
  '"a" 1}',
  '"a":1 "b":2}',
  '"a":1,}',
  '"a":1,2}',
  '"a":]',
  '"a":1]',
  '"a":,"b":1}',
  '"a":1,"b"}',
  '"a":1,"b":}',
  '"a":1,"b":2',
  '"a":1:"b":2}',
  '"a":1,"b":tru}',
  '"a":01}',
  '"a":"x","b":"y"]',
  '"a","x","b":1}',
  '"a":1,2:3,"b":4}',
  '"a":1,"b":2,}',
];

/** Every member run with its tokens shifted across a 64-byte block and the 16 KiB window boundary, below and at the envelope's top level. */
export function* memberRunCases(): Generator<Buffer> {
  for (const boundary of BOUNDARIES) {
    for (const run of MEMBER_RUNS) {
      for (let shift = -24; shift <= 4; shift += 1) {
        const start = boundary + shift;
        // {"id":1,"result":{"pad":"ppp",<run>}: a nested object, its members checked in runs
        const nested = '{"id":1,"result":{"pad":"';
        yield Buffer.from(`${nested}${'p'.repeat(Math.max(0, start - nested.length - 2))}",${run}}`);
        // the same run as the envelope's own members, which are read one token at a time
        const top = '{"pad":"';
        yield Buffer.from(`${top}${'p'.repeat(Math.max(0, start - top.length - 2))}",${run}`);
      }
    }
  }
}

/** Deep nesting, valid and broken at the deepest level (the validators keep their own stack). */
export function* deepCases(depth: number): Generator<Buffer> {
  yield Buffer.from('['.repeat(depth) + ']'.repeat(depth));
  yield Buffer.from(`{"id":1,"result":${'['.repeat(depth)}${']'.repeat(depth)}}`);
  yield Buffer.from(`{"id":1,"result":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`);
  yield Buffer.from('['.repeat(depth) + ']'.repeat(depth - 1));
  yield Buffer.from('['.repeat(depth) + '}' + ']'.repeat(depth - 1));
  yield Buffer.from(`${'{"a":'.repeat(depth)}tru${'}'.repeat(depth)}`);
  yield Buffer.from('['.repeat(depth) + ']'.repeat(depth + 1));
}

/** Runs `cases` random cases (mutated pages half, random texts and envelopes a quarter each); returns the disagreements. */
export function runRandomCases(seed: number, cases: number): Disagreement[] {
  const random = createRandom(seed);
  const pages = realPages();
  const disagreements: Disagreement[] = [];
  for (let index = 0; index < cases; index += 1) {
    const kind = index % 4;
    const found =
      kind < 2
        ? checkCase('mutated page', mutate(random.pick(pages), random))
        : kind === 2
          ? checkCase('random text', randomText(random))
          : checkCase('random envelope', random.next() < 0.7 ? randomEnvelope(random) : mutate(randomEnvelope(random), random));
    if (found !== undefined && disagreements.length < 20) disagreements.push(found);
  }
  return disagreements;
}

/** Checks every case `cases` yields; returns how many ran and the disagreements. */
export function runCases(kind: string, cases: Iterable<Buffer>): { ran: number; disagreements: Disagreement[] } {
  const disagreements: Disagreement[] = [];
  let ran = 0;
  for (const bytes of cases) {
    ran += 1;
    const found = checkCase(kind, bytes);
    if (found !== undefined && disagreements.length < 20) disagreements.push(found);
  }
  return { ran, disagreements };
}
