import type { RequestContext } from '../server/context.js';
import type { GatewayMetrics } from './metrics.js';

/** Turns a finished request's context into metric updates. */
export function recordRequest(metrics: GatewayMetrics, ctx: RequestContext): void {
  const network = ctx.networkId ?? 'none';
  const status = String(ctx.httpStatus);
  if (ctx.calls.length === 0) {
    // Rejected as a whole (404, 401, 415, parse error...) or notifications only.
    const outcome = ctx.errorCode === undefined ? 'no_reply' : ctx.errorCode.slice('TG_ERR_'.length).toLowerCase();
    metrics.requests.inc({ network, method: 'none', outcome, status });
  }
  for (const call of ctx.calls) metrics.requests.inc({ network, method: call.method, outcome: call.outcome, status });
  const durationMethod = ctx.batchSize !== undefined ? 'batch' : (ctx.calls[0]?.method ?? 'none');
  metrics.requestDuration.observe({ network, method: durationMethod }, (performance.now() - ctx.startedAt) / 1000);
  if (ctx.teamId !== undefined) {
    for (const charge of ctx.charges) metrics.creditsCharged.inc({ network, method: charge.method, team: ctx.teamId }, charge.credits);
  }
  for (const reason of ctx.creditRejections) metrics.creditRejections.inc({ network, reason });
}
