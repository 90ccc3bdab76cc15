#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { existsSync } from 'node:fs';
import { ConfigError, loadConfigFile } from './config/load.js';
import type { StoreConfig } from './config/schema.js';
import { startGateway } from './gateway.js';
import { openStore, StoreConflictError, type Store } from './store/index.js';
import { issueKey } from './admin/key-issuer.js';

/**
 * The `tollgate` command. `serve` runs the gateway from a config file, `devnet` runs a local
 * development network with a gateway in front, and the admin verbs (`teams`, `keys`) work on
 * the store named by the config (or `--db` for a SQLite file).
 */

const USAGE = `Usage:
  tollgate serve [--config FILE]
  tollgate devnet [--json] [--port N] [--data-dir DIR]
  tollgate teams create NAME --daily-credits N [--credits-per-second N]
  tollgate teams list
  tollgate keys create --team NAME [--label TEXT] [--daily-cap N] [--networks a,b] [--expires ISO-DATE]
  tollgate keys list [--team NAME]
  tollgate keys revoke KEY_ID

Admin verbs read the store from --config FILE (default: $TOLLGATE_CONFIG or config/gateway.yaml),
or from --db FILE (a SQLite database file).`;

class UsageError extends Error {}

const OPTIONS = {
  config: { type: 'string' },
  db: { type: 'string' },
  json: { type: 'boolean' },
  port: { type: 'string' },
  'data-dir': { type: 'string' },
  'daily-credits': { type: 'string' },
  'credits-per-second': { type: 'string' },
  team: { type: 'string' },
  label: { type: 'string' },
  'daily-cap': { type: 'string' },
  networks: { type: 'string' },
  expires: { type: 'string' },
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

function storeConfigOf(values: Values): StoreConfig {
  if (values.db !== undefined) return { driver: 'sqlite', path: values.db };
  const path = configPath(values);
  if (!existsSync(path)) throw new UsageError(`no config file at ${path}: pass --config FILE or --db FILE`);
  return loadConfigFile(path).store;
}

async function withStore<T>(values: Values, run: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(storeConfigOf(values));
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

async function requireTeam(store: Store, name: string | undefined) {
  if (name === undefined) throw new UsageError('--team NAME is required');
  const team = await store.findTeam(name);
  if (team === null) throw new UsageError(`no team named "${name}"`);
  return team;
}

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

async function serve(values: Values): Promise<void> {
  const config = loadConfigFile(configPath(values));
  const gateway = await startGateway(config);
  const stop = (signal: NodeJS.Signals) => {
    gateway.logger.info({ signal }, 'stopping');
    void gateway.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  const [command, verb, ...rest] = positionals;
  if (values.help || command === undefined) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  switch (`${command} ${command === 'serve' || command === 'devnet' ? '' : (verb ?? '')}`.trim()) {
    case 'serve':
      return serve(values);
    case 'devnet': {
      const { runDevnet } = await import('./devnet/devnet.js');
      await runDevnet({
        json: values.json ?? false,
        port: wholeNumber(values.port, '--port') ?? 8080,
        dataDir: values['data-dir'] ?? 'data',
      });
      return;
    }
    case 'teams create': {
      const name = rest[0];
      if (name === undefined) throw new UsageError('teams create needs a NAME');
      const dailyCredits = wholeNumber(values['daily-credits'], '--daily-credits');
      if (dailyCredits === undefined) throw new UsageError('--daily-credits N is required');
      const creditsPerSecond = wholeNumber(values['credits-per-second'], '--credits-per-second') ?? null;
      return withStore(values, async (store) => print(await store.createTeam({ name, dailyCredits, creditsPerSecond })));
    }
    case 'teams list':
      return withStore(values, async (store) => print(await store.listTeams()));
    case 'keys create':
      return withStore(values, async (store) => {
        const team = await requireTeam(store, values.team);
        const expiresAt = values.expires === undefined ? null : Date.parse(values.expires);
        if (expiresAt !== null && Number.isNaN(expiresAt)) throw new UsageError(`--expires must be an ISO date, got "${values.expires}"`);
        const { key, secret } = await issueKey(store, {
          teamId: team.id,
          label: values.label ?? null,
          dailyCap: wholeNumber(values['daily-cap'], '--daily-cap') ?? null,
          allowedNetworks: values.networks === undefined ? null : values.networks.split(',').map((id) => id.trim()).filter(Boolean),
          expiresAt,
        });
        // The secret is shown this once; only its hash is stored.
        print({ ...key, secret });
      });
    case 'keys list':
      return withStore(values, async (store) => {
        const team = values.team === undefined ? undefined : await requireTeam(store, values.team);
        print(await store.listKeys(team === undefined ? {} : { teamId: team.id }));
      });
    case 'keys revoke':
      return withStore(values, async (store) => {
        const id = rest[0];
        if (id === undefined) throw new UsageError('keys revoke needs a KEY_ID');
        if (!(await store.revokeKey(id, Date.now()))) throw new UsageError(`no key with id "${id}"`);
        print({ id, revoked: true });
      });
    default:
      throw new UsageError(`unknown command "${positionals.join(' ')}"`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError || error instanceof ConfigError || error instanceof StoreConflictError) {
    process.stderr.write(`tollgate: ${error.message}\n`);
    if (error instanceof UsageError) process.stderr.write(`\n${USAGE}\n`);
    process.exit(2);
  }
  if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write(`tollgate: ${(error as Error).message}\n\n${USAGE}\n`);
    process.exit(2);
  }
  process.stderr.write(`tollgate: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
