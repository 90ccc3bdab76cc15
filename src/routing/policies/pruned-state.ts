import { readsStateAtBlock, type ArchiveDepth } from '../archive-depth.js';
import type { AttemptPolicy } from './types.js';

/**
 * A pruned node asked for state it no longer keeps answers with its own error, in its client's
 * words and mostly as `-32000` (which would otherwise be the answer, passed to the client and
 * charged). This policy recognises those answers to state reads and turns them into one failure
 * reason, {@link PRUNED_STATE}: failover asks the next upstream (an archive may have the state),
 * the circuit breaker counts it as an answer (the node is healthy, it just lacks old state), the
 * upstream is learned as pruned at that depth (archive-depth.ts), and the error is kept so that,
 * should every upstream say the same, the client gets the node's own error.
 * The wordings are listed in docs/routing.md#archive-depth; keep the two in step.
 */

export const PRUNED_STATE = 'pruned_state';

/** One pattern per wording family, matched case-insensitively against the message (and `data` when it is a string). */
export const PRUNED_STATE_PATTERNS: readonly RegExp[] = [
  // geth and its forks: "missing trie node 8b16…fa (path )"; nethermind: "MissingTrieNodeException … is missing from the DB"
  /missing trie node|MissingTrieNode/i,
  // geth, erigon, besu: "header not found" for a block the node no longer (or never) had
  /header not found/i,
  // geth tracing: "required historical state unavailable (reexec=128)"; klaytn: "historical state unavailable";
  // geth path scheme: "historical state not available in path scheme yet"; geth: "historical state … is not available"
  /historical state (?:is )?(?:not available|unavailable)|required historical state/i,
  // geth with history indexing: "state histories haven't been fully indexed yet"
  /state histories? (?:have|has)n'?t been (?:fully )?indexed/i,
  // nethermind: "No state available for block 0x…"; erigon and others: "state not available", "state is not available"
  /no state available for block|state (?:is )?not available/i,
  // reth, eth_getProof beyond its window: "distance to target block exceeds maximum proof window"
  /exceeds maximum proof window/i,
  // reth: "state at block #123 is pruned"; openethereum: "… your node is running with state pruning. Run with --pruning=archive"
  /\bpruned\b|state pruning/i,
];

/** A revert is the contract's own answer, whatever its reason string says. */
const REVERTED = /^execution reverted/i;

/** True when an upstream's error text says it does not keep the state the call needs. */
export function isPrunedState(message: string, data?: unknown): boolean {
  if (REVERTED.test(message)) return false;
  const texts = typeof data === 'string' ? [message, data] : [message];
  return texts.some((text) => PRUNED_STATE_PATTERNS.some((pattern) => pattern.test(text)));
}

/** Marks "state not available" answers to state reads as {@link PRUNED_STATE} failures (see the module comment). */
export function prunedStatePolicy(archive: ArchiveDepth): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    // Other methods pass through untouched, without an async turn of this policy around them.
    if (!readsStateAtBlock(execution.method)) return next(upstream, execution, signal);
    return next(upstream, execution, signal).then((outcome) => {
      const error = outcome.kind === 'rpc-error' ? outcome.error : outcome.kind === 'failure' ? outcome.rpcError : undefined;
      if (error === undefined || !isPrunedState(error.message, error.data)) return outcome;
      archive.learnPruned(upstream, execution.method, execution.paramsFor(upstream));
      execution.passedOverErrors?.push({ upstream: upstream.id, error });
      return { kind: 'failure', reason: PRUNED_STATE, rpcError: error, timedOut: false, durationMs: outcome.durationMs };
    });
  };
}
