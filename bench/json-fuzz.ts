// The long run of the differential JSON validation test (test/json-differential.test.ts runs a
// seeded 20,000 cases in `npm test`): many more mutated pages, random texts and envelopes, each
// checked against TextDecoder(fatal) + JSON.parse, with the WebAssembly validator and the
// JavaScript scan giving the same spans. Prints the first disagreements and exits 1 if any.
//
//   node --import tsx bench/json-fuzz.ts [--cases 1000000] [--seed 1]

import { parseArgs } from 'node:util';
import { jsonValidatorEngine } from '../src/jsonrpc/envelope-scanner.js';
import { boundaryCases, deepCases, memberRunCases, realPages, runCases, runRandomCases, type Disagreement } from '../test/helpers/json-differential.js';

const { values } = parseArgs({ options: { cases: { type: 'string', default: '1000000' }, seed: { type: 'string', default: String(Date.now() % 1_000_000) } } });
const cases = Number(values.cases);
const seed = Number(values.seed);
const started = performance.now();
console.log(`validator: ${jsonValidatorEngine}; seed ${seed} (FUZZ_SEED=${seed} replays the random part in the test)`);

const found: Disagreement[] = [];
let ran = 0;
for (const [kind, generated] of [
  ['page', realPages()],
  ['boundary', boundaryCases()],
  ['member run', memberRunCases()],
  ['deep', deepCases(100_000)],
] as const) {
  const result = runCases(kind, generated);
  ran += result.ran;
  found.push(...result.disagreements);
}
// In slices of 50,000, each with its own seed, so progress shows and a failure names a small replay.
const SLICE = 50_000;
for (let done = 0; done < cases; done += SLICE) {
  const sliceSeed = seed + done / SLICE;
  const count = Math.min(SLICE, cases - done);
  const disagreements = runRandomCases(sliceSeed, count);
  ran += count;
  if (disagreements.length > 0) console.log(`seed ${sliceSeed} (cases ${count}): ${disagreements.length} disagreements`);
  found.push(...disagreements);
  process.stdout.write(`\r${ran} cases, ${((performance.now() - started) / 1000).toFixed(0)} s`);
}
console.log(`\n${ran} cases in ${((performance.now() - started) / 1000).toFixed(1)} s: ${found.length === 0 ? 'no disagreement' : `${found.length} disagreements`}`);
for (const disagreement of found.slice(0, 10)) console.log(disagreement);
process.exitCode = found.length === 0 ? 0 : 1;
