// The eth_getLogs range pieces alone: parsing and limits (logs-range.ts), the "too large"
// wordings (policies/logs-too-large.ts), and the splitter (logs-splitter.ts) against scripted
// chunk runners that stand in for the cache and the failsafe chain.

import { describe, expect, it } from 'vitest';
import { GatewayError } from '../src/errors.js';
import { alignedChunks, parseLogsQuery, resolveRange, type BlockRange } from '../src/routing/logs-range.js';
import { joinArrays, splitLogsRange, type ChunkRun } from '../src/routing/logs-splitter.js';
import { isLogsTooLarge } from '../src/routing/policies/logs-too-large.js';

const LIMITS = { maxRange: 10_000, maxAddresses: 2, maxTopics: 3 };
const hex = (n: number) => `0x${n.toString(16)}`;

function paramsError(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as GatewayError).code).toBe('TG_ERR_INVALID_PARAMS');
    return error as GatewayError;
  }
  throw new Error('expected a -32602');
}

/** One fake log per block in `blocksWithLogs`, as an upstream would list them. */
function logsOf(range: BlockRange, blocksWithLogs: (block: number) => number): Buffer {
  const logs: string[] = [];
  for (let block = range.from; block <= range.to; block += 1) {
    for (let index = 0; index < blocksWithLogs(block); index += 1) logs.push(JSON.stringify({ blockNumber: hex(block), logIndex: hex(index) }));
  }
  return Buffer.from(`[${logs.join(',')}]`);
}

describe('parseLogsQuery and resolveRange', () => {
  it('reads bounds, tags and blockHash; refuses limits and bad ranges naming them', () => {
    expect(parseLogsQuery([{ fromBlock: '0x10', toBlock: '0x20' }], LIMITS)).toMatchObject({ from: 16, to: 32 });
    expect(parseLogsQuery([{}], LIMITS)).toMatchObject({ from: 'latest', to: 'latest' });
    expect(parseLogsQuery([{ fromBlock: 'earliest', toBlock: 'finalized' }], LIMITS)).toMatchObject({ from: 'earliest', to: 'finalized' });
    const hash = `0x${'ab'.repeat(32)}`;
    expect(parseLogsQuery([{ blockHash: hash }], LIMITS).blockHash).toBe(hash);

    expect(paramsError(() => parseLogsQuery([{ fromBlock: '0x20', toBlock: '0x10' }], LIMITS)).message).toBe('invalid params: fromBlock (0x20) is after toBlock (0x10)');
    const wide = paramsError(() => parseLogsQuery([{ fromBlock: '0x0', toBlock: hex(10_000) }], LIMITS));
    expect(wide.message).toBe("invalid params: a range of 10001 blocks is over this network's getLogs.maxRange (10000)");
    expect(wide.data).toEqual({ limit: 'getLogs.maxRange', max: 10_000, requested: 10_001 });
    expect(parseLogsQuery([{ fromBlock: '0x0', toBlock: hex(9_999) }], LIMITS)).toMatchObject({ from: 0, to: 9_999 });
    expect(parseLogsQuery([{ fromBlock: '0x0', toBlock: hex(50_000) }], { maxRange: 0 })).toMatchObject({ to: 50_000 });
    const addresses = paramsError(() => parseLogsQuery([{ address: ['0x1', '0x2', '0x3'] }], LIMITS));
    expect(addresses.message).toBe("invalid params: 3 addresses is over this network's getLogs.maxAddresses (2)");
    const topics = paramsError(() => parseLogsQuery([{ topics: [['0xa', '0xb'], null, ['0xc', null, '0xd']] }], LIMITS));
    expect(topics.data).toEqual({ limit: 'getLogs.maxTopics', max: 3, requested: 4 });
    paramsError(() => parseLogsQuery([{ blockHash: hash, fromBlock: '0x1' }], LIMITS));
    paramsError(() => parseLogsQuery([{ fromBlock: 12 }], LIMITS));
    paramsError(() => parseLogsQuery([{ toBlock: 'newest' }], LIMITS));
    paramsError(() => parseLogsQuery([{ topics: [1, 2, 3, 4, 5] }], LIMITS));
    paramsError(() => parseLogsQuery([], LIMITS));
  });

  it('resolves each distinct tag once, earliest without asking, then checks the range', async () => {
    const asked: string[] = [];
    const resolve = (tag: string) => {
      asked.push(tag);
      return Promise.resolve(tag === 'finalized' ? 900 : 1_000);
    };
    expect(await resolveRange(parseLogsQuery([{ fromBlock: 'earliest', toBlock: 'finalized' }], LIMITS), LIMITS, resolve)).toEqual({ from: 0, to: 900 });
    expect(await resolveRange(parseLogsQuery([{ fromBlock: 'finalized', toBlock: 'latest' }], LIMITS), LIMITS, resolve)).toEqual({ from: 900, to: 1_000 });
    expect(asked).toEqual(['finalized', 'finalized', 'latest']);
    await expect(resolveRange(parseLogsQuery([{ fromBlock: 'latest', toBlock: 'finalized' }], LIMITS), LIMITS, resolve)).rejects.toThrow('fromBlock (0x3e8) is after toBlock (0x384)');
    await expect(resolveRange(parseLogsQuery([{ fromBlock: 'earliest' }], { maxRange: 500 }), { maxRange: 500 }, resolve)).rejects.toThrow('getLogs.maxRange (500)');
  });

  it('aligns the chunks of a wider range to multiples of the chunk size; a narrower one is one chunk as it is', () => {
    expect(alignedChunks({ from: 1_500, to: 4_200 }, 1_000)).toEqual([
      { from: 1_500, to: 1_999 },
      { from: 2_000, to: 2_999 },
      { from: 3_000, to: 3_999 },
      { from: 4_000, to: 4_200 },
    ]);
    expect(alignedChunks({ from: 1_500, to: 2_400 }, 1_000)).toEqual([{ from: 1_500, to: 2_400 }]);
    expect(alignedChunks({ from: 0, to: 1_999 }, 1_000)).toEqual([
      { from: 0, to: 999 },
      { from: 1_000, to: 1_999 },
    ]);
    expect(alignedChunks({ from: 5, to: 50_000 }, Infinity)).toEqual([{ from: 5, to: 50_000 }]);
  });
});

describe('too-large wordings', () => {
  it.each([
    ['Infura / geth', 'query returned more than 10000 results'],
    ['Alchemy', 'Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range and no limit on the response size'],
    ['Alchemy (small plans)', 'You can make eth_getLogs requests with up to a 500 block range. Based on your parameters, this block range should work: [0x2710, 0x2903]'],
    ['QuickNode', 'eth_getLogs is limited to a 10,000 range'],
    ['QuickNode (newer)', 'eth_getLogs and eth_newFilter are limited to a 10000 blocks range'],
    ['Ankr', 'block range is too wide'],
    ['Ankr / Chainstack', 'exceed maximum block range: 1000'],
    ['erigon range', 'query block range exceeds server limit, narrow your filter: 1000'],
    ['erigon results', 'query returns too many logs, narrow your filter: 20000'],
    ['reth range', 'query exceeds max block range 100000'],
    ['reth results', 'query exceeds max results 20000, retry with the range 100-200'],
    ['nethermind', 'Too many logs requested. Max logs per response is 10000.'],
    ['besu', 'Requested range exceeds maximum RPC range limit'],
    ['generic', 'response size exceeded'],
  ])('%s: "%s"', (_provider, message) => {
    expect(isLogsTooLarge(message)).toBe(true);
  });

  it.each(['execution reverted', 'header not found', 'invalid block range params', 'rate limit exceeded', 'filter not found', 'missing trie node'])('not too large: "%s"', (message) => {
    expect(isLogsTooLarge(message)).toBe(false);
  });
});

describe('splitLogsRange', () => {
  const everyBlock = () => 1;

  it('runs aligned chunks with bounded concurrency and joins them in block order', async () => {
    let running = 0;
    let mostRunning = 0;
    const asked: BlockRange[] = [];
    const gates: Array<() => void> = [];
    const runner = async (range: BlockRange): Promise<ChunkRun> => {
      asked.push(range);
      running += 1;
      mostRunning = Math.max(mostRunning, running);
      // Answer out of order: each chunk waits until a later one was asked for (or none is left).
      await new Promise<void>((resolve) => gates.push(resolve));
      running -= 1;
      return { outcome: { kind: 'logs', bytes: logsOf(range, everyBlock), upstream: range.from < 2_000 ? 'a' : 'b' }, upstreamCalls: 1 };
    };
    const done = splitLogsRange({ from: 500, to: 4_499 }, { chunkSize: 1_000, concurrency: 2 }, runner);
    // Release the chunks newest first whenever two are waiting, so completion order is not block order.
    while (asked.length < 5 || gates.length > 0) {
      await new Promise((resolve) => setImmediate(resolve));
      if (gates.length > 0) gates.pop()!();
    }
    const result = await done;
    expect(mostRunning).toBe(2);
    expect(asked.map((range) => [range.from, range.to])).toEqual([
      [500, 999],
      [1_000, 1_999],
      [2_000, 2_999],
      [3_000, 3_999],
      [4_000, 4_499],
    ]);
    expect(result.kind).toBe('logs');
    if (result.kind !== 'logs') return;
    const blocks = (JSON.parse(result.bytes.toString()) as Array<{ blockNumber: string }>).map((log) => Number.parseInt(log.blockNumber, 16));
    expect(blocks).toEqual(Array.from({ length: 4_000 }, (_, index) => 500 + index));
    expect(result.upstreamCalls).toBe(5);
    expect(result.chunkCalls).toBe(5);
    expect(new Set(result.upstreams)).toEqual(new Set(['a', 'b']));
  });

  it('bisects a chunk declined as too large down to what an upstream answers, and the answer stays exact', async () => {
    // Blocks 1000-1999 hold 3 logs each; an upstream answers at most 400 logs per call.
    const dense = (block: number) => (block >= 1_000 && block < 2_000 ? 3 : block % 7 === 0 ? 1 : 0);
    const asked: BlockRange[] = [];
    const runner = (range: BlockRange): Promise<ChunkRun> => {
      asked.push(range);
      const bytes = logsOf(range, dense);
      const count = (JSON.parse(bytes.toString()) as unknown[]).length;
      if (count > 400) return Promise.resolve({ outcome: { kind: 'too-large', attempts: [{ upstream: 'a', reason: 'logs_too_large' }] }, upstreamCalls: 2 });
      return Promise.resolve({ outcome: { kind: 'logs', bytes, upstream: 'a' }, upstreamCalls: 1 });
    };
    const result = await splitLogsRange({ from: 0, to: 2_999 }, { chunkSize: 1_000, concurrency: 3 }, runner);
    expect(result.kind).toBe('logs');
    if (result.kind !== 'logs') return;
    expect(result.bytes.equals(logsOf({ from: 0, to: 2_999 }, dense))).toBe(true);
    // 1000-1999 (3000 logs) → halves of 500 blocks (1500) → 250 (750) → 125 (375): 1 + 2 + 4 + 8 calls.
    expect(asked.filter((range) => range.from >= 1_000 && range.to < 2_000)).toHaveLength(15);
    expect(asked.filter((range) => range.from >= 1_000 && range.to < 2_000 && range.to - range.from + 1 === 125)).toHaveLength(8);
    expect(result.chunkCalls).toBe(17);
    expect(result.upstreamCalls).toBe(7 * 2 + 10);
  });

  it('fails the call when one block is still too large, or a chunk fails everywhere: no partial list, the later chunks not started', async () => {
    const oneBlock = await splitLogsRange({ from: 0, to: 7 }, { chunkSize: 8, concurrency: 1 }, (range) =>
      Promise.resolve(
        range.from <= 5 && range.to >= 5
          ? { outcome: { kind: 'too-large', attempts: [{ upstream: 'a', reason: 'logs_too_large' }] }, upstreamCalls: 1 }
          : { outcome: { kind: 'logs', bytes: logsOf(range, everyBlock), upstream: 'a' }, upstreamCalls: 1 },
      ),
    );
    expect(oneBlock.kind).toBe('failed');
    if (oneBlock.kind !== 'failed') return;
    expect(oneBlock.error.code).toBe('TG_ERR_UPSTREAMS_FAILED');
    expect(oneBlock.error.message).toBe('every upstream declined the logs of block 0x5 as too large');
    expect(oneBlock.error.data).toMatchObject({ fromBlock: '0x5', toBlock: '0x5' });

    const asked: number[] = [];
    const failing = await splitLogsRange({ from: 0, to: 9_999 }, { chunkSize: 1_000, concurrency: 2 }, (range) => {
      asked.push(range.from);
      if (range.from === 2_000) {
        const attempts = [
          { upstream: 'a', reason: 'http_500' },
          { upstream: 'b', reason: 'connection_refused' },
        ];
        return Promise.resolve({ outcome: { kind: 'failed', error: new GatewayError('TG_ERR_UPSTREAMS_FAILED', undefined, { attempts }), attempts }, upstreamCalls: 2 });
      }
      return Promise.resolve({ outcome: { kind: 'logs', bytes: logsOf(range, everyBlock), upstream: 'a' }, upstreamCalls: 1 });
    });
    expect(failing.kind).toBe('failed');
    if (failing.kind !== 'failed') return;
    expect(failing.error.message).toBe('every upstream failed for the logs of blocks 0x7d0-0xbb7');
    expect(failing.attempts.map((attempt) => attempt.reason)).toEqual(['http_500', 'connection_refused']);
    // Chunks already under way finished; none was started after the failure.
    expect(asked.length).toBeLessThan(10);
    expect(failing.upstreamCalls).toBe(asked.length - 1 + 2);
  });

  it("passes an upstream's own error through as the call's answer", async () => {
    const result = await splitLogsRange({ from: 0, to: 2_999 }, { chunkSize: 1_000, concurrency: 1 }, (range) =>
      Promise.resolve(
        range.from === 1_000
          ? { outcome: { kind: 'rpc-error', error: { code: -32000, message: 'header not found' }, upstream: 'b' }, upstreamCalls: 1 }
          : { outcome: { kind: 'logs', bytes: Buffer.from('[]'), upstream: 'a' }, upstreamCalls: 1 },
      ),
    );
    expect(result).toMatchObject({ kind: 'rpc-error', error: { code: -32000, message: 'header not found' }, upstream: 'b', upstreamCalls: 2 });
  });

  it('joins arrays as bytes: empty ones vanish, whitespace is kept inside, a non-array fails the join', () => {
    expect(joinArrays([Buffer.from('[1,2]'), Buffer.from(' [ ] '), Buffer.from('[3]\n')])!.toString()).toBe('[1,2,3]');
    expect(joinArrays([Buffer.from('[]'), Buffer.from('[]')])!.toString()).toBe('[]');
    expect(JSON.parse(joinArrays([Buffer.from('[{"a":[1]}]'), Buffer.from('[ {"b":"]"} ]')])!.toString())).toEqual([{ a: [1] }, { b: ']' }]);
    expect(joinArrays([Buffer.from('"0x1"')])!.toString()).toBe('"0x1"');
    expect(joinArrays([Buffer.from('[1]'), Buffer.from('null')])).toBeUndefined();
  });
});
