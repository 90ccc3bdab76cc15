/**
 * How the routing layer cancels what it started: an attempt that timed out, the hedge branches
 * that lost, the lookups a null answer or a transaction send no longer needs. A module of its own,
 * importing nothing, so the upstream exchange, the budgets and the policies can all use it.
 *
 * Why not the platform's AbortController: in Node 20 an AbortSignal is an EventTarget, with a map
 * of listeners, a listener object per callback and an event's dispatch. A forwarded call made two
 * controllers and three listeners. A CPU profile of 167 KiB pass-throughs put them at about 2% of
 * the gateway's busy time; measured apart, with their collection, a call's five operations took
 * 13–16 µs against 0.1–0.2 µs here (docs/benchmarks.md, "Call signals"). The layer needs none of
 * what EventTarget adds: its signals never leave it (undici's `dispatch` is aborted through its
 * own controller), so a flag, a reason and a short list of callbacks do.
 */

/** What an attempt is told about its cancellation. */
export interface CallSignal {
  readonly aborted: boolean;
  /** Why it was aborted (what the exchange rejects with); undefined while it is not. */
  readonly reason: Error | undefined;
  /**
   * Calls `onAbort` once, when this signal aborts; returns what stops listening. Listening on a
   * signal that has already aborted does nothing (as with AbortSignal): check `aborted` first.
   */
  listen(onAbort: () => void): () => void;
}

export const noRelease = (): void => undefined;

/** A signal its holder aborts. It is its own signal: `controller.signal === controller`. */
export class CallController implements CallSignal {
  aborted = false;
  reason: Error | undefined = undefined;
  /** Callbacks of listeners still waiting; a call has one or two. */
  private listeners: Array<() => void> = [];

  get signal(): CallSignal {
    return this;
  }

  /** Listeners still waiting (for tests: a finished call must leave none behind on its parent). */
  get listening(): number {
    return this.listeners.length;
  }

  listen(onAbort: () => void): () => void {
    if (this.aborted) return noRelease;
    this.listeners.push(onAbort);
    return () => {
      const index = this.listeners.indexOf(onAbort);
      if (index >= 0) this.listeners.splice(index, 1);
    };
  }

  /** Aborts this signal once; later calls change nothing. Listeners run in the order they listened. */
  abort(reason: Error = new DOMException('This operation was aborted', 'AbortError')): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.listeners;
    this.listeners = [];
    for (const onAbort of listeners) onAbort();
  }
}

/**
 * The signal of a call that nothing outside it can cancel (what the forwarding entry points pass
 * down): never aborted, and listening on it holds nothing, so one shared signal serves every call.
 */
export const NEVER_ABORTED: CallSignal = Object.freeze({
  aborted: false,
  reason: undefined,
  listen: () => noRelease,
});

/** A controller that follows `parent` (aborted with its reason) and can also be aborted on its own. */
export function childController(parent: CallSignal): { controller: CallController; release: () => void } {
  const controller = new CallController();
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { controller, release: noRelease };
  }
  return { controller, release: parent.listen(() => controller.abort(parent.reason)) };
}
