import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * WAL checkpoints on a worker thread. By default SQLite checkpoints inside the commit that
 * pushes the WAL past 1000 pages: on the gateway that commit is the ledger transaction of an
 * event-loop turn, and copying the WAL into the database file and fsyncing it stalls every
 * request of that turn (measured: 1–14 ms, every few hundred transactions, and ~40% of the
 * ledger's time). The gateway's connection turns automatic checkpoints off and this thread, with
 * its own connection, runs a PASSIVE checkpoint every interval instead: PASSIVE never waits for
 * the writer, and commits (synchronous = NORMAL, no fsync) never wait for it.
 */

export interface SqliteCheckpointer {
  stop(): Promise<void>;
}

/**
 * The worker's whole program, as CommonJS source: an `eval` worker needs no file of its own, so
 * it runs the same from the compiled build and from the TypeScript sources under test.
 */
const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const Database = require(workerData.driverPath);
const db = new Database(workerData.path);
db.pragma('busy_timeout = 5000');
setInterval(() => db.pragma('wal_checkpoint(PASSIVE)'), workerData.intervalMs);
`;

export function startSqliteCheckpointer(
  path: string,
  options: { intervalMs: number; onError: (error: Error) => void },
): SqliteCheckpointer {
  const driverPath = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { driverPath, path, intervalMs: options.intervalMs } });
  worker.unref(); // a checkpoint thread never keeps the process alive
  let ended = false; // stopped, or its failure already reported
  worker.once('error', (error) => {
    ended = true;
    options.onError(error);
  });
  worker.once('exit', (code) => {
    if (!ended) options.onError(new Error(`the checkpoint thread exited (code ${code})`));
  });
  return {
    async stop() {
      ended = true;
      await worker.terminate();
    },
  };
}
