// eth_getBlockByHash params parsed directly: hashes already found well-formed are remembered (so a
// batch naming one block checks it once), and what is remembered never lets a malformed hash in.

import { describe, expect, it } from 'vitest';
import { parseBlockByHashParams } from '../src/methods/eth-get-block-by-hash.js';

const hashOf = (n: number): string => `0x${n.toString(16).padStart(64, '0')}`;

describe('eth_getBlockByHash params', () => {
  it('accepts a hash seen before and refuses its malformed neighbours before and after', () => {
    const good = hashOf(0xabc);
    const neighbours = [`${good.slice(0, -1)}g`, `${good}0`, good.slice(0, -1), `0X${good.slice(2)}`, ` ${good.slice(1)}`];
    for (const bad of neighbours) expect(() => parseBlockByHashParams([bad, false]), bad).toThrow(/^invalid argument 0/);
    for (let round = 0; round < 3; round += 1) expect(parseBlockByHashParams([good, round === 1])).toEqual({ hash: good, hydrated: round === 1 });
    for (const bad of neighbours) expect(() => parseBlockByHashParams([bad, false]), bad).toThrow(/^invalid argument 0/);
    // A remembered hash still needs a well-formed second argument.
    expect(() => parseBlockByHashParams([good])).toThrow(/^invalid argument 1/);
    expect(() => parseBlockByHashParams([good, 'true'])).toThrow(/^invalid argument 1/);
    // Upper case is accepted and answered in lower case, whether or not the lower-case form was seen.
    expect(parseBlockByHashParams([good.toUpperCase().replace('0X', '0x'), false])).toEqual({ hash: good, hydrated: false });
  });

  it('keeps answering right past the bound on remembered hashes (the set starts over)', () => {
    for (let n = 1; n <= 10_000; n += 1) expect(parseBlockByHashParams([hashOf(n), false]).hash).toBe(hashOf(n));
    expect(parseBlockByHashParams([hashOf(1), true])).toEqual({ hash: hashOf(1), hydrated: true });
    expect(() => parseBlockByHashParams([`${hashOf(10_000).slice(0, -1)}z`, false])).toThrow(/^invalid argument 0/);
  });
});
