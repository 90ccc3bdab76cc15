// The gateway's Node flags (src/startup/node-flags.ts): the `tollgate` command starts Node with a
// young generation large enough that answers held until validated are not promoted and collected
// by full collections, and `tollgate serve` started without it says so at start.

import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GATEWAY_NODE_FLAGS, SEMI_SPACE_MIB, semiSpaceMib } from '../src/startup/node-flags.js';
import { CLI, ensureBuilt } from './helpers/build.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned, spawnGateway, type GatewayProcess } from './helpers/spawn-gateway.js';

describe('semiSpaceMib', () => {
  it('reads the flag from NODE_OPTIONS and the command line, the last one winning, in either spelling', () => {
    expect(semiSpaceMib([], '')).toBeUndefined();
    expect(semiSpaceMib(['--max-old-space-size=512'], '--inspect')).toBeUndefined();
    expect(semiSpaceMib(['--max-semi-space-size=64'], '')).toBe(64);
    expect(semiSpaceMib(['--max_semi_space_size', '32'], '')).toBe(32);
    expect(semiSpaceMib([], '--max-semi-space-size=16 --no-warnings')).toBe(16);
    // The command line comes after NODE_OPTIONS, so it wins.
    expect(semiSpaceMib(['--max-semi-space-size=64'], '--max-semi-space-size=8')).toBe(64);
    expect(semiSpaceMib(['--max-semi-space-size=x'], '')).toBeUndefined();
  });

  it('is what the gateway flags set', () => {
    expect(semiSpaceMib(GATEWAY_NODE_FLAGS, '')).toBe(SEMI_SPACE_MIB);
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

  const youngGenerationLine = (process: GatewayProcess) => process.waitForLine((line) => String(line.msg).startsWith('V8 young generation'), 'the young generation line');

  it('run as the tollgate command, starts Node with the young generation its first line names', async () => {
    gateway = await spawnGateway(configFile, { asCommand: true, env: { ...process.env, NODE_OPTIONS: '' } });
    const line = await youngGenerationLine(gateway);
    expect(line, gateway.output()).toMatchObject({ level: 'info', maxSemiSpaceMiB: SEMI_SPACE_MIB });
  });

  it('started by `node dist/cli.js serve` alone, says at start that the flag is missing and which one to pass', async () => {
    gateway = await spawnGateway(configFile, { nodeDefaults: true, env: { ...process.env, NODE_OPTIONS: '' } });
    const line = await youngGenerationLine(gateway);
    expect(line, gateway.output()).toMatchObject({ level: 'warn', maxSemiSpaceMiB: 'default', recommended: GATEWAY_NODE_FLAGS.join(' ') });
  });
});
