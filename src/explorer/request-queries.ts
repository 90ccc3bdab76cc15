import { AdminError } from '../admin/admin-service.js';
import { REQUESTS_KEPT_PER_TEAM, type ApiKey, type RequestLog, type RequestQuery, type RequestRecord } from '../store/index.js';

/**
 * Reading the request explorer (docs/explorer.md), the same for the team API and the admin API:
 * `?key=&method=&status=&limit=` over one team's last requests, newest first, each with its key's
 * current label.
 */

export interface ExplorerRow extends RequestRecord {
  /** The key's label as it is now (null when it has none, or the key is gone). */
  keyLabel: string | null;
}

const DEFAULT_LIMIT = 100;
const STATUS = /^(ok|error|[1-5]\d\d)$/;

/** The query of `?key=&method=&status=&limit=`; a malformed value is the caller's mistake (400). */
export function requestQueryOf(teamId: string, params: URLSearchParams): RequestQuery {
  const query: RequestQuery = { teamId, limit: DEFAULT_LIMIT };
  const limit = params.get('limit');
  if (limit !== null) {
    if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > REQUESTS_KEPT_PER_TEAM) throw new AdminError(400, `limit must be 1 to ${REQUESTS_KEPT_PER_TEAM}`);
    query.limit = Number(limit);
  }
  const status = params.get('status');
  if (status !== null && status !== '') {
    if (!STATUS.test(status)) throw new AdminError(400, 'status must be ok, error or an HTTP status');
    query.status = status === 'ok' || status === 'error' ? status : Number(status);
  }
  const key = params.get('key');
  if (key !== null && key !== '') query.keyId = key;
  const method = params.get('method');
  if (method !== null && method !== '') query.method = method;
  return query;
}

export async function readRequests(store: Pick<RequestLog, 'recentRequests'>, keys: () => Promise<readonly ApiKey[]>, query: RequestQuery): Promise<{ requests: ExplorerRow[] }> {
  const [records, teamKeys] = await Promise.all([store.recentRequests(query), keys()]);
  const labels = new Map(teamKeys.map((key) => [key.id, key.label]));
  return { requests: records.map((record) => ({ ...record, keyLabel: labels.get(record.keyId) ?? null })) };
}
