/**
 * Where each request object's `id` and `params` members are in the text of a request body, and
 * how deeply its params nest. Runs on text that `JSON.parse` has already accepted, so it only
 * follows the structure and validates nothing.
 *
 * Why: JSON-RPC echoes the id the client sent, and `JSON.parse` loses the text of a number
 * (`9007199254740993` becomes `…992`, `1e-400` becomes `0`); the id's own bytes are echoed
 * instead. And the nesting depth of params is known here without recursion, before anything
 * recursive (serialising params for an upstream) can meet a 5,000-level document.
 *
 * One pass over the text, iterative. Strings, nearly all of a large body's bytes, are skipped
 * with `indexOf`, so a body of long hex strings costs little more than finding its quotes.
 */

export interface ItemSpans {
  /** Start of the text of the last top-level `id` member's value (JSON.parse keeps the last), or -1. */
  idStart: number;
  idEnd: number;
  /** Start of the text of the last top-level `params` member's value, or -1. */
  paramsStart: number;
  paramsEnd: number;
  /** Deepest nesting of arrays and objects in params: `[1]` is 1, `{"a":[1]}` is 2, a scalar 0. */
  paramsDepth: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;

function skipWhitespace(text: string, index: number): number {
  for (;;) {
    const code = text.charCodeAt(index);
    if (code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09) index += 1;
    else return index;
  }
}

/** Index just past the string whose opening quote is at `start`. */
function stringEnd(text: string, start: number): number {
  let from = start + 1;
  for (;;) {
    const quote = text.indexOf('"', from);
    if (quote < 0) return text.length; // not reached for text JSON.parse accepted
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes += 1;
    if ((backslashes & 1) === 0) return quote + 1;
    from = quote + 1;
  }
}

/** The nesting depth of the last value {@link valueEnd} skipped (module state: no allocation per value). */
let lastDepth = 0;

/** Index just past the value starting at `start`; sets {@link lastDepth}. */
function valueEnd(text: string, start: number): number {
  const first = text.charCodeAt(start);
  lastDepth = 0;
  if (first === QUOTE) return stringEnd(text, start);
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    let depth = 0;
    let deepest = 0;
    for (let index = start; index < text.length; index += 1) {
      const code = text.charCodeAt(index);
      if (code === QUOTE) {
        index = stringEnd(text, index) - 1;
      } else if (code === OPEN_BRACE || code === OPEN_BRACKET) {
        depth += 1;
        if (depth > deepest) deepest = depth;
      } else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
        depth -= 1;
        if (depth === 0) {
          lastDepth = deepest;
          return index + 1;
        }
      }
    }
    return text.length;
  }
  // A number, true, false or null: up to the next delimiter.
  let index = start;
  for (; index < text.length; index += 1) {
    const code = text.charCodeAt(index);
    if (code === COMMA || code === CLOSE_BRACE || code === CLOSE_BRACKET || code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09) break;
  }
  return index;
}

/** Longest raw text a key naming `id` or `params` can have: `"params"` with every letter as `\uXXXX`. */
const MAX_ESCAPED_KEY_LENGTH = 2 + 6 * 6;

/** Which member a key (the text from its opening quote to just past its closing one) names: 1 id, 2 params, 0 other. */
function memberOf(text: string, start: number, end: number): 0 | 1 | 2 {
  const length = end - start;
  if (length === 4 && text.charCodeAt(start + 1) === 0x69 && text.charCodeAt(start + 2) === 0x64) return 1;
  if (length === 8 && text.startsWith('params', start + 1)) return 2;
  // An escaped spelling (`"\u0069d"`) is the same key to JSON.parse; rare, and short enough to check.
  if (length <= 4 || length > MAX_ESCAPED_KEY_LENGTH) return 0;
  for (let index = start + 1; index < end - 1; index += 1) {
    if (text.charCodeAt(index) === BACKSLASH) {
      const key = JSON.parse(text.slice(start, end)) as string;
      return key === 'id' ? 1 : key === 'params' ? 2 : 0;
    }
  }
  return 0;
}

function emptySpans(): ItemSpans {
  return { idStart: -1, idEnd: -1, paramsStart: -1, paramsEnd: -1, paramsDepth: 0 };
}

/** Scans the object starting at `start` (an opening brace); returns the index just past it. */
function scanObject(text: string, start: number, spans: ItemSpans): number {
  let index = skipWhitespace(text, start + 1);
  if (text.charCodeAt(index) === CLOSE_BRACE) return index + 1;
  for (;;) {
    const keyEnd = stringEnd(text, index);
    const member = memberOf(text, index, keyEnd);
    index = skipWhitespace(text, keyEnd) + 1; // past the colon
    index = skipWhitespace(text, index);
    const end = valueEnd(text, index);
    if (member === 1) {
      spans.idStart = index;
      spans.idEnd = end;
    } else if (member === 2) {
      spans.paramsStart = index;
      spans.paramsEnd = end;
      spans.paramsDepth = lastDepth;
    }
    index = skipWhitespace(text, end);
    const delimiter = text.charCodeAt(index);
    index += 1;
    if (delimiter !== COMMA) return index; // the closing brace
    index = skipWhitespace(text, index);
  }
}

/**
 * The spans of a body that `JSON.parse` accepted: one {@link ItemSpans} for a single value, one
 * per element for a batch (all -1 for an element that is not an object).
 */
export function scanRequestBody(text: string): ItemSpans | ItemSpans[] {
  let index = skipWhitespace(text, 0);
  const first = text.charCodeAt(index);
  if (first === OPEN_BRACE) {
    const spans = emptySpans();
    scanObject(text, index, spans);
    return spans;
  }
  if (first !== OPEN_BRACKET) return emptySpans();
  const items: ItemSpans[] = [];
  index = skipWhitespace(text, index + 1);
  if (text.charCodeAt(index) === CLOSE_BRACKET) return items;
  for (;;) {
    const spans = emptySpans();
    index = text.charCodeAt(index) === OPEN_BRACE ? scanObject(text, index, spans) : valueEnd(text, index);
    items.push(spans);
    index = skipWhitespace(text, index);
    if (text.charCodeAt(index) !== COMMA) return items;
    index = skipWhitespace(text, index + 1);
  }
}

const COLON = 0x3a;

/**
 * The text of each `id` member's value in order, found by searching for the member name instead
 * of walking the structure, when that is exact; otherwise undefined (scan the body instead).
 *
 * Exact when the text holds no backslash: then a quote only ever opens or closes a string and no
 * key is spelled with escapes, so `"id"` followed by a colon is a member named `id`, whatever its
 * depth (a quote before `id` cannot be a closing one: JSON allows no letter after a string). So
 * if there are exactly as many of them as items with an `id` member (`itemsWithId`, counted on
 * the parsed values), none is nested in params or repeated within an item, and the k-th is the
 * k-th item's. Text inside an id's own value (an object, which is an invalid id) is skipped.
 */
export function idTextsByMemberName(text: string, itemsWithId: number): string[] | undefined {
  if (text.indexOf('\\') >= 0) return undefined;
  const ids: string[] = [];
  let from = 0;
  for (;;) {
    const name = text.indexOf('"id"', from);
    if (name < 0) break;
    const colon = skipWhitespace(text, name + 4);
    if (text.charCodeAt(colon) !== COLON) {
      from = name + 4; // the string "id" as a value
      continue;
    }
    if (ids.length === itemsWithId) return undefined;
    const start = skipWhitespace(text, colon + 1);
    const end = valueEnd(text, start);
    ids.push(text.slice(start, end));
    from = end;
  }
  return ids.length === itemsWithId ? ids : undefined;
}
