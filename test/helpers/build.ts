// The built CLI (`dist/cli.js`) that process-level tests spawn. `npm test` builds first; a bare
// `vitest run` of one file builds here when dist/ is missing or older than src/.

import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { until } from './until.js';

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

/**
 * Builds dist/ when it is missing or older than src/. Test files run in parallel workers; a
 * directory lock keeps two of them from writing dist/ at once (a stale lock of a killed run is
 * broken after 3 minutes). tsc emits even when some file has a type error: the typecheck is
 * another job, only a missing CLI is fatal here.
 */
export async function ensureBuilt(): Promise<void> {
  if (distIsFresh()) return;
  const lock = join(tmpdir(), 'tollgate-dist-build.lock');
  const takeLock = (): boolean => {
    try {
      mkdirSync(lock);
      return true;
    } catch {
      try {
        if (Date.now() - statSync(lock).mtimeMs > 180_000) rmSync(lock, { recursive: true, force: true });
      } catch {
        // released meanwhile
      }
      return false;
    }
  };
  let locked = false;
  try {
    // Another worker holding the lock is building dist/: once it lets go, dist/ is looked at again.
    await until(() => (locked = takeLock()), 'the dist/ build lock (another test worker is building)', 170_000);
  } catch {
    // Still locked after all that time: a dist/cli.js that exists is used as it is (below).
  }
  if (locked) {
    try {
      if (!distIsFresh()) spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', ROOT], { cwd: ROOT, encoding: 'utf8' });
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build`');
}
