import type Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import type { AlertSettings, AlertStore, TeamToken, TeamTokens, WebhookDelivery } from './portal-types.js';

/**
 * The SQLite driver's team self-service tables: team tokens (hashes only), alert settings, event
 * claims (INSERT OR IGNORE: the first process to insert a claim sends the event) and the
 * webhook delivery log (the newest `MAX_DELIVERIES` attempts are kept).
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS team_tokens (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL REFERENCES teams(id),
  token_hash TEXT NOT NULL UNIQUE,
  label TEXT,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER
);
CREATE INDEX IF NOT EXISTS team_tokens_team ON team_tokens(team_id);
CREATE TABLE IF NOT EXISTS team_alerts (
  team_id TEXT PRIMARY KEY REFERENCES teams(id),
  thresholds TEXT,
  webhook_url TEXT,
  signing_secret TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS event_claims (
  event_key TEXT PRIMARY KEY,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS webhook_deliveries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL,
  type TEXT NOT NULL,
  team_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  at INTEGER NOT NULL,
  status INTEGER,
  outcome TEXT NOT NULL,
  duration_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_team ON webhook_deliveries(team_id, seq);
`;

/** Delivery attempts kept; older ones are dropped as new ones are written. */
const MAX_DELIVERIES = 10_000;

interface TokenRow {
  id: string;
  team_id: string;
  label: string | null;
  created_at: number;
  revoked_at: number | null;
}

interface DeliveryRow {
  event_id: string;
  type: string;
  team_id: string;
  attempt: number;
  at: number;
  status: number | null;
  outcome: WebhookDelivery['outcome'];
  duration_ms: number;
}

const toToken = (row: TokenRow): TeamToken => ({ id: row.id, teamId: row.team_id, label: row.label, createdAt: row.created_at, revokedAt: row.revoked_at });
const toDelivery = (row: DeliveryRow): WebhookDelivery => ({
  eventId: row.event_id,
  type: row.type,
  teamId: row.team_id,
  attempt: row.attempt,
  at: row.at,
  status: row.status,
  outcome: row.outcome,
  durationMs: row.duration_ms,
});

const TOKEN_COLUMNS = 'id, team_id, label, created_at, revoked_at';

export function createSqliteTeamTokens(db: Database.Database, options: { now: () => number }): TeamTokens & AlertStore {
  db.exec(SCHEMA);
  const { now } = options;
  const statements = {
    insertToken: db.prepare<[string, string, string, string | null, number]>(
      'INSERT INTO team_tokens (id, team_id, token_hash, label, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    tokenByHash: db.prepare<[string], TokenRow>(`SELECT ${TOKEN_COLUMNS} FROM team_tokens WHERE token_hash = ?`),
    tokenById: db.prepare<[string], TokenRow>(`SELECT ${TOKEN_COLUMNS} FROM team_tokens WHERE id = ?`),
    listTokens: db.prepare<[], TokenRow>(`SELECT ${TOKEN_COLUMNS} FROM team_tokens ORDER BY created_at, id`),
    listTokensOfTeam: db.prepare<[string], TokenRow>(`SELECT ${TOKEN_COLUMNS} FROM team_tokens WHERE team_id = ? ORDER BY created_at, id`),
    revokeToken: db.prepare<[number, string]>('UPDATE team_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?'),
    alertSettings: db.prepare<[string], { thresholds: string | null; webhook_url: string | null; signing_secret: string | null }>(
      'SELECT thresholds, webhook_url, signing_secret FROM team_alerts WHERE team_id = ?',
    ),
    setAlertSettings: db.prepare<[string, string | null, string | null, string | null]>(
      `INSERT INTO team_alerts (team_id, thresholds, webhook_url, signing_secret) VALUES (?, ?, ?, ?)
       ON CONFLICT DO UPDATE SET thresholds = excluded.thresholds, webhook_url = excluded.webhook_url, signing_secret = excluded.signing_secret`,
    ),
    dropExpiredClaims: db.prepare<[number]>('DELETE FROM event_claims WHERE expires_at < ?'),
    claim: db.prepare<[string, number]>('INSERT OR IGNORE INTO event_claims (event_key, expires_at) VALUES (?, ?)'),
    insertDelivery: db.prepare<[string, string, string, number, number, number | null, string, number]>(
      'INSERT INTO webhook_deliveries (event_id, type, team_id, attempt, at, status, outcome, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    trimDeliveries: db.prepare<[number]>('DELETE FROM webhook_deliveries WHERE seq <= (SELECT MAX(seq) FROM webhook_deliveries) - ?'),
    deliveries: db.prepare<[number], DeliveryRow>('SELECT * FROM webhook_deliveries ORDER BY seq DESC LIMIT ?'),
    deliveriesOfTeam: db.prepare<[string, number], DeliveryRow>('SELECT * FROM webhook_deliveries WHERE team_id = ? ORDER BY seq DESC LIMIT ?'),
  };

  const claim = db.transaction((eventKey: string, expiresAt: number, at: number): boolean => {
    statements.dropExpiredClaims.run(at);
    return statements.claim.run(eventKey, expiresAt).changes === 1;
  });

  return {
    async createTeamToken(token) {
      const row: TokenRow = { id: `tok_${randomBytes(8).toString('hex')}`, team_id: token.teamId, label: token.label ?? null, created_at: now(), revoked_at: null };
      statements.insertToken.run(row.id, row.team_id, token.tokenHash, row.label, row.created_at);
      return toToken(row);
    },
    async findTeamTokenByHash(tokenHash) {
      const row = statements.tokenByHash.get(tokenHash);
      return row === undefined ? null : toToken(row);
    },
    async listTeamTokens(filter = {}) {
      return (filter.teamId === undefined ? statements.listTokens.all() : statements.listTokensOfTeam.all(filter.teamId)).map(toToken);
    },
    async revokeTeamToken(id, at) {
      return statements.revokeToken.run(at, id).changes > 0 && statements.tokenById.get(id) !== undefined;
    },
    async alertSettings(teamId): Promise<AlertSettings | null> {
      const row = statements.alertSettings.get(teamId);
      if (row === undefined) return null;
      return {
        thresholds: row.thresholds === null ? null : (JSON.parse(row.thresholds) as number[]),
        webhookUrl: row.webhook_url,
        signingSecret: row.signing_secret,
      };
    },
    async setAlertSettings(teamId, settings) {
      statements.setAlertSettings.run(teamId, settings.thresholds === null ? null : JSON.stringify(settings.thresholds), settings.webhookUrl, settings.signingSecret);
    },
    async claimEvent(eventKey, ttlMs) {
      const at = now();
      return claim.immediate(eventKey, at + ttlMs, at);
    },
    async recordDelivery(delivery) {
      statements.insertDelivery.run(delivery.eventId, delivery.type, delivery.teamId, delivery.attempt, delivery.at, delivery.status, delivery.outcome, delivery.durationMs);
      statements.trimDeliveries.run(MAX_DELIVERIES);
    },
    async listDeliveries(filter) {
      const rows = filter.teamId === undefined ? statements.deliveries.all(filter.limit) : statements.deliveriesOfTeam.all(filter.teamId, filter.limit);
      return rows.map(toDelivery);
    },
  };
}
