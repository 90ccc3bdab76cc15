import { describe, expect, it } from 'vitest';
import { newId } from '../src/store/ids.js';
import { keySlot } from '../src/store/redis-client.js';
import { clusterTeamTag, createRedisKeyspace } from '../src/store/redis-keyspace.js';

describe('the Redis Cluster keyspace', () => {
  const keys = createRedisKeyspace('tg:', true);
  const teamKeys = (teamId: string) => [
    keys.teamDay(teamId, '2026-11-26'),
    keys.keyDay(teamId, 'key_0123456789abcdef', '2026-11-26'),
    keys.bucket(teamId),
    keys.reservation(teamId, 'r1'),
    keys.reservations(teamId),
    `${keys.reservationPrefix(teamId)}r2`,
    keys.usageCredits(teamId, '2026-11-26'),
    keys.usageRequests(teamId, '2026-11-26'),
    keys.usageHours(teamId, '2026-11-26'),
    keys.providerSpend(teamId, '2026-11-26'),
    keys.teamAlerts(teamId),
    keys.requests(teamId),
  ];

  it("puts every key of a team's ledger in one slot, the unknown team ('') included", () => {
    for (const teamId of ['', 'team_0123456789abcdef', newId('team'), 'a team with spaces']) {
      const slots = new Set(teamKeys(teamId).map(keySlot));
      expect(slots.size, teamId).toBe(1);
    }
  });

  it('gives each team a short tag that is never empty, and keeps the id in every name', () => {
    for (const teamId of ['', 'team_0123456789abcdef', newId('team')]) {
      expect(clusterTeamTag(teamId)).toMatch(/^[0-9a-z]{1,3}$/);
      expect(clusterTeamTag(teamId)).toBe(clusterTeamTag(teamId));
      for (const key of teamKeys(teamId)) expect(key.startsWith(`tg:{${clusterTeamTag(teamId)}}${teamId}:`), key).toBe(true);
    }
    // Two teams never share a name, even when their tags collide.
    const names = new Set<string>();
    for (let index = 0; index < 2_000; index += 1) for (const key of teamKeys(`team_${index}`)) names.add(key);
    expect(names.size).toBe(2_000 * 12);
  });

  it('spreads teams over the slots as evenly as their ids', () => {
    // Three masters own a third of the slots each (redis-cli --cluster create).
    const perThird = [0, 0, 0];
    const teams = 6_000;
    for (let index = 0; index < teams; index += 1) perThird[Math.min(2, Math.floor(keySlot(keys.teamDay(newId('team'), 'd')) / (16_384 / 3)))]! += 1;
    for (const count of perThird) expect(Math.abs(count - teams / 3)).toBeLessThan(teams / 3 / 10);
  });
});
