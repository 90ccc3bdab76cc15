import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { toHttpStatus, type GatewayError } from '../errors.js';
import { rawErrorResponse } from '../server/http-connections.js';
import type { Logger } from '../logging/logger.js';

/**
 * The HTTP side of a WebSocket upgrade, before there is a WebSocket: the path it must have, the
 * HTTP answer of a refused upgrade (the status and JSON-RPC body the HTTP path gives the same
 * request), and the way back to the HTTP server for an upgrade to anything else.
 */

/** `{prefix}/ws/v3/<key>` → `{prefix}/v3/<key>` (what the network resolver reads), or undefined. */
export function httpPathOf(path: string): string | undefined {
  const queryStart = path.indexOf('?');
  const bare = queryStart === -1 ? path : path.slice(0, queryStart);
  const match = /^(.*)\/ws(\/v3(?:\/[^/]*)?\/?)$/.exec(bare);
  return match === null ? undefined : `${match[1]}${match[2]}`;
}

/** Answers a refused upgrade with its HTTP status and JSON-RPC error, closes, and logs it; returns the status. */
export function refuseUpgrade(socket: Duplex, error: GatewayError, logger: Logger, fields: Record<string, unknown>): number {
  const status = toHttpStatus(error);
  if (socket.writable) socket.end(rawErrorResponse(error));
  else socket.destroy();
  if (logger.isLevelEnabled('info')) logger.info({ transport: 'ws', status, error: error.code, ...fields }, 'websocket upgrade refused');
  return status;
}

/**
 * An `Upgrade` to anything but WebSocket (`h2c` from `curl --http2`, say) is an ordinary HTTP
 * request that Node handed to the upgrade listener: it goes back to the HTTP server without
 * its upgrade headers, as if it had come that way.
 */
export function passToHttp(server: Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const lines = [`${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/${req.httpVersion}`];
  const raw = req.rawHeaders;
  for (let index = 0; index < raw.length; index += 2) {
    const name = raw[index]!.toLowerCase();
    if (name === 'upgrade' || name === 'http2-settings') continue;
    if (name === 'connection') {
      const tokens = raw[index + 1]!.split(',').map((token) => token.trim()).filter((token) => !/^(upgrade|http2-settings)$/i.test(token));
      if (tokens.length > 0) lines.push(`${raw[index]}: ${tokens.join(', ')}`);
      continue;
    }
    lines.push(`${raw[index]}: ${raw[index + 1]}`);
  }
  socket.unshift(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), head]));
  server.emit('connection', socket);
}
