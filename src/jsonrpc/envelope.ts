import { GatewayError, toJsonRpcError, type JsonRpcErrorObject } from '../errors.js';
import { scanRequestBody, type ItemSpans } from './request-scanner.js';

/**
 * JSON-RPC 2.0 envelopes: the body parsed once into request items, and replies serialised
 * around result bytes that may come straight from the cache (spliced, never re-serialised).
 */

/**
 * An id as the JSON text the client sent (`9007199254740993`, `"abc"`, `1e-400`), echoed byte
 * for byte: a parsed number may not survive the round trip. `null` when the request had none
 * that can be echoed.
 */
export type IdText = string & { readonly __idText: unique symbol };

export const NULL_ID = 'null' as IdText;

/** The JSON text of an id the gateway chose itself (tests, replies to bodies it could not read). */
export function idText(id: string | number | null): IdText {
  return JSON.stringify(id) as IdText;
}

export type RequestItem =
  /** `paramsError`: params beyond the nesting or size bounds; answered as such once the method is known to exist. */
  | { kind: 'call'; id: IdText; method: string; params: unknown; paramsError: GatewayError | undefined }
  /** No `id` member: not executed, not charged, not answered. */
  | { kind: 'notification'; method: string }
  | { kind: 'invalid'; id: IdText; error: GatewayError };

export type ParsedBody =
  | { kind: 'single'; item: RequestItem }
  | { kind: 'batch'; items: RequestItem[] }
  /** The whole body is answered with one error object (parse error, empty or oversized batch). */
  | { kind: 'rejected'; error: GatewayError };

export interface EnvelopeLimits {
  maxBatchItems: number;
  /** Deepest nesting of arrays and objects allowed in one call's params (params itself is level 1). */
  maxParamsDepth: number;
  /** Largest params of one call, in bytes of JSON text. */
  maxParamsBytes: number;
}

/** JSON-RPC ids are strings, numbers (any JSON number: the text is echoed, not the value) and null. */
function isValidId(id: unknown): boolean {
  return id === null || typeof id === 'string' || typeof id === 'number';
}

/** The bytes of the JSON text `text[start, end)` without encoding it when the answer is plain. */
function utf8Length(text: string, start: number, end: number, limit: number): number {
  const chars = end - start;
  // UTF-8 takes 1 to 3 bytes per UTF-16 unit (4 per surrogate pair): decide without counting when possible.
  if (chars > limit || chars * 3 <= limit) return chars;
  return Buffer.byteLength(text.slice(start, end));
}

/** The depth of `value`'s nesting, counted without recursion (`[1]` is 1). */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (depth > deepest) deepest = depth;
    for (const child of Object.values(node as object)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return deepest;
}

/** Names the member of params that nests too deeply: `params.options`, `params[7]`, or `params`. */
function tooDeepField(params: unknown, maxDepth: number): string {
  if (params === null || typeof params !== 'object') return 'params';
  for (const [key, child] of Object.entries(params)) {
    if (depthOf(child) + 1 > maxDepth) {
      const shown = key.length > 64 ? `${key.slice(0, 64)}…` : key;
      return Array.isArray(params) ? `params[${key}]` : `params.${shown}`;
    }
  }
  return 'params';
}

function paramsErrorOf(params: unknown, spans: ItemSpans, text: string, limits: EnvelopeLimits): GatewayError | undefined {
  if (spans.paramsStart < 0) return undefined;
  if (spans.paramsDepth > limits.maxParamsDepth) {
    const field = tooDeepField(params, limits.maxParamsDepth);
    return new GatewayError('TG_ERR_INVALID_PARAMS', `Invalid params: ${field} nests deeper than ${limits.maxParamsDepth} levels`);
  }
  const bytes = utf8Length(text, spans.paramsStart, spans.paramsEnd, limits.maxParamsBytes);
  if (bytes > limits.maxParamsBytes) {
    return new GatewayError('TG_ERR_INVALID_PARAMS', `Invalid params: params are ${bytes} bytes, at most ${limits.maxParamsBytes} bytes are accepted`);
  }
  return undefined;
}

function toItem(value: unknown, spans: ItemSpans, text: string, limits: EnvelopeLimits): RequestItem {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { kind: 'invalid', id: NULL_ID, error: new GatewayError('TG_ERR_INVALID_REQUEST', 'Invalid Request: expected a JSON-RPC request object') };
  }
  const request = value as Record<string, unknown>;
  const hasId = Object.hasOwn(request, 'id');
  const idValid = hasId && isValidId(request.id);
  const id = idValid && spans.idStart >= 0 ? (text.slice(spans.idStart, spans.idEnd) as IdText) : NULL_ID;
  const invalid = (message: string): RequestItem => ({ kind: 'invalid', id, error: new GatewayError('TG_ERR_INVALID_REQUEST', `Invalid Request: ${message}`) });
  if (hasId && !idValid) return invalid('id must be a string, a number or null');
  if (request.jsonrpc !== '2.0') return invalid('jsonrpc must be exactly "2.0"');
  if (typeof request.method !== 'string' || request.method === '') return invalid('method must be a non-empty string');
  // `params: null` means "params not given" (as the reference servers read it): a
  // method that needs params answers -32602 naming what is missing, one that takes none is served.
  const params = request.params === null ? undefined : request.params;
  if (params !== undefined && typeof params !== 'object') return invalid('params must be an array or an object');
  if (!hasId) return { kind: 'notification', method: request.method };
  return { kind: 'call', id, method: request.method, params, paramsError: paramsErrorOf(params, spans, text, limits) };
}

export function parseBody(body: Buffer, limits: EnvelopeLimits): ParsedBody {
  const text = body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: 'rejected', error: new GatewayError('TG_ERR_PARSE') };
  }
  if (!Array.isArray(value)) {
    // Only objects have members worth finding; a bare scalar is an invalid request as it is.
    const spans = value !== null && typeof value === 'object' ? (scanRequestBody(text) as ItemSpans) : EMPTY_SPANS;
    return { kind: 'single', item: toItem(value, spans, text, limits) };
  }
  if (value.length === 0) return { kind: 'rejected', error: new GatewayError('TG_ERR_EMPTY_BATCH') };
  if (value.length > limits.maxBatchItems) {
    return {
      kind: 'rejected',
      error: new GatewayError('TG_ERR_BATCH_TOO_LARGE', `Invalid Request: batch too large (${value.length} items, at most ${limits.maxBatchItems})`),
    };
  }
  const spans = scanRequestBody(text) as ItemSpans[];
  return { kind: 'batch', items: value.map((item, index) => toItem(item, spans[index] ?? EMPTY_SPANS, text, limits)) };
}

const EMPTY_SPANS: ItemSpans = Object.freeze({ idStart: -1, idEnd: -1, paramsStart: -1, paramsEnd: -1, paramsDepth: 0 });

/** One answer. A result is JSON text (string or bytes) so cached bytes need no re-serialising. */
export type Reply =
  | { id: IdText; result: string | Buffer }
  | { id: IdText; error: JsonRpcErrorObject; gatewayError?: GatewayError };

export function errorReply(id: IdText, error: GatewayError): Reply {
  return { id, error: toJsonRpcError(error), gatewayError: error };
}

const RESULT_SUFFIX = Buffer.from('}');

/** Serialises one reply into buffers to concatenate (a batch item). */
function pushReply(reply: Reply, chunks: Buffer[]): void {
  if ('result' in reply) {
    chunks.push(Buffer.from(`{"jsonrpc":"2.0","id":${reply.id},"result":`));
    chunks.push(typeof reply.result === 'string' ? Buffer.from(reply.result) : reply.result);
    chunks.push(RESULT_SUFFIX);
  } else {
    chunks.push(Buffer.from(`{"jsonrpc":"2.0","id":${reply.id},"error":${JSON.stringify(reply.error)}}`));
  }
}

/**
 * The body of a single (non-batch) response. Result bytes are copied once, straight into the
 * body: this is every cache hit's response.
 */
export function serialiseReply(reply: Reply): Buffer {
  if (!('result' in reply)) return Buffer.from(`{"jsonrpc":"2.0","id":${reply.id},"error":${JSON.stringify(reply.error)}}`);
  const head = `{"jsonrpc":"2.0","id":${reply.id},"result":`;
  if (typeof reply.result === 'string') return Buffer.from(`${head}${reply.result}}`);
  const headBytes = Buffer.byteLength(head);
  const body = Buffer.allocUnsafe(headBytes + reply.result.length + 1);
  body.write(head, 0);
  reply.result.copy(body, headBytes);
  body[body.length - 1] = 0x7d; // }
  return body;
}

/**
 * Results at least this large are not copied into the body: the body is the head, the result's
 * own bytes and the closing brace, which the response writes as one `writev`. Copying a 1.6 MB
 * `getAssetsByGroup` page cost a fresh 1.6 MB allocation per answer (page faults, and GC work
 * for the external memory); below this size one copy is cheaper than a gathered write.
 */
const SPLICE_MIN_BYTES = 64 * 1024;

/** The body of a single (non-batch) response: one buffer, or for a large result the parts to write in order. */
export function replyBody(reply: Reply): Buffer | Buffer[] {
  if ('result' in reply && typeof reply.result !== 'string' && reply.result.length >= SPLICE_MIN_BYTES) {
    return [Buffer.from(`{"jsonrpc":"2.0","id":${reply.id},"result":`), reply.result, RESULT_SUFFIX];
  }
  return serialiseReply(reply);
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
