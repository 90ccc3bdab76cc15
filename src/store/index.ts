import type { StoreConfig } from '../config/schema.js';
import { createSqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
import { createRedisStore } from './redis-store.js';
import type { Store } from './types.js';

export type {
  Store,
  Ledger,
  KeyDirectory,
  UsageReports,
  Snapshots,
  Team,
  ApiKey,
  KeyWithTeam,
  KeySettings,
  JwtPublicKey,
  NewKey,
  NewTeam,
  ChargeSubject,
  LedgerOp,
  LedgerResult,
  LedgerDone,
  LedgerRefusal,
  AdmissionResult,
  FinishResult,
  ReservationGone,
  UsageQuery,
  UsageRow,
  TeamPatch,
  KeyPatch,
  StoreSnapshot,
  SharedSecrets,
  TeamToken,
  TeamTokens,
  NewTeamToken,
  AlertSettings,
  AlertStore,
  WebhookDelivery,
  HourlyUsageQuery,
  HourlyUsageRow,
  RequestLog,
  RequestQuery,
  RequestRecord,
} from './types.js';
export { StoreConflictError, MAX_RECORDED_METHODS, REQUESTS_KEPT_PER_TEAM } from './types.js';

/** Opens the store the config names; the only place that knows which drivers exist. */
export async function openStore(
  config: StoreConfig,
  options: Pick<SqliteStoreOptions, 'now' | 'backgroundCheckpoints' | 'checkpointedElsewhere'> = {},
): Promise<Store> {
  switch (config.driver) {
    case 'sqlite':
      return createSqliteStore({ path: config.path, ...options });
    case 'redis':
      return createRedisStore({
        url: config.url,
        cluster: config.cluster,
        waitReplicas: config.waitReplicas,
        keyPrefix: config.keyPrefix,
        usageRetentionDays: config.usageRetentionDays,
        commandTimeoutMs: config.commandTimeoutMs,
        now: options.now,
      });
  }
}
