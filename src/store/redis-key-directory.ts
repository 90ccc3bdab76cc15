import type { ChainableCommander, Cluster, Redis } from 'ioredis';
import type { RedisKeyspace } from './redis-keyspace.js';
import { newId } from './ids.js';
import { ROTATE_SCRIPT } from './redis-scripts.js';
import { StoreConflictError, type ApiKey, type KeySettings, type KeyDirectory, type KeyPatch, type KeyWithTeam, type NewKey, type NewTeam, type StoreSnapshot, type Team, type TeamPatch } from './types.js';

/**
 * The Redis driver's teams, keys and secrets (key layout in redis-scripts.ts). Only secret hashes
 * are stored; a key may have several secrets while a rotation's grace period runs.
 */

export interface RedisKeyDirectory extends KeyDirectory {
  /** Ids of every team, oldest first. */
  teamIds(): Promise<string[]>;
  /** Teams and keys with their secrets, for a snapshot. */
  exportEntries(): Promise<Pick<StoreSnapshot, 'teams' | 'keys'>>;
  /**
   * Claims the snapshot's team names, all or none (a clash releases those claimed and throws
   * {@link StoreConflictError}), then queues its teams and keys on `multi`, ids kept.
   */
  importEntries(snapshot: Pick<StoreSnapshot, 'teams' | 'keys'>, multi: ChainableCommander): Promise<void>;
}

type RedisWithRotate = (Redis | Cluster) & {
  tgRotate(...keysAndArgs: Array<string | number>): Promise<number>;
};

function teamFromHash(hash: Record<string, string>): Team | null {
  if (hash.id === undefined) return null;
  return {
    id: hash.id,
    name: hash.name!,
    dailyCredits: Number(hash.dailyCredits),
    creditsPerSecond: hash.creditsPerSecond === '' || hash.creditsPerSecond === undefined ? null : Number(hash.creditsPerSecond),
    createdAt: Number(hash.createdAt),
  };
}

function keyFromHash(hash: Record<string, string>): ApiKey | null {
  if (hash.id === undefined) return null;
  const nullableNumber = (value: string | undefined) => (value === undefined || value === '' ? null : Number(value));
  return {
    id: hash.id,
    teamId: hash.teamId!,
    label: hash.label === undefined || hash.label === '' ? null : hash.label,
    dailyCap: nullableNumber(hash.dailyCap),
    allowedNetworks: hash.allowedNetworks === undefined || hash.allowedNetworks === '' ? null : (JSON.parse(hash.allowedNetworks) as string[]),
    expiresAt: nullableNumber(hash.expiresAt),
    revokedAt: nullableNumber(hash.revokedAt),
    createdAt: Number(hash.createdAt),
    settings: hash.settings === undefined || hash.settings === '' ? null : (JSON.parse(hash.settings) as KeySettings),
    hasKeySecret: hash.keySecretHash !== undefined && hash.keySecretHash !== '',
  };
}

const settingsText = (settings: KeySettings | null | undefined): string => (settings == null ? '' : JSON.stringify(settings));

/** A team as its hash stores it. */
const teamHash = (team: Team) => ({
  id: team.id,
  name: team.name,
  dailyCredits: team.dailyCredits,
  creditsPerSecond: team.creditsPerSecond ?? '',
  createdAt: team.createdAt,
});

/** A key as its hash stores it. */
const keyHash = (key: ApiKey) => ({
  id: key.id,
  teamId: key.teamId,
  label: key.label ?? '',
  dailyCap: key.dailyCap ?? '',
  allowedNetworks: key.allowedNetworks === null ? '' : JSON.stringify(key.allowedNetworks),
  expiresAt: key.expiresAt ?? '',
  revokedAt: key.revokedAt ?? '',
  createdAt: key.createdAt,
  settings: settingsText(key.settings),
});

export function createRedisKeyDirectory(client: Redis | Cluster, options: { keys: RedisKeyspace; now: () => number }): RedisKeyDirectory {
  const redis = client as RedisWithRotate;
  redis.defineCommand('tgRotate', { numberOfKeys: 3, lua: ROTATE_SCRIPT });
  const { keys: k, now } = options;

  async function readTeam(id: string): Promise<Team | null> {
    return teamFromHash(await redis.hgetall(k.team(id)));
  }
  async function readKey(id: string): Promise<ApiKey | null> {
    return keyFromHash(await redis.hgetall(k.key(id)));
  }
  /** Queues a team on `multi`. */
  const addTeam = (multi: ChainableCommander, team: Team) => multi.hset(k.team(team.id), teamHash(team)).zadd(k.teams, team.createdAt, team.id);
  /** Queues a key and its listings on `multi`. */
  const addKey = (multi: ChainableCommander, key: ApiKey) =>
    multi.hset(k.key(key.id), keyHash(key)).zadd(k.keys, key.createdAt, key.id).zadd(k.teamKeys(key.teamId), key.createdAt, key.id);
  /** Queues a secret of a key on `multi`. */
  const addSecret = (multi: ChainableCommander, keyId: string, hash: string, validUntil: number | null) =>
    multi.hset(k.secret(hash), { keyId, validUntil: validUntil ?? '' }).sadd(k.keySecrets(keyId), hash);

  const directory: RedisKeyDirectory = {
    async createTeam(team: NewTeam) {
      const id = newId('team');
      const claimed = await redis.set(k.teamName(team.name), id, 'NX');
      if (claimed === null) throw new StoreConflictError(`a team named "${team.name}" already exists`);
      const created: Team = { id, name: team.name, dailyCredits: team.dailyCredits, creditsPerSecond: team.creditsPerSecond ?? null, createdAt: now() };
      await addTeam(redis.multi(), created).exec();
      return created;
    },
    async findTeam(idOrName) {
      const byId = await readTeam(idOrName);
      if (byId !== null) return byId;
      const id = await redis.get(k.teamName(idOrName));
      return id === null ? null : readTeam(id);
    },
    async listTeams() {
      const teams = await Promise.all((await directory.teamIds()).map(readTeam));
      return teams.filter((team): team is Team => team !== null);
    },
    async updateTeam(id, patch: TeamPatch) {
      if ((await readTeam(id)) === null) return null;
      const fields: Record<string, string | number> = {};
      if (patch.dailyCredits !== undefined) fields.dailyCredits = patch.dailyCredits;
      if (patch.creditsPerSecond !== undefined) fields.creditsPerSecond = patch.creditsPerSecond ?? '';
      if (Object.keys(fields).length > 0) await redis.hset(k.team(id), fields);
      return readTeam(id);
    },
    async createKey(key: NewKey) {
      const created: ApiKey = {
        id: newId('key'),
        teamId: key.teamId,
        label: key.label ?? null,
        dailyCap: key.dailyCap ?? null,
        allowedNetworks: key.allowedNetworks ?? null,
        expiresAt: key.expiresAt ?? null,
        revokedAt: null,
        createdAt: now(),
        settings: key.settings ?? null,
        hasKeySecret: false,
      };
      await addSecret(addKey(redis.multi(), created), created.id, key.secretHash, null).exec();
      return (await readKey(created.id))!;
    },
    async findKeyBySecretHash(secretHash): Promise<KeyWithTeam | null> {
      const secret = await redis.hgetall(k.secret(secretHash));
      if (secret.keyId === undefined) return null;
      const keyFields = await redis.hgetall(k.key(secret.keyId));
      const key = keyFromHash(keyFields);
      if (key === null) return null;
      const team = await readTeam(key.teamId);
      if (team === null) return null;
      return {
        key,
        team,
        secretValidUntil: secret.validUntil === '' || secret.validUntil === undefined ? null : Number(secret.validUntil),
        keySecretHash: keyFields.keySecretHash === undefined || keyFields.keySecretHash === '' ? null : keyFields.keySecretHash,
      };
    },
    async listKeys(filter = {}) {
      const ids = await redis.zrange(filter.teamId === undefined ? k.keys : k.teamKeys(filter.teamId), '0', '-1');
      const keys = await Promise.all(ids.map(readKey));
      return keys.filter((key): key is ApiKey => key !== null);
    },
    findKey: readKey,
    async revokeKey(id, at) {
      const key = await readKey(id);
      if (key === null) return false;
      if (key.revokedAt === null) await redis.hset(k.key(id), 'revokedAt', at);
      return true;
    },
    async updateKey(id, patch: KeyPatch) {
      if ((await readKey(id)) === null) return null;
      const fields: Record<string, string | number> = {};
      if (patch.label !== undefined) fields.label = patch.label ?? '';
      if (patch.dailyCap !== undefined) fields.dailyCap = patch.dailyCap ?? '';
      if (patch.allowedNetworks !== undefined) fields.allowedNetworks = patch.allowedNetworks === null ? '' : JSON.stringify(patch.allowedNetworks);
      if (patch.expiresAt !== undefined) fields.expiresAt = patch.expiresAt ?? '';
      if (patch.settings !== undefined) fields.settings = settingsText(patch.settings);
      if (patch.keySecretHash !== undefined) fields.keySecretHash = patch.keySecretHash ?? '';
      if (Object.keys(fields).length > 0) await redis.hset(k.key(id), fields);
      return readKey(id);
    },
    async rotateKey(id, newSecretHash, previousValidUntil) {
      const rotated = await redis.tgRotate(k.key(id), k.keySecrets(id), k.secret(newSecretHash), k.secretPrefix, newSecretHash, previousValidUntil, id);
      return rotated === 1;
    },
    teamIds: () => redis.zrange(k.teams, '0', '-1'),
    async exportEntries() {
      const keys = await directory.listKeys();
      const withSecrets = await Promise.all(
        keys.map(async (key) => {
          const hashes = await redis.smembers(k.keySecrets(key.id));
          const secrets = await Promise.all(
            hashes.map(async (hash) => {
              const validUntil = await redis.hget(k.secret(hash), 'validUntil');
              return { hash, validUntil: validUntil === null || validUntil === '' ? null : Number(validUntil) };
            }),
          );
          const keySecretHash = await redis.hget(k.key(key.id), 'keySecretHash');
          return { ...key, secrets, keySecretHash: keySecretHash === null || keySecretHash === '' ? null : keySecretHash };
        }),
      );
      return { teams: await directory.listTeams(), keys: withSecrets };
    },
    async importEntries(snapshot, multi) {
      const claimed: string[] = [];
      for (const team of snapshot.teams) {
        if ((await redis.set(k.teamName(team.name), team.id, 'NX')) === null) {
          // Release the names this import claimed, so that a refused import leaves nothing behind
          // and can be retried once the clash is resolved.
          if (claimed.length > 0) await redis.del(...claimed);
          throw new StoreConflictError(`a team named "${team.name}" already exists`);
        }
        claimed.push(k.teamName(team.name));
      }
      for (const team of snapshot.teams) addTeam(multi, team);
      for (const key of snapshot.keys) {
        addKey(multi, key);
        if (key.keySecretHash != null) multi.hset(k.key(key.id), 'keySecretHash', key.keySecretHash);
        for (const secret of key.secrets) addSecret(multi, key.id, secret.hash, secret.validUntil);
      }
    },
  };
  return directory;
}
