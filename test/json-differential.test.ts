// The JSON validators (WebAssembly SIMD where available, and the JavaScript scan) against the
// reference, `TextDecoder('utf-8', {fatal: true})` then `JSON.parse`: the same verdict on every
// case, the same envelope spans from both validators, and each span holding exactly the member's
// value. Seeded: a failure prints its case; FUZZ_SEED=<seed> replays a run. bench/json-fuzz.ts
// runs the same checks on many more cases.

import { describe, expect, it } from 'vitest';
import { jsonValidatorEngine } from '../src/jsonrpc/envelope-scanner.js';
import { boundaryCases, deepCases, memberRunCases, realPages, runCases, runRandomCases } from './helpers/json-differential.js';

const seed = process.env.FUZZ_SEED === undefined ? 0x27_5eed : Number(process.env.FUZZ_SEED);
const RANDOM_CASES = 20_000;

describe('JSON validation against TextDecoder(fatal) + JSON.parse', () => {
  it('runs in WebAssembly SIMD on this Node (the JavaScript scan is only a fallback)', () => {
    expect(jsonValidatorEngine).toBe('wasm-simd');
  });

  it('agrees on real getAssetsByGroup pages as they are', () => {
    const { ran, disagreements } = runCases('page', realPages());
    expect(disagreements).toEqual([]);
    expect(ran).toBeGreaterThan(8);
  });

  it('agrees on every escape, UTF-8 sequence, literal and number straddling a 64-byte block or a 16 KiB window boundary', () => {
    const { ran, disagreements } = runCases('boundary', boundaryCases());
    expect(disagreements).toEqual([]);
    expect(ran).toBeGreaterThan(3000);
  }, 120_000);

  it("agrees on objects' members, valid and broken at each token, with the tokens straddling a 64-byte block or a 16 KiB window boundary", () => {
    const { ran, disagreements } = runCases('member run', memberRunCases());
    expect(disagreements).toEqual([]);
    expect(ran).toBe(3 * 23 * 29 * 2);
  }, 120_000);

  it('agrees on 100,000-deep nesting, valid and broken at the bottom', () => {
    const { ran, disagreements } = runCases('deep', deepCases(100_000));
    expect(disagreements).toEqual([]);
    expect(ran).toBe(7);
  }, 120_000);

  it(`agrees on ${RANDOM_CASES} mutated pages, random texts and envelopes with escaped member names (seed ${seed})`, () => {
    expect(runRandomCases(seed, RANDOM_CASES)).toEqual([]);
  }, 120_000);
});
