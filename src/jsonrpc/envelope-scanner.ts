/**
 * Finds the top-level members of an upstream's JSON-RPC response without parsing what is inside
 * them. A `getAssetsByGroup` page can be megabytes; parsing it into objects and serialising it
 * again cost tens of milliseconds and a large transient heap per request, while the gateway only
 * needs the envelope (`id`, `error`) and the result's bytes to pass on. The scan checks that
 * the body is one well-formed object with balanced brackets and terminated strings; the bytes
 * inside a member are not otherwise validated (the upstream's own serialiser produced them).
 *
 * Works on UTF-8 bytes directly: every byte it looks for is ASCII, and no byte of a multi-byte
 * UTF-8 sequence is ASCII.
 */

export interface MemberSpan {
  start: number;
  end: number;
}

export interface EnvelopeSpans {
  id?: MemberSpan;
  result?: MemberSpan;
  error?: MemberSpan;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;

function isWhitespace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/** Index just past the string starting at `start` (a quote), or -1 if it never ends. */
function skipString(bytes: Uint8Array, start: number): number {
  for (let index = start + 1; index < bytes.length; index += 1) {
    const byte = bytes[index]!;
    if (byte === BACKSLASH) index += 1;
    else if (byte === QUOTE) return index + 1;
  }
  return -1;
}

/** Index just past the value starting at `start`, or -1 if it is malformed. */
function skipValue(bytes: Uint8Array, start: number): number {
  const first = bytes[start];
  if (first === QUOTE) return skipString(bytes, start);
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    const closers: number[] = [];
    for (let index = start; index < bytes.length; index += 1) {
      const byte = bytes[index]!;
      if (byte === QUOTE) {
        index = skipString(bytes, index) - 1;
        if (index < 0) return -1;
      } else if (byte === OPEN_BRACE) closers.push(CLOSE_BRACE);
      else if (byte === OPEN_BRACKET) closers.push(CLOSE_BRACKET);
      else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) {
        if (closers.pop() !== byte) return -1;
        if (closers.length === 0) return index + 1;
      }
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter.
  let index = start;
  while (index < bytes.length) {
    const byte = bytes[index]!;
    if (byte === COMMA || byte === CLOSE_BRACE || isWhitespace(byte)) break;
    index += 1;
  }
  return index > start ? index : -1;
}

function keyIs(bytes: Uint8Array, start: number, end: number, name: string): boolean {
  if (end - start !== name.length) return false;
  for (let offset = 0; offset < name.length; offset += 1) if (bytes[start + offset] !== name.charCodeAt(offset)) return false;
  return true;
}

/** The spans of `id`, `result` and `error`, or undefined when the body is not one JSON object. */
export function scanEnvelope(bytes: Uint8Array): EnvelopeSpans | undefined {
  const spans: EnvelopeSpans = {};
  let index = 0;
  const skipWhitespace = () => {
    while (index < bytes.length && isWhitespace(bytes[index]!)) index += 1;
  };
  skipWhitespace();
  if (bytes[index] !== OPEN_BRACE) return undefined;
  index += 1;
  skipWhitespace();
  if (bytes[index] === CLOSE_BRACE) {
    index += 1;
  } else {
    for (;;) {
      skipWhitespace();
      if (bytes[index] !== QUOTE) return undefined;
      const keyEnd = skipString(bytes, index);
      if (keyEnd < 0) return undefined;
      const keyStart = index + 1;
      index = keyEnd;
      skipWhitespace();
      if (bytes[index] !== COLON) return undefined;
      index += 1;
      skipWhitespace();
      const valueStart = index;
      const valueEnd = skipValue(bytes, valueStart);
      if (valueEnd < 0) return undefined;
      const span = { start: valueStart, end: valueEnd };
      if (keyIs(bytes, keyStart, keyEnd - 1, 'result')) spans.result = span;
      else if (keyIs(bytes, keyStart, keyEnd - 1, 'error')) spans.error = span;
      else if (keyIs(bytes, keyStart, keyEnd - 1, 'id')) spans.id = span;
      index = valueEnd;
      skipWhitespace();
      if (bytes[index] === COMMA) {
        index += 1;
        continue;
      }
      if (bytes[index] === CLOSE_BRACE) {
        index += 1;
        break;
      }
      return undefined;
    }
  }
  skipWhitespace();
  return index === bytes.length ? spans : undefined;
}
