import type { Dispatcher } from 'undici';
import type { AnswerCollector } from '../jsonrpc/answer-buffers.js';
import type { CallSignal } from './abort-signals.js';

/** What one exchange with an upstream brought back: the final status and the whole answer. */
export interface ExchangeResult {
  status: number;
  answer: AnswerCollector;
}

/**
 * One HTTP request to an upstream through undici's `dispatch`, its answer's chunks handed to an
 * {@link AnswerCollector} as undici parses them. Resolves once the answer is complete; rejects
 * with whatever ended the exchange first (a connection failure, undici's own timeouts, or
 * `signal`'s abort, whose reason it carries), after giving the collector's buffer back.
 *
 * Why not `pool.request`: it wraps every answer in a Readable stream, which the caller then reads
 * through an async iterator. That is a stream with its end-of-stream bookkeeping per answer and a
 * promise per chunk, for bytes that are only ever collected; on a forwarded call it cost about as
 * much as the routing policies around it (docs/benchmarks.md, "A forwarded call's fixed cost").
 */
export function exchange(
  dispatcher: Dispatcher,
  request: Dispatcher.DispatchOptions,
  signal: CallSignal,
  collectorFor: (announcedLength: number | undefined) => AnswerCollector,
): Promise<ExchangeResult> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    dispatcher.dispatch(request, new ExchangeHandler(signal, collectorFor, resolve, reject));
  });
}

class ExchangeHandler implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private status = 0;
  private answer: AnswerCollector | undefined;
  private readonly stopListening: () => void;

  constructor(
    private readonly signal: CallSignal,
    private readonly collectorFor: (announcedLength: number | undefined) => AnswerCollector,
    private readonly resolve: (result: ExchangeResult) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    this.stopListening = signal.listen(() => this.controller?.abort(signal.reason!));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // Aborted while the request waited for a connection: undici has not sent it yet.
    if (this.signal.aborted) controller.abort(this.signal.reason!);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    // An informational (1xx) answer is followed by the real one.
    if (statusCode < 200) return;
    this.status = statusCode;
    const announced = Number(headers['content-length']);
    this.answer = this.collectorFor(Number.isSafeInteger(announced) ? announced : undefined);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    try {
      this.answer!.add(chunk);
    } catch (error) {
      // Out of memory for a huge answer, say: the exchange fails, not the process.
      controller.abort(error as Error);
    }
  }

  onResponseEnd(): void {
    this.stopListening();
    this.resolve({ status: this.status, answer: this.answer! });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.stopListening();
    this.answer?.discard();
    this.answer = undefined;
    this.reject(error);
  }
}
