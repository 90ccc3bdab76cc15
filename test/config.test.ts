// The config file contract (docs/configuration.md): one zod schema, `${ENV}` expansion, unknown
// keys rejected with their path named, defaults applied, the result frozen. The commented example
// in config/ must load.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfigFile, parseConfig } from '../src/config/load.js';
import { resolveWorkerCount } from '../src/cluster/worker-group.js';
import { availableParallelism } from 'node:os';

const EXAMPLE = join(process.cwd(), 'config', 'gateway.example.yaml');

/** Every `${NAME}` in the example's values (its comments mention `${NAME}` too; those do not count). */
function placeholdersOf(value: unknown): string[] {
  if (typeof value === 'string') return [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((match) => match[1]!);
  if (value !== null && typeof value === 'object') return Object.values(value).flatMap(placeholdersOf);
  return [];
}
const PLACEHOLDERS = [...new Set(placeholdersOf(parseYaml(readFileSync(EXAMPLE, 'utf8'))))];
/** A distinct value per placeholder, so the test can see where each one landed. */
const EXAMPLE_ENV: NodeJS.ProcessEnv = Object.fromEntries(PLACEHOLDERS.map((name) => [name, `value-of-${name.toLowerCase()}`]));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tollgate-config-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function yamlFile(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

/** The smallest valid config, to mutate one field at a time. */
function minimal(): Record<string, unknown> {
  return {
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'a', url: 'http://127.0.0.1:8545' }] }],
  };
}

function configError(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('config/gateway.example.yaml', () => {
  it('names its placeholders (the test supplies each one)', () => {
    expect(PLACEHOLDERS.length).toBeGreaterThan(0);
    expect(PLACEHOLDERS).toEqual(expect.arrayContaining(['ALCHEMY_API_KEY', 'INFURA_API_KEY', 'HELIUS_API_KEY', 'DAS_NODE_TOKEN']));
  });

  it('loads, validates and expands ${ENV} placeholders', () => {
    const config = loadConfigFile(EXAMPLE, EXAMPLE_ENV);
    expect(config.networks.map((n) => n.id)).toEqual(['eth-mainnet', 'solana-mainnet']);
    const eth = config.networks[0]!;
    expect(eth).toMatchObject({ kind: 'evm', chainId: 1 });
    expect(eth.upstreams[0]!.url).toBe('https://eth-mainnet.g.alchemy.com/v2/value-of-alchemy_api_key');
    const serialised = JSON.stringify(config);
    for (const name of PLACEHOLDERS) {
      expect(serialised).toContain(`value-of-${name.toLowerCase()}`);
      expect(serialised).not.toContain(`\${${name}}`);
    }
    const solana = config.networks[1]!;
    expect(solana.kind).toBe('asset');
    expect(solana.upstreams.map((u) => u.params)).toEqual(['named', 'positional']);
  });

  it('is deeply frozen: mutation throws (ESM is strict mode)', () => {
    const config = loadConfigFile(EXAMPLE, EXAMPLE_ENV);
    expect(Object.isFrozen(config)).toBe(true);
    expect(() => {
      (config.server as { port: number }).port = 1;
    }).toThrow(TypeError);
    expect(() => {
      (config.networks as unknown as unknown[]).push({});
    }).toThrow(TypeError);
    expect(() => {
      (config.networks[0]!.upstreams[0] as { timeoutMs: number }).timeoutMs = 1;
    }).toThrow(TypeError);
    expect(() => {
      (config.networks[0]!.methods as Record<string, number>).eth_blockNumber = 0;
    }).toThrow(TypeError);
    expect(config.server.port).toBe(8080);
  });

  it('a missing env var is an error naming the variable and the path', () => {
    const env = { ...EXAMPLE_ENV };
    delete env.ALCHEMY_API_KEY;
    const message = configError(() => loadConfigFile(EXAMPLE, env));
    expect(message).toContain('ALCHEMY_API_KEY');
    expect(message).toContain('networks.0.upstreams.0.url');
    expect(message).toContain(EXAMPLE);
    // Only the missing one is reported.
    expect(message).not.toContain('INFURA_API_KEY');
  });

  it('an unreadable file is a ConfigError naming the file', () => {
    expect(configError(() => loadConfigFile(join(dir, 'does-not-exist.yaml'), {}))).toContain('does-not-exist.yaml');
  });
});

describe('schema rules', () => {
  it('invalid YAML is a ConfigError naming the file', async () => {
    const path = await yamlFile('broken.yaml', 'networks: [\n  - id: x\n');
    const message = configError(() => loadConfigFile(path, {}));
    expect(message).toContain(path);
  });

  it('an unknown top-level key is an error naming it', async () => {
    const path = await yamlFile(
      'unknown-top.yaml',
      'timeout: 5\nnetworks:\n  - id: eth\n    kind: evm\n    chainId: 1\n    baseUrls: ["*/eth"]\n    upstreams:\n      - id: a\n        url: http://127.0.0.1:8545\n',
    );
    const message = configError(() => loadConfigFile(path, {}));
    expect(message).toMatch(/(^|\s)timeout: unknown key/m);
  });

  it('an unknown nested key is an error naming its full path', async () => {
    const path = await yamlFile(
      'unknown-nested.yaml',
      'networks:\n  - id: eth\n    kind: evm\n    chainId: 1\n    baseUrls: ["*/eth"]\n    upstreams:\n      - id: a\n        url: http://127.0.0.1:8545\n        timeout: 4000\n',
    );
    expect(configError(() => loadConfigFile(path, {}))).toContain('networks.0.upstreams.0.timeout: unknown key');

    const server = minimal();
    server.server = { maxBodyByte: 10 };
    expect(configError(() => parseConfig(server, {}))).toContain('server.maxBodyByte: unknown key');

    const auth = minimal();
    auth.auth = { keyCacheTTL: 10 };
    expect(configError(() => parseConfig(auth, {}))).toContain('auth.keyCacheTTL: unknown key');
  });

  it('duplicate network ids are rejected', () => {
    const config = minimal();
    const [network] = config.networks as Array<Record<string, unknown>>;
    config.networks = [network, { ...network, baseUrls: ['*/eth2'] }];
    const message = configError(() => parseConfig(config, {}));
    expect(message).toContain('networks.1.id');
    expect(message).toContain('duplicate network id "eth"');
  });

  it('an EVM network without chainId is rejected; an asset network needs none', () => {
    const config = minimal();
    const [network] = config.networks as Array<Record<string, unknown>>;
    delete network!.chainId;
    const message = configError(() => parseConfig(config, {}));
    expect(message).toContain('networks.0.chainId');
    expect(message).toContain('chainId');

    const asset = { networks: [{ id: 'das', kind: 'asset', baseUrls: ['*/das'], upstreams: [{ id: 'a', url: 'http://127.0.0.1:9' }] }] };
    expect(parseConfig(asset, {}).networks[0]!.chainId).toBeUndefined();
  });

  it('requestTimeoutMs is bounded: at most 5 minutes, and shorter than credits.staleReservationMs', () => {
    const config = minimal();
    const [network] = config.networks as Array<Record<string, unknown>>;
    network!.requestTimeoutMs = 300_001;
    expect(configError(() => parseConfig(config, {}))).toContain('networks.0.requestTimeoutMs');
    network!.requestTimeoutMs = 300_000;
    expect(parseConfig(config, {}).networks[0]!.requestTimeoutMs).toBe(300_000);
    config.credits = { staleReservationMs: 300_000 };
    const message = configError(() => parseConfig(config, {}));
    expect(message).toContain('networks.0.requestTimeoutMs');
    expect(message).toContain('credits.staleReservationMs');
  });

  it('no networks at all is rejected', () => {
    expect(configError(() => parseConfig({}, {}))).toContain('networks');
  });

  it('wrong types name their path', () => {
    const config = minimal();
    config.server = { maxBatchItems: 'many' };
    expect(configError(() => parseConfig(config, {}))).toContain('server.maxBatchItems');
  });

  it('defaults are applied', () => {
    const config = parseConfig(minimal(), {});
    expect(config.server.maxBodyBytes).toBe(1_048_576);
    expect(config.server.maxBatchItems).toBe(100);
    expect(config.server.port).toBe(8080);
    expect(config.auth.keyCacheTtlMs).toBe(5_000);
    expect(config.store).toEqual({ driver: 'sqlite', path: './data/tollgate.db' });
    const network = config.networks[0]!;
    expect(network.requestTimeoutMs).toBe(10_000);
    expect(network.methods).toEqual({});
    expect(network.upstreams[0]).toMatchObject({ params: 'named', timeoutMs: 5_000, headers: {} });
    expect(Object.isFrozen(network.upstreams[0])).toBe(true);
  });

  it('server.workers is a count or auto (the cores available), default 1', () => {
    expect(parseConfig(minimal(), {}).server.workers).toBe(1);
    for (const workers of [2, 'auto'] as const) {
      const config = minimal();
      config.server = { workers };
      expect(parseConfig(config, {}).server.workers).toBe(workers);
    }
    expect(resolveWorkerCount('auto')).toBe(availableParallelism());
    expect(resolveWorkerCount(3)).toBe(3);
    for (const workers of [0, 2.5, 'all']) {
      const config = minimal();
      config.server = { workers };
      expect(configError(() => parseConfig(config, {}))).toContain('server.workers');
    }
  });

  it('store.driver redis takes exactly one of url and cluster; a cluster key prefix has no braces', () => {
    const withStore = (store: Record<string, unknown>) => ({ ...minimal(), store: { driver: 'redis', ...store } });
    const seeds = ['redis://10.0.0.1:6379', 'redis://10.0.0.2:6379'];
    expect(parseConfig(withStore({ cluster: seeds, waitReplicas: 1 }), {}).store).toMatchObject({ driver: 'redis', cluster: seeds, waitReplicas: 1, keyPrefix: 'tollgate:' });
    expect(parseConfig(withStore({ url: 'redis://10.0.0.1:6379' }), {}).store).toMatchObject({ url: 'redis://10.0.0.1:6379' });
    expect(configError(() => parseConfig(withStore({ url: 'redis://a:1', cluster: seeds }), {}))).toContain('exactly one of url');
    expect(configError(() => parseConfig(withStore({}), {}))).toContain('exactly one of url');
    expect(configError(() => parseConfig(withStore({ cluster: [] }), {}))).toContain('store.cluster');
    expect(configError(() => parseConfig(withStore({ cluster: ['http://10.0.0.1:6379'] }), {}))).toContain('store.cluster.0');
    expect(configError(() => parseConfig(withStore({ cluster: seeds, keyPrefix: 'a{b}:' }), {}))).toContain('store.keyPrefix');
    expect(configError(() => parseConfig(withStore({ cluster: seeds, waitReplicas: -1 }), {}))).toContain('store.waitReplicas');
  });

  it('cache.shared takes exactly one of url and cluster', () => {
    const withShared = (shared: Record<string, unknown>) => ({ ...minimal(), cache: { shared } });
    const seeds = ['redis://10.0.0.1:6379', 'redis://10.0.0.2:6379'];
    expect(parseConfig(withShared({ cluster: seeds }), {}).cache.shared).toMatchObject({ cluster: seeds, ttlSeconds: 86_400 });
    expect(parseConfig(withShared({ url: 'redis://10.0.0.1:6379' }), {}).cache.shared).toMatchObject({ url: 'redis://10.0.0.1:6379' });
    expect(configError(() => parseConfig(withShared({ url: 'redis://a:1', cluster: seeds }), {}))).toContain('exactly one of url');
    expect(configError(() => parseConfig(withShared({}), {}))).toContain('exactly one of url');
    expect(configError(() => parseConfig(withShared({ cluster: ['http://10.0.0.1:6379'] }), {}))).toContain('cache.shared.cluster.0');
  });
});
