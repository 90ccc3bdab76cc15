// The checks of single lexemes, for json-validator.ts (AssemblyScript, built with it into
// assets/json-validator.wasm): the escape after a backslash, a number or literal, and the UTF-16
// units of a short member name. Separate from json-validator.ts, which holds the two stages and
// their state: these read only the bytes they are given and keep no state of their own.

export const QUOTE: u8 = 0x22;
export const BACKSLASH: u8 = 0x5c;
export const COMMA: u8 = 0x2c;
export const COLON: u8 = 0x3a;
export const OPEN_BRACE: u8 = 0x7b;
export const CLOSE_BRACE: u8 = 0x7d;
export const OPEN_BRACKET: u8 = 0x5b;
export const CLOSE_BRACKET: u8 = 0x5d;

function isHexDigit(byte: u32): bool {
  return byte - 0x30 < 10 || (byte | 0x20) - 0x61 < 6;
}

/** Whether the byte a backslash escapes at `at` (inside a string) makes a valid escape. */
export function validEscape(at: usize): bool {
  const byte = <u32>load<u8>(at);
  if (byte == 0x75 /* u */) {
    return isHexDigit(load<u8>(at + 1)) && isHexDigit(load<u8>(at + 2)) && isHexDigit(load<u8>(at + 3)) && isHexDigit(load<u8>(at + 4));
  }
  return byte == QUOTE || byte == BACKSLASH || byte == 0x2f || byte == 0x62 || byte == 0x66 || byte == 0x6e || byte == 0x72 || byte == 0x74;
}

export function isWhitespace(byte: u32): bool {
  return byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09;
}

/** Whether a number or literal may end before this byte. */
function isDelimiter(byte: u32): bool {
  return isWhitespace(byte) || byte == COMMA || byte == COLON || byte == CLOSE_BRACE || byte == CLOSE_BRACKET || byte == OPEN_BRACE || byte == OPEN_BRACKET;
}

function isDigit(byte: u32): bool {
  return byte - 0x30 < 10;
}

/** Whether the run at `at` is one number (`-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`) or literal. */
export function validScalar(at: usize, first: u32): bool {
  if (first == 0x74 /* t */) return load<u32>(at) == 0x65757274 && isDelimiter(load<u8>(at + 4));
  if (first == 0x6e /* n */) return load<u32>(at) == 0x6c6c756e && isDelimiter(load<u8>(at + 4));
  if (first == 0x66 /* f */) return load<u32>(at + 1) == 0x65736c61 && isDelimiter(load<u8>(at + 5));
  let index = at;
  if (first == 0x2d /* - */) index += 1;
  let byte = <u32>load<u8>(index);
  if (byte == 0x30) {
    index += 1;
  } else {
    if (byte - 0x31 >= 9) return false;
    index += 1;
    while (isDigit(load<u8>(index))) index += 1;
  }
  byte = load<u8>(index);
  if (byte == 0x2e /* . */) {
    index += 1;
    if (!isDigit(load<u8>(index))) return false;
    while (isDigit(load<u8>(index))) index += 1;
    byte = load<u8>(index);
  }
  if ((byte | 0x20) == 0x65 /* e E */) {
    index += 1;
    byte = load<u8>(index);
    if (byte == 0x2b || byte == 0x2d) index += 1;
    if (!isDigit(load<u8>(index))) return false;
    while (isDigit(load<u8>(index))) index += 1;
    byte = load<u8>(index);
  }
  return isDelimiter(byte);
}

function decodedHex(at: usize): u32 {
  let value: u32 = 0;
  for (let index: usize = 0; index < 4; index += 1) {
    const byte = <u32>load<u8>(at + index);
    value = (value << 4) | (byte <= 0x39 ? byte - 0x30 : (byte | 0x20) - 0x61 + 10);
  }
  return value;
}

/** The UTF-16 units of the member name whose quote is at `at`, if at most six, into `units`; else -1. */
export function decodeShortName(at: usize, units: usize): i32 {
  let index = at + 1;
  let count = 0;
  while (count <= 6) {
    let byte = <u32>load<u8>(index);
    if (byte == QUOTE) return count;
    if (count == 6) break;
    if (byte == BACKSLASH) {
      const escape = <u32>load<u8>(index + 1);
      if (escape == 0x75) {
        byte = decodedHex(index + 2);
        index += 6;
      } else {
        byte = escape == 0x62 ? 8 : escape == 0x66 ? 12 : escape == 0x6e ? 10 : escape == 0x72 ? 13 : escape == 0x74 ? 9 : escape;
        index += 2;
      }
    } else {
      index += 1;
    }
    store<u16>(units + (<usize>count << 1), <u16>byte);
    count += 1;
  }
  return -1;
}

export function unitsAre(units: usize, count: i32, name: string): bool {
  if (count != name.length) return false;
  for (let index = 0; index < count; index += 1) {
    if (load<u16>(units + (<usize>index << 1)) != <u16>name.charCodeAt(index)) return false;
  }
  return true;
}
