// A process's CPU time and resident memory from /proc (Linux), for the bench's per-process
// figures; undefined elsewhere or once the process has exited.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Clock ticks per second of /proc/<pid>/stat CPU times. */
const CLOCK_TICKS = ((): number => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** User and system (kernel) CPU seconds a process has used so far. */
export function cpuTimes(pid: number | undefined): { user: number; system: number } | undefined {
  if (pid === undefined) return undefined;
  try {
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th overall.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { user: Number(fields[11]) / CLOCK_TICKS, system: Number(fields[12]) / CLOCK_TICKS };
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds a process has used so far. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  const times = cpuTimes(pid);
  return times === undefined ? undefined : times.user + times.system;
}

/**
 * Resident bytes of a process's `[heap]` mapping: the C allocator's main heap, where Node's
 * buffers of under 128 KiB (a socket read's chunk) live. Freed memory inside it stays resident
 * until what lies above it is freed too, so it shows what the RSS keeps after a burst that V8's
 * own figures no longer count.
 */
export function mallocHeapBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const smaps = readFileSync(`/proc/${pid}/smaps`, 'utf8');
    const start = smaps.search(/ \[heap\]\n/m);
    if (start < 0) return 0;
    const match = /^Rss:\s+(\d+)\s+kB/m.exec(smaps.slice(start));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Resident set size of a process, in bytes. */
export function rssBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}
