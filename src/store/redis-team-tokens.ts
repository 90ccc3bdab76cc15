import type { ChainableCommander, Cluster, Redis } from 'ioredis';
import type { RedisKeyspace } from './redis-keyspace.js';
import { randomBytes } from 'node:crypto';
import type { AlertSettings, AlertStore, TeamToken, TeamTokens, WebhookDelivery } from './portal-types.js';

/**
 * The Redis driver's team self-service keys (names in redis-keyspace.ts; one Redis):
 *   team-token:<id>            hash {id, teamId, label, createdAt, revokedAt}
 *   team-token-hash:<hash>     the token id of a token hash
 *   team-tokens, team-tokens:<teamId>   zsets of token ids by creation time
 *   team-alerts:<teamId>       hash {thresholds, webhookUrl, signingSecret}
 *   claim:<eventKey>           SET NX PX: the first replica to set it sends the event
 *   deliveries, deliveries:<teamId>     lists of delivery attempts (JSON), newest first, capped
 */

const MAX_DELIVERIES = 10_000;

function tokenFromHash(hash: Record<string, string>): TeamToken | null {
  if (hash.id === undefined) return null;
  return {
    id: hash.id,
    teamId: hash.teamId!,
    label: hash.label === undefined || hash.label === '' ? null : hash.label,
    createdAt: Number(hash.createdAt),
    revokedAt: hash.revokedAt === undefined || hash.revokedAt === '' ? null : Number(hash.revokedAt),
  };
}

export interface RedisTeamTokens extends TeamTokens, AlertStore {
  /** Queues a snapshot's token (its id, hash and times kept) on `multi`. */
  importTeamToken(token: TeamToken & { tokenHash: string }, multi: ChainableCommander): void;
}

export function createRedisTeamTokens(redis: Redis | Cluster, options: { keys: RedisKeyspace; now: () => number }): RedisTeamTokens {
  const { keys: k, now } = options;
  /** Queues a token and its listings on `multi`. */
  const addToken = (multi: ChainableCommander, token: TeamToken, tokenHash: string) =>
    multi
      .hset(k.teamToken(token.id), { id: token.id, teamId: token.teamId, label: token.label ?? '', createdAt: token.createdAt, revokedAt: token.revokedAt ?? '' })
      .set(k.teamTokenHash(tokenHash), token.id)
      .zadd(k.teamTokens, token.createdAt, token.id)
      .zadd(k.teamTokensOf(token.teamId), token.createdAt, token.id);
  const readToken = async (id: string) => tokenFromHash(await redis.hgetall(k.teamToken(id)));
  const emptyToNull = (value: string | undefined) => (value === undefined || value === '' ? null : value);

  return {
    async createTeamToken(token) {
      const created: TeamToken = { id: `tok_${randomBytes(8).toString('hex')}`, teamId: token.teamId, label: token.label ?? null, createdAt: now(), revokedAt: null };
      await addToken(redis.multi(), created, token.tokenHash).exec();
      return created;
    },
    importTeamToken(token, multi) {
      addToken(multi, token, token.tokenHash);
    },
    async findTeamTokenByHash(tokenHash) {
      const id = await redis.get(k.teamTokenHash(tokenHash));
      return id === null ? null : readToken(id);
    },
    async listTeamTokens(filter = {}) {
      const ids = await redis.zrange(filter.teamId === undefined ? k.teamTokens : k.teamTokensOf(filter.teamId), '0', '-1');
      return (await Promise.all(ids.map(readToken))).filter((token): token is TeamToken => token !== null);
    },
    async revokeTeamToken(id, at) {
      const token = await readToken(id);
      if (token === null) return false;
      // HSETNX-like: the first revocation time stays (an empty field counts as unset).
      if (token.revokedAt === null) await redis.hset(k.teamToken(id), 'revokedAt', at);
      return true;
    },
    async alertSettings(teamId): Promise<AlertSettings | null> {
      const hash = await redis.hgetall(k.teamAlerts(teamId));
      if (Object.keys(hash).length === 0) return null;
      const thresholds = emptyToNull(hash.thresholds);
      return { thresholds: thresholds === null ? null : (JSON.parse(thresholds) as number[]), webhookUrl: emptyToNull(hash.webhookUrl), signingSecret: emptyToNull(hash.signingSecret) };
    },
    async setAlertSettings(teamId, settings) {
      await redis.hset(k.teamAlerts(teamId), {
        thresholds: settings.thresholds === null ? '' : JSON.stringify(settings.thresholds),
        webhookUrl: settings.webhookUrl ?? '',
        signingSecret: settings.signingSecret ?? '',
      });
    },
    async claimEvent(eventKey, ttlMs) {
      return (await redis.set(k.claim(eventKey), '1', 'PX', Math.max(1, ttlMs), 'NX')) === 'OK';
    },
    async recordDelivery(delivery) {
      const json = JSON.stringify(delivery);
      await redis
        .multi()
        .lpush(k.deliveries, json)
        .ltrim(k.deliveries, 0, MAX_DELIVERIES - 1)
        .lpush(k.deliveriesOf(delivery.teamId), json)
        .ltrim(k.deliveriesOf(delivery.teamId), 0, MAX_DELIVERIES - 1)
        .exec();
    },
    async listDeliveries(filter) {
      const list = await redis.lrange(filter.teamId === undefined ? k.deliveries : k.deliveriesOf(filter.teamId), 0, filter.limit - 1);
      return list.map((json) => JSON.parse(json) as WebhookDelivery);
    },
  };
}
