/**
 * Concurrent identical calls share one execution: the first caller runs it, later callers with
 * the same key wait for its outcome. Each follower still honours its own deadline and gets
 * `onTimeout()` when that passes first; the shared call keeps running for the others.
 */
export interface SingleFlight<T> {
  run(key: string, execute: () => Promise<T>, deadline: number, onTimeout: () => T): Promise<T>;
}

/**
 * `onShared` is called with the outcome once per follower, in the turn the outcome arrives: an
 * outcome that lends a pooled buffer (jsonrpc/answer-buffers.ts) must then never give it back, as
 * more than one reply is written from it.
 */
export function createSingleFlight<T>(now: () => number = Date.now, onShared?: (value: T) => void): SingleFlight<T> {
  const calls = new Map<string, Promise<T>>();
  return {
    run(key, execute, deadline, onTimeout) {
      const existing = calls.get(key);
      if (existing === undefined) {
        const shared = execute().finally(() => calls.delete(key));
        calls.set(key, shared);
        return shared;
      }
      const remaining = deadline - now();
      if (remaining <= 0) return Promise.resolve(onTimeout());
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => resolve(onTimeout()), remaining);
        existing.then(
          (value) => {
            clearTimeout(timer);
            onShared?.(value);
            resolve(value);
          },
          (error: unknown) => {
            clearTimeout(timer);
            reject(error);
          },
        );
      });
    },
  };
}
