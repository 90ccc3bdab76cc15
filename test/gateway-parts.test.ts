import { describe, expect, it } from 'vitest';
import { createThrottle } from '../src/logging/throttle.js';
import { createNetworkSetHolder } from '../src/server/network-sets.js';
import type { NetworkSet } from '../src/server/network-runtime.js';
import { readiness } from '../src/admin/operational-routes.js';

// The parts the composition root wires, tested alone: no listener, no real time.

function fakeSet(name: string, healthy: Record<string, boolean> = {}): NetworkSet & { closed: number; name: string } {
  const set = {
    name,
    closed: 0,
    resolver: undefined as unknown as NetworkSet['resolver'],
    byId: new Map(Object.entries(healthy).map(([id, ok]) => [id, { forwarder: { hasHealthyUpstream: () => ok } }])) as unknown as NetworkSet['byId'],
    close: async () => {
      set.closed += 1;
    },
  };
  return set;
}

describe('network set holder', () => {
  it('closes a replaced set at once when nothing runs on it', () => {
    const first = fakeSet('first');
    const holder = createNetworkSetHolder(first);
    holder.replace(fakeSet('second'));
    expect(first.closed).toBe(1);
    expect((holder.current() as ReturnType<typeof fakeSet>).name).toBe('second');
  });

  it('keeps a replaced set open until the last request that started on it is released', () => {
    const first = fakeSet('first');
    const holder = createNetworkSetHolder(first);
    const a = holder.acquire();
    const b = holder.acquire();
    const second = fakeSet('second');
    holder.replace(second);
    const c = holder.acquire();
    expect(c).toBe(second);
    expect(holder.inFlight()).toBe(3);
    holder.release(a);
    expect(first.closed).toBe(0);
    holder.release(b);
    expect(first.closed).toBe(1);
    holder.release(c);
    expect(holder.inFlight()).toBe(0);
    expect(second.closed).toBe(0);
  });

  it('survives two reloads while one request holds the oldest set, and closes every set on shutdown', async () => {
    const first = fakeSet('first');
    const holder = createNetworkSetHolder(first);
    const held = holder.acquire();
    const second = fakeSet('second');
    holder.replace(second);
    const third = fakeSet('third');
    holder.replace(third);
    expect(second.closed).toBe(1);
    expect(holder.inFlight()).toBe(1);
    await holder.closeAll();
    expect(first.closed).toBe(1);
    expect(third.closed).toBe(1);
    holder.release(held);
  });
});

describe('log throttle', () => {
  it('lets the first call through, then one per interval of the injected clock', () => {
    let time = 1_000;
    const pass = createThrottle(5_000, () => time);
    expect(pass()).toBe(true);
    time += 4_999;
    expect(pass()).toBe(false);
    time += 1;
    expect(pass()).toBe(true);
    expect(pass()).toBe(false);
  });
});

describe('readiness', () => {
  it('is ready only when not draining, the store answers and every network can route', async () => {
    const store = { ping: async () => undefined };
    const down = { ping: async () => Promise.reject(new Error('down')) };
    const healthy = fakeSet('ok', { a: true, b: true });
    const oneDown = fakeSet('partial', { a: true, b: false });
    expect(await readiness({ store, networks: () => healthy, draining: () => false })).toEqual({
      ready: true,
      checks: { draining: false, store: true, networks: { a: true, b: true } },
    });
    expect((await readiness({ store, networks: () => healthy, draining: () => true })).ready).toBe(false);
    expect((await readiness({ store: down, networks: () => healthy, draining: () => false })).checks.store).toBe(false);
    expect((await readiness({ store, networks: () => oneDown, draining: () => false })).ready).toBe(false);
  });
});
