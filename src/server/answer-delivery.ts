import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from '../logging/logger.js';
import type { Meter } from '../metering/meter.js';
import { CLIENT_CLOSED_REQUEST, type RequestContext } from './context.js';

/** The decisions of a connection's responses still queued behind another one, run when it closes. */
const QUEUED_ANSWERS = Symbol('tollgate.queuedAnswers');
type QueueingSocket = Socket & { [QUEUED_ANSWERS]?: Set<() => void> };

function settleQueuedAnswers(this: QueueingSocket): void {
  const queued = this[QUEUED_ANSWERS];
  this[QUEUED_ANSWERS] = undefined;
  if (queued !== undefined) for (const settle of queued) settle();
}

/**
 * Runs `done` (the log line, the metrics) once the response's fate is known. An answer counts as
 * delivered only when its last byte was handed to a live connection ('finish'); Node does not
 * emit 'finish' when the write meets a connection the client had already reset. An answer that
 * was not written gives back what it was charged (charges are committed before the write, so a
 * crash never loses one for an answer that went out) and is logged as 499.
 */
export function whenWritten(res: ServerResponse, ctx: RequestContext, meter: Pick<Meter, 'reverse'>, logger: Logger, done: () => void): void {
  let decided = false;
  const settle = (): void => {
    if (decided) return;
    decided = true;
    const written = res.writableFinished;
    if (written && ctx.httpStatus !== CLIENT_CLOSED_REQUEST) return done();
    ctx.httpStatus = CLIENT_CLOSED_REQUEST;
    const charged = ctx.charged;
    if (charged === undefined) return done();
    ctx.charged = undefined;
    ctx.creditsCharged = 0;
    ctx.charges = [];
    Promise.all(charged.map((subject) => meter.reverse(subject))).then(done, (error: unknown) => {
      logger.error({ err: error, requestId: ctx.requestId }, 'could not give back the charge of an answer that was not delivered');
      done();
    });
  };
  // Nothing was written (the client left first), or the response is over: decided now.
  if (!res.headersSent || res.writableFinished || res.destroyed) return settle();
  const socket = ctx.socket as QueueingSocket | undefined;
  if (res.socket === null && socket !== undefined) {
    // A pipelined answer waiting for the ones before it: Node hands it to the connection only at
    // its turn, and if the connection closes first (a reset, say) Node never emits 'close' or
    // 'finish' for it. Without this its charge would stay and its request would never be logged.
    if (socket.destroyed) return settle();
    let queued = socket[QUEUED_ANSWERS];
    if (queued === undefined) {
      // One listener per connection, however many answers are queued on it.
      queued = socket[QUEUED_ANSWERS] = new Set();
      socket.once('close', settleQueuedAnswers);
    }
    queued.add(settle);
    res.once('close', () => {
      socket[QUEUED_ANSWERS]?.delete(settle);
      settle();
    });
    return;
  }
  res.once('close', settle);
}
