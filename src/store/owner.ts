import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

/**
 * Which process holds a reservation: `host:pid:nonce`, one tag per process (shared by every store
 * it opens, so two stores of one process never take each other for dead). The nonce tells a
 * restarted process apart from an earlier one that had the same pid.
 */
export const PROCESS_OWNER_TAG = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;

/**
 * True when `owner` is a process of this host that no longer runs (or an earlier life of our
 * own pid). For other hosts' processes it cannot tell and says false; the Redis driver's
 * heartbeats and the age rule cover those.
 */
export function isLocalOwnerDead(owner: string): boolean {
  if (owner === PROCESS_OWNER_TAG) return false;
  const [host, pidText] = owner.split(':');
  if (host !== hostname()) return false;
  const pid = Number(pidText);
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** The start of every owner tag of this host's processes. */
export const LOCAL_OWNER_PREFIX = `${hostname()}:`;
