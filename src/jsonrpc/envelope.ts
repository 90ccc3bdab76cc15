import { GatewayError, toJsonRpcError, type JsonRpcErrorObject } from '../errors.js';

/**
 * JSON-RPC 2.0 envelopes: the body parsed once into request items, and replies serialised
 * around result bytes that may come straight from the cache (spliced, never re-serialised).
 */

export type JsonRpcId = string | number | null;

export type RequestItem =
  | { kind: 'call'; id: JsonRpcId; method: string; params: unknown }
  /** No `id` member: not executed, not charged, not answered. */
  | { kind: 'notification'; method: string }
  | { kind: 'invalid'; id: JsonRpcId; error: GatewayError };

export type ParsedBody =
  | { kind: 'single'; item: RequestItem }
  | { kind: 'batch'; items: RequestItem[] }
  /** The whole body is answered with one error object (parse error, empty or oversized batch). */
  | { kind: 'rejected'; error: GatewayError };

function isValidId(id: unknown): id is JsonRpcId {
  return id === null || typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id));
}

function toItem(value: unknown): RequestItem {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { kind: 'invalid', id: null, error: new GatewayError('TG_ERR_INVALID_REQUEST', 'Invalid Request: expected a JSON-RPC request object') };
  }
  const request = value as Record<string, unknown>;
  const hasId = Object.hasOwn(request, 'id');
  const id = hasId && isValidId(request.id) ? request.id : null;
  const invalid = (message: string): RequestItem => ({ kind: 'invalid', id, error: new GatewayError('TG_ERR_INVALID_REQUEST', `Invalid Request: ${message}`) });
  if (hasId && !isValidId(request.id)) return invalid('id must be a string, a number or null');
  if (request.jsonrpc !== '2.0') return invalid('jsonrpc must be exactly "2.0"');
  if (typeof request.method !== 'string' || request.method === '') return invalid('method must be a non-empty string');
  const params = request.params;
  if (params !== undefined && (params === null || typeof params !== 'object')) return invalid('params must be an array or an object');
  if (!hasId) return { kind: 'notification', method: request.method };
  return { kind: 'call', id, method: request.method, params };
}

export function parseBody(body: Buffer, maxBatchItems: number): ParsedBody {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return { kind: 'rejected', error: new GatewayError('TG_ERR_PARSE') };
  }
  if (!Array.isArray(value)) return { kind: 'single', item: toItem(value) };
  if (value.length === 0) return { kind: 'rejected', error: new GatewayError('TG_ERR_EMPTY_BATCH') };
  if (value.length > maxBatchItems) {
    return {
      kind: 'rejected',
      error: new GatewayError('TG_ERR_BATCH_TOO_LARGE', `Invalid Request: batch too large (${value.length} items, at most ${maxBatchItems})`),
    };
  }
  return { kind: 'batch', items: value.map(toItem) };
}

/** One answer. A result is JSON text (string or bytes) so cached bytes need no re-serialising. */
export type Reply =
  | { id: JsonRpcId; result: string | Buffer }
  | { id: JsonRpcId; error: JsonRpcErrorObject; gatewayError?: GatewayError };

export function errorReply(id: JsonRpcId, error: GatewayError): Reply {
  return { id, error: toJsonRpcError(error), gatewayError: error };
}

const RESULT_SUFFIX = Buffer.from('}');

/** `{"jsonrpc":"2.0","id":<id>,` — everything of a reply before its `result` or `error` member. */
function replyHead(id: JsonRpcId): string {
  return `{"jsonrpc":"2.0","id":${typeof id === 'number' ? String(id) : JSON.stringify(id)},`;
}

/** Serialises one reply into buffers to concatenate (a batch item). */
function pushReply(reply: Reply, chunks: Buffer[]): void {
  if ('result' in reply) {
    chunks.push(Buffer.from(`${replyHead(reply.id)}"result":`));
    chunks.push(typeof reply.result === 'string' ? Buffer.from(reply.result) : reply.result);
    chunks.push(RESULT_SUFFIX);
  } else {
    chunks.push(Buffer.from(`${replyHead(reply.id)}"error":${JSON.stringify(reply.error)}}`));
  }
}

/**
 * The body of a single (non-batch) response. Result bytes are copied once, straight into the
 * body: this is every cache hit's response.
 */
export function serialiseReply(reply: Reply): Buffer {
  if (!('result' in reply)) return Buffer.from(`${replyHead(reply.id)}"error":${JSON.stringify(reply.error)}}`);
  const head = `${replyHead(reply.id)}"result":`;
  if (typeof reply.result === 'string') return Buffer.from(`${head}${reply.result}}`);
  const headBytes = Buffer.byteLength(head);
  const body = Buffer.allocUnsafe(headBytes + reply.result.length + 1);
  body.write(head, 0);
  reply.result.copy(body, headBytes);
  body[body.length - 1] = 0x7d; // }
  return body;
}

const BATCH_OPEN = Buffer.from('[');
const BATCH_SEPARATOR = Buffer.from(',');
const BATCH_CLOSE = Buffer.from(']');

/** The body of a batch response: the replies in `[...]`. */
export function serialiseBatch(replies: readonly Reply[]): Buffer {
  const chunks: Buffer[] = [BATCH_OPEN];
  replies.forEach((reply, index) => {
    if (index > 0) chunks.push(BATCH_SEPARATOR);
    pushReply(reply, chunks);
  });
  chunks.push(BATCH_CLOSE);
  return Buffer.concat(chunks);
}
