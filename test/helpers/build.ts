// The built CLI (`dist/cli.js`) that process-level tests spawn. `npm test` builds first; a bare
// `vitest run` of one file builds here when dist/ is missing or older than src/.

import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = join(ROOT, 'dist', 'cli.js');

function newestSourceMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSourceMtime(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

function distIsFresh(): boolean {
  return existsSync(CLI) && statSync(CLI).mtimeMs >= newestSourceMtime(join(ROOT, 'src'));
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Builds dist/ when it is missing or older than src/. Test files run in parallel workers; a
 * directory lock keeps two of them from writing dist/ at once (a stale lock of a killed run is
 * broken after 3 minutes). tsc emits even when some file has a type error: the typecheck is
 * another job, only a missing CLI is fatal here.
 */
export async function ensureBuilt(): Promise<void> {
  const lock = join(tmpdir(), 'tollgate-dist-build.lock');
  const giveUpAt = Date.now() + 170_000;
  while (!distIsFresh() && Date.now() < giveUpAt) {
    try {
      mkdirSync(lock);
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > 180_000) rmSync(lock, { recursive: true, force: true });
      } catch {
        // released meanwhile
      }
      await sleep(250);
      continue;
    }
    try {
      if (!distIsFresh()) spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', ROOT], { cwd: ROOT, encoding: 'utf8' });
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
    break; // one build is enough, even if src/ changed again meanwhile
  }
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build`');
}
