import { existsSync, readdirSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { resolveAnvilCommand, startAnvil } from '../src/devnet/anvil.js';
import { useSeededAnvil } from './helpers/anvil.js';

async function rpc(url: string, method: string, params: unknown[] = []): Promise<unknown> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.body.json()) as { result?: unknown; error?: unknown };
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('resolveAnvilCommand', () => {
  it('finds the native platform binary, not the node wrapper', () => {
    const cmd = resolveAnvilCommand();
    expect(cmd.kind).toBe('native');
    expect(cmd.prefixArgs).toEqual([]);
    expect(cmd.command).toMatch(/@foundry-rs[\\/]anvil-[a-z0-9]+-[a-z0-9]+[\\/]bin[\\/]anvil(\.exe)?$/);
  });
});

describe('startAnvil', () => {
  it('starts on a free port, answers eth_chainId, and stop() terminates it', async () => {
    const node = await startAnvil();
    let stopped = false;
    try {
      expect(node.port).toBeGreaterThan(0);
      expect(node.url).toBe(`http://127.0.0.1:${node.port}`);
      expect(node.chainId).toBe(31337);
      expect(await rpc(node.url, 'eth_chainId')).toBe('0x7a69');
      expect(isAlive(node.pid)).toBe(true);

      await node.stop();
      stopped = true;
      expect(isAlive(node.pid)).toBe(false);
      await expect(rpc(node.url, 'eth_chainId')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      // stop() is idempotent
      await node.stop();
    } finally {
      if (!stopped) await node.stop();
    }
  });

  it('keeps the states it moves to disk in its own directory, and removes it when stopped', async () => {
    const node = await startAnvil();
    try {
      expect(readdirSync(node.statesDir)).toEqual([]);
      // anvil keeps the states of its 500 most recent blocks in memory; older ones go to disk.
      await rpc(node.url, 'anvil_mine', ['0x258']);
      const written = readdirSync(node.statesDir, { recursive: true });
      expect(written.filter((name) => String(name).endsWith('.json')).length).toBeGreaterThan(0);
    } finally {
      await node.stop();
    }
    expect(existsSync(node.statesDir)).toBe(false);
  });

  it('honours a custom chain id', async () => {
    const node = await startAnvil({ chainId: 1337 });
    try {
      expect(node.chainId).toBe(1337);
      expect(await rpc(node.url, 'eth_chainId')).toBe('0x539');
    } finally {
      await node.stop();
    }
  });

  it("fails with anvil's stderr when the port is taken", async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const { port } = blocker.address() as AddressInfo;
    try {
      await expect(startAnvil({ port, startupTimeoutMs: 10_000 })).rejects.toThrow(
        /exited before listening[\s\S]*Address already in use/,
      );
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
  });
});

describe('seedAnvil', () => {
  const anvil = useSeededAnvil();

  it('mines at least 20 blocks that each carry transactions', async () => {
    const { seed, node } = anvil;
    expect(seed.blocksWithTransactions.length).toBeGreaterThanOrEqual(24);
    expect(new Set(seed.blocksWithTransactions).size).toBe(seed.blocksWithTransactions.length);
    expect(seed.transactionHashes).toHaveLength(24 * 3);

    let total = 0;
    for (const hash of seed.blocksWithTransactions) {
      expect(hash).toMatch(/^0x[0-9a-f]{64}$/);
      expect(seed.blockHashes).toContain(hash);
      const block = (await rpc(node.url, 'eth_getBlockByHash', [hash, false])) as {
        hash: string;
        transactions: string[];
      };
      expect(block.hash).toBe(hash);
      expect(block.transactions.length).toBeGreaterThanOrEqual(1);
      total += block.transactions.length;
    }
    expect(total).toBe(seed.transactionHashes.length);
  });

  it('restores automine afterwards', async () => {
    const { node } = anvil;
    expect(await rpc(node.url, 'anvil_getAutomine')).toBe(true);
    const [from, to] = (await rpc(node.url, 'eth_accounts')) as string[];
    const tx = await rpc(node.url, 'eth_sendTransaction', [{ from, to, value: '0x1' }]);
    // Automine mines in the background right after eth_sendTransaction returns, so the
    // receipt appears within milliseconds; with automine off it never would.
    await expect
      .poll(async () => ((await rpc(node.url, 'eth_getTransactionReceipt', [tx])) as { status: string } | null)?.status, {
        timeout: 2_000,
        interval: 20,
      })
      .toBe('0x1');
  });
});
