import type { Clock } from './clock.js';
import type { AttemptOutcome, RoutedUpstream } from './upstream.js';
import type { ResultBytes } from '../jsonrpc/result-bytes.js';

/**
 * Active health checks: every `intervalMs` each upstream of a network gets one cheap call
 * (`eth_blockNumber` on EVM networks, a configured method on asset networks). The answer's
 * latency refreshes the upstream's estimate even while no traffic reaches it, its head tells how
 * far behind it is, and for an upstream whose circuit is open the probe is the trial after the
 * cooldown: a recovered upstream takes traffic again without a client paying for the trial.
 * Any proper JSON-RPC answer counts as alive (a method the upstream does not know still proves
 * it answers); only a numeric result is read as a head.
 */

export interface ProbeSettings {
  intervalMs: number;
  timeoutMs: number;
  method: string;
}

export type ProbeFn = (upstream: RoutedUpstream, method: string, timeoutMs: number) => Promise<AttemptOutcome>;

export interface HealthProber {
  /** Probes every upstream once now (the interval timer does the same). */
  probeAll(): Promise<void>;
  stop(): void;
}

/** A head from a probe result: a hex quantity (`0x1b4`) or a plain non-negative integer. */
export function headOf(resultBytes: ResultBytes): number | undefined {
  if (!Buffer.isBuffer(resultBytes)) return undefined; // a result in parts is far larger than any head
  const text = resultBytes.toString('latin1');
  const hex = /^"0x([0-9a-fA-F]{1,13})"$/.exec(text);
  if (hex !== null) return Number.parseInt(hex[1]!, 16);
  return /^\d{1,15}$/.test(text) ? Number(text) : undefined;
}

export function startHealthProber(
  upstreams: readonly RoutedUpstream[],
  settings: ProbeSettings,
  clock: Clock,
  probe: ProbeFn,
  observe?: (upstream: RoutedUpstream, outcome: AttemptOutcome) => void,
  /** Runs after a probe that read a head, within the same round (the finality probe). */
  afterHead?: (upstream: RoutedUpstream, head: number) => Promise<void>,
): HealthProber {
  let stopped = false;
  let cancel = () => {};

  async function probeOne(upstream: RoutedUpstream): Promise<void> {
    // An open circuit admits one trial per cooldown; the probe takes it when it is due.
    if (!upstream.health.admit()) return;
    const outcome = await probe(upstream, settings.method, settings.timeoutMs);
    if (stopped) return;
    observe?.(upstream, outcome);
    if (outcome.kind === 'failure') {
      upstream.health.recordFailure();
      return;
    }
    upstream.health.recordProbe(outcome.durationMs);
    const head = outcome.kind === 'result' ? headOf(outcome.resultBytes) : undefined;
    if (head === undefined) return;
    upstream.health.recordHead(head);
    if (afterHead !== undefined) await afterHead(upstream, head);
  }

  async function probeAll(): Promise<void> {
    await Promise.all(upstreams.map(probeOne));
  }

  function schedule(): void {
    if (stopped) return;
    cancel = clock.setTimer(settings.intervalMs, () => {
      void probeAll().finally(schedule);
    });
  }

  schedule();
  return {
    probeAll,
    stop() {
      stopped = true;
      cancel();
    },
  };
}
