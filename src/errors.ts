/**
 * The one registry of errors the gateway itself produces. Each has a stable `TG_ERR_*` code
 * (logged, documented in docs/errors.md and checked by a test), the JSON-RPC code clients see,
 * and the HTTP status of a single (non-batch) response carrying it. Batch items always travel
 * in an HTTP 200 array.
 */
export const ERROR_REGISTRY = {
  TG_ERR_PARSE: { rpcCode: -32700, httpStatus: 200, message: 'Parse error' },
  TG_ERR_INVALID_REQUEST: { rpcCode: -32600, httpStatus: 200, message: 'Invalid Request' },
  TG_ERR_EMPTY_BATCH: { rpcCode: -32600, httpStatus: 200, message: 'Invalid Request: empty batch' },
  TG_ERR_BATCH_TOO_LARGE: { rpcCode: -32600, httpStatus: 200, message: 'Invalid Request: batch too large' },
  TG_ERR_METHOD_NOT_FOUND: { rpcCode: -32601, httpStatus: 200, message: 'the method does not exist/is not available' },
  TG_ERR_METHOD_DISABLED: { rpcCode: -32601, httpStatus: 200, message: 'the method is disabled on this gateway' },
  TG_ERR_INVALID_PARAMS: { rpcCode: -32602, httpStatus: 200, message: 'Invalid params' },
  TG_ERR_DAS_VALIDATION: { rpcCode: -32000, httpStatus: 200, message: 'DAS validation error' },
  TG_ERR_FILTER_NOT_FOUND: { rpcCode: -32000, httpStatus: 200, message: 'filter not found' },
  TG_ERR_NOT_FOUND: { rpcCode: -32600, httpStatus: 404, message: 'not found' },
  TG_ERR_HTTP_METHOD: { rpcCode: -32600, httpStatus: 405, message: 'only POST is supported' },
  TG_ERR_MEDIA_TYPE: { rpcCode: -32600, httpStatus: 415, message: 'Content-Type must be application/json' },
  TG_ERR_BODY_TOO_LARGE: { rpcCode: -32600, httpStatus: 413, message: 'request body too large' },
  TG_ERR_BAD_HTTP: { rpcCode: -32600, httpStatus: 400, message: 'malformed HTTP request' },
  TG_ERR_HEADERS_TOO_LARGE: { rpcCode: -32600, httpStatus: 431, message: 'request headers too large' },
  TG_ERR_REQUEST_TIMEOUT: { rpcCode: -32600, httpStatus: 408, message: 'request not received in time' },
  TG_ERR_MISSING_KEY: { rpcCode: -32016, httpStatus: 401, message: 'missing API key: use {base_url}/v3/<API_KEY>' },
  TG_ERR_INVALID_KEY: { rpcCode: -32016, httpStatus: 401, message: 'invalid API key' },
  TG_ERR_NETWORK_NOT_ALLOWED: { rpcCode: -32002, httpStatus: 403, message: 'this API key is not allowed on this network' },
  TG_ERR_KEY_SETTINGS: { rpcCode: -32002, httpStatus: 403, message: 'rejected due to key settings' },
  TG_ERR_INVALID_KEY_SECRET: { rpcCode: -32016, httpStatus: 401, message: 'invalid API key secret' },
  TG_ERR_INVALID_JWT: { rpcCode: -32016, httpStatus: 401, message: 'invalid JWT' },
  TG_ERR_CREDITS_EXHAUSTED: { rpcCode: -32005, httpStatus: 402, message: 'daily credit balance exhausted' },
  TG_ERR_RATE_LIMITED: { rpcCode: -32005, httpStatus: 429, message: 'credits-per-second limit exceeded' },
  TG_ERR_UPSTREAM_BUDGET: { rpcCode: -32005, httpStatus: 429, message: 'every upstream of this network is at its rate limit' },
  TG_ERR_WS_KEY_CONNECTIONS: { rpcCode: -32005, httpStatus: 429, message: 'too many WebSocket connections for this API key' },
  TG_ERR_WS_SERVER_FULL: { rpcCode: -32005, httpStatus: 503, message: 'too many WebSocket connections on this gateway' },
  TG_ERR_WS_SUBSCRIPTION_LIMIT: { rpcCode: -32005, httpStatus: 200, message: 'too many subscriptions on this connection' },
  TG_ERR_UPSTREAMS_FAILED: { rpcCode: -32603, httpStatus: 502, message: 'every upstream failed' },
  TG_ERR_UPSTREAMS_TIMED_OUT: { rpcCode: -32603, httpStatus: 504, message: 'every upstream failed or timed out' },
  TG_ERR_NO_HEALTHY_UPSTREAM: { rpcCode: -32603, httpStatus: 503, message: 'no healthy upstream' },
  TG_ERR_STORE_UNAVAILABLE: { rpcCode: -32603, httpStatus: 503, message: 'the credit store is unavailable' },
  TG_ERR_INTERNAL: { rpcCode: -32603, httpStatus: 500, message: 'Internal error' },
} as const satisfies Record<string, { rpcCode: number; httpStatus: number; message: string }>;

export type GatewayErrorCode = keyof typeof ERROR_REGISTRY;

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** An error the gateway answers with itself (as opposed to an upstream's error passed through). */
export class GatewayError extends Error {
  override name = 'GatewayError';
  constructor(
    readonly code: GatewayErrorCode,
    message: string = ERROR_REGISTRY[code].message,
    readonly data?: unknown,
    /** Extra response headers this error implies, such as `Retry-After`. */
    readonly headers?: Readonly<Record<string, string>>,
    /** The underlying failure, for logs only (never sent to clients). */
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

export function toJsonRpcError(error: GatewayError): JsonRpcErrorObject {
  const object: JsonRpcErrorObject = { code: ERROR_REGISTRY[error.code].rpcCode, message: error.message };
  if (error.data !== undefined) object.data = error.data;
  return object;
}

export function toHttpStatus(error: GatewayError): number {
  return ERROR_REGISTRY[error.code].httpStatus;
}
