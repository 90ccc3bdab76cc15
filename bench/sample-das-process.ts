// The sample DAS upstream (src/devnet/sample-das) as its own process, so that neither the
// gateway nor the load generator shares its event loop. Prints `{"url":"…","groupValue":"…"}`
// when listening: the largest collection's mint, which has more than 1000 assets.
//
//   node --import tsx bench/sample-das-process.ts

import { startSampleDasServer } from '../src/devnet/sample-das/index.js';

const server = await startSampleDasServer();
const largest = [...server.dataset.collections].sort((a, b) => b.size - a.size)[0];
if (largest === undefined) throw new Error('the sample data set has no collection');
process.stdout.write(`${JSON.stringify({ url: server.url, groupValue: largest.id, size: largest.size })}\n`);
process.on('SIGTERM', () => {
  void server.close().finally(() => process.exit(0));
});
