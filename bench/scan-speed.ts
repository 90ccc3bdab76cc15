// What the JSON validation of a large answer costs on its own: the envelope scan
// (src/jsonrpc/envelope-scanner.ts: the WebAssembly SIMD validator, the page's copy into its
// memory and the UTF-8 check included) on the sample DAS server's getAssetsByGroup pages, in
// milliseconds per page, against the JavaScript scan it replaced (the fallback where WebAssembly
// SIMD is missing) and `JSON.parse` of the same text (what validating by parsing would cost). Measured twice: in this fresh process, and again once an ArrayBuffer has been detached.
// The second is the gateway's case: undici's HTTP parser (WebAssembly) detaches its memory's old
// ArrayBuffer when the memory grows for a large answer, V8 then drops its "no ArrayBuffer was ever
// detached" assumption for the whole process, and every typed-array read checks for detachment.
//
//   node --import tsx bench/scan-speed.ts [--rounds 15]

import { request } from 'node:http';
import { parseArgs } from 'node:util';
import { startSampleDasServer } from '../src/devnet/sample-das/index.js';
import { jsonValidatorEngine, scanEnvelope } from '../src/jsonrpc/envelope-scanner.js';
import { jsScanEnvelope } from '../src/jsonrpc/js-envelope-scanner.js';

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '15' } } });
const ROUNDS = Number(values.rounds);
const CALLS_PER_ROUND = 20;

const server = await startSampleDasServer();
const largest = [...server.dataset.collections].sort((a, b) => b.size - a.size)[0];
if (largest === undefined) throw new Error('the sample data set has no collection');

/** One page, fetched with `node:http` (native parser): undici would detach a buffer before the first measurement. */
function page(limit: number): Promise<Buffer> {
  const params = { groupKey: 'collection', groupValue: largest!.id, page: 1, limit };
  return new Promise((resolve, reject) => {
    const call = request(server.url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk));
      answer.on('end', () => resolve(Buffer.concat(chunks)));
      answer.on('error', reject);
    });
    call.on('error', reject);
    call.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'getAssetsByGroup', params }));
  });
}

const pages = [
  { name: 'limit 100', bytes: await page(100) },
  { name: 'limit 1000', bytes: await page(1000) },
];
await server.close();

/** The fastest single call of the last {@link bestMs}: on a busy shared machine, the least disturbed figure. */
let fastestCallMs = Infinity;

/**
 * The best round's mean time per call, in ms (the least disturbed by whatever else the machine
 * does); each call gets a fresh copy of the page, as each answer is a fresh buffer.
 */
function bestMs(bytes: Buffer, work: (copy: Buffer) => unknown): number {
  const perRound: number[] = [];
  fastestCallMs = Infinity;
  for (let round = 0; round < ROUNDS; round += 1) {
    let total = 0;
    for (let call = 0; call < CALLS_PER_ROUND; call += 1) {
      const copy = Buffer.from(new Uint8Array(bytes).buffer);
      const started = performance.now();
      if (work(copy) === undefined) throw new Error('the page did not validate');
      const took = performance.now() - started;
      total += took;
      fastestCallMs = Math.min(fastestCallMs, took);
    }
    perRound.push(total / CALLS_PER_ROUND);
  }
  return Math.min(...perRound);
}

function measure(condition: string): void {
  for (const { name, bytes } of pages) {
    const scan = bestMs(bytes, scanEnvelope);
    const scanFastest = fastestCallMs;
    const jsScan = bestMs(bytes, jsScanEnvelope);
    const jsScanFastest = fastestCallMs;
    const parse = bestMs(bytes, (copy) => JSON.parse(copy.toString('utf8')) as unknown);
    const nsPerByte = (ms: number): string => ((ms * 1e6) / bytes.length).toFixed(2);
    console.log(
      `| ${condition} | ${name} (${(bytes.length / 1024).toFixed(0)} KiB) | ${scan.toFixed(2)} ms (${nsPerByte(scan)} ns/byte; fastest call ${scanFastest.toFixed(2)}) | ${jsScan.toFixed(2)} ms (${nsPerByte(jsScan)} ns/byte; fastest call ${jsScanFastest.toFixed(2)}) | ${parse.toFixed(2)} ms (${nsPerByte(parse)} ns/byte) |`,
    );
  }
}

// Warm-up: both paths optimised by V8 before anything is timed.
for (const { bytes } of pages) {
  bestMs(bytes, scanEnvelope);
  bestMs(bytes, jsScanEnvelope);
  bestMs(bytes, (copy) => JSON.parse(copy.toString('utf8')) as unknown);
}
console.log(`validator: ${jsonValidatorEngine}`);
console.log('| process | page | envelope scan | JavaScript scan | JSON.parse |');
console.log('|---|---|---:|---:|---:|');
measure('fresh');
const detached = new ArrayBuffer(8);
structuredClone(detached, { transfer: [detached] });
measure('after an ArrayBuffer was detached (the gateway)');
