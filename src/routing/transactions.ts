import { keccak_256 } from '@noble/hashes/sha3.js';
import type { JsonRpcErrorObject } from '../errors.js';
import { upstreamParams, type PreparedCall } from '../methods/registry.js';
import type { RequestTrace } from './call-trace.js';
import type { ProviderSpend } from './upstream-price.js';
import { failed, forwardOutcomeOf, type ForwardOutcome } from './call-outcome.js';
import { CallController } from './abort-signals.js';
import { attemptEachCandidate, attemptOf, FAILED, isListedFailure, isNullResult, NEVER_ABORTED, type Attempt, type Execution, type RoutedUpstream } from './policies/types.js';
import type { StatefulRouteDeps } from './stateful-deps.js';
import { probeExecution } from './executions.js';

/**
 * `eth_sendRawTransaction` (docs/routing.md#transactions): never hedged, and never answered with a
 * false error.
 *
 * The candidates are tried one after another. An attempt whose outcome is unknown — it may have
 * reached the node (a timeout, a reset, a 5xx, a broken answer: every failure but a refused
 * connection) — is followed by the same bytes to the next candidate. That node may then say it
 * already has a transaction at this nonce ({@link isDuplicateError}); after an unknown outcome
 * that is most likely our own transaction, so the transaction hash (keccak256 of the raw bytes)
 * is asked for with `eth_getTransactionByHash` on every available upstream, and if any has it the
 * call is answered with the hash, as the first node would have. Otherwise, and always without a
 * prior unknown outcome (a client resending its own transaction), the error passes through
 * unchanged, as do execution errors (`execution reverted`, `insufficient funds`). When every
 * attempt failed and one may have reached its node, the same lookup can still answer the hash.
 *
 * With `broadcast: true` the bytes go to every available upstream at once; the first success is
 * the answer (the other sends carry on, so every node gets the transaction), a duplicate error
 * never outranks a success, and only when none succeeds is an error answered — the duplicate
 * rule above applied to what they said, else the first error, else `-32603` with the attempts.
 */

export const SEND_RAW_TRANSACTION = 'eth_sendRawTransaction';

/**
 * Errors that say the node already has a transaction from this sender at this nonce — ours, or
 * another. Spellings of geth, erigon, reth and anvil (`already known`, `nonce too low`,
 * `replacement transaction underpriced`), Besu (`Known transaction`, `Nonce too low`), Nethermind
 * (`AlreadyKnown`, `OldNonce`), OpenEthereum (`Transaction with the same hash was already
 * imported.`, `Transaction nonce is too low`). Only acted upon after an unknown outcome, and
 * only when the transaction's own hash is then found, which settles whose transaction it is.
 */
const DUPLICATE_ERROR = /(?<![a-z])(already known|known transaction|alreadyknown|already imported|nonce too low|nonce is too low|oldnonce|replacement transaction underpriced)(?![a-z])/i;

export function isDuplicateError(error: JsonRpcErrorObject): boolean {
  return DUPLICATE_ERROR.test(error.message);
}

/** A failure after which the node may have the transaction: every one but a connection never made. */
function outcomeUnknown(attempt: Attempt): boolean {
  return attempt.reason !== 'connection_refused';
}

const RAW_TRANSACTION = /^0x(?:[0-9a-fA-F]{2})+$/;

/** keccak256 of the raw transaction bytes, or undefined when the param is not hex bytes (the upstream will say why). */
export function transactionHashOf(params: unknown): string | undefined {
  const raw: unknown = Array.isArray(params) ? params[0] : undefined;
  if (typeof raw !== 'string' || !RAW_TRANSACTION.test(raw)) return undefined;
  return `0x${Buffer.from(keccak_256(Buffer.from(raw.slice(2), 'hex'))).toString('hex')}`;
}

export interface TransactionCalls {
  /** The outcome of a transaction send, or undefined for any other method. */
  route(prepared: PreparedCall, deadline: number, trace?: RequestTrace, spend?: ProviderSpend): Promise<ForwardOutcome> | undefined;
}

export function createTransactionCalls(deps: StatefulRouteDeps): TransactionCalls {
  const { clock, upstreams } = deps;
  const attemptNext = attemptEachCandidate(deps.attempt);

  /** True once some available upstream returns the transaction (pending or mined) within the deadline. */
  function found(hash: string, deadline: number): Promise<boolean> {
    const asked = upstreams.filter((upstream) => upstream.health.isAvailable());
    if (asked.length === 0 || clock.now() >= deadline) return Promise.resolve(false);
    const lookup = probeExecution('eth_getTransactionByHash', deadline, [hash]);
    const controller = new CallController();
    return new Promise((resolve) => {
      let pending = asked.length;
      const done = () => {
        pending -= 1;
        if (pending === 0) resolve(false);
      };
      for (const upstream of asked) {
        deps.attempt(upstream, lookup, controller.signal).then((outcome) => {
          if (outcome.kind === 'result' && !isNullResult(outcome.resultBytes)) {
            controller.abort(new Error('another upstream has the transaction'));
            resolve(true);
          }
          done();
        }, done);
      }
    });
  }

  function answeredWithHash(hash: string, upstream: string, attempts: Attempt[]): ForwardOutcome {
    return { kind: 'result', resultBytes: Buffer.from(JSON.stringify(hash)), upstream, attempts };
  }

  /** The answer when no attempt succeeded: the duplicate rule, else the first error, else the failure. */
  async function unanswered(
    errors: Array<{ error: JsonRpcErrorObject; upstream: string }>,
    execution: Execution,
    candidates: RoutedUpstream[],
    hash: string | undefined,
  ): Promise<ForwardOutcome> {
    const { attempts, deadline } = execution;
    const unknown = attempts.some(outcomeUnknown);
    const duplicate = errors.find((answer) => isDuplicateError(answer.error));
    if (unknown && hash !== undefined && (duplicate !== undefined || errors.length === 0) && (await found(hash, deadline))) {
      return answeredWithHash(hash, duplicate?.upstream ?? attempts.at(-1)!.upstream, attempts);
    }
    const first = errors[0];
    if (first !== undefined) return { kind: 'rpc-error', error: first.error, upstream: first.upstream, attempts };
    return forwardOutcomeOf(FAILED, execution, candidates, clock.now());
  }

  async function oneAfterAnother(execution: Execution, candidates: RoutedUpstream[], hash: string | undefined): Promise<ForwardOutcome> {
    const signal = NEVER_ABORTED;
    while (execution.peekCandidate() !== undefined && clock.now() < execution.deadline) {
      const outcome = await attemptNext(execution, signal);
      if (outcome.kind === 'result') return forwardOutcomeOf(outcome, execution, candidates, clock.now());
      if (outcome.kind === 'rpc-error') return unanswered([outcome], execution, candidates, hash);
    }
    return unanswered([], execution, candidates, hash);
  }

  function toEveryone(execution: Execution, candidates: RoutedUpstream[], hash: string | undefined): Promise<ForwardOutcome> {
    // Never aborted: once one node has answered, the others still get the transaction (each
    // attempt is bounded by its timeout).
    const signal = NEVER_ABORTED;
    const errors: Array<{ error: JsonRpcErrorObject; upstream: string }> = [];
    return new Promise((resolve) => {
      let pending = candidates.length;
      let answered = false;
      const settle = () => {
        pending -= 1;
        if (pending === 0 && !answered) resolve(unanswered(errors, execution, candidates, hash));
      };
      for (const upstream of candidates) {
        deps.attempt(upstream, execution, signal).then((outcome) => {
          if (outcome.kind === 'result' && !answered) {
            answered = true;
            resolve({ kind: 'result', resultBytes: outcome.resultBytes, upstream: upstream.id, attempts: execution.attempts });
          } else if (outcome.kind === 'rpc-error') {
            errors.push({ error: outcome.error, upstream: upstream.id });
          } else if (isListedFailure(outcome) && !answered) {
            execution.attempts.push(attemptOf(upstream, outcome));
          }
          settle();
        }, settle);
      }
    });
  }

  return {
    route(prepared, deadline, trace, spend) {
      if (prepared.method !== SEND_RAW_TRANSACTION) return undefined;
      const candidates = [...deps.candidatesFor(prepared)];
      if (candidates.length === 0) {
        return Promise.resolve(failed('TG_ERR_NO_HEALTHY_UPSTREAM', upstreams.map((upstream) => ({ upstream: upstream.id, reason: 'circuit_open' }))));
      }
      const execution = deps.executionFor(prepared, deadline, candidates, trace, spend);
      const hash = transactionHashOf(upstreamParams(prepared, upstreams[0]!.config));
      return deps.network.broadcast ? toEveryone(execution, candidates, hash) : oneAfterAnother(execution, candidates, hash);
    },
  };
}
