// Param checks that remember what passed (block hashes, Solana public keys): a string that passed
// is not checked again, a failing one always is, the memory is bounded, and nothing remembered
// lets a malformed neighbour through.

import { describe, expect, it } from 'vitest';
import { isBase58PublicKey } from '../src/methods/base58.js';
import { rememberPasses } from '../src/methods/remembered-passes.js';

describe('rememberPasses', () => {
  it('checks a passing string once, a failing one every time, and starts over past its bound', () => {
    const checked: string[] = [];
    const isShort = rememberPasses((value) => {
      checked.push(value);
      return value.length < 4;
    }, 3);
    expect([isShort('a'), isShort('a'), isShort('long'), isShort('long'), isShort('a')]).toEqual([true, true, false, false, true]);
    expect(checked).toEqual(['a', 'long', 'long']);
    // 'b' and 'c' fill the set to its bound of 3; 'd' starts it over, so 'a' is checked again.
    for (const value of ['b', 'c', 'd', 'a']) expect(isShort(value)).toBe(true);
    expect(checked).toEqual(['a', 'long', 'long', 'b', 'c', 'd', 'a']);
  });
});

describe('isBase58PublicKey', () => {
  const key = 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w';
  // Not base58 (0, O, a space), longer than a key can be, too short to decode to 32 bytes.
  const neighbours = [`${key.slice(0, -1)}0`, `${key.slice(0, -1)}O`, ` ${key.slice(1)}`, `${key}1`, key.slice(0, -3), '', 'abc'];

  it('accepts a key seen before and refuses its malformed neighbours before and after', () => {
    for (const bad of neighbours) expect(isBase58PublicKey(bad), bad).toBe(false);
    for (let round = 0; round < 3; round += 1) expect(isBase58PublicKey(key)).toBe(true);
    for (const bad of neighbours) expect(isBase58PublicKey(bad), bad).toBe(false);
  });
});
