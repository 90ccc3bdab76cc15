/**
 * The store's part of team self-service (docs/portal.md): team-scoped tokens (hashes
 * only), per-team quota alert settings, the once-only claims that deduplicate webhook events
 * across replicas, the log of webhook delivery attempts, and hourly usage. Both drivers
 * implement these (sqlite-team-tokens.ts, redis-team-tokens.ts; hours in the ledgers).
 */

export interface TeamToken {
  id: string;
  teamId: string;
  label: string | null;
  createdAt: number;
  revokedAt: number | null;
}

export interface NewTeamToken {
  teamId: string;
  /** SHA-256 of the token; the token itself is never stored. */
  tokenHash: string;
  label?: string | null;
}

/** Tokens with which a team manages its own keys and reads its own usage. */
export interface TeamTokens {
  createTeamToken(token: NewTeamToken): Promise<TeamToken>;
  /** The token whose hash this is, revoked or not (the caller decides). */
  findTeamTokenByHash(tokenHash: string): Promise<TeamToken | null>;
  listTeamTokens(filter?: { teamId?: string }): Promise<TeamToken[]>;
  /** Marks a token revoked (the first time wins); false if there is no such token. */
  revokeTeamToken(id: string, at: number): Promise<boolean>;
}

/** A team's quota alert settings; null fields fall back to the gateway's defaults. */
export interface AlertSettings {
  /** Percentages of the daily quota, ascending, each 1–100. */
  thresholds: number[] | null;
  webhookUrl: string | null;
  /** HMAC key of the team's own webhook (given when `webhookUrl` is). */
  signingSecret: string | null;
}

/** One attempt to deliver one webhook event. */
export interface WebhookDelivery {
  eventId: string;
  type: string;
  teamId: string;
  /** 1 for the first attempt. */
  attempt: number;
  /** Epoch ms the attempt started. */
  at: number;
  /** The receiver's HTTP status, or null when it gave none (timeout, connection error). */
  status: number | null;
  outcome: 'delivered' | 'failed' | 'timeout' | 'error';
  durationMs: number;
}

export interface AlertStore {
  alertSettings(teamId: string): Promise<AlertSettings | null>;
  setAlertSettings(teamId: string, settings: AlertSettings): Promise<void>;
  /**
   * Claims an event once across every process sharing the store: true for the first caller,
   * false for every later one (SQLite INSERT OR IGNORE, Redis SET NX). The claim is kept `ttlMs`.
   */
  claimEvent(eventKey: string, ttlMs: number): Promise<boolean>;
  recordDelivery(delivery: WebhookDelivery): Promise<void>;
  /** Newest first. */
  listDeliveries(filter: { teamId?: string; limit: number }): Promise<WebhookDelivery[]>;
}

export interface HourlyUsageQuery {
  teamId: string;
  day: string;
}

export interface HourlyUsageRow {
  day: string;
  /** 0–23, UTC. */
  hour: number;
  teamId: string;
  keyId: string;
  credits: number;
  requests: number;
}
