import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseConfig } from '../config/load.js';
import { startGateway, type RunningGateway } from '../gateway.js';
import { startWorkerGroup } from '../cluster/worker-group.js';
import { createLogger } from '../logging/logger.js';
import pino from 'pino';
import { issueKey } from '../admin/key-issuer.js';
import { issueTeamToken } from '../portal/team-token.js';
import { openStore, type Store } from '../store/index.js';
import { seedAnvil } from './anvil-seed.js';
import { startAnvil, type AnvilNode } from './anvil.js';
import { watchLauncher } from './launcher-watch.js';
import { startSampleDasThread, type SampleDasThread } from './sample-das/index.js';

/**
 * `tollgate devnet` (what `npm start` runs): a real anvil node seeded with blocks that carry
 * transactions, the sample DAS upstream, a SQLite store with a demo team and key, and a
 * gateway in front of both. Development only: `tollgate serve` never starts any of this.
 */

export interface DevnetOptions {
  json: boolean;
  port: number;
  dataDir: string;
  /** Gateway worker processes (`--workers`); 1, the default, serves from this process. */
  workers: number;
}

export const DEVNET_EVM_NETWORK = 'eth-devnet';
export const DEVNET_ASSET_NETWORK = 'das-devnet';
const DEMO_TEAM = 'demo';
const DEMO_DAILY_CREDITS = 10_000_000;

/** A demo key and a team token for the portal page, both new on each start. */
async function demoKey(store: Store): Promise<{ apiKey: string; teamToken: string }> {
  const team = (await store.findTeam(DEMO_TEAM)) ?? (await store.createTeam({ name: DEMO_TEAM, dailyCredits: DEMO_DAILY_CREDITS }));
  const { secret } = await issueKey(store, { teamId: team.id, label: 'devnet demo key' });
  const { secret: teamToken } = await issueTeamToken(store, team.id, 'devnet portal');
  return { apiKey: secret, teamToken };
}

export async function runDevnet(options: DevnetOptions): Promise<void> {
  const started: { anvil?: AnvilNode; das?: SampleDasThread; gateway?: Pick<RunningGateway, 'close' | 'rpcOrigin' | 'adminOrigin' | 'portalOrigin'> } = {};
  let stopping = false;
  const stop = async (exitCode: number) => {
    if (stopping) return;
    stopping = true;
    launcher.stop();
    await started.gateway?.close().catch(() => undefined);
    await started.das?.close().catch(() => undefined);
    await started.anvil?.stop().catch(() => undefined);
    process.exit(exitCode);
  };
  // `on`, not `once`: startAnvil's own signal hook kills anvil and re-raises the signal when it
  // is the only listener left, which with `once` it is by the time it runs, so the graceful
  // stop (drain, exit 0) never happened. A second signal while stopping exits at once (the
  // 'exit' hook in anvil.ts still kills the node).
  const onSignal = () => (stopping ? process.exit(1) : void stop(0));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Killed launcher (npm start under SIGKILL): stop at once, without the drain a signal gets.
  const launcher = watchLauncher(() => {
    process.stderr.write('the process that started the devnet is gone; stopping anvil and the gateway\n');
    void stop(0);
  });

  try {
    const anvil = await startAnvil();
    started.anvil = anvil;
    const seed = await seedAnvil(anvil.url);
    // On its own thread: a slow answer of the fixture never stalls the gateway (or its SIGTERM).
    const das = await startSampleDasThread();
    started.das = das;

    const adminToken = `devnet-${randomBytes(16).toString('hex')}`;
    const config = parseConfig(
      {
        server: { host: '127.0.0.1', port: options.port },
        // Admin listener next to the RPC port (8081 for the default 8080; any free port with --port 0).
        admin: { host: '127.0.0.1', port: options.port === 0 ? 0 : options.port + 1, token: adminToken },
        // The team portal next to the admin port (8082 for the default 8080).
        portal: { enabled: true, host: '127.0.0.1', port: options.port === 0 ? 0 : options.port + 2 },
        store: { driver: 'sqlite', path: join(options.dataDir, 'devnet.db') },
        networks: [
          {
            id: DEVNET_EVM_NETWORK,
            kind: 'evm',
            chainId: anvil.chainId,
            baseUrls: [`*/${DEVNET_EVM_NETWORK}`],
            // anvil serves WebSocket on its HTTP port: subscriptions over the gateway's /ws/v3/ endpoint.
            upstreams: [{ id: 'anvil', url: anvil.url, wsUrl: anvil.url.replace(/^http/, 'ws') }],
          },
          {
            id: DEVNET_ASSET_NETWORK,
            kind: 'asset',
            baseUrls: [`*/${DEVNET_ASSET_NETWORK}`],
            upstreams: [{ id: 'sample-das', url: das.url, params: 'named' }],
          },
        ],
      },
      process.env,
      'devnet config',
    );
    const store = await openStore(config.store);
    const { apiKey, teamToken } = await demoKey(store);
    await store.close();
    // Request logs go to stderr: stdout carries the ready message (or the one `--json` line).
    const logger = createLogger({ destination: pino.destination({ fd: 2, sync: false }) });
    const gateway = options.workers > 1 ? await startWorkerGroup(config, { workers: options.workers, logger, workerLogFd: 2 }) : await startGateway(config, { logger });
    started.gateway = gateway;

    const evmUrl = `${gateway.rpcOrigin}/${DEVNET_EVM_NETWORK}/v3/${apiKey}`;
    const assetUrl = `${gateway.rpcOrigin}/${DEVNET_ASSET_NETWORK}/v3/${apiKey}`;
    const evmWsUrl = `${gateway.rpcOrigin.replace(/^http/, 'ws')}/${DEVNET_EVM_NETWORK}/ws/v3/${apiKey}`;
    const collections = das.collections;
    if (options.json) {
      process.stdout.write(
        `${JSON.stringify({ evmUrl, evmWsUrl, assetUrl, apiKey, evmUpstreamUrl: anvil.url, assetUpstreamUrl: das.url, collections, adminUrl: gateway.adminOrigin, adminToken, portalUrl: gateway.portalOrigin, teamToken })}\n`,
      );
      return;
    }
    const blockHash = seed.blocksWithTransactions.at(-1) ?? seed.blockHashes.at(-1) ?? '';
    process.stdout.write(
      readyText({ evmUrl, evmWsUrl, assetUrl, apiKey, anvilUrl: anvil.url, dasUrl: das.url, adminOrigin: gateway.adminOrigin, adminToken, portalOrigin: gateway.portalOrigin ?? '', teamToken, blockHash, collection: collections[0] ?? '' }),
    );
  } catch (error) {
    process.stderr.write(`tollgate devnet: ${(error as Error).message}\n`);
    await stop(1);
  }
}

export interface ReadyTextInput {
  evmUrl: string;
  evmWsUrl: string;
  assetUrl: string;
  apiKey: string;
  anvilUrl: string;
  dasUrl: string;
  adminOrigin: string;
  adminToken: string;
  portalOrigin: string;
  teamToken: string;
  blockHash: string;
  collection: string;
}

/** What `tollgate devnet` prints when it is ready (without `--json`): URLs, curl lines and a viem snippet. */
export function readyText(input: ReadyTextInput): string {
  const { evmUrl, evmWsUrl, assetUrl, apiKey, anvilUrl, dasUrl, adminOrigin, adminToken, portalOrigin, teamToken, blockHash, collection } = input;
  return [
    '',
    'Tollgate devnet is running.',
    '',
    `  EVM network   ${evmUrl}`,
    `  EVM websocket ${evmWsUrl}   (also eth_subscribe: newHeads, logs, newPendingTransactions)`,
    `  DAS network   ${assetUrl}`,
    `  demo API key  ${apiKey}   (team "${DEMO_TEAM}", ${DEMO_DAILY_CREDITS.toLocaleString('en-US')} credits a day)`,
    `  upstreams     anvil ${anvilUrl}, sample DAS ${dasUrl}`,
    `  admin API     ${adminOrigin}   (Authorization: Bearer ${adminToken})`,
    `  team portal   ${portalOrigin}/   (sign in with the team token ${teamToken})`,
    '',
    'Every method of the catalogue is served (docs/methods.md); dev-node controls such as evm_mine',
    `are denied on the gateway: send those to anvil itself (${anvilUrl}).`,
    '',
    'Try:',
    '',
    `  curl -s -X POST -H 'content-type: application/json' '${evmUrl}' \\`,
    `    -d '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["${blockHash}",false]}'`,
    '',
    `  curl -s -X POST -H 'content-type: application/json' '${assetUrl}' \\`,
    `    -d '{"jsonrpc":"2.0","id":1,"method":"getAssetsByGroup","params":{"groupKey":"collection","groupValue":"${collection}","limit":2}}'`,
    '',
    `  curl -s -H 'authorization: Bearer ${adminToken}' '${adminOrigin}/v1/usage?team=${DEMO_TEAM}'`,
    '',
    'or, from a dapp (viem):',
    '',
    `  import { createPublicClient, http, webSocket } from 'viem';`,
    `  const client = createPublicClient({ transport: http('${evmUrl}') });`,
    `  console.log(await client.getBlockNumber(), await client.getBalance({ address: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266' }));`,
    `  createPublicClient({ transport: webSocket('${evmWsUrl}') }).watchBlocks({ onBlock: (block) => console.log(block.number) });`,
    '',
    'Ctrl-C stops everything.',
    '',
  ].join('\n');
}
