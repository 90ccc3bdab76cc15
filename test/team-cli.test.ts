// The CLI's team self-service verbs (README "Commands"): `tollgate team-tokens create|list|revoke`
// and `tollgate usage --format csv`, run as the built CLI against a SQLite file that a store
// handle in the test also opens (charges are made through the real ledger).

import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret } from '../src/auth/api-key.js';
import { openStore, type Store } from '../src/store/index.js';
import { CLI, ensureBuilt } from './helpers/build.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-team-cli-'));
const db = join(dir, 'cli.db');
let store: Store;

function cli(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [CLI, ...args, '--db', db], { encoding: 'utf8' });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

beforeAll(async () => {
  await ensureBuilt();
  store = await openStore({ driver: 'sqlite', path: db });
}, 180_000);

afterAll(async () => {
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('tollgate team-tokens and usage --format csv', () => {
  it('issues a token once (hash stored), lists without secrets, revokes; exports usage as CSV', async () => {
    expect(cli('teams', 'create', 'acme', '--daily-credits', '1000').status).toBe(0);
    const created = cli('team-tokens', 'create', '--team', 'acme', '--label', 'portal');
    expect(created.status).toBe(0);
    const token = JSON.parse(created.stdout);
    expect(token.secret).toMatch(/^tgt_/);
    expect(await store.findTeamTokenByHash(hashSecret(token.secret))).toMatchObject({ id: token.id, label: 'portal', revokedAt: null });
    const listed = cli('team-tokens', 'list', '--team', 'acme');
    expect(JSON.parse(listed.stdout)).toEqual([{ id: token.id, teamId: token.teamId, label: 'portal', createdAt: token.createdAt, revokedAt: null }]);
    expect(listed.stdout).not.toContain(token.secret);
    expect(JSON.parse(cli('team-tokens', 'revoke', token.id).stdout).revokedAt).toEqual(expect.any(Number));
    expect(cli('team-tokens', 'revoke', 'tok_nope').status).toBe(2);

    const team = (await store.findTeam('acme'))!;
    const key = await store.createKey({ teamId: team.id, secretHash: hashSecret('tg_cli'), label: 'cli' });
    const day = new Date().toISOString().slice(0, 10);
    const subject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_call', cost: 80, day, teamDailyCredits: 1000, keyDailyCap: null, teamCreditsPerSecond: null };
    await store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }, { type: 'charge', subject, nowMs: Date.now() }]);
    const csv = cli('usage', '--team', 'acme', '--format', 'csv');
    expect(csv.status).toBe(0);
    expect(csv.stdout).toBe(`day,team_id,key_id,network,method,credits,requests,upstream_units,upstream_usd,saved_units\r\n${day},${team.id},${key.id},eth,eth_call,160,2,0,0,0\r\n`);
    expect(JSON.parse(cli('usage', '--team', 'acme').stdout).totals).toEqual({ credits: 160, requests: 2 });
    expect(cli('usage', '--team', 'acme', '--format', 'xml').status).toBe(2);
  });
});
