/**
 * Abort signals shared by the routing layer: the root signal of calls nothing outside can cancel,
 * and the one way the layer listens on a signal. A module of its own, importing nothing, so the
 * upstream exchange, the budgets and the policies can all use it.
 */

/**
 * The signal of a call that nothing outside it can cancel (what the forwarding entry points pass
 * down): never aborted, since no one holds its controller. One shared signal rather than a new one
 * per call: an AbortController costs about as much to make as an undici request's handler, and
 * nothing listens on this one ({@link listenForAbort}).
 */
export const NEVER_ABORTED: AbortSignal = new AbortController().signal;

export const noRelease = (): void => undefined;

/**
 * Calls `onAbort` once if `signal` aborts; returns what stops listening. Every listener of the
 * routing layer goes through here, so none is ever added to {@link NEVER_ABORTED}, where it
 * would only pile up.
 */
export function listenForAbort(signal: AbortSignal, onAbort: () => void): () => void {
  if (signal === NEVER_ABORTED) return noRelease;
  signal.addEventListener('abort', onAbort, { once: true });
  return () => signal.removeEventListener('abort', onAbort);
}
