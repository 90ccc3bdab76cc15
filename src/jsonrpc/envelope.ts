import { GatewayError, toJsonRpcError, type JsonRpcErrorObject } from '../errors.js';
import { returnLent } from './answer-buffers.js';
import { idTextsByMemberName, scanRequestBody, type ItemSpans } from './request-scanner.js';
import { resultLength, SPLICE_MIN_BYTES, type ResultBytes } from './result-bytes.js';

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

/**
 * Whether `value` nests deeper than `limit` (`[1]` is 1), stopping at the first level too deep;
 * without recursion, since the limit may be up to 100,000 levels.
 */
function nestsDeeperThan(value: unknown, limit: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  const nodes: object[] = [value];
  const depths: number[] = [1];
  while (nodes.length > 0) {
    const node = nodes.pop()!;
    const depth = depths.pop()!;
    if (depth > limit) return true;
    if (Array.isArray(node)) {
      for (const child of node as unknown[]) {
        if (child !== null && typeof child === 'object') {
          nodes.push(child);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const child of Object.values(node)) {
        if (child !== null && typeof child === 'object') {
          nodes.push(child as object);
          depths.push(depth + 1);
        }
      }
    }
  }
  return false;
}

/** Names the member of params that nests too deeply: `params.options`, `params[7]`, or `params`. */
function tooDeepField(params: unknown, maxDepth: number): string {
  if (params === null || typeof params !== 'object') return 'params';
  for (const [key, child] of Object.entries(params)) {
    if (nestsDeeperThan(child, maxDepth - 1)) {
      const shown = key.length > 64 ? `${key.slice(0, 64)}…` : key;
      return Array.isArray(params) ? `params[${key}]` : `params.${shown}`;
    }
  }
  return 'params';
}

/**
 * The params' bounds checked (`params` absent or `null` is within them): depth from the scanner's
 * spans, or on the fast path (`spans` undefined) from the parsed value; size from the spans, and
 * on the fast path not at all, since it is taken only when the whole body is within the bound.
 */
function paramsErrorOf(params: unknown, spans: ItemSpans | undefined, text: string, limits: EnvelopeLimits): GatewayError | undefined {
  if (params === undefined) return undefined;
  if (spans === undefined ? nestsDeeperThan(params, limits.maxParamsDepth) : spans.paramsDepth > limits.maxParamsDepth) {
    const field = tooDeepField(params, limits.maxParamsDepth);
    return new GatewayError('TG_ERR_INVALID_PARAMS', `Invalid params: ${field} nests deeper than ${limits.maxParamsDepth} levels`);
  }
  if (spans === undefined) return undefined;
  const bytes = utf8Length(text, spans.paramsStart, spans.paramsEnd, limits.maxParamsBytes);
  if (bytes > limits.maxParamsBytes) {
    return new GatewayError('TG_ERR_INVALID_PARAMS', `Invalid params: params are ${bytes} bytes, at most ${limits.maxParamsBytes} bytes are accepted`);
  }
  return undefined;
}

/**
 * One item of the body. `idText` is the text of its id member when it has one (from the scanner or
 * the fast path); `spans` are the scanner's, undefined on the fast path.
 */
function toItem(value: unknown, idText: string | undefined, spans: ItemSpans | undefined, text: string, limits: EnvelopeLimits): RequestItem {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { kind: 'invalid', id: NULL_ID, error: new GatewayError('TG_ERR_INVALID_REQUEST', 'Invalid Request: expected a JSON-RPC request object') };
  }
  const request = value as Record<string, unknown>;
  const hasId = Object.hasOwn(request, 'id');
  const idValid = hasId && isValidId(request.id);
  const id = idValid && idText !== undefined ? (idText as IdText) : NULL_ID;
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

function hasIdMember(item: unknown): boolean {
  return item !== null && typeof item === 'object' && !Array.isArray(item) && Object.hasOwn(item, 'id');
}

/**
 * The items of a parsed body (`values`: the single value, or the batch's elements). One pass of
 * `JSON.parse` suffices when the ids' texts can be found by their member names
 * ({@link idTextsByMemberName}) and the whole body is within the params size bound (so each
 * params is); otherwise the scanner walks the text for each item's id and params spans.
 */
function itemsOf(values: readonly unknown[], text: string, bodyBytes: number, limits: EnvelopeLimits): RequestItem[] {
  if (bodyBytes <= limits.maxParamsBytes) {
    let withId = 0;
    for (const value of values) if (hasIdMember(value)) withId += 1;
    const idTexts = idTextsByMemberName(text, withId);
    if (idTexts !== undefined) {
      let next = 0;
      return values.map((value) => toItem(value, hasIdMember(value) ? idTexts[next++] : undefined, undefined, text, limits));
    }
  }
  const scanned = scanRequestBody(text);
  const spansList = Array.isArray(scanned) ? scanned : [scanned];
  return values.map((value, index) => {
    const spans = spansList[index] ?? EMPTY_SPANS;
    return toItem(value, spans.idStart >= 0 ? text.slice(spans.idStart, spans.idEnd) : undefined, spans, text, limits);
  });
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
    return { kind: 'single', item: itemsOf([value], text, body.length, limits)[0]! };
  }
  if (value.length === 0) return { kind: 'rejected', error: new GatewayError('TG_ERR_EMPTY_BATCH') };
  if (value.length > limits.maxBatchItems) {
    return {
      kind: 'rejected',
      error: new GatewayError('TG_ERR_BATCH_TOO_LARGE', `Invalid Request: batch too large (${value.length} items, at most ${limits.maxBatchItems})`),
    };
  }
  return { kind: 'batch', items: itemsOf(value, text, body.length, limits) };
}

const EMPTY_SPANS: ItemSpans = Object.freeze({ idStart: -1, idEnd: -1, paramsStart: -1, paramsEnd: -1, paramsDepth: 0 });

/** One answer. A result is JSON text (string or bytes) so cached bytes need no re-serialising. */
export type Reply =
  /** `result`: JSON text, or the upstream's bytes as they came (a large result in parts, see result-bytes.ts). */
  | { id: IdText; result: string | ResultBytes }
  | { id: IdText; error: JsonRpcErrorObject; gatewayError?: GatewayError };

export function errorReply(id: IdText, error: GatewayError): Reply {
  return { id, error: toJsonRpcError(error), gatewayError: error };
}

const RESULT_SUFFIX = Buffer.from('}');

/** A result reply's text up to its result, which follows as bytes, then `}`. */
function resultHead(id: IdText): string {
  return `{"jsonrpc":"2.0","id":${id},"result":`;
}

/** An error reply's whole text. */
function errorText(reply: Reply & { error: JsonRpcErrorObject }): string {
  return `{"jsonrpc":"2.0","id":${reply.id},"error":${JSON.stringify(reply.error)}}`;
}

/**
 * The body of a single (non-batch) response. Result bytes are copied once, straight into the
 * body: this is every cache hit's response.
 */
export function serialiseReply(reply: Reply): Buffer {
  if (!('result' in reply)) return Buffer.from(errorText(reply));
  const head = resultHead(reply.id);
  if (typeof reply.result === 'string') return Buffer.from(`${head}${reply.result}}`);
  const headBytes = Buffer.byteLength(head);
  const body = Buffer.allocUnsafe(headBytes + resultLength(reply.result) + 1);
  body.write(head, 0);
  copyResult(reply.result, body, headBytes);
  body[body.length - 1] = 0x7d; // }
  return body;
}

/**
 * The replies' results were copied into one body (a batch, a WebSocket message): the pooled
 * buffers large results were lent with (answer-buffers.ts) go back for the next large answers.
 */
export function returnCopiedResults(replies: readonly Reply[]): void {
  for (const reply of replies) if ('result' in reply) returnLent(reply.result);
}

/** Copies a result's bytes into `target` at `offset`; returns how many were copied. */
function copyResult(result: ResultBytes, target: Buffer, offset: number): number {
  if (Buffer.isBuffer(result)) return result.copy(target, offset);
  let copied = 0;
  for (const part of result) copied += part.copy(target, offset + copied);
  return copied;
}

/**
 * The body of a single (non-batch) response: one buffer, or for a large result the parts to write
 * in order (the head, the result's own bytes or parts, the closing brace), which the response
 * writes as one `writev`. Copying a 1.6 MB `getAssetsByGroup` page cost a fresh 1.6 MB allocation
 * per answer (page faults, and GC work for the external memory); below SPLICE_MIN_BYTES one copy
 * is cheaper than a gathered write.
 */
export function replyBody(reply: Reply): Buffer | Buffer[] {
  if ('result' in reply && typeof reply.result !== 'string' && resultLength(reply.result) >= SPLICE_MIN_BYTES) {
    const head = Buffer.from(resultHead(reply.id));
    return Buffer.isBuffer(reply.result) ? [head, reply.result, RESULT_SUFFIX] : [head, ...reply.result, RESULT_SUFFIX];
  }
  return serialiseReply(reply);
}

/**
 * The body of a batch response: the replies in `[...]`, built in one allocation. Each reply's text
 * (its head, or the whole of an error reply) is written into the body and each result's bytes
 * copied in once; no buffer per reply is made only to be concatenated.
 */
export function serialiseBatch(replies: readonly Reply[]): Buffer {
  const texts: string[] = new Array<string>(replies.length);
  // '[' and ']', and a ',' between replies.
  let length = 1 + replies.length;
  replies.forEach((reply, index) => {
    const text = 'result' in reply ? resultHead(reply.id) : errorText(reply);
    texts[index] = text;
    length += Buffer.byteLength(text);
    if ('result' in reply) length += (typeof reply.result === 'string' ? Buffer.byteLength(reply.result) : resultLength(reply.result)) + 1;
  });
  const body = Buffer.allocUnsafe(length);
  body[0] = 0x5b; // [
  let offset = 1;
  replies.forEach((reply, index) => {
    if (index > 0) body[offset++] = 0x2c; // ,
    offset += body.write(texts[index]!, offset);
    if ('result' in reply) {
      offset += typeof reply.result === 'string' ? body.write(reply.result, offset) : copyResult(reply.result, body, offset);
      body[offset++] = 0x7d; // }
    }
  });
  body[offset] = 0x5d; // ]
  return body;
}
