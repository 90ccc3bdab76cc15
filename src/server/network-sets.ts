import type { NetworkSet } from './network-runtime.js';

/**
 * Which network set requests start on, and when a replaced one may close. Each request holds
 * the set it started on; a set replaced by a reload is closed only once the last request that
 * started on it is done, so a request in flight keeps the pools of the upstreams it has not
 * tried yet (failover). Plain counters rather than a map lookup per request (both acquire and
 * release are on the cache-hit path); the in-flight gauge is read when /metrics is scraped.
 */
export interface NetworkSetHolder {
  /** The set a new request starts on; pair with one {@link release}. */
  acquire(): NetworkSet;
  release(set: NetworkSet): void;
  /** The current set, without holding it. */
  current(): NetworkSet;
  /** Makes `next` current; the previous set closes when its last request is released. */
  replace(next: NetworkSet): void;
  /** Requests in flight on every set. */
  inFlight(): number;
  /** Closes every set, current and retired, whatever is still in flight. */
  closeAll(): Promise<void>;
}

export function createNetworkSetHolder(initial: NetworkSet): NetworkSetHolder {
  let current = initial;
  /** Requests in flight that started on `current`. */
  let onCurrent = 0;
  /** Sets replaced by a reload, with their requests still in flight. */
  const retired = new Map<NetworkSet, number>();

  return {
    acquire() {
      onCurrent += 1;
      return current;
    },
    release(set) {
      if (set === current) {
        onCurrent -= 1;
        return;
      }
      const left = (retired.get(set) ?? 1) - 1;
      if (left > 0) return void retired.set(set, left);
      retired.delete(set);
      void set.close();
    },
    current: () => current,
    replace(next) {
      const previous = current;
      current = next;
      if (onCurrent > 0) retired.set(previous, onCurrent);
      else void previous.close();
      onCurrent = 0;
    },
    inFlight() {
      let count = onCurrent;
      for (const left of retired.values()) count += left;
      return count;
    },
    async closeAll() {
      const sets = [current, ...retired.keys()];
      retired.clear();
      await Promise.all(sets.map((set) => set.close()));
    },
  };
}
