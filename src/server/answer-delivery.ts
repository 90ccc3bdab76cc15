import type { ServerResponse } from 'node:http';
import type { Logger } from '../logging/logger.js';
import type { Meter } from '../metering/meter.js';
import { CLIENT_CLOSED_REQUEST, type RequestContext } from './context.js';

/**
 * Runs `done` (the log line, the metrics) once the response's fate is known. An answer counts as
 * delivered only when its last byte was handed to a live connection ('finish'); Node does not
 * emit 'finish' when the write meets a connection the client had already reset. An answer that
 * was not written gives back what it was charged (charges are committed before the write, so a
 * crash never loses one for an answer that went out) and is logged as 499.
 */
export function whenWritten(res: ServerResponse, ctx: RequestContext, meter: Pick<Meter, 'reverse'>, logger: Logger, done: () => void): void {
  const settle = (): void => {
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
  res.once('close', settle);
}
