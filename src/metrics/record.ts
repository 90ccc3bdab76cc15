import { CLIENT_CLOSED_REQUEST, type RequestContext } from '../server/context.js';
import type { GatewayMetrics } from './metrics.js';

/** The `status` label of the statuses seen so far: the same few strings for every request. */
const statusLabels = new Map<number, string>();
function statusLabel(status: number): string {
  let label = statusLabels.get(status);
  if (label === undefined) statusLabels.set(status, (label = String(status)));
  return label;
}

/** Turns a finished request's context into metric updates. */
export function createRequestRecorder(metrics: GatewayMetrics): (ctx: RequestContext) => void {
  // Label order follows each metric's labelNames.
  const { requests, requestDuration, creditsCharged, creditRejections, keySettingsRejections } = metrics;

  return (ctx) => {
    const network = ctx.networkId ?? 'none';
    const status = statusLabel(ctx.httpStatus);
    if (ctx.calls.length === 0) {
      // Rejected as a whole (404, 401, 415, parse error...) or notifications only.
      const outcome =
        ctx.errorCode !== undefined
          ? ctx.errorCode.slice('TG_ERR_'.length).toLowerCase()
          : ctx.httpStatus === CLIENT_CLOSED_REQUEST
            ? 'client_closed'
            : 'no_reply';
      requests.add(1, network, 'none', outcome, status);
    }
    // A batch's calls (and below, its charges) are counted run by run: its items are mostly alike
    // (the same method and outcome), and one tally addition per run instead of per item took the
    // recording of a batch of 50 hits from about 57,000 to 36,000 instructions (docs/benchmarks.md).
    const calls = ctx.calls;
    for (let start = 0; start < calls.length; ) {
      const { method, outcome } = calls[start]!;
      let end = start + 1;
      while (end < calls.length && calls[end]!.method === method && calls[end]!.outcome === outcome) end += 1;
      requests.add(end - start, network, method, outcome, status);
      start = end;
    }
    const durationMethod = ctx.batchSize !== undefined ? 'batch' : (ctx.calls[0]?.method ?? 'none');
    requestDuration.observe((performance.now() - ctx.startedAt) / 1000, network, durationMethod);
    if (ctx.teamId !== undefined) {
      const charges = ctx.charges;
      for (let start = 0; start < charges.length; ) {
        const method = charges[start]!.method;
        let credits = charges[start]!.credits;
        let end = start + 1;
        for (; end < charges.length && charges[end]!.method === method; end += 1) credits += charges[end]!.credits;
        creditsCharged.add(credits, network, method, ctx.teamId);
        start = end;
      }
    }
    for (const reason of ctx.creditRejections) creditRejections.add(1, network, reason);
    if (ctx.ruleRejections !== undefined) for (const rule of ctx.ruleRejections) keySettingsRejections.add(1, network, rule);
  };
}
