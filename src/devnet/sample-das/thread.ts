/**
 * DEVELOPMENT FIXTURE — the sample DAS upstream on a worker thread of its own, as `tollgate devnet`
 * runs it: however long it takes to answer (a batch of full pages, a hostile request), the
 * gateway's event loop in the main thread is never the one doing that work.
 */
import { Worker } from 'node:worker_threads';

export interface SampleDasThread {
  url: string;
  port: number;
  /** Ids of the generated collections (the data set lives in the worker). */
  collections: string[];
  close(): Promise<void>;
}

export function startSampleDasThread(options: { host?: string; port?: number } = {}): Promise<SampleDasThread> {
  // Built code runs the compiled entry; from sources (tsx, tests) the TypeScript one through tsx.
  const fromSource = import.meta.url.endsWith('.ts');
  const worker = new Worker(new URL(fromSource ? './thread-main.ts' : './thread-main.js', import.meta.url), {
    workerData: options,
    execArgv: fromSource ? ['--import', 'tsx'] : [],
  });
  return new Promise((resolve, reject) => {
    const failed = (error: Error) => reject(error);
    worker.once('error', failed);
    worker.once('exit', (code) => reject(new Error(`the sample DAS thread exited with code ${code} before listening`)));
    worker.once('message', (message: { url: string; port: number; collections: string[] }) => {
      worker.off('error', failed);
      worker.removeAllListeners('exit');
      resolve({
        ...message,
        close: () =>
          new Promise<void>((done) => {
            worker.once('exit', () => done());
            worker.postMessage('close');
            // A fixture that does not close promptly is stopped.
            setTimeout(() => void worker.terminate(), 2_000).unref();
          }),
      });
    });
  });
}
