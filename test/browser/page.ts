// The page the browser test loads from its own loopback origin: viem, bundled by esbuild at test
// start, calling the gateway as a dapp would. Every function returns what the page saw (values,
// statuses, readable headers and bodies, or the error the browser raised), never throws.

import { createPublicClient, http } from 'viem';

// The few DOM names used here (the test program is type-checked without the DOM library).
declare const document: { createElement(tag: 'pre'): { textContent: string | null }; body: { append(node: unknown): void }; title: string };
declare const window: Record<string, unknown>;

type Seen = Record<string, unknown>;

async function attempt(run: () => Promise<Seen>): Promise<Seen> {
  try {
    return { ok: true, ...(await run()) };
  } catch (error) {
    const e = error as Error & { details?: string; cause?: Error };
    return { ok: false, error: `${e.name}: ${e.message}`, details: e.details, cause: e.cause === undefined ? undefined : `${e.cause.name}: ${e.cause.message}` };
  }
}

function show(label: string, seen: Seen): Seen {
  const line = document.createElement('pre');
  line.textContent = `${label}: ${JSON.stringify(seen)}`;
  document.body.append(line);
  return seen;
}

const client = (url: string) => createPublicClient({ transport: http(url, { retryCount: 0 }) });

const page = {
  getChainId: (url: string) => attempt(async () => ({ chainId: await client(url).getChainId() })).then((seen) => show('getChainId', seen)),

  getBlock: (url: string, blockHash: `0x${string}`) =>
    attempt(async () => {
      const block = await client(url).getBlock({ blockHash });
      return { hash: block.hash, number: block.number.toString(), transactions: block.transactions.length };
    }).then((seen) => show('getBlock', seen)),

  /** A raw JSON-RPC POST (what an SDK does for methods viem has no action for), with what is readable of its answer. */
  post: (label: string, url: string, body: unknown) =>
    attempt(async () => {
      const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return {
        status: response.status,
        body: await response.json(),
        creditsRemaining: response.headers.get('x-credits-remaining'),
        creditsCost: response.headers.get('x-credits-cost'),
        retryAfter: response.headers.get('retry-after'),
        requestId: response.headers.get('x-request-id'),
      };
    }).then((seen) => show(label, seen)),
};

window.tollgate = page;
document.title = 'tollgate browser test';
