import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { AdminError, type AdminService } from '../admin/admin-service.js';
import { parse, usageQuery, type AdminRoute } from '../admin/admin-server.js';
import type { Store, TeamToken } from '../store/index.js';
import { issueTeamToken } from './team-token.js';
import { usageCsv } from './usage-csv.js';
import { readRequests, requestQueryOf } from '../explorer/request-queries.js';

/**
 * The operator's side of team self-service, on the admin listener (docs/admin-api.md): team
 * tokens (issue, list, revoke), a team's quota alert settings, the webhook delivery log, and
 * usage as CSV. Shared with the CLI through {@link createSelfServiceAdmin}.
 */

export interface AlertSettingsView {
  thresholds: number[] | null;
  webhookUrl: string | null;
  /** Whether the team's webhook has a signing secret (the secret is shown only when it is made). */
  hasSigningSecret: boolean;
}

export interface SelfServiceAdmin {
  issueTeamToken(team: string, label: string | null): Promise<{ token: TeamToken; secret: string }>;
  listTeamTokens(team?: string): Promise<TeamToken[]>;
  revokeTeamToken(id: string): Promise<TeamToken>;
  alertSettings(team: string): Promise<AlertSettingsView>;
  /** A new signing secret is made (and returned once) when a webhook URL is first set or `rotateSecret` asks. */
  updateAlertSettings(
    team: string,
    patch: { thresholds?: number[] | null; webhookUrl?: string | null; rotateSecret?: boolean },
  ): Promise<{ alerts: AlertSettingsView; signingSecret?: string }>;
}

export function createSelfServiceAdmin(store: Store, admin: AdminService, options: { now: () => number; onAlertSettingsChanged?: (teamId: string) => void }): SelfServiceAdmin {
  const view = (settings: { thresholds: number[] | null; webhookUrl: string | null; signingSecret: string | null } | null): AlertSettingsView => ({
    thresholds: settings?.thresholds ?? null,
    webhookUrl: settings?.webhookUrl ?? null,
    hasSigningSecret: settings?.signingSecret != null,
  });
  return {
    async issueTeamToken(team, label) {
      return issueTeamToken(store, (await admin.getTeam(team)).id, label);
    },
    async listTeamTokens(team) {
      return store.listTeamTokens(team === undefined ? {} : { teamId: (await admin.getTeam(team)).id });
    },
    async revokeTeamToken(id) {
      const all = await store.listTeamTokens();
      if (!all.some((token) => token.id === id)) throw new AdminError(404, `no team token "${id}"`);
      await store.revokeTeamToken(id, options.now());
      return (await store.listTeamTokens()).find((token) => token.id === id)!;
    },
    async alertSettings(team) {
      return view(await store.alertSettings((await admin.getTeam(team)).id));
    },
    async updateAlertSettings(team, patch) {
      const teamId = (await admin.getTeam(team)).id;
      const current = (await store.alertSettings(teamId)) ?? { thresholds: null, webhookUrl: null, signingSecret: null };
      const webhookUrl = patch.webhookUrl === undefined ? current.webhookUrl : patch.webhookUrl;
      const newSecret = webhookUrl !== null && (current.signingSecret === null || patch.rotateSecret === true) ? `whsec_${randomBytes(24).toString('base64url')}` : undefined;
      const next = {
        thresholds: patch.thresholds === undefined ? current.thresholds : patch.thresholds,
        webhookUrl,
        signingSecret: newSecret ?? current.signingSecret,
      };
      await store.setAlertSettings(teamId, next);
      options.onAlertSettingsChanged?.(teamId);
      return { alerts: view(next), ...(newSecret !== undefined ? { signingSecret: newSecret } : {}) };
    },
  };
}

const tokenCreate = z.strictObject({ label: z.string().max(200).nullable().optional() });
const thresholds = z
  .array(z.number().int().min(1).max(100))
  .min(1)
  .max(10)
  .transform((list) => [...new Set(list)].sort((a, b) => a - b));
const alertsUpdate = z.strictObject({
  thresholds: thresholds.nullable().optional(),
  webhookUrl: z.url({ protocol: /^https?$/ }).nullable().optional(),
  rotateSecret: z.boolean().optional(),
});

export function selfServiceAdminRoutes(selfService: SelfServiceAdmin, admin: AdminService, store: Pick<Store, 'listDeliveries' | 'findTeam' | 'recentRequests'>): AdminRoute[] {
  return [
    {
      method: 'POST',
      path: '/v1/teams/:team/tokens',
      handle: async ({ params, body }) => ({ status: 201, body: await selfService.issueTeamToken(params.team!, parse(tokenCreate, body).label ?? null) }),
    },
    { method: 'GET', path: '/v1/teams/:team/tokens', handle: async ({ params }) => ({ body: { tokens: await selfService.listTeamTokens(params.team!) } }) },
    { method: 'GET', path: '/v1/team-tokens', handle: async () => ({ body: { tokens: await selfService.listTeamTokens() } }) },
    { method: 'POST', path: '/v1/team-tokens/:token/revoke', handle: async ({ params }) => ({ body: { token: await selfService.revokeTeamToken(params.token!) } }) },
    { method: 'GET', path: '/v1/teams/:team/alerts', handle: async ({ params }) => ({ body: { alerts: await selfService.alertSettings(params.team!) } }) },
    {
      method: 'PATCH',
      path: '/v1/teams/:team/alerts',
      handle: async ({ params, body }) => ({ body: await selfService.updateAlertSettings(params.team!, parse(alertsUpdate, body)) }),
    },
    {
      method: 'GET',
      path: '/v1/webhook-deliveries',
      handle: async ({ query }) => {
        const limit = query.get('limit') ?? '100';
        if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 1000) throw new AdminError(400, 'limit must be 1 to 1000');
        const team = query.get('team');
        const teamId = team === null ? undefined : (await admin.getTeam(team)).id;
        return { body: { deliveries: await store.listDeliveries({ teamId, limit: Number(limit) }) } };
      },
    },
    {
      method: 'GET',
      path: '/v1/teams/:team/requests',
      handle: async ({ params, query }) => {
        const team = await admin.getTeam(params.team!);
        return { body: await readRequests(store, () => admin.listKeys(team.id), requestQueryOf(team.id, query)) };
      },
    },
    {
      method: 'GET',
      path: '/v1/usage.csv',
      handle: async ({ query }) => ({ body: usageCsv((await admin.usage(usageQuery(query))).rows), contentType: 'text/csv; charset=utf-8' }),
    },
  ];
}
