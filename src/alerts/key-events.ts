import type { Logger } from '../logging/logger.js';
import type { AlertStore, ApiKey, KeyDirectory } from '../store/index.js';
import type { AlertTargets } from './alert-targets.js';
import { eventId } from './quota-alerts.js';
import type { WebhookSender } from './webhook-sender.js';

/**
 * Key events: `key.revoked` when a key is revoked (at once when this process revoked it; by the
 * periodic check for revocations made elsewhere, e.g. the CLI) and `key.expiring` once, a set
 * number of days before a key's expiry. Each event is claimed in the store first, so replicas
 * and the periodic check never send one twice.
 */

export interface KeyEvents {
  keyRevoked(key: ApiKey): Promise<void>;
  /** One pass over every key: revocations of the last day not yet announced, keys about to expire. */
  check(): Promise<void>;
  start(intervalMs: number): void;
  stop(): void;
}

const DAY_MS = 86_400_000;
/** Revocations older than this are not announced by the periodic check (a new gateway's first pass). */
const REVOKED_LOOKBACK_MS = DAY_MS;

export function createKeyEvents(options: {
  store: Pick<KeyDirectory, 'listKeys'> & Pick<AlertStore, 'claimEvent'>;
  targets: AlertTargets;
  sender: WebhookSender;
  expiringDays: number;
  now: () => number;
  logger?: Logger;
}): KeyEvents {
  const { store, targets, sender, now } = options;
  let timer: NodeJS.Timeout | undefined;

  async function announce(eventKey: string, key: ApiKey, event: Record<string, unknown> & { type: string }): Promise<void> {
    const { target } = await targets.get(key.teamId);
    if (target === null) return;
    if (!(await store.claimEvent(eventKey, 2 * REVOKED_LOOKBACK_MS + options.expiringDays * DAY_MS))) return;
    void sender.deliver({ id: eventId(eventKey), team: key.teamId, ...event, key: { id: key.id, label: key.label } }, target);
  }

  const events: KeyEvents = {
    async keyRevoked(key) {
      if (key.revokedAt === null) return;
      await announce(`key.revoked:${key.id}`, key, { type: 'key.revoked', revokedAt: new Date(key.revokedAt).toISOString() });
    },
    async check() {
      const at = now();
      for (const key of await store.listKeys()) {
        if (key.revokedAt !== null) {
          if (at - key.revokedAt <= REVOKED_LOOKBACK_MS) await events.keyRevoked(key);
        } else if (key.expiresAt !== null && key.expiresAt > at && key.expiresAt - at <= options.expiringDays * DAY_MS) {
          await announce(`key.expiring:${key.id}:${key.expiresAt}`, key, { type: 'key.expiring', expiresAt: new Date(key.expiresAt).toISOString() });
        }
      }
    },
    start(intervalMs) {
      const run = () => void events.check().catch((error: unknown) => options.logger?.error({ err: error }, 'key event check failed'));
      run();
      timer = setInterval(run, intervalMs);
      timer.unref();
    },
    stop() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
  return events;
}
