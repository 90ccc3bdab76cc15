// Run as its own process: opens a store, reserves credits, and exits without settling or
// closing — a gateway process that died mid-request, as far as the ledger can tell.
// Usage: node --import tsx test/helpers/reserve-and-exit.ts '<json {storeConfig, op}>'

import { openStore } from '../../src/store/index.js';
import type { StoreConfig } from '../../src/config/schema.js';
import type { LedgerOp } from '../../src/store/index.js';

const { storeConfig, op } = JSON.parse(process.argv[2] ?? '{}') as { storeConfig: StoreConfig; op: LedgerOp };
const store = await openStore(storeConfig);
const [result] = await store.applyLedger([op]);
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
