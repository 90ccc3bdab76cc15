// What the Redis store costs Redis, for capacity planning (docs/scaling.md): the commands Redis
// ran and the CPU it used while one gateway served a known number of requests, read from
// `INFO commandstats` and `INFO cpu` before and after (Redis counts every command it executes,
// scripts' inner calls included, and its own user + system CPU time).

import { Redis } from 'ioredis';

export interface RedisSnapshot {
  /** Calls per command (`evalsha`, `get`, ...), as `INFO commandstats` counts them. */
  calls: Map<string, number>;
  /** Microseconds Redis spent executing each command (a script's include its inner calls'); absent in summed deltas that do not keep it. */
  usec?: Map<string, number>;
  /** Redis's user + system CPU seconds (main thread and children). */
  cpuSeconds: number;
  /** Socket reads Redis made (`total_reads_processed`): fewer per command means more commands per read. */
  reads?: number;
  /** Bytes Redis read from clients (`total_net_input_bytes`): longer key names mean more of them. */
  inputBytes?: number;
}

export interface RedisCost {
  /** Commands per 1,000 requests, by command, largest first. */
  commandsPer1000: Array<[command: string, per1000: number]>;
  totalPer1000: number;
  /** Redis CPU milliseconds per 1,000 requests. */
  cpuMsPer1000: number;
  /**
   * Milliseconds per 1,000 requests Redis spent running scripts (`evalsha`, `eval`), as
   * `INFO commandstats` times them: the ledger's work itself, apart from reading and answering
   * clients and the server's own upkeep, which make up the rest of {@link cpuMsPer1000}.
   */
  scriptMsPer1000: number;
  /** Socket reads per 1,000 requests, when both snapshots count them. */
  readsPer1000: number | undefined;
  /** Bytes read from clients per 1,000 requests, when both snapshots count them. */
  inputBytesPer1000: number | undefined;
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

export async function redisSnapshot(url: string): Promise<RedisSnapshot> {
  const snapshotter = await redisSnapshotter(url);
  try {
    return await snapshotter.snapshot();
  } finally {
    snapshotter.close();
  }
}

/**
 * Snapshots of one Redis over one connection kept open, each one `INFO` call: for measuring in
 * short rounds, where a connection and three `INFO` calls per snapshot (on each of a cluster's
 * masters, twice a round) would weigh in the CPU per call being measured.
 */
export async function redisSnapshotter(url: string): Promise<{ snapshot(): Promise<RedisSnapshot>; close(): void }> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  return { snapshot: () => snapshotOf(client), close: () => client.disconnect() };
}

async function snapshotOf(client: Redis): Promise<RedisSnapshot> {
  const info = parseInfo(await client.info('commandstats', 'cpu', 'stats'));
  const calls = new Map<string, number>();
  const usec = new Map<string, number>();
  for (const [name, value] of info) {
    // cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
    const match = /(?:^|,)calls=(\d+),usec=(\d+)/.exec(value);
    if (!name.startsWith('cmdstat_') || match === null) continue;
    calls.set(name.slice('cmdstat_'.length), Number(match[1]));
    usec.set(name.slice('cmdstat_'.length), Number(match[2]));
  }
  const cpuSeconds = ['used_cpu_sys', 'used_cpu_user', 'used_cpu_sys_children', 'used_cpu_user_children'].reduce((sum, field) => sum + Number(info.get(field) ?? 0), 0);
  return { calls, usec, cpuSeconds, reads: Number(info.get('total_reads_processed')), inputBytes: Number(info.get('total_net_input_bytes')) };
}

/**
 * The difference of two snapshots per 1,000 requests. The commands of the snapshots themselves
 * (`info`, and the client's handshake) are left out.
 */
export function redisCost(before: RedisSnapshot, after: RedisSnapshot, requests: number): RedisCost {
  const ignored = new Set(['info', 'client|setinfo', 'client|setname', 'hello', 'command', 'command|docs', 'select', 'ping']);
  const per1000: Array<[string, number]> = [];
  for (const [command, calls] of after.calls) {
    if (ignored.has(command)) continue;
    const delta = calls - (before.calls.get(command) ?? 0);
    if (delta > 0) per1000.push([command, (1000 * delta) / requests]);
  }
  per1000.sort((a, b) => b[1] - a[1]);
  const scriptUsec = ['evalsha', 'eval'].reduce((sum, command) => sum + (after.usec?.get(command) ?? 0) - (before.usec?.get(command) ?? 0), 0);
  return {
    commandsPer1000: per1000,
    totalPer1000: per1000.reduce((sum, [, value]) => sum + value, 0),
    cpuMsPer1000: (1000 * 1000 * (after.cpuSeconds - before.cpuSeconds)) / requests,
    scriptMsPer1000: scriptUsec / requests,
    readsPer1000: perThousand(before.reads, after.reads, requests),
    inputBytesPer1000: perThousand(before.inputBytes, after.inputBytes, requests),
  };
}

function perThousand(before: number | undefined, after: number | undefined, requests: number): number | undefined {
  return before === undefined || after === undefined ? undefined : (1000 * (after - before)) / requests;
}
