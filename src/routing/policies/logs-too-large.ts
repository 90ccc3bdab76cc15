import type { AttemptPolicy } from './types.js';

/**
 * Upstreams cap `eth_getLogs` by block range, result count or response size, and say so each in
 * its own words and codes (some as `-32005`, which is otherwise "try another upstream", some as
 * `-32602`, which is otherwise the client's fault). This policy recognises those answers and
 * turns them into one failure reason, {@link LOGS_TOO_LARGE}: failover then asks the next
 * upstream (its cap may be wider), the circuit breaker counts it as an answer (the upstream is
 * healthy), and when every upstream declined, the logs splitter bisects the range.
 * The wordings are listed in docs/logs.md; keep the two in step.
 */

export const LOGS_TOO_LARGE = 'logs_too_large';

/** Methods whose "too large" answers are read here. */
const LOGS_METHODS: ReadonlySet<string> = new Set(['eth_getLogs', 'eth_getFilterLogs']);

/**
 * One pattern per wording family, matched case-insensitively against the error message (and
 * `data` when it is a string). Examples of each are in docs/logs.md.
 */
export const LOGS_TOO_LARGE_PATTERNS: readonly RegExp[] = [
  // Infura, geth-based nodes, Thirdweb: "query returned more than 10000 results"
  /returned more than [\d,]+ results/i,
  // Alchemy: "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range ..."
  /log response size exceeded/i,
  /response size (?:exceeded|is (?:too )?(?:large|big))|response (?:is )?too (?:large|big)/i,
  // Alchemy (free tier): "You can make eth_getLogs requests with up to a 500 block range"
  /requests with up to an? [\dkK,]+ block range/i,
  // QuickNode: "eth_getLogs is limited to a 10,000 range" / "... limited to a 10000 blocks range"
  /limited to an? [\d,]+ (?:blocks? )?range/i,
  // Ankr, Frontier, Cloudflare: "block range is too wide", "block range too large", "range too large"
  /(?:block )?range (?:is )?too (?:wide|large|big)/i,
  // Ankr, Chainstack, BlastAPI: "exceed maximum block range: 1000"; reth: "query exceeds max block range 100000";
  // Besu: "Requested range exceeds maximum RPC range limit"
  /exceeds? (?:the )?max(?:imum)? (?:rpc )?(?:block )?range/i,
  // erigon: "query block range exceeds server limit, narrow your filter: 1000"
  /block range exceeds/i,
  // erigon: "query returns too many logs, narrow your filter: 20000"; nethermind: "Too many logs requested"
  /too many (?:logs|results|events)/i,
  // reth: "query exceeds max results 20000, retry with the range 100-200"
  /exceeds? (?:the )?max(?:imum)? (?:results|logs)/i,
  // Generic forms: "block range limit exceeded", "max results limit exceeded", "result set too large"
  /(?:block range|results?|logs) limit exceeded|result set (?:is )?too (?:large|big)/i,
];

/** True when an upstream's error text says the `eth_getLogs` range or its answer is too large. */
export function isLogsTooLarge(message: string, data?: unknown): boolean {
  const texts = typeof data === 'string' ? [message, data] : [message];
  return texts.some((text) => LOGS_TOO_LARGE_PATTERNS.some((pattern) => pattern.test(text)));
}

/** Marks "too large" answers to a logs method as {@link LOGS_TOO_LARGE} failures (see the module comment). */
export function logsTooLargePolicy(): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    // Other methods pass through untouched, without an async turn of this policy around them.
    if (!LOGS_METHODS.has(execution.method)) return next(upstream, execution, signal);
    return next(upstream, execution, signal).then((outcome) => {
      const error = outcome.kind === 'rpc-error' ? outcome.error : outcome.kind === 'failure' ? outcome.rpcError : undefined;
      if (error === undefined || !isLogsTooLarge(error.message, error.data)) return outcome;
      return { kind: 'failure', reason: LOGS_TOO_LARGE, timedOut: false, durationMs: outcome.durationMs };
    });
  };
}
