// JSON validation (RFC 8259) of an upstream's answer in WebAssembly with SIMD, in the manner of
// simdjson. AssemblyScript, compiled by `npm run build:wasm` into assets/json-validator.wasm (not
// by tsc: this folder is excluded from the TypeScript build). The caller (json-validator-wasm.ts)
// asks `reserve(length)` for the input's place, copies the answer there, checks its UTF-8 with
// Node's native `isUtf8`, and calls `validate`.
//
// Stage 1 reads 64-byte blocks as four 16-byte vectors and turns each into 64-bit masks: quotes,
// backslashes, structural characters, whitespace and control bytes. From them, without a branch
// per byte: which bytes a backslash escapes (carried across blocks), which bytes are inside a
// string (a prefix XOR of the unescaped quotes, carried across blocks), raw control bytes inside
// strings (an error), and the token positions: structural characters outside strings, opening
// quotes, and the first byte of every other run outside strings (a number or literal, or garbage
// that stage 2 refuses). Escapes are rare, so each escaped byte is checked one by one. Answers
// are mostly compact JSON without backslashes: a block with no backslash, or with no byte below
// 0x21 (no whitespace, no control byte), skips building those masks (one vector test each; in a
// getAssetsByGroup page 92% of blocks have no such byte and none has a backslash).
//
// Stage 2 is a loop over the token positions with an explicit state and container stack (no
// recursion: 100,000-deep nesting is answered), checking the grammar, numbers and literals, and,
// for an envelope, noting where the top-level `id`, `result` and `error` values lie. A member name
// written with escapes (`"r\u0065sult"`) is decoded: `JSON.parse` reads it as `result`. Most
// members are a name, a colon, a string or scalar, and a comma or a closing brace: those four
// tokens are checked together, one member after the other, without a turn of the state machine
// each (a fifth less time per page).
//
// The checks of single lexemes (an escape, a number or literal, a short member name's units) are
// in json-lexemes.ts.
//
// The two stages alternate over windows of WINDOW_BYTES, so the token buffer has a fixed size and
// the memory needed is about twice the answer (the input and a byte per possible nesting level).

import { BACKSLASH, CLOSE_BRACE, CLOSE_BRACKET, COLON, COMMA, OPEN_BRACE, OPEN_BRACKET, QUOTE, decodeShortName, isWhitespace, unitsAre, validEscape, validScalar } from './json-lexemes';

const WINDOW_BYTES: i32 = 16 * 1024;
/** One u32 per byte of a window at most (every byte a token, as in `[1,1,1`), plus one. */
const TOKEN_BYTES: i32 = WINDOW_BYTES * 4 + 64;
/** Bytes read past the input: the last block's rest, a `\uXXXX` or literal read ahead. */
const PADDING: i32 = 128;
const PAGE_BYTES: i32 = 65536;

const ODD_BITS: u64 = 0xaaaaaaaaaaaaaaaa;

// Where the spans are written: six i32 (id, result, error: start and end, -1 when absent).
let spansPtr: usize = 0;
let tokensPtr: usize = 0;
let stackPtr: usize = 0;
let inputPtr: usize = 0;

// Stage 1 state carried from one block to the next.
let nextIsEscaped: u64 = 0;
let inStringCarry: u64 = 0;
let scalarCarry: u64 = 0;
let stage1Error: bool = false;
let tokenCount: i32 = 0;

// Stage 2 state carried from one window to the next.
const EXPECT_VALUE: i32 = 0;
const EXPECT_VALUE_OR_CLOSE: i32 = 1;
const EXPECT_KEY: i32 = 2;
const EXPECT_KEY_OR_CLOSE: i32 = 3;
const EXPECT_COLON: i32 = 4;
const AFTER_VALUE: i32 = 5;
let state: i32 = EXPECT_VALUE;
let depth: i32 = 0;
let envelope: bool = false;
/** 0 none, 1 id, 2 result, 3 error: the member whose value is being read at depth 1. */
let member: i32 = 0;
let memberStart: i32 = 0;

function align64(value: usize): usize {
  return (value + 63) & ~(<usize>63);
}

/** Where an input of `length` bytes goes (memory grown as needed), or 0 if memory cannot grow. */
export function reserve(length: i32): usize {
  spansPtr = align64(__heap_base);
  tokensPtr = spansPtr + 64;
  stackPtr = tokensPtr + <usize>TOKEN_BYTES;
  inputPtr = align64(stackPtr + <usize>length + 1);
  const end = inputPtr + align64(<usize>length) + <usize>PADDING;
  const have = <usize>memory.size() * <usize>PAGE_BYTES;
  if (end > have) {
    const pages = <i32>((end - have + <usize>PAGE_BYTES - 1) / <usize>PAGE_BYTES);
    if (memory.grow(pages) < 0) return 0;
  }
  return inputPtr;
}

/** Where the six span values are. */
export function spans(): usize {
  return spansPtr;
}

// ------------------------------------------------------------------------------------------
// Stage 1

// @ts-ignore: decorator
@inline function mask(v: v128, byte: u8): u64 {
  return <u64><u32>i8x16.bitmask(i8x16.eq(v, i8x16.splat(byte)));
}

// Whitespace and structural characters are found by a table lookup on the low four bits of each
// byte (one swizzle): each table holds, at index n, the byte with low bits n that belongs to the
// class, and elsewhere 0x80 | (n + 1) & 15, whose low bits are not n, which no input byte can equal.
const LOW_BITS: v128 = i8x16(15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15);
// space 0x20, tab 0x09, line feed 0x0a, carriage return 0x0d
const WHITESPACE_BY_LOW_BITS: v128 = i8x16(0x20, -126, -125, -124, -123, -122, -121, -120, -119, 0x9, 0xa, -116, -115, 0xd, -113, -128);
// Compared with the byte OR 0x20, which folds `[` `]` onto `{` `}`: comma 0x2c, colon 0x3a, 0x7b, 0x7d.
// (It also folds the control bytes 0x0c and 0x1a onto comma and colon: they then count as
// tokens, which stage 2 refuses, as it would have refused them as the start of a scalar.)
const STRUCTURAL_BY_LOW_BITS: v128 = i8x16(-127, -126, -125, -124, -123, -122, -121, -120, -119, -118, 0x3a, 0x7b, 0x2c, 0x7d, -113, -128);

// @ts-ignore: decorator
@inline function structuralMask(v: v128, lowBits: v128): u64 {
  const found = i8x16.eq(v128.or(v, i8x16.splat(0x20)), i8x16.swizzle(STRUCTURAL_BY_LOW_BITS, lowBits));
  return <u64><u32>i8x16.bitmask(found);
}

// @ts-ignore: decorator
@inline function whitespaceMask(v: v128, lowBits: v128): u64 {
  return <u64><u32>i8x16.bitmask(i8x16.eq(v, i8x16.swizzle(WHITESPACE_BY_LOW_BITS, lowBits)));
}

// @ts-ignore: decorator
@inline function controlMask(v: v128): u64 {
  return <u64><u32>i8x16.bitmask(i8x16.lt_u(v, i8x16.splat(0x20)));
}

/** Bit i set when byte i is escaped by a backslash (simdjson's odd-run arithmetic). */
// @ts-ignore: decorator
@inline function escapedBy(backslash: u64): u64 {
  if (backslash == 0) {
    const escaped = nextIsEscaped;
    nextIsEscaped = 0;
    return escaped;
  }
  const potentialEscape = backslash & ~nextIsEscaped;
  const maybeEscaped = potentialEscape << 1;
  const maybeEscapedAndOddBits = maybeEscaped | ODD_BITS;
  const evenSeriesCodesAndOddBits = maybeEscapedAndOddBits - potentialEscape;
  const escapeAndTerminalCode = evenSeriesCodesAndOddBits ^ ODD_BITS;
  const escaped = escapeAndTerminalCode ^ (backslash | nextIsEscaped);
  const escape = escapeAndTerminalCode & backslash;
  nextIsEscaped = escape >> 63;
  return escaped;
}

// @ts-ignore: decorator
@inline function prefixXor(bits: u64): u64 {
  bits ^= bits << 1;
  bits ^= bits << 2;
  bits ^= bits << 4;
  bits ^= bits << 8;
  bits ^= bits << 16;
  bits ^= bits << 32;
  return bits;
}

function classifyBlock(offset: i32): void {
  const at = inputPtr + <usize>offset;
  const v0 = v128.load(at);
  const v1 = v128.load(at, 16);
  const v2 = v128.load(at, 32);
  const v3 = v128.load(at, 48);
  const quote = mask(v0, QUOTE) | (mask(v1, QUOTE) << 16) | (mask(v2, QUOTE) << 32) | (mask(v3, QUOTE) << 48);
  const backslashes = i8x16.splat(BACKSLASH);
  const anyBackslash = v128.any_true(v128.or(v128.or(i8x16.eq(v0, backslashes), i8x16.eq(v1, backslashes)), v128.or(i8x16.eq(v2, backslashes), i8x16.eq(v3, backslashes))));
  const backslash: u64 = anyBackslash ? mask(v0, BACKSLASH) | (mask(v1, BACKSLASH) << 16) | (mask(v2, BACKSLASH) << 32) | (mask(v3, BACKSLASH) << 48) : 0;

  const escaped = escapedBy(backslash);
  const realQuote = quote & ~escaped;
  const inString = prefixXor(realQuote) ^ inStringCarry;
  inStringCarry = <u64>(<i64>inString >> 63);

  const low0 = v128.and(v0, LOW_BITS);
  const low1 = v128.and(v1, LOW_BITS);
  const low2 = v128.and(v2, LOW_BITS);
  const low3 = v128.and(v3, LOW_BITS);
  // Whitespace (0x20, 0x09, 0x0a, 0x0d) and control bytes are all below 0x21.
  const belowSpace = i8x16.splat(0x21);
  const anyWhitespaceOrControl = v128.any_true(v128.or(v128.or(i8x16.lt_u(v0, belowSpace), i8x16.lt_u(v1, belowSpace)), v128.or(i8x16.lt_u(v2, belowSpace), i8x16.lt_u(v3, belowSpace))));
  let whitespace: u64 = 0;
  if (anyWhitespaceOrControl) {
    const control = controlMask(v0) | (controlMask(v1) << 16) | (controlMask(v2) << 32) | (controlMask(v3) << 48);
    if ((control & inString) != 0) stage1Error = true;
    whitespace = whitespaceMask(v0, low0) | (whitespaceMask(v1, low1) << 16) | (whitespaceMask(v2, low2) << 32) | (whitespaceMask(v3, low3) << 48);
  }
  let escapes = escaped & inString;
  while (escapes != 0) {
    if (!validEscape(at + <usize>ctz(escapes))) stage1Error = true;
    escapes &= escapes - 1;
  }

  const structural = structuralMask(v0, low0) | (structuralMask(v1, low1) << 16) | (structuralMask(v2, low2) << 32) | (structuralMask(v3, low3) << 48);
  const scalar = ~(structural | whitespace | realQuote | inString);
  const scalarStart = scalar & ~((scalar << 1) | scalarCarry);
  scalarCarry = scalar >> 63;
  let tokens = (structural & ~inString) | (realQuote & inString) | scalarStart;

  let out = tokensPtr + (<usize>tokenCount << 2);
  while (tokens != 0) {
    store<u32>(out, <u32>offset + <u32>ctz(tokens));
    out += 4;
    tokens &= tokens - 1;
  }
  tokenCount = <i32>((out - tokensPtr) >> 2);
}

// ------------------------------------------------------------------------------------------
// Stage 2

/** Which envelope member the name whose opening quote is at `at` is: 1 id, 2 result, 3 error, 0 other. */
function memberNamed(at: usize): i32 {
  // The plain spellings, at a glance: a quote after a letter is the closing one.
  if (load<u32>(at) == 0x2264_6922 /* "id" */) return 1;
  if (load<u64>(at) == 0x2274_6c75_7365_7222 /* "result" */) return 2;
  if (load<u32>(at + 1) == 0x6f72_7265 /* erro */ && load<u16>(at + 5) == 0x2272 /* r" */) return 3;
  // Any other spelling of six characters or fewer: decode its escapes (`"r\u0065sult"` is result).
  const units = spansPtr + 32;
  const count = decodeShortName(at, units);
  if (count < 0) return 0;
  if (unitsAre(units, count, 'id')) return 1;
  if (unitsAre(units, count, 'result')) return 2;
  if (unitsAre(units, count, 'error')) return 3;
  return 0;
}

/** The value of the current envelope member ended before the token at `delimiter`. */
function endMember(delimiter: u32): void {
  if (member == 0) return;
  let end = delimiter;
  while (isWhitespace(load<u8>(inputPtr + <usize>end - 1))) end -= 1;
  const slot = spansPtr + (<usize>(member - 1) << 3);
  store<i32>(slot, memberStart);
  store<i32>(slot, <i32>end, 4);
  member = 0;
}

function grammar(): bool {
  const input = inputPtr;
  const stack = stackPtr;
  const tokens = tokensPtr;
  const count = tokenCount;
  let current = state;
  let level = depth;
  // Whether the innermost open container is an object (kept here, not re-read from the stack).
  let inObject = level > 0 && load<u8>(stack + <usize>level - 1) == 1;
  for (let token = 0; token < count; token += 1) {
    const position = load<u32>(tokens + (<usize>token << 2));
    const byte = <u32>load<u8>(input + <usize>position);
    if (current == AFTER_VALUE) {
      if (level == 0) return false; // something after the value
      if (byte == COMMA) {
        if (level == 1 && envelope) endMember(position);
        current = inObject ? EXPECT_KEY : EXPECT_VALUE;
      } else if (byte == (inObject ? CLOSE_BRACE : CLOSE_BRACKET)) {
        if (level == 1 && envelope) endMember(position);
        level -= 1;
        inObject = level > 0 && load<u8>(stack + <usize>level - 1) == 1;
      } else {
        return false;
      }
    } else if (current <= EXPECT_VALUE_OR_CLOSE) {
      if (level == 1 && envelope) memberStart = <i32>position;
      if (byte == QUOTE) {
        if (level == 0 && envelope) return false; // an envelope is an object
        current = AFTER_VALUE;
      } else if (byte == OPEN_BRACE) {
        store<u8>(stack + <usize>level, 1);
        level += 1;
        inObject = true;
        current = EXPECT_KEY_OR_CLOSE;
      } else if (byte == OPEN_BRACKET) {
        if (level == 0 && envelope) return false;
        store<u8>(stack + <usize>level, 0);
        level += 1;
        inObject = false;
        current = EXPECT_VALUE_OR_CLOSE;
      } else if (byte == CLOSE_BRACKET) {
        if (current != EXPECT_VALUE_OR_CLOSE) return false;
        level -= 1;
        inObject = level > 0 && load<u8>(stack + <usize>level - 1) == 1;
        current = AFTER_VALUE;
      } else {
        if (level == 0 && envelope) return false;
        if (!validScalar(input + <usize>position, byte)) return false;
        current = AFTER_VALUE;
      }
    } else if (current == EXPECT_COLON) {
      if (byte != COLON) return false;
      current = EXPECT_VALUE;
    } else {
      // EXPECT_KEY or EXPECT_KEY_OR_CLOSE
      if (byte == QUOTE) {
        if (level == 1 && envelope) {
          // An envelope member: its name is read, and its value's span noted, on the next turns.
          member = memberNamed(input + <usize>position);
          current = EXPECT_COLON;
          continue;
        }
        // A run of members `"name": value,` whose values are strings or scalars, four tokens at a
        // time (name, colon, value, comma or closing brace) while the window holds them. It ends
        // at a value that is an object or array (the next turn takes it), at the closing brace, or
        // where fewer than four tokens are left (the name's colon is then taken as below).
        current = EXPECT_COLON;
        let name = token;
        while (name + 3 < count) {
          const at = tokens + (<usize>name << 2);
          if (load<u8>(input + <usize>load<u32>(at, 4)) != COLON) return false;
          const valueAt = load<u32>(at, 8);
          const value = <u32>load<u8>(input + <usize>valueAt);
          if (value == OPEN_BRACE || value == OPEN_BRACKET) {
            token = name + 1;
            current = EXPECT_VALUE;
            break;
          }
          if (value != QUOTE && !validScalar(input + <usize>valueAt, value)) return false;
          const delimiter = <u32>load<u8>(input + <usize>load<u32>(at, 12));
          if (delimiter == CLOSE_BRACE) {
            token = name + 3;
            level -= 1;
            inObject = level > 0 && load<u8>(stack + <usize>level - 1) == 1;
            current = AFTER_VALUE;
            break;
          }
          if (delimiter != COMMA) return false;
          if (name + 4 == count) {
            token = name + 3;
            current = EXPECT_KEY;
            break;
          }
          if (load<u8>(input + <usize>load<u32>(at, 16)) != QUOTE) return false;
          name += 4;
        }
        if (current == EXPECT_COLON) {
          token = name;
          // The colon is nearly always the next token: take it here rather than on another turn.
          if (token + 1 < count) {
            token += 1;
            if (load<u8>(input + <usize>load<u32>(tokens + (<usize>token << 2))) != COLON) return false;
            current = EXPECT_VALUE;
          }
        }
      } else if (byte == CLOSE_BRACE && current == EXPECT_KEY_OR_CLOSE) {
        level -= 1;
        inObject = level > 0 && load<u8>(stack + <usize>level - 1) == 1;
        current = AFTER_VALUE;
      } else {
        return false;
      }
    }
  }
  state = current;
  depth = level;
  return true;
}

// ------------------------------------------------------------------------------------------

/**
 * Whether the `length` bytes placed at `reserve(length)` are one JSON text (UTF-8 is checked by
 * the caller). With `asEnvelope`, the text must be an object, and the spans of its `id`, `result`
 * and `error` values (the last of each, as `JSON.parse` keeps) are written at `spans()`.
 */
export function validate(length: i32, asEnvelope: i32): i32 {
  const padded = <i32>align64(<usize>length);
  memory.fill(inputPtr + <usize>length, 0x20, <usize>(padded - length + PADDING));
  for (let slot = 0; slot < 6; slot += 1) store<i32>(spansPtr + (<usize>slot << 2), -1);
  nextIsEscaped = 0;
  inStringCarry = 0;
  scalarCarry = 0;
  stage1Error = false;
  state = EXPECT_VALUE;
  depth = 0;
  member = 0;
  envelope = asEnvelope != 0;
  for (let window = 0; window < padded; window += WINDOW_BYTES) {
    const windowEnd = min(window + WINDOW_BYTES, padded);
    tokenCount = 0;
    for (let block = window; block < windowEnd; block += 64) classifyBlock(block);
    if (stage1Error || !grammar()) return 0;
  }
  return inStringCarry == 0 && depth == 0 && state == AFTER_VALUE ? 1 : 0;
}
