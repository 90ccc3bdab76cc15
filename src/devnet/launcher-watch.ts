import { readFileSync } from 'node:fs';

/**
 * Notices when whatever started the devnet is gone, so a supervisor, a CI step or a closed
 * terminal that kills `npm start` with SIGKILL (which cannot be caught or forwarded) does not
 * leave anvil and the gateway running. Under `npm start` the chain is npm → `sh -c` → node,
 * and killing npm leaves `sh` alive as our parent, so the launcher watched is npm itself: the
 * parent's parent when an npm script started us (npm sets `npm_lifecycle_event`), else the
 * parent. Checked by polling: Node has no parent-death signal (prctl PR_SET_PDEATHSIG).
 */

/** The parent process id of `pid` (Linux `/proc`), or undefined where that cannot be read. */
function parentOf(pid: number): number | undefined {
  try {
    // `/proc/<pid>/stat`: "pid (comm) state ppid …"; comm may hold spaces and parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return Number.isInteger(ppid) && ppid > 0 ? ppid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, we may just not signal it.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export interface LauncherWatch {
  /** The processes watched (the parent, and npm when started by an npm script). */
  readonly watched: readonly number[];
  stop(): void;
}

/** Calls `onGone` once, within `intervalMs`, after a watched launcher process has exited. */
export function watchLauncher(onGone: (pid: number) => void, intervalMs = 250): LauncherWatch {
  const parent = process.ppid;
  const watched = [parent];
  if (process.env.npm_lifecycle_event !== undefined) {
    const npm = parentOf(parent);
    // Never pid 1: an init or container entrypoint is not a launcher that "went away".
    if (npm !== undefined && npm !== 1) watched.push(npm);
  }
  const timer = setInterval(() => {
    // Our own parent changing means it died and we were re-parented (its pid may be reused later).
    const gone = process.ppid !== parent ? parent : watched.find((pid) => !isAlive(pid));
    if (gone === undefined) return;
    clearInterval(timer);
    onGone(gone);
  }, intervalMs);
  timer.unref();
  return { watched, stop: () => clearInterval(timer) };
}
