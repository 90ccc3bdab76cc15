import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import { isProtocolMessage, type FromWorker, type ToWorker, type WorkerAnswers, type WorkerQuestion } from './worker-messages.js';

/**
 * The primary's side of the workers: forks one per slot (1..N), hands each the group's current
 * config, restarts one that ends without being asked (after a back-off that grows while a slot
 * keeps dying young), asks them questions and drains them.
 */

export interface WorkerSupervisor {
  /** Forks every worker; resolves once all listen, rejects (and stops the rest) if one ends first. */
  start(): Promise<{ rpcOrigin: string; rpcPort: number }>;
  /** Slots whose worker is listening now. */
  listeningSlots(): number[];
  pidOf(slot: number): number | undefined;
  /** One worker's answer, or a rejection after `timeoutMs` or when it ends. */
  ask<Q extends WorkerQuestion>(slot: number, question: Q, timeoutMs: number): Promise<WorkerAnswers[Q['op']]>;
  /** Sends to every connected worker. */
  broadcast(message: ToWorker): void;
  /** The config a worker (re)started from now on is given. */
  setConfig(config: GatewayConfig): void;
  /** The log level a worker (re)started from now on is given. */
  setLogLevel(level: string): void;
  /** Tells every worker to drain and waits for all to exit; stragglers get SIGKILL after `graceMs`. */
  drain(graceMs: number): Promise<void>;
  /** Ends a worker at once (SIGKILL); it is restarted like any worker that died. */
  kill(slot: number): void;
}

export interface WorkerSupervisorOptions {
  count: number;
  config: GatewayConfig;
  /** The file descriptor workers log to (1 stdout, 2 stderr). */
  logFd: 1 | 2;
  logger: Logger;
  /** A worker ended unasked and will be restarted (reason: its signal or `exit_<code>`). */
  onUnexpectedExit(slot: number, reason: string): void;
  /** The number of listening workers changed. */
  onListeningCount(count: number): void;
}

/** First restart of a slot after this; doubled for each further death within {@link STABLE_AFTER_MS}. */
const RESTART_MIN_DELAY_MS = 100;
const RESTART_MAX_DELAY_MS = 30_000;
/** A worker that lived this long resets its slot's back-off. */
const STABLE_AFTER_MS = 30_000;

const WORKER_ENTRY = fileURLToPath(new URL('./worker-main.js', import.meta.url));

interface Slot {
  slot: number;
  worker: Worker | undefined;
  listening: boolean;
  startedAt: number;
  /** Deaths in a row of workers that did not live {@link STABLE_AFTER_MS}. */
  youngDeaths: number;
  restartTimer: NodeJS.Timeout | undefined;
  pending: Map<number, { resolve(value: unknown): void; reject(error: Error): void; timer: NodeJS.Timeout }>;
}

export function createWorkerSupervisor(options: WorkerSupervisorOptions): WorkerSupervisor {
  const { logger } = options;
  let config = options.config;
  let logLevel = options.logger.level;
  let stopping = false;
  let started = false;
  let nextQuestionId = 1;
  const slots: Slot[] = Array.from({ length: options.count }, (_, index) => ({
    slot: index + 1,
    worker: undefined,
    listening: false,
    startedAt: 0,
    youngDeaths: 0,
    restartTimer: undefined,
    pending: new Map(),
  }));
  const firstListen: { resolve(origin: { rpcOrigin: string; rpcPort: number }): void; reject(error: Error): void; listening: number; origin?: { rpcOrigin: string; rpcPort: number } } = {
    resolve: () => undefined,
    reject: () => undefined,
    listening: 0,
  };

  // Workers run their own program (not the CLI again), with messages that carry objects as they are.
  cluster.setupPrimary({ exec: WORKER_ENTRY, args: [], serialization: 'advanced' });

  const listeningCount = () => slots.filter((entry) => entry.listening).length;

  function fork(entry: Slot): void {
    const worker = cluster.fork({ TOLLGATE_WORKER_SLOT: String(entry.slot), TOLLGATE_WORKER_COUNT: String(options.count), TOLLGATE_WORKER_LOG_FD: String(options.logFd) });
    entry.worker = worker;
    entry.listening = false;
    entry.startedAt = Date.now();
    worker.on('message', (message: unknown) => {
      if (!isProtocolMessage<FromWorker>(message)) return;
      switch (message.type) {
        case 'hello':
          worker.send({ type: 'start', config, logLevel } satisfies ToWorker);
          return;
        case 'listening': {
          entry.listening = true;
          options.onListeningCount(listeningCount());
          const origin = { rpcOrigin: message.rpcOrigin, rpcPort: message.rpcPort };
          if (!started) {
            firstListen.origin = origin;
            firstListen.listening += 1;
            if (firstListen.listening === slots.length) {
              started = true;
              firstListen.resolve(origin);
            }
          } else {
            // Tests and operators wait for this line after a worker died.
            logger.info({ slot: entry.slot, pid: worker.process.pid }, 'worker restarted and listening');
          }
          return;
        }
        case 'reply': {
          const waiting = entry.pending.get(message.id);
          if (waiting === undefined) return;
          entry.pending.delete(message.id);
          clearTimeout(waiting.timer);
          if (message.ok) waiting.resolve(message.value);
          else waiting.reject(new Error(`worker ${entry.slot}: ${message.error}`));
          return;
        }
      }
    });
    worker.once('exit', (code, signal) => onExit(entry, worker, code, signal));
  }

  function onExit(entry: Slot, worker: Worker, code: number | null, signal: string | null): void {
    if (entry.worker !== worker) return;
    const wasListening = entry.listening;
    entry.worker = undefined;
    entry.listening = false;
    for (const [id, waiting] of entry.pending) {
      clearTimeout(waiting.timer);
      waiting.reject(new Error(`worker ${entry.slot} ended`));
      entry.pending.delete(id);
    }
    if (wasListening) options.onListeningCount(listeningCount());
    if (stopping) return;
    const reason = signal ?? `exit_${code ?? 'unknown'}`;
    if (!started) {
      firstListen.reject(new Error(`worker ${entry.slot} ended (${reason}) before it listened`));
      return;
    }
    const lived = Date.now() - entry.startedAt;
    entry.youngDeaths = lived >= STABLE_AFTER_MS ? 0 : entry.youngDeaths + 1;
    const delayMs = Math.min(RESTART_MAX_DELAY_MS, RESTART_MIN_DELAY_MS * 2 ** Math.max(0, entry.youngDeaths - 1));
    logger.error({ slot: entry.slot, pid: worker.process.pid, reason, livedMs: lived, restartInMs: delayMs }, 'worker ended unasked; restarting it');
    options.onUnexpectedExit(entry.slot, reason);
    entry.restartTimer = setTimeout(() => {
      entry.restartTimer = undefined;
      if (!stopping) fork(entry);
    }, delayMs);
  }

  async function drain(graceMs: number): Promise<void> {
    stopping = true;
    const exits: Array<Promise<void>> = [];
    for (const entry of slots) {
      clearTimeout(entry.restartTimer);
      const worker = entry.worker;
      if (worker === undefined) continue;
      exits.push(new Promise((resolve) => (worker.isDead() ? resolve() : worker.once('exit', () => resolve()))));
      if (worker.isConnected()) worker.send({ type: 'drain' } satisfies ToWorker);
      else worker.process.kill('SIGTERM');
    }
    // Each worker bounds its own drain by the same grace; this only catches one that hangs.
    const killer = setTimeout(() => {
      for (const entry of slots) entry.worker?.process.kill('SIGKILL');
    }, graceMs);
    await Promise.all(exits);
    clearTimeout(killer);
  }

  return {
    start() {
      return new Promise((resolve, reject) => {
        firstListen.resolve = resolve;
        firstListen.reject = (error) => {
          void drain(0).then(() => reject(error));
        };
        for (const entry of slots) fork(entry);
      });
    },
    listeningSlots: () => slots.filter((entry) => entry.listening).map((entry) => entry.slot),
    pidOf: (slot) => slots[slot - 1]?.worker?.process.pid,
    ask(slot, question, timeoutMs) {
      const entry = slots[slot - 1];
      const worker = entry?.worker;
      if (entry === undefined || worker === undefined || !worker.isConnected()) return Promise.reject(new Error(`worker ${slot} is not running`));
      const id = nextQuestionId++;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          entry.pending.delete(id);
          reject(new Error(`worker ${slot} did not answer ${question.op} within ${timeoutMs} ms`));
        }, timeoutMs);
        entry.pending.set(id, { resolve: resolve as (value: unknown) => void, reject, timer });
        worker.send({ type: 'ask', id, question } satisfies ToWorker);
      });
    },
    broadcast(message) {
      for (const entry of slots) if (entry.worker?.isConnected()) entry.worker.send(message);
    },
    setConfig(next) {
      config = next;
    },
    setLogLevel(level) {
      logLevel = level;
    },
    drain,
    kill(slot) {
      slots[slot - 1]?.worker?.process.kill('SIGKILL');
    },
  };
}
