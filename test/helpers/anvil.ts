// One seeded anvil per test file: start it in beforeAll, stop it in afterAll.

import { afterAll, beforeAll } from 'vitest';
import { seedAnvil, type SeedOptions, type SeedResult } from '../../src/devnet/anvil-seed.js';
import { startAnvil, type AnvilNode, type AnvilOptions } from '../../src/devnet/anvil.js';
import { request } from 'undici';

export interface SeededAnvil {
  node: AnvilNode;
  seed: SeedResult;
}

export async function startSeededAnvil(options: AnvilOptions = {}, seedOptions: SeedOptions = {}): Promise<SeededAnvil> {
  const node = await startAnvil(options);
  try {
    return { node, seed: await seedAnvil(node.url, seedOptions) };
  } catch (err) {
    await node.stop();
    throw err;
  }
}

/**
 * Registers beforeAll/afterAll hooks in the calling file and returns a handle whose
 * `node` and `seed` are available inside tests (reading them earlier throws).
 */
export function useSeededAnvil(options: AnvilOptions = {}, seedOptions: SeedOptions = {}): SeededAnvil {
  let current: SeededAnvil | undefined;
  beforeAll(async () => {
    current = await startSeededAnvil(options, seedOptions);
  }, 30_000);
  afterAll(async () => {
    await current?.node.stop();
  });
  const get = (): SeededAnvil => {
    if (!current) throw new Error('useSeededAnvil: anvil is not started yet (read it inside a test or hook)');
    return current;
  };
  return {
    get node() {
      return get().node;
    },
    get seed() {
      return get().seed;
    },
  };
}

/** One JSON-RPC call straight to a node (no gateway in between); throws on a JSON-RPC error. */
export async function directRpc(url: string, method: string, params: unknown[]): Promise<unknown> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.body.json()) as { result?: unknown; error?: unknown };
  if (body.error !== undefined) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}
