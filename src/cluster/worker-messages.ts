import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { GatewayConfig } from '../config/schema.js';
import type { Readiness } from '../admin/operational-routes.js';
import type { LogLevel } from '../logging/logger.js';

/**
 * What the primary of `serve --workers N` and its workers say to each other over the cluster's
 * IPC channel (structured-clone serialization, so a config travels as the object it is). The
 * primary owns the config: a worker is given it at start and with every reload, and never reads
 * the file itself, so a restarted worker runs what its siblings run even if the file changed.
 */

export type MetricsJson = Array<MetricObjectWithValues<MetricValue<string>>>;

/** Questions the primary asks and a worker answers (one `reply` each). */
export type WorkerQuestion =
  | { op: 'metrics' }
  | { op: 'readiness' }
  /** Apply this config (already validated by the primary). */
  | { op: 'reload'; config: GatewayConfig }
  /** Log at this level from now on (`PUT /v1/log-level`). */
  | { op: 'log-level'; level: LogLevel };

export interface WorkerAnswers {
  metrics: MetricsJson;
  readiness: Readiness;
  reload: { networks: string[] };
  'log-level': { level: LogLevel };
}

export type ToWorker =
  /** The group's config, and its log level as the admin API last set it. */
  | { type: 'start'; config: GatewayConfig; logLevel: string }
  | { type: 'ask'; id: number; question: WorkerQuestion }
  /** Keys or teams changed through the admin API or the portal: drop cached keys. */
  | { type: 'forget-keys' }
  /** A team's webhook settings changed: read them again before the next alert. */
  | { type: 'forget-alert-targets'; teamId: string }
  /** Stop accepting, finish what is in flight (bounded by `server.drainTimeoutMs`), exit 0. */
  | { type: 'drain' };

export type FromWorker =
  /** The worker listens for messages: the primary sends `start`. */
  | { type: 'hello' }
  | { type: 'listening'; rpcOrigin: string; rpcPort: number }
  | { type: 'reply'; id: number; ok: true; value: unknown }
  | { type: 'reply'; id: number; ok: false; error: string };

const MESSAGE_TYPES = new Set(['start', 'ask', 'forget-keys', 'forget-alert-targets', 'drain', 'hello', 'listening', 'reply']);

/**
 * Messages of this protocol, told apart from others on the same channel (prom-client's and
 * Node's own cluster messages use other shapes).
 */
export function isProtocolMessage<T extends ToWorker | FromWorker>(message: unknown): message is T {
  return typeof message === 'object' && message !== null && MESSAGE_TYPES.has((message as { type?: unknown }).type as string);
}
