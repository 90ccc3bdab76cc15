import type { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import type { AlertSettings, AlertStore, TeamToken, TeamTokens, WebhookDelivery } from './portal-types.js';

/**
 * The Redis driver's team self-service keys (under the store's prefix):
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

export function createRedisTeamTokens(redis: Redis, options: { keyPrefix: string; now: () => number }): TeamTokens & AlertStore {
  const p = options.keyPrefix;
  const { now } = options;
  const readToken = async (id: string) => tokenFromHash(await redis.hgetall(`${p}team-token:${id}`));
  const emptyToNull = (value: string | undefined) => (value === undefined || value === '' ? null : value);

  return {
    async createTeamToken(token) {
      const created: TeamToken = { id: `tok_${randomBytes(8).toString('hex')}`, teamId: token.teamId, label: token.label ?? null, createdAt: now(), revokedAt: null };
      await redis
        .multi()
        .hset(`${p}team-token:${created.id}`, { id: created.id, teamId: created.teamId, label: created.label ?? '', createdAt: created.createdAt, revokedAt: '' })
        .set(`${p}team-token-hash:${token.tokenHash}`, created.id)
        .zadd(`${p}team-tokens`, created.createdAt, created.id)
        .zadd(`${p}team-tokens:${created.teamId}`, created.createdAt, created.id)
        .exec();
      return created;
    },
    async findTeamTokenByHash(tokenHash) {
      const id = await redis.get(`${p}team-token-hash:${tokenHash}`);
      return id === null ? null : readToken(id);
    },
    async listTeamTokens(filter = {}) {
      const ids = await redis.zrange(filter.teamId === undefined ? `${p}team-tokens` : `${p}team-tokens:${filter.teamId}`, '0', '-1');
      return (await Promise.all(ids.map(readToken))).filter((token): token is TeamToken => token !== null);
    },
    async revokeTeamToken(id, at) {
      const token = await readToken(id);
      if (token === null) return false;
      // HSETNX-like: the first revocation time stays (an empty field counts as unset).
      if (token.revokedAt === null) await redis.hset(`${p}team-token:${id}`, 'revokedAt', at);
      return true;
    },
    async alertSettings(teamId): Promise<AlertSettings | null> {
      const hash = await redis.hgetall(`${p}team-alerts:${teamId}`);
      if (Object.keys(hash).length === 0) return null;
      const thresholds = emptyToNull(hash.thresholds);
      return { thresholds: thresholds === null ? null : (JSON.parse(thresholds) as number[]), webhookUrl: emptyToNull(hash.webhookUrl), signingSecret: emptyToNull(hash.signingSecret) };
    },
    async setAlertSettings(teamId, settings) {
      await redis.hset(`${p}team-alerts:${teamId}`, {
        thresholds: settings.thresholds === null ? '' : JSON.stringify(settings.thresholds),
        webhookUrl: settings.webhookUrl ?? '',
        signingSecret: settings.signingSecret ?? '',
      });
    },
    async claimEvent(eventKey, ttlMs) {
      return (await redis.set(`${p}claim:${eventKey}`, '1', 'PX', Math.max(1, ttlMs), 'NX')) === 'OK';
    },
    async recordDelivery(delivery) {
      const json = JSON.stringify(delivery);
      await redis
        .multi()
        .lpush(`${p}deliveries`, json)
        .ltrim(`${p}deliveries`, 0, MAX_DELIVERIES - 1)
        .lpush(`${p}deliveries:${delivery.teamId}`, json)
        .ltrim(`${p}deliveries:${delivery.teamId}`, 0, MAX_DELIVERIES - 1)
        .exec();
    },
    async listDeliveries(filter) {
      const list = await redis.lrange(filter.teamId === undefined ? `${p}deliveries` : `${p}deliveries:${filter.teamId}`, 0, filter.limit - 1);
      return list.map((json) => JSON.parse(json) as WebhookDelivery);
    },
  };
}
