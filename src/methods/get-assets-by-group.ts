import { GatewayError } from '../errors.js';
import { isBase58, isBase58PublicKey } from './base58.js';

/**
 * `getAssetsByGroup` (Solana DAS). Both param forms that real clients send are accepted and
 * normalised once into an {@link AssetsByGroupQuery}; upstreams then get it in the form they
 * declare. Validation follows the reference DAS server's order: the first failing
 * rule wins, and nothing invalid ever reaches an upstream.
 */

export const ASSET_SORT_FIELDS = ['id', 'created', 'updated', 'recent_action', 'none'] as const;
export const SORT_DIRECTIONS = ['asc', 'desc'] as const;
export type AssetSortField = (typeof ASSET_SORT_FIELDS)[number];
export type SortDirection = (typeof SORT_DIRECTIONS)[number];

export interface AssetSorting {
  sortBy: AssetSortField;
  sortDirection?: SortDirection;
}

export interface AssetsByGroupQuery {
  groupKey: string;
  groupValue: string;
  sortBy?: AssetSorting;
  limit?: number;
  page?: number;
  before?: string;
  after?: string;
  /** Display options, passed through untouched (providers add their own flags). */
  options?: Record<string, unknown>;
  cursor?: string;
}

/** Positional order of the spec: `[groupKey, groupValue, sortBy, limit, page, before, after, options, cursor]`. */
const POSITIONAL_FIELDS = ['groupKey', 'groupValue', 'sortBy', 'limit', 'page', 'before', 'after', 'options', 'cursor'] as const;
const NAMED_FIELDS = new Set<string>([...POSITIONAL_FIELDS, 'displayOptions']);
const MAX_U32 = 2 ** 32 - 1;
const MAX_LIMIT = 1000;
/**
 * Size bounds (docs/security.md). Group keys are short names (`collection`); public keys are at
 * most 44 base58 characters (checked before decoding); cursors of DAS servers encode an asset id,
 * so 128 characters leave room for provider variants while keeping base58 decoding, which is
 * quadratic in the length, cheap; display options are a handful of flags.
 */
export const MAX_GROUP_KEY_LENGTH = 64;
export const MAX_CURSOR_LENGTH = 128;
export const MAX_OPTIONS_BYTES = 4_096;
/** How much of an offending value an error message quotes. */
const MAX_QUOTED_LENGTH = 64;

/** A value as an error message quotes it: whole when short, else its start and an ellipsis. */
function quoted(value: string): string {
  return value.length <= MAX_QUOTED_LENGTH ? value : `${value.slice(0, MAX_QUOTED_LENGTH)}…`;
}

function invalidParams(message: string): GatewayError {
  return new GatewayError('TG_ERR_INVALID_PARAMS', `Invalid params: ${message}`);
}

function dasError(message: string): GatewayError {
  return new GatewayError('TG_ERR_DAS_VALIDATION', message);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Turns either param form into field → value, with `null` meaning "not given". */
function collectFields(params: unknown): Map<string, unknown> {
  const fields = new Map<string, unknown>();
  if (Array.isArray(params)) {
    if (params.length > POSITIONAL_FIELDS.length) {
      throw invalidParams(`too many arguments, want at most ${POSITIONAL_FIELDS.length}`);
    }
    params.forEach((value, index) => {
      if (value !== null && value !== undefined) fields.set(POSITIONAL_FIELDS[index]!, value);
    });
    return fields;
  }
  if (isPlainObject(params)) {
    for (const [key, value] of Object.entries(params)) {
      if (!NAMED_FIELDS.has(key)) throw invalidParams(`unknown field \`${quoted(key)}\``);
      if (value !== null && value !== undefined) fields.set(key, value);
    }
    if (fields.has('options') && fields.has('displayOptions')) {
      throw invalidParams('give either `options` or `displayOptions`, not both');
    }
    if (fields.has('displayOptions')) {
      fields.set('options', fields.get('displayOptions'));
      fields.delete('displayOptions');
    }
    return fields;
  }
  if (params === undefined || params === null) throw invalidParams('missing params: expected an object or an array');
  throw invalidParams('params must be an object or an array');
}

function readU32(fields: Map<string, unknown>, name: 'limit' | 'page'): number | undefined {
  const value = fields.get(name);
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_U32) {
    throw invalidParams(`\`${name}\` must be a non-negative integer no greater than ${MAX_U32}`);
  }
  return value;
}

function readOptionalString(fields: Map<string, unknown>, name: 'before' | 'after' | 'cursor'): string | undefined {
  const value = fields.get(name);
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw invalidParams(`\`${name}\` must be a string`);
  // Empty strings count as absent: some clients always send every field.
  return value === '' ? undefined : value;
}

function readSorting(fields: Map<string, unknown>): AssetSorting | undefined {
  const value = fields.get('sortBy');
  if (value === undefined) return undefined;
  if (!isPlainObject(value)) throw invalidParams('`sortBy` must be an object {sortBy, sortDirection}');
  for (const key of Object.keys(value)) {
    if (key !== 'sortBy' && key !== 'sortDirection') throw invalidParams(`unknown field \`sortBy.${quoted(key)}\``);
  }
  const field = value.sortBy;
  if (typeof field !== 'string' || !(ASSET_SORT_FIELDS as readonly string[]).includes(field)) {
    throw invalidParams(`\`sortBy.sortBy\` must be one of ${ASSET_SORT_FIELDS.join(', ')}`);
  }
  const sorting: AssetSorting = { sortBy: field as AssetSortField };
  const direction = value.sortDirection;
  if (direction !== undefined && direction !== null) {
    if (typeof direction !== 'string' || !(SORT_DIRECTIONS as readonly string[]).includes(direction)) {
      throw invalidParams(`\`sortBy.sortDirection\` must be one of ${SORT_DIRECTIONS.join(', ')}`);
    }
    sorting.sortDirection = direction as SortDirection;
  }
  return sorting;
}

/** Validates and normalises `getAssetsByGroup` params; throws the first failing rule's error. */
export function parseAssetsByGroupParams(params: unknown): AssetsByGroupQuery {
  // Rule 1: shapes and JSON types, field by field in positional order.
  const fields = collectFields(params);
  const groupKey = fields.get('groupKey');
  if (typeof groupKey !== 'string') throw invalidParams('`groupKey` is required and must be a string');
  if (groupKey.length > MAX_GROUP_KEY_LENGTH) throw invalidParams(`\`groupKey\` must be at most ${MAX_GROUP_KEY_LENGTH} characters`);
  const groupValue = fields.get('groupValue');
  if (typeof groupValue !== 'string') throw invalidParams('`groupValue` is required and must be a string');
  const sortBy = readSorting(fields);
  const limit = readU32(fields, 'limit');
  const page = readU32(fields, 'page');
  const before = readOptionalString(fields, 'before');
  const after = readOptionalString(fields, 'after');
  const options = fields.get('options');
  if (options !== undefined && !isPlainObject(options)) throw invalidParams('`options` must be an object');
  // Passed through untouched, so bounded as a whole (its nesting is bounded by the envelope, server.maxParamsDepth).
  if (options !== undefined && Buffer.byteLength(JSON.stringify(options)) > MAX_OPTIONS_BYTES) {
    throw invalidParams(`\`options\` must be at most ${MAX_OPTIONS_BYTES} bytes of JSON`);
  }
  const cursor = readOptionalString(fields, 'cursor');

  // Rule 2: the group value is a public key.
  if (!isBase58PublicKey(groupValue)) throw dasError(`Pubkey Validation Err: ${quoted(groupValue)} is invalid`);
  // Rules 3-5: pagination limits and exclusivity.
  if (limit !== undefined && limit > MAX_LIMIT) {
    throw dasError('Pagination Error. Limit should not be greater than 1000.');
  }
  if (page === 0) throw dasError('Pagination Error. No Pagination Method Selected');
  const onlyOne = 'Pagination Error. Only one pagination parameter supported per query.';
  if (page !== undefined && (before !== undefined || after !== undefined || cursor !== undefined)) throw dasError(onlyOne);
  if ((before !== undefined || after !== undefined) && cursor !== undefined) throw dasError(onlyOne);
  // Rule 6: keyset modes (before/after, cursor, or nothing at all) only work when sorted by id.
  if (page === undefined && sortBy !== undefined && sortBy.sortBy !== 'id') {
    throw dasError('Pagination Sorting Error. Only sorting based on id is supported for this pagination option.');
  }
  // Rule 7: keyset values.
  // Public keys are length-checked before any decoding (isBase58PublicKey); so is a cursor here.
  if (before !== undefined && !isBase58PublicKey(before)) throw dasError(`Pubkey Validation Err: ${quoted(before)} is invalid`);
  if (after !== undefined && !isBase58PublicKey(after)) throw dasError(`Pubkey Validation Err: ${quoted(after)} is invalid`);
  if (cursor !== undefined && (cursor.length > MAX_CURSOR_LENGTH || !isBase58(cursor))) throw dasError(`Cursor Validation Err: ${quoted(cursor)} is invalid`);

  const query: AssetsByGroupQuery = { groupKey, groupValue };
  if (sortBy !== undefined) query.sortBy = sortBy;
  if (limit !== undefined) query.limit = limit;
  if (page !== undefined) query.page = page;
  if (before !== undefined) query.before = before;
  if (after !== undefined) query.after = after;
  if (options !== undefined) query.options = options as Record<string, unknown>;
  if (cursor !== undefined) query.cursor = cursor;
  return query;
}

/** The normalised query in the form an upstream declared it accepts. */
export function serialiseAssetsByGroupParams(
  query: AssetsByGroupQuery,
  form: 'named' | 'positional',
): Record<string, unknown> | unknown[] {
  if (form === 'named') return { ...query };
  const positional: unknown[] = POSITIONAL_FIELDS.map((field) => query[field] ?? null);
  while (positional.length > 2 && positional[positional.length - 1] === null) positional.pop();
  return positional;
}
