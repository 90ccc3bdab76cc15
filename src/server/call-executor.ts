import { GatewayError } from '../errors.js';
import { errorReply, type Reply, type RequestItem } from '../jsonrpc/envelope.js';
import type { PreparedCall } from '../methods/registry.js';
import type { RequestContext } from './context.js';
import type { NetworkRuntime } from './network-runtime.js';

/**
 * One JSON-RPC call, from validated params to a reply: validate → answer locally, or forward
 * with failover. Every failure becomes a reply; nothing here throws.
 */

export interface CallExecutor {
  execute(item: Extract<RequestItem, { kind: 'call' }>, network: NetworkRuntime, ctx: RequestContext, deadline: number): Promise<Reply>;
}

export function createCallExecutor(): CallExecutor {
  async function answer(call: PreparedCall, network: NetworkRuntime, ctx: RequestContext, deadline: number, id: Reply['id']): Promise<Reply> {
    if (call.kind === 'local') return { id, result: JSON.stringify(call.result) };
    const outcome = await network.forwarder.forward(call, deadline);
    ctx.attempts.push(...outcome.attempts);
    if (outcome.kind === 'failed') return errorReply(id, outcome.error);
    ctx.upstream = outcome.upstream;
    if (outcome.kind === 'rpc-error') return { id, error: outcome.error };
    return { id, result: JSON.stringify(outcome.result) };
  }

  return {
    async execute(item, network, ctx, deadline) {
      try {
        const call = network.methods.prepare(item.method, item.params);
        return await answer(call, network, ctx, deadline, item.id);
      } catch (error) {
        if (error instanceof GatewayError) return errorReply(item.id, error);
        throw error;
      }
    },
  };
}
