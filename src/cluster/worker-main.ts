import pino from 'pino';
import { startGateway, type RunningGateway } from '../gateway.js';
import { createLogger, setLogLevel } from '../logging/logger.js';
import { collectConfigSecrets } from '../config/secrets.js';
import type { GatewayConfig } from '../config/schema.js';
import { isProtocolMessage, type FromWorker, type ToWorker, type WorkerAnswers, type WorkerQuestion } from './worker-messages.js';

/**
 * The program of one worker of `tollgate serve --workers N` (the primary forks it with
 * node:cluster; see worker-group.ts). It waits for its config from the primary, serves the RPC
 * port (HTTP and WebSocket upgrades; the primary hands it connections) and answers the
 * primary's questions. It has no admin listener or portal: the primary serves those for the
 * whole group.
 */

/** What the next reload applies: the primary's validated config (the worker never reads the file). */
let nextConfig: GatewayConfig | undefined;

function send(message: FromWorker): void {
  process.send?.(message);
}

async function answer(gateway: RunningGateway, question: WorkerQuestion): Promise<WorkerAnswers[WorkerQuestion['op']]> {
  switch (question.op) {
    case 'metrics':
      return gateway.group.metricsJson();
    case 'readiness':
      return gateway.group.readiness();
    case 'reload':
      nextConfig = question.config;
      await gateway.reload();
      return { networks: question.config.networks.map((network) => network.id) };
    case 'log-level':
      setLogLevel(gateway.logger, question.level);
      return { level: question.level };
  }
}

function serveGroupWorker(): void {
  if (process.send === undefined) throw new Error('worker-main runs only as a cluster worker of `tollgate serve --workers N`');
  let gateway: RunningGateway | undefined;
  let draining: Promise<void> | undefined;

  function handle(message: ToWorker): void {
    switch (message.type) {
      case 'start': {
        const { config } = message;
        const logger = createLogger({
          level: message.logLevel,
          secrets: collectConfigSecrets(config),
          base: { worker: Number(process.env.TOLLGATE_WORKER_SLOT) },
          destination: pino.destination({ fd: process.env.TOLLGATE_WORKER_LOG_FD === '2' ? 2 : 1, sync: false }),
        });
        nextConfig = config;
        startGateway(config, { logger, groupWorker: true, groupSize: Number(process.env.TOLLGATE_WORKER_COUNT ?? '1'), loadConfig: () => nextConfig! }).then(
          (started) => {
            gateway = started;
            send({ type: 'listening', rpcOrigin: started.rpcOrigin, rpcPort: started.rpcPort });
          },
          (error: unknown) => {
            logger.fatal({ err: error }, 'worker could not start');
            // The primary sees the exit: before the group is up it stops, after it restarts the worker.
            logger.flush(() => process.exit(1));
          },
        );
        return;
      }
      case 'ask': {
        const { id, question } = message;
        if (gateway === undefined) {
          send({ type: 'reply', id, ok: false, error: 'the worker is still starting' });
          return;
        }
        answer(gateway, question).then(
          (value) => send({ type: 'reply', id, ok: true, value }),
          (error: unknown) => send({ type: 'reply', id, ok: false, error: (error as Error).message }),
        );
        return;
      }
      case 'forget-keys':
        gateway?.group.forgetKeys();
        return;
      case 'forget-alert-targets':
        gateway?.group.forgetAlertTargets(message.teamId);
        return;
      case 'drain': {
        const running = gateway;
        if (running === undefined) process.exit(0);
        draining ??= running.drain().then(
          () => running.logger.flush(() => process.exit(0)),
          (error: unknown) => {
            running.logger.error({ err: error }, 'drain failed');
            running.logger.flush(() => process.exit(1));
          },
        );
        return;
      }
    }
  }

  process.on('message', (message: unknown) => {
    if (isProtocolMessage<ToWorker>(message)) handle(message);
  });
  send({ type: 'hello' });
  // SIGTERM sent to this worker alone (or to the whole process group) drains it like the
  // primary's `drain`; the primary restarts it unless the group is stopping. SIGINT and SIGHUP
  // are the primary's to act on for the whole group (a terminal's Ctrl-C reaches every process).
  process.on('SIGTERM', () => handle({ type: 'drain' }));
  for (const signal of ['SIGINT', 'SIGHUP'] as const) process.on(signal, () => undefined);
  // A worker whose primary is gone (kill -9 of the primary) must not serve on alone.
  process.on('disconnect', () => {
    if (draining === undefined) process.exit(0);
  });
}

serveGroupWorker();
