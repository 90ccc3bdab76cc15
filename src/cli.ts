#!/usr/bin/env -S MALLOC_MMAP_THRESHOLD_=1048576 node --max-semi-space-size=32 --initial-old-space-size=128 --expose-gc
import { parseArgs } from 'node:util';
import { existsSync, readFileSync } from 'node:fs';
import { basename, extname } from 'node:path';
import { ConfigError, loadConfigFile } from './config/load.js';
import type { StoreConfig } from './config/schema.js';
import { startGateway } from './gateway.js';
import type { Logger } from './logging/logger.js';
import { GATEWAY_ENVIRONMENT, GATEWAY_ENVIRONMENT_ASSIGNMENTS, GATEWAY_NODE_FLAGS, missingGatewayEnvironment, missingGatewayFlags } from './startup/node-flags.js';
import { resolveWorkerCount, serveWorkerGroup } from './cluster/worker-group.js';
import { openStore, StoreConflictError, type Store } from './store/index.js';
import { AdminError, createAdminService, type AdminService } from './admin/admin-service.js';
import { utcDay } from './metering/meter.js';
import { createSelfServiceAdmin } from './portal/admin-routes.js';
import { usageCsv } from './portal/usage-csv.js';

/**
 * The `tollgate` command. `serve` runs the gateway from a config file (SIGTERM drains, SIGHUP
 * reloads), `devnet` runs a local development network with a gateway in front, and the admin
 * verbs work on the store named by the config (or `--db` for a SQLite file) through the same
 * service as the admin HTTP API. Changes made here reach running gateways within
 * `auth.keyCacheTtlMs`.
 */

/** How long a failed command may take to end by itself before what it left open is named and it is ended. */
const LEFTOVER_HANDLES_GRACE_MS = 5_000;

const USAGE = `Usage:
  tollgate serve [--config FILE] [--workers N|auto]
  tollgate devnet [--json] [--port N] [--data-dir DIR] [--workers N|auto]
  tollgate teams create NAME --daily-credits N [--credits-per-second N]
  tollgate teams update NAME [--daily-credits N] [--credits-per-second N|none]
  tollgate teams list
  tollgate keys create --team NAME [--label TEXT] [--daily-cap N] [--networks a,b] [--expires ISO-DATE]
  tollgate keys list [--team NAME]
  tollgate keys update KEY_ID [--label TEXT] [--daily-cap N|none] [--networks a,b|all] [--expires ISO-DATE|never]
                       [--allow-origin O]... [--allow-user-agent UA]... [--allow-ip CIDR]...
                       [--allow-method M]... [--allow-address 0x...]... [--clear-allowlists]
                       [--require-secret | --no-require-secret] [--require-jwt | --no-require-jwt]
                       [--jwt-key [ID=]FILE]... [--jwt-audience AUD|none]
  tollgate keys secret KEY_ID
  tollgate keys rotate KEY_ID [--grace-seconds N]
  tollgate keys revoke KEY_ID
  tollgate team-tokens create --team NAME [--label TEXT]
  tollgate team-tokens list [--team NAME]
  tollgate team-tokens revoke TOKEN_ID
  tollgate usage (--team NAME | --key KEY_ID) [--days N | --from YYYY-MM-DD --to YYYY-MM-DD] [--format json|csv]
  tollgate migrate --from (sqlite:PATH | redis://HOST:PORT | cluster:redis://HOST:PORT,...) [--from-key-prefix P]
                   --to (redis://HOST:PORT | cluster:redis://HOST:PORT,...) [--key-prefix P] [--days N]

Admin verbs read the store from --config FILE (default: $TOLLGATE_CONFIG or config/gateway.yaml),
or from --db FILE (a SQLite database file).`;

class UsageError extends Error {}

const OPTIONS = {
  config: { type: 'string' },
  db: { type: 'string' },
  json: { type: 'boolean' },
  port: { type: 'string' },
  workers: { type: 'string' },
  'data-dir': { type: 'string' },
  'daily-credits': { type: 'string' },
  'credits-per-second': { type: 'string' },
  team: { type: 'string' },
  key: { type: 'string' },
  label: { type: 'string' },
  'daily-cap': { type: 'string' },
  networks: { type: 'string' },
  expires: { type: 'string' },
  'grace-seconds': { type: 'string' },
  'allow-origin': { type: 'string', multiple: true },
  'allow-user-agent': { type: 'string', multiple: true },
  'allow-ip': { type: 'string', multiple: true },
  'allow-method': { type: 'string', multiple: true },
  'allow-address': { type: 'string', multiple: true },
  'clear-allowlists': { type: 'boolean' },
  'require-secret': { type: 'boolean' },
  'no-require-secret': { type: 'boolean' },
  'require-jwt': { type: 'boolean' },
  'no-require-jwt': { type: 'boolean' },
  'jwt-key': { type: 'string', multiple: true },
  'jwt-audience': { type: 'string' },
  days: { type: 'string' },
  'key-prefix': { type: 'string' },
  'from-key-prefix': { type: 'string' },
  from: { type: 'string' },
  to: { type: 'string' },
  format: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function wholeNumber(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`${flag} must be a whole number, got "${value}"`);
  return Number(value);
}

function configPath(values: Values): string {
  return values.config ?? process.env.TOLLGATE_CONFIG ?? 'config/gateway.yaml';
}

/** The store the admin verbs work on, and the config's default rotation grace (0 with --db). */
function adminContextOf(values: Values): { store: StoreConfig; rotationGraceMs: number } {
  if (values.db !== undefined) return { store: { driver: 'sqlite', path: values.db }, rotationGraceMs: 0 };
  const path = configPath(values);
  if (!existsSync(path)) throw new UsageError(`no config file at ${path}: pass --config FILE or --db FILE`);
  const config = loadConfigFile(path);
  return { store: config.store, rotationGraceMs: config.auth.rotationGraceMs };
}

async function withAdmin(values: Values, run: (admin: AdminService, rotationGraceMs: number, store: Store) => Promise<unknown>): Promise<void> {
  const context = adminContextOf(values);
  const store: Store = await openStore(context.store);
  try {
    const result = await run(createAdminService(store), context.rotationGraceMs, store);
    if (typeof result === 'string') process.stdout.write(result);
    else print(result);
  } finally {
    await store.close();
  }
}

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

function requireArg(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`${what} is required`);
  return value;
}

/** `--require-x` / `--no-require-x`: true, false, or not given. */
function toggle(values: Values, name: 'require-secret' | 'require-jwt'): boolean | undefined {
  const on = values[name] === true;
  const off = values[`no-${name}`] === true;
  if (on && off) throw new UsageError(`give --${name} or --no-${name}, not both`);
  return on ? true : off ? false : undefined;
}

/** `--jwt-key [ID=]FILE`: a PEM public key or a JWK (JSON) file; the id defaults to the file's name. */
function jwtKeyFromFile(argument: string): { id: string; pem?: string; jwk?: Record<string, unknown> } {
  const equals = argument.indexOf('=');
  const file = equals > 0 ? argument.slice(equals + 1) : argument;
  const id = equals > 0 ? argument.slice(0, equals) : basename(file, extname(file));
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new UsageError(`--jwt-key: cannot read ${file}: ${(error as Error).message}`);
  }
  if (text.trimStart().startsWith('{')) {
    try {
      return { id, jwk: JSON.parse(text) as Record<string, unknown> };
    } catch {
      throw new UsageError(`--jwt-key: ${file} is neither a PEM key nor JSON`);
    }
  }
  return { id, pem: text };
}

/** The `settings` patch of `keys update`, from its flags; undefined when none was given. */
function settingsFromFlags(values: Values): Record<string, unknown> | undefined {
  const settings: Record<string, unknown> = {};
  if (values['clear-allowlists'] === true) {
    for (const field of ['allowedOrigins', 'allowedUserAgents', 'allowedIps', 'allowedMethods', 'allowedAddresses']) settings[field] = [];
  }
  const lists = [
    ['allow-origin', 'allowedOrigins'],
    ['allow-user-agent', 'allowedUserAgents'],
    ['allow-ip', 'allowedIps'],
    ['allow-method', 'allowedMethods'],
    ['allow-address', 'allowedAddresses'],
  ] as const;
  for (const [flag, field] of lists) if (values[flag] !== undefined) settings[field] = values[flag];
  const requireSecret = toggle(values, 'require-secret');
  if (requireSecret !== undefined) settings.requireSecret = requireSecret;
  const requireJwt = toggle(values, 'require-jwt');
  if (requireJwt !== undefined) settings.requireJwt = requireJwt;
  if (values['jwt-key'] !== undefined) settings.jwtKeys = values['jwt-key'].map(jwtKeyFromFile);
  if (values['jwt-audience'] !== undefined) settings.jwtAudience = values['jwt-audience'] === 'none' ? null : values['jwt-audience'];
  return Object.keys(settings).length === 0 ? undefined : settings;
}

/** `--workers N|auto`, over the config's `server.workers`. */
function workersFlag(values: Values): number | 'auto' | undefined {
  return values.workers === 'auto' ? 'auto' : wholeNumber(values.workers, '--workers');
}

async function serve(values: Values): Promise<void> {
  const path = configPath(values);
  const config = loadConfigFile(path);
  const workers = resolveWorkerCount(workersFlag(values) ?? config.server.workers);
  if (workers > 1) {
    // The workers are forked with this process's Node flags, the heap settings' included.
    await serveWorkerGroup(config, { workers, loadConfig: () => loadConfigFile(path), onStarted: reportNodeFlags });
    return;
  }
  const gateway = await startGateway(config, { loadConfig: () => loadConfigFile(path) });
  reportNodeFlags(gateway.logger);
  process.once('SIGTERM', () => {
    gateway.drain().then(
      () => process.exit(0),
      (error: unknown) => {
        gateway.logger.error({ err: error }, 'drain failed');
        process.exit(1);
      },
    );
  });
  process.once('SIGINT', () => void gateway.close().then(() => process.exit(0)));
  // A rejected reload is logged by the gateway and leaves the running config in place.
  process.on('SIGHUP', () => void gateway.reload().catch(() => undefined));
}

/**
 * The memory settings this process runs with (src/startup/node-flags.ts), said once at start: a
 * warning naming the gateway's Node flags and allocator variables it was started without, as
 * `node dist/cli.js serve` is.
 */
function reportNodeFlags(logger: Logger): void {
  const missing = [...missingGatewayFlags(), ...missingGatewayEnvironment()];
  if (missing.length === 0) {
    logger.info({ nodeFlags: GATEWAY_NODE_FLAGS, environment: GATEWAY_ENVIRONMENT }, 'V8 heap settings');
    return;
  }
  logger.warn(
    { missing, recommended: `${GATEWAY_ENVIRONMENT_ASSIGNMENTS} node ${GATEWAY_NODE_FLAGS.join(' ')}` },
    `V8 heap settings: Node was started without ${missing.join(' ')}, so under large answers the gateway may spend much of its CPU in full garbage collections, or keep a burst's memory long after it (the tollgate command sets them)`,
  );
}

/** A store named on the command line: `sqlite:PATH`, `redis://...`, or `cluster:redis://a,redis://b`. */
function storeArg(text: string, keyPrefix: string, flag: string): StoreConfig {
  if (text.startsWith('sqlite:')) return { driver: 'sqlite', path: text.slice('sqlite:'.length) };
  const redis = { driver: 'redis' as const, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false };
  if (text.startsWith('cluster:')) {
    const seeds = text.slice('cluster:'.length).split(',').filter((seed) => seed !== '');
    if (seeds.length === 0 || !seeds.every((seed) => /^rediss?:\/\//.test(seed))) throw new UsageError(`${flag} cluster: takes redis:// seed URLs separated by commas`);
    return { ...redis, cluster: seeds };
  }
  if (/^rediss?:\/\//.test(text)) return { ...redis, url: text };
  throw new UsageError(`${flag} must be sqlite:PATH, a redis:// URL or cluster:redis://...`);
}

/**
 * Copies a store into Redis or Redis Cluster: teams, keys (secret hashes included, so issued keys
 * keep working), team tokens, alert settings, shared secrets (the filter ids' HMAC key, so filter
 * ids stay valid) and the usage, daily and hourly, of the last `--days` days (default 35, the
 * Redis store's retention). Run it with the gateways stopped; reservations in flight, throughput
 * buckets, event claims and the webhook delivery log are not copied.
 */
async function migrate(values: Values): Promise<void> {
  const keyPrefix = values['key-prefix'] ?? 'tollgate:';
  const sourceConfig = storeArg(requireArg(values.from, '--from sqlite:PATH | redis://... | cluster:redis://...'), values['from-key-prefix'] ?? keyPrefix, '--from');
  const targetConfig = storeArg(requireArg(values.to, '--to redis://... | cluster:redis://...'), keyPrefix, '--to');
  if (targetConfig.driver !== 'redis') throw new UsageError('--to must be a redis:// URL or cluster:redis://...');
  const days = values.days === undefined ? 35 : wholeNumber(values.days, '--days')!;
  const source = await openStore(sourceConfig);
  const target = await openStore(targetConfig);
  try {
    const toDay = utcDay(Date.now());
    const fromDay = utcDay(Date.now() - (days - 1) * 86_400_000);
    const snapshot = await source.exportSnapshot({ fromDay, toDay });
    await target.importSnapshot(snapshot);
    print({
      teams: snapshot.teams.length,
      keys: snapshot.keys.length,
      teamTokens: snapshot.teamTokens.length,
      alertSettings: snapshot.alertSettings.length,
      sharedSecrets: snapshot.sharedSecrets.length,
      usageRows: snapshot.usage.length,
      hourlyUsageRows: snapshot.hourlyUsage.length,
      fromDay,
      toDay,
      credits: snapshot.usage.reduce((sum, row) => sum + row.credits, 0),
    });
  } finally {
    await source.close();
    await target.close();
  }
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  const [command, verb, ...rest] = positionals;
  if (values.help || command === undefined) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const creditsPerSecond = (): number | null | undefined =>
    values['credits-per-second'] === 'none' ? null : wholeNumber(values['credits-per-second'], '--credits-per-second');
  switch (['serve', 'devnet', 'usage', 'migrate'].includes(command) ? command : `${command} ${verb ?? ''}`) {
    case 'serve':
      return serve(values);
    case 'devnet': {
      const { runDevnet } = await import('./devnet/devnet.js');
      return runDevnet({
        json: values.json ?? false,
        port: wholeNumber(values.port, '--port') ?? 8080,
        dataDir: values['data-dir'] ?? 'data',
        workers: resolveWorkerCount(workersFlag(values) ?? 1),
      });
    }
    case 'teams create':
      return withAdmin(values, (admin) =>
        admin.createTeam({
          name: requireArg(rest[0], 'NAME'),
          dailyCredits: wholeNumber(requireArg(values['daily-credits'], '--daily-credits N'), '--daily-credits')!,
          creditsPerSecond: creditsPerSecond() ?? null,
        }),
      );
    case 'teams update':
      return withAdmin(values, (admin) =>
        admin.updateTeam(requireArg(rest[0], 'NAME'), {
          dailyCredits: wholeNumber(values['daily-credits'], '--daily-credits'),
          creditsPerSecond: creditsPerSecond(),
        }),
      );
    case 'teams list':
      return withAdmin(values, (admin) => admin.listTeams());
    case 'keys create':
      return withAdmin(values, async (admin) => {
        const expiresAt = values.expires === undefined ? null : Date.parse(values.expires);
        if (expiresAt !== null && Number.isNaN(expiresAt)) throw new UsageError(`--expires must be an ISO date, got "${values.expires}"`);
        const { key, secret } = await admin.issueKey(requireArg(values.team, '--team NAME'), {
          label: values.label ?? null,
          dailyCap: wholeNumber(values['daily-cap'], '--daily-cap') ?? null,
          allowedNetworks: values.networks === undefined ? null : values.networks.split(',').map((id) => id.trim()).filter(Boolean),
          expiresAt,
        });
        // The secret is shown this once; only its hash is stored.
        return { ...key, secret };
      });
    case 'keys list':
      return withAdmin(values, (admin) => admin.listKeys(values.team));
    case 'keys update':
      return withAdmin(values, async (admin) => {
        const expiresAt = values.expires === undefined ? undefined : values.expires === 'never' ? null : Date.parse(values.expires);
        if (expiresAt !== undefined && expiresAt !== null && Number.isNaN(expiresAt)) throw new UsageError(`--expires must be an ISO date or never, got "${values.expires}"`);
        const { key, keySecret } = await admin.updateKey(requireArg(rest[0], 'KEY_ID'), {
          label: values.label,
          dailyCap: values['daily-cap'] === 'none' ? null : wholeNumber(values['daily-cap'], '--daily-cap'),
          allowedNetworks: values.networks === undefined ? undefined : values.networks === 'all' ? null : values.networks.split(',').map((id) => id.trim()).filter(Boolean),
          expiresAt,
          settings: settingsFromFlags(values),
        });
        // A key secret issued by turning --require-secret on is shown this once.
        return keySecret === undefined ? key : { ...key, keySecret };
      });
    case 'keys secret':
      return withAdmin(values, async (admin) => {
        const { key, keySecret } = await admin.issueKeySecret(requireArg(rest[0], 'KEY_ID'));
        return { ...key, keySecret };
      });
    case 'keys rotate':
      return withAdmin(values, (admin, defaultGraceMs) => {
        const graceSeconds = wholeNumber(values['grace-seconds'], '--grace-seconds');
        return admin.rotateKey(requireArg(rest[0], 'KEY_ID'), graceSeconds === undefined ? defaultGraceMs : graceSeconds * 1000);
      });
    case 'keys revoke':
      return withAdmin(values, (admin) => admin.revokeKey(requireArg(rest[0], 'KEY_ID')));
    case 'usage': {
      const format = values.format ?? 'json';
      if (format !== 'json' && format !== 'csv') throw new UsageError(`--format must be json or csv, got "${format}"`);
      return withAdmin(values, async (admin) => {
        const report = await admin.usage({ team: values.team, key: values.key, from: values.from, to: values.to, days: wholeNumber(values.days, '--days') });
        return format === 'csv' ? usageCsv(report.rows) : report;
      });
    }
    case 'team-tokens create':
      return withAdmin(values, async (admin, _grace, store) => {
        const { token, secret } = await createSelfServiceAdmin(store, admin, { now: Date.now }).issueTeamToken(requireArg(values.team, '--team NAME'), values.label ?? null);
        // The token is shown this once; only its hash is stored.
        return { ...token, secret };
      });
    case 'team-tokens list':
      return withAdmin(values, (admin, _grace, store) => createSelfServiceAdmin(store, admin, { now: Date.now }).listTeamTokens(values.team));
    case 'team-tokens revoke':
      return withAdmin(values, (admin, _grace, store) => createSelfServiceAdmin(store, admin, { now: Date.now }).revokeTeamToken(requireArg(rest[0], 'TOKEN_ID')));
    case 'migrate':
      return migrate(values);
    default:
      throw new UsageError(`unknown command "${positionals.join(' ')}"`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError || error instanceof ConfigError || error instanceof StoreConflictError || error instanceof AdminError) {
    process.stderr.write(`tollgate: ${error.message}\n`);
    if (error instanceof UsageError) process.stderr.write(`\n${USAGE}\n`);
    process.exit(2);
  }
  if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write(`tollgate: ${(error as Error).message}\n\n${USAGE}\n`);
    process.exit(2);
  }
  process.stderr.write(`tollgate: ${(error as Error).stack ?? String(error)}\n`);
  // A failed start has closed what it opened, so the process ends by itself once the error is
  // written. Should something still be open, it is named and the process ends anyway.
  process.exitCode = 1;
  setTimeout(() => {
    process.stderr.write(`tollgate: still open after the failure: ${process.getActiveResourcesInfo().join(', ')}\n`);
    process.exit(1);
  }, LEFTOVER_HANDLES_GRACE_MS).unref();
});
