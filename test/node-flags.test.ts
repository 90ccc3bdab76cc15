// The gateway's Node flags (src/startup/node-flags.ts): the `tollgate` command starts Node with
// heap settings under which answers held until validated do not set off full collection after
// full collection, and `tollgate serve` started without them says so at start.

import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GATEWAY_NODE_FLAGS, missingGatewayFlags } from '../src/startup/node-flags.js';
import { CLI, ensureBuilt, ROOT } from './helpers/build.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned, spawnGateway, type GatewayProcess } from './helpers/spawn-gateway.js';

describe('missingGatewayFlags', () => {
  it('finds the flags in NODE_OPTIONS or on the command line, by name whatever their value, in either spelling', () => {
    expect(missingGatewayFlags([], '')).toEqual(GATEWAY_NODE_FLAGS);
    expect(missingGatewayFlags(['--max-old-space-size=512'], '--inspect')).toEqual(GATEWAY_NODE_FLAGS);
    expect(missingGatewayFlags([...GATEWAY_NODE_FLAGS], '')).toEqual([]);
    expect(missingGatewayFlags(['--max_semi_space_size=32'], '--initial-old-space-size=512 --no-warnings')).toEqual([]);
    expect(missingGatewayFlags(['--max-semi-space-size=64'], '')).toEqual(['--initial-old-space-size=128']);
  });

  it('finds none missing from the command npm start runs', () => {
    const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(missingGatewayFlags(scripts['start']!.split(/\s+/), '')).toEqual([]);
  });
});

describe('tollgate serve', () => {
  let upstream: ScriptedUpstream;
  let dir: string;
  let configFile: string;
  let gateway: GatewayProcess | undefined;

  beforeAll(async () => {
    await ensureBuilt();
    // npm marks a package's `bin` executable when it installs it; a build from source is not.
    chmodSync(CLI, 0o755);
    upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
    dir = mkdtempSync(join(tmpdir(), 'tollgate-node-flags-'));
    configFile = join(dir, 'gateway.yaml');
    const config = {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      store: { driver: 'sqlite', path: join(dir, 'gateway.db') },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, baseUrls: ['*/evm'], upstreams: [{ id: 'u', url: upstream.url }] }],
    };
    writeFileSync(configFile, JSON.stringify(config)); // JSON is YAML
  });
  afterEach(async () => {
    await gateway?.stop();
    gateway = undefined;
    await killSpawned();
  });
  afterAll(async () => {
    await upstream?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  const heapSettingsLine = (process: GatewayProcess) => process.waitForLine((line) => String(line.msg).startsWith('V8 heap settings'), 'the heap settings line');

  it('run as the tollgate command, starts Node with the heap settings its first line names', async () => {
    gateway = await spawnGateway(configFile, { asCommand: true, env: { ...process.env, NODE_OPTIONS: '' } });
    const line = await heapSettingsLine(gateway);
    expect(line, gateway.output()).toMatchObject({ level: 'info', nodeFlags: GATEWAY_NODE_FLAGS });
  });

  it('started by `node dist/cli.js serve` alone, says at start which flags are missing', async () => {
    gateway = await spawnGateway(configFile, { nodeDefaults: true, env: { ...process.env, NODE_OPTIONS: '' } });
    const line = await heapSettingsLine(gateway);
    expect(line, gateway.output()).toMatchObject({ level: 'warn', missing: GATEWAY_NODE_FLAGS, recommended: GATEWAY_NODE_FLAGS.join(' ') });
  });
});
