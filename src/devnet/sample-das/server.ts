/**
 * DEVELOPMENT FIXTURE — a sample Solana DAS upstream. Used by `tollgate devnet`, the test suite
 * and the benchmarks; never by `tollgate serve` (production gateways point at real providers).
 *
 * A plain `node:http` JSON-RPC 2.0 server that answers `getAssetsByGroup` over a generated data set
 * as a DAS server does (defaults, sorting, pagination), validating params with the gateway's own
 * parser so its errors match a real DAS server's. Both param forms are accepted, batches work,
 * every other method gets -32601. Pages are spliced from JSON serialised once per asset, so the
 * fixture stays cheap next to the gateway it is measuring.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GatewayError, toJsonRpcError, type JsonRpcErrorObject } from '../../errors.js';
import { parseAssetsByGroupParams } from '../../methods/get-assets-by-group.js';
import { generateSampleDataset, type SampleDataset } from './dataset.js';
import { createSampleDasIndex, queryAssetsByGroup, type AssetsByGroupResult, type SampleDasIndex } from './query.js';

export interface SampleDasServerOptions {
  /** Default 0 (an ephemeral port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default `generateSampleDataset()` (seed 1, 3 collections). */
  dataset?: SampleDataset;
}

export interface SampleDasServer {
  /** `http://host:port`; JSON-RPC is served on any path. */
  url: string;
  port: number;
  close(): Promise<void>;
  /** HTTP requests received so far (any method, path or outcome). */
  requestCount(): number;
  dataset: SampleDataset;
}

const MAX_BODY_BYTES = 1024 * 1024;
/** Longer than any sane client idle timeout (undici's default is 4 s) so the client closes first. */
const KEEP_ALIVE_TIMEOUT_MS = 65_000;

type JsonRpcId = string | number | null;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function errorReply(id: JsonRpcId, error: JsonRpcErrorObject): Buffer {
  return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id, error }));
}

const COMMA = Buffer.from(',');

/** The page as UTF-8 bytes, spliced from each asset's bytes (copied once, by `Buffer.concat`). */
function resultParts(index: SampleDasIndex, result: AssetsByGroupResult): Buffer[] {
  let head = `{"total":${result.total},"limit":${result.limit}`;
  if (result.page !== undefined) head += `,"page":${result.page}`;
  if (result.before !== undefined) head += `,"before":${JSON.stringify(result.before)}`;
  if (result.after !== undefined) head += `,"after":${JSON.stringify(result.after)}`;
  if (result.cursor !== undefined) head += `,"cursor":${JSON.stringify(result.cursor)}`;
  const parts: Buffer[] = [Buffer.from(`${head},"items":[`)];
  result.items.forEach((asset, position) => {
    if (position > 0) parts.push(COMMA);
    parts.push(index.json.get(asset) ?? Buffer.from(JSON.stringify(asset)));
  });
  parts.push(Buffer.from(']}'));
  return parts;
}

/** One request object → its reply, or `undefined` for a notification. */
function handleCall(index: SampleDasIndex, call: unknown): Buffer | undefined {
  if (!isPlainObject(call)) return errorReply(null, toJsonRpcError(new GatewayError('TG_ERR_INVALID_REQUEST')));
  const hasId = 'id' in call;
  const rawId = call.id;
  const idValid = rawId === null || typeof rawId === 'string' || typeof rawId === 'number';
  const id: JsonRpcId = idValid ? (rawId as JsonRpcId) : null;
  if (call.jsonrpc !== '2.0' || typeof call.method !== 'string' || (hasId && !idValid)) {
    return errorReply(id, toJsonRpcError(new GatewayError('TG_ERR_INVALID_REQUEST')));
  }
  // Notifications are not executed (nothing would read the answer).
  if (!hasId) return undefined;
  if (call.method !== 'getAssetsByGroup') {
    const error = new GatewayError('TG_ERR_METHOD_NOT_FOUND', `the method ${call.method} does not exist/is not available`);
    return errorReply(id, toJsonRpcError(error));
  }
  try {
    const result = queryAssetsByGroup(index, parseAssetsByGroupParams(call.params));
    return Buffer.concat([Buffer.from(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":`), ...resultParts(index, result), Buffer.from('}')]);
  } catch (error) {
    if (error instanceof GatewayError) return errorReply(id, toJsonRpcError(error));
    return errorReply(id, toJsonRpcError(new GatewayError('TG_ERR_INTERNAL')));
  }
}

/** The reply body for a whole HTTP request body, or `undefined` when nothing is to be answered. */
function handleBody(index: SampleDasIndex, body: string): Buffer | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return errorReply(null, toJsonRpcError(new GatewayError('TG_ERR_PARSE')));
  }
  if (!Array.isArray(parsed)) return handleCall(index, parsed);
  if (parsed.length === 0) return errorReply(null, toJsonRpcError(new GatewayError('TG_ERR_EMPTY_BATCH')));
  const replies = parsed.map((call) => handleCall(index, call)).filter((reply) => reply !== undefined);
  if (replies.length === 0) return undefined;
  const parts: Buffer[] = [Buffer.from('[')];
  replies.forEach((reply, position) => {
    if (position > 0) parts.push(COMMA);
    parts.push(reply);
  });
  parts.push(Buffer.from(']'));
  return Buffer.concat(parts);
}

function send(response: ServerResponse, status: number, body: Buffer | undefined, headers: Record<string, string> = {}): void {
  if (body === undefined) {
    response.writeHead(204, headers).end();
    return;
  }
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length, ...headers }).end(body);
}

function handleRequest(index: SampleDasIndex, request: IncomingMessage, response: ServerResponse): void {
  if (request.method !== 'POST') {
    request.resume();
    send(response, 405, errorReply(null, toJsonRpcError(new GatewayError('TG_ERR_HTTP_METHOD'))), { allow: 'POST' });
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  request.on('data', (chunk: Buffer) => {
    if (tooLarge) return;
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      tooLarge = true;
      chunks.length = 0;
      return;
    }
    chunks.push(chunk);
  });
  request.on('end', () => {
    if (tooLarge) {
      send(response, 413, errorReply(null, toJsonRpcError(new GatewayError('TG_ERR_BODY_TOO_LARGE'))));
      return;
    }
    send(response, 200, handleBody(index, Buffer.concat(chunks).toString('utf8')));
  });
  request.on('error', () => response.destroy());
}

/** Starts the sample DAS upstream; resolves once it is listening. */
export async function startSampleDasServer(options: SampleDasServerOptions = {}): Promise<SampleDasServer> {
  const dataset = options.dataset ?? generateSampleDataset();
  const index = createSampleDasIndex(dataset);
  const host = options.host ?? '127.0.0.1';
  let requests = 0;

  const server = createServer((request, response) => {
    requests++;
    handleRequest(index, request, response);
  });
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  server.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    dataset,
    requestCount: () => requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}
