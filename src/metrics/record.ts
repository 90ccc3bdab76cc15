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
    for (const call of ctx.calls) requests.add(1, network, call.method, call.outcome, status);
    const durationMethod = ctx.batchSize !== undefined ? 'batch' : (ctx.calls[0]?.method ?? 'none');
    requestDuration.observe((performance.now() - ctx.startedAt) / 1000, network, durationMethod);
    if (ctx.teamId !== undefined) {
      for (const charge of ctx.charges) creditsCharged.add(charge.credits, network, charge.method, ctx.teamId);
    }
    for (const reason of ctx.creditRejections) creditRejections.add(1, network, reason);
    if (ctx.ruleRejections !== undefined) for (const rule of ctx.ruleRejections) keySettingsRejections.add(1, network, rule);
  };
}
