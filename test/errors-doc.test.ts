// docs/errors.md and the error registry stay in step (fastify-style): every TG_ERR_* code is
// documented in the table with its JSON-RPC code and HTTP status, and the doc names no code
// that does not exist.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_REGISTRY, GatewayError, toHttpStatus, toJsonRpcError, type GatewayErrorCode } from '../src/errors.js';

const DOC = readFileSync(join(process.cwd(), 'docs', 'errors.md'), 'utf8');
const CODES = Object.keys(ERROR_REGISTRY) as GatewayErrorCode[];

/** The table rows of the doc, as trimmed cells without the surrounding pipes. */
const ROWS: string[][] = DOC.split('\n')
  .filter((line) => line.trimStart().startsWith('|'))
  .map((line) =>
    line
      .trim()
      .replace(/^\||\|$/g, '')
      .split('|')
      .map((cell) => cell.trim()),
  );
const HEADER = ROWS[0] ?? [];
const column = (name: RegExp): number => HEADER.findIndex((cell) => name.test(cell));

describe('docs/errors.md', () => {
  it('has a table with TG code, JSON-RPC code, HTTP status and when columns', () => {
    expect(column(/TG code/i)).toBe(0);
    expect(column(/JSON-RPC code/i)).toBeGreaterThan(0);
    expect(column(/HTTP/i)).toBeGreaterThan(0);
    expect(column(/when/i)).toBeGreaterThan(0);
  });

  it.each(CODES)('documents %s with its JSON-RPC code and HTTP status in one row', (code) => {
    const rows = ROWS.filter((cells) => cells[0]?.replace(/`/g, '') === code);
    expect(rows, `one table row for ${code}`).toHaveLength(1);
    const row = rows[0]!;
    expect(row[column(/JSON-RPC code/i)]).toBe(String(ERROR_REGISTRY[code].rpcCode));
    expect(row[column(/HTTP/i)]).toBe(String(ERROR_REGISTRY[code].httpStatus));
    expect(row[column(/when/i)]!.length, `${code} says when it happens`).toBeGreaterThan(20);
  });

  it('mentions no TG_ERR_* code that the registry lacks', () => {
    const mentioned = new Set(DOC.match(/TG_ERR_[A-Z0-9_]+/g) ?? []);
    // `TG_ERR_` alone (as in "TG_ERR_*") is the family, not a code.
    mentioned.delete('TG_ERR_');
    for (const code of mentioned) expect(CODES, `${code} is in the doc`).toContain(code);
    expect(mentioned.size).toBe(CODES.length);
  });

  it('the two pure mappings agree with the registry', () => {
    for (const code of CODES) {
      const error = new GatewayError(code);
      expect(toJsonRpcError(error)).toStrictEqual({ code: ERROR_REGISTRY[code].rpcCode, message: ERROR_REGISTRY[code].message });
      expect(toHttpStatus(error)).toBe(ERROR_REGISTRY[code].httpStatus);
    }
  });

  it('carries the statuses for the whole-request errors', () => {
    const expected: Partial<Record<GatewayErrorCode, [number, number]>> = {
      TG_ERR_PARSE: [-32700, 200],
      TG_ERR_EMPTY_BATCH: [-32600, 200],
      TG_ERR_BATCH_TOO_LARGE: [-32600, 200],
      TG_ERR_METHOD_NOT_FOUND: [-32601, 200],
      TG_ERR_METHOD_DISABLED: [-32601, 200],
      TG_ERR_NOT_FOUND: [-32600, 404],
      TG_ERR_HTTP_METHOD: [-32600, 405],
      TG_ERR_MEDIA_TYPE: [-32600, 415],
      TG_ERR_BODY_TOO_LARGE: [-32600, 413],
      TG_ERR_MISSING_KEY: [-32016, 401],
      TG_ERR_INVALID_KEY: [-32016, 401],
      TG_ERR_NETWORK_NOT_ALLOWED: [-32002, 403],
      TG_ERR_CREDITS_EXHAUSTED: [-32005, 402],
      TG_ERR_RATE_LIMITED: [-32005, 429],
      TG_ERR_UPSTREAMS_FAILED: [-32603, 502],
      TG_ERR_UPSTREAMS_TIMED_OUT: [-32603, 504],
      TG_ERR_NO_HEALTHY_UPSTREAM: [-32603, 503],
    };
    for (const [code, [rpcCode, httpStatus]] of Object.entries(expected) as Array<[GatewayErrorCode, [number, number]]>) {
      expect({ code, rpcCode: ERROR_REGISTRY[code].rpcCode, httpStatus: ERROR_REGISTRY[code].httpStatus }).toStrictEqual({ code, rpcCode, httpStatus });
    }
  });
});
