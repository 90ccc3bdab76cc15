/**
 * DEVELOPMENT FIXTURE — the entry point of the sample DAS upstream's own thread (see thread.ts).
 * Starts the server, tells the parent where it listens, and closes when asked.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startSampleDasServer } from './server.js';

const options = (workerData ?? {}) as { host?: string; port?: number };
const server = await startSampleDasServer(options);
parentPort!.on('message', (message: unknown) => {
  if (message === 'close') void server.close().finally(() => parentPort!.close());
});
parentPort!.postMessage({ url: server.url, port: server.port, collections: server.dataset.collections.map((collection) => collection.id) });
