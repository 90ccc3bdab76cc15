/**
 * The members of the one log line per request, written field by field in a fixed order: exactly
 * the text `JSON.stringify(fields)` gives between its braces (a field left undefined is not
 * written), for about a quarter of its instructions (docs/benchmarks.md).
 *
 * Why not `JSON.stringify`: on Node 20 it escapes every member name anew on every line, and the
 * line's values are mostly the same few strings request after request (the path, network, team,
 * key, method and cache state of one client's calls). Here the names are text of the source, the
 * recurring strings are encoded once and looked up, and a request's own id, whose characters are
 * checked, goes in as it is. test/request-line.test.ts holds the two to the same bytes for
 * fields of any text.
 */

/** The fields of a request's log line, in the order the line writes them (built by `requestLogFields`). */
export interface RequestLineFields {
  requestId: string;
  transport: 'ws' | undefined;
  connectionId: string | undefined;
  path: string | undefined;
  network: string | undefined;
  teamId: string | undefined;
  keyId: string | undefined;
  methods: readonly string[];
  batchSize: number | undefined;
  status: number;
  error: string | undefined;
  credits: number;
  cache: string | undefined;
  upstream: string | undefined;
  upstreamCalls: number | undefined;
  /** Objects of plain data (upstream, reason, duration): written by `JSON.stringify`. */
  attempts: readonly object[] | undefined;
  userAgent: string | undefined;
  durationMs: number;
}

/**
 * Encoded strings kept at most (a few MiB at worst, with every one of them as long as allowed);
 * when full, the memory starts again empty.
 */
const MAX_ENCODED = 4_096;
/** Longer strings are encoded each time (a user agent is cut to 200 characters before this). */
const MAX_ENCODED_LENGTH = 512;
const encoded = new Map<string, string>();

/** `JSON.stringify(text)`, looked up for a string seen before. */
function jsonString(text: string): string {
  let json = encoded.get(text);
  if (json === undefined) {
    json = JSON.stringify(text);
    if (text.length <= MAX_ENCODED_LENGTH) {
      if (encoded.size >= MAX_ENCODED) encoded.clear();
      encoded.set(text, json);
    }
  }
  return json;
}

/** Printable ASCII but `"` and `\`: what JSON writes as it is. */
const NEEDS_NO_ESCAPE = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * A string seen once (a request id): quoted as it is when nothing in it needs escaping (our ids,
 * and a client's `X-Request-Id`, which is accepted only in such characters), else encoded.
 */
function jsonStringOnce(text: string): string {
  return NEEDS_NO_ESCAPE.test(text) ? `"${text}"` : JSON.stringify(text);
}

function jsonNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}

/**
 * A duration rounded to hundredths of a millisecond, as `String(value)` writes it, without the
 * general shortest-digits conversion: the integer and its two decimals are written from integers.
 * Any other number (more decimals, negative, huge) goes to {@link jsonNumber}.
 */
function jsonHundredths(value: number): string {
  const hundredths = Math.round(value * 100);
  if (!(hundredths >= 0 && hundredths < 1e15 && hundredths / 100 === value)) return jsonNumber(value);
  const whole = Math.floor(hundredths / 100);
  const fraction = hundredths - whole * 100;
  if (fraction === 0) return `${whole}`;
  if (fraction % 10 === 0) return `${whole}.${fraction / 10}`;
  return `${whole}.${fraction < 10 ? '0' : ''}${fraction}`;
}

function jsonStrings(list: readonly string[]): string {
  let json = '[';
  for (let index = 0; index < list.length; index += 1) json += index === 0 ? jsonString(list[index]!) : `,${jsonString(list[index]!)}`;
  return `${json}]`;
}

/** `JSON.stringify(fields)` without its braces. */
export function requestLineMembers(fields: RequestLineFields): string {
  let members = `"requestId":${jsonStringOnce(fields.requestId)}`;
  if (fields.transport !== undefined) members += `,"transport":${jsonString(fields.transport)}`;
  if (fields.connectionId !== undefined) members += `,"connectionId":${jsonString(fields.connectionId)}`;
  if (fields.path !== undefined) members += `,"path":${jsonString(fields.path)}`;
  if (fields.network !== undefined) members += `,"network":${jsonString(fields.network)}`;
  if (fields.teamId !== undefined) members += `,"teamId":${jsonString(fields.teamId)}`;
  if (fields.keyId !== undefined) members += `,"keyId":${jsonString(fields.keyId)}`;
  members += `,"methods":${jsonStrings(fields.methods)}`;
  if (fields.batchSize !== undefined) members += `,"batchSize":${jsonNumber(fields.batchSize)}`;
  members += `,"status":${jsonNumber(fields.status)}`;
  if (fields.error !== undefined) members += `,"error":${jsonString(fields.error)}`;
  members += `,"credits":${jsonNumber(fields.credits)}`;
  if (fields.cache !== undefined) members += `,"cache":${jsonString(fields.cache)}`;
  if (fields.upstream !== undefined) members += `,"upstream":${jsonString(fields.upstream)}`;
  if (fields.upstreamCalls !== undefined) members += `,"upstreamCalls":${jsonNumber(fields.upstreamCalls)}`;
  if (fields.attempts !== undefined) members += `,"attempts":${JSON.stringify(fields.attempts)}`;
  if (fields.userAgent !== undefined) members += `,"userAgent":${jsonString(fields.userAgent)}`;
  return `${members},"durationMs":${jsonHundredths(fields.durationMs)}`;
}
