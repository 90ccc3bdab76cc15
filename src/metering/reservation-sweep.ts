import type { Logger } from '../logging/logger.js';
import type { Store } from '../store/index.js';

/** How often reservations older than `credits.staleReservationMs` (or of dead processes) are looked for. */
const RESERVATION_SWEEP_INTERVAL_MS = 15_000;

/**
 * Refunds the credits held by requests of a process that died (kill -9) before serving, then
 * keeps looking for stale reservations in the background. Returns the stop.
 */
export async function startReservationSweep(store: Store, staleReservationMs: number, logger: Logger): Promise<() => void> {
  const recovered = await store.recoverReservations(staleReservationMs);
  if (recovered > 0) logger.warn({ reservations: recovered }, 'refunded reservations of requests that never finished');
  const sweep = setInterval(() => {
    store.recoverReservations(staleReservationMs).then(
      (count) => count > 0 && logger.warn({ reservations: count }, 'refunded stale reservations'),
      (error: unknown) => logger.error({ err: error }, 'reservation sweep failed'),
    );
  }, RESERVATION_SWEEP_INTERVAL_MS);
  sweep.unref();
  return () => clearInterval(sweep);
}
