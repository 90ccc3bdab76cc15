// Starts a real gateway on 127.0.0.1:0 with an in-memory SQLite store, a team and a key, and
// captures its log lines, for tests that drive it over HTTP.

import { Writable } from 'node:stream';
import { parseConfig } from '../../src/config/load.js';
import type { GatewayConfig } from '../../src/config/schema.js';
import { startGateway, type GatewayOptions, type RunningGateway } from '../../src/gateway.js';
import { issueKey } from '../../src/admin/key-issuer.js';
import { createLogger } from '../../src/logging/logger.js';
import { collectConfigSecrets } from '../../src/config/secrets.js';
import { openStore, type Store, type Team } from '../../src/store/index.js';

export const TEST_ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestGateway {
  gateway: RunningGateway;
  store: Store;
  team: Team;
  apiKey: string;
  keyId: string;
  /** `http://127.0.0.1:port/<network>/v3/<key>` for a network whose base URL is `*\/<network>`. */
  url(networkId: string, key?: string): string;
  /** Every log line written so far, raw. */
  logLines: string[];
  close(): Promise<void>;
}

export interface TestGatewayOptions {
  /** The `networks` section; each network gets `baseUrls: ['*\/<id>']` and no health probes unless it sets its own. */
  networks: Array<Record<string, unknown> & { id: string }>;
  /** Other top-level config sections (server, auth, ...). */
  config?: Record<string, unknown>;
  dailyCredits?: number;
  now?: () => number;
  store?: Store;
  /** The `networks` section a reload (SIGHUP, `POST /v1/reload`) reads, same defaults; without it reload is refused. */
  reloadNetworks?: () => Array<Record<string, unknown> & { id: string }>;
  /** The wait between webhook retries (default: real timers). */
  webhookSleep?: GatewayOptions['webhookSleep'];
}

function testConfig(options: TestGatewayOptions, networks: TestGatewayOptions['networks']): GatewayConfig {
  return parseConfig(
    {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
      ...options.config,
      // Health probes are off unless a test turns them on: many tests count the calls an upstream receives.
      networks: networks.map((network) => ({ baseUrls: [`*/${network.id}`], healthCheck: { intervalMs: 0 }, ...network })),
    },
    process.env,
    'test config',
  );
}

export async function startTestGateway(options: TestGatewayOptions): Promise<TestGateway> {
  const config = testConfig(options, options.networks);
  const { reloadNetworks } = options;
  const loadConfig = reloadNetworks === undefined ? undefined : () => testConfig(options, reloadNetworks());
  const logLines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') logLines.push(line);
      callback();
    },
  });
  const logger = createLogger({ destination, level: 'info', secrets: collectConfigSecrets(config) });
  const store = options.store ?? (await openStore({ driver: 'sqlite', path: ':memory:' }, { now: options.now }));
  const team = await store.createTeam({ name: `team-${Math.random().toString(36).slice(2)}`, dailyCredits: options.dailyCredits ?? 1_000_000_000 });
  const { key, secret } = await issueKey(store, { teamId: team.id });
  const gateway = await startGateway(config, { logger, store, now: options.now, loadConfig, webhookSleep: options.webhookSleep });
  return {
    gateway,
    store,
    team,
    apiKey: secret,
    keyId: key.id,
    url: (networkId, apiKey = secret) => `${gateway.rpcOrigin}/${networkId}/v3/${apiKey}`,
    logLines,
    async close() {
      await gateway.close();
      if (options.store === undefined) await store.close();
    },
  };
}

/** POSTs a JSON-RPC body and returns status, headers and the parsed body (undefined if empty). */
export async function rpc(
  url: string,
  body: unknown,
  init: { headers?: Record<string, string>; method?: string; rawBody?: string } = {},
): Promise<{ status: number; headers: Headers; body: any }> {
  const response = await fetch(url, {
    method: init.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...init.headers },
    body: init.method === 'GET' || init.method === 'HEAD' ? undefined : (init.rawBody ?? JSON.stringify(body)),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text === '' ? undefined : JSON.parse(text) };
}
