// Summarises a V8 .cpuprofile (from `node --cpu-prof`, or `npm run bench -- --profile`): where
// the CPU was when it was busy (idle time left out), by self time per area (tollgate module,
// package, node core, V8) and per function, and by inclusive time per function.
//
//   node --import tsx bench/profile-summary.ts <file.cpuprofile> [top=40] [--last SECONDS]
//
// `--last` keeps only the samples of the profile's last SECONDS: a gateway's profile covers its
// start and the bench's warm-up of every kind of call, and the rounds of one `--only` scenario are
// the end of it.

import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const lastAt = args.indexOf('--last');
const lastSeconds = lastAt === -1 ? undefined : Number(args.splice(lastAt, 2)[1]);
if (lastSeconds !== undefined && !(lastSeconds > 0)) throw new Error('--last takes a number of seconds above 0');
const [file, topArg] = args;
if (file === undefined) throw new Error('usage: profile-summary.ts <file.cpuprofile> [top] [--last SECONDS]');
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const top = Number(topArg ?? 40);
const profileDuration = profile.timeDeltas.reduce((sum, delta) => sum + delta, 0);
const keepFrom = lastSeconds === undefined ? 0 : profileDuration - lastSeconds * 1e6;

const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);

function label(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url === '' ? '' : ` ${url.replace(/^file:\/\/.*?\/(node_modules|dist|src)\//, '$1/')}:${lineNumber + 1}`;
  return `${functionName || '(anonymous)'}${where}`;
}

function area(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  if (url === '') return functionName.startsWith('(') ? functionName : '(native/V8)';
  if (url.startsWith('node:')) return 'node core';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (pkg !== undefined) return pkg;
  const own = /\/(?:dist|src)\/(.+)$/.exec(url)?.[1];
  return own === undefined ? url : `tollgate ${own}`;
}

const self = new Map<string, number>();
const areas = new Map<string, number>();
const inclusive = new Map<string, number>();
let busy = 0;
let idle = 0;
let elapsed = 0;
profile.samples.forEach((id, index) => {
  const us = profile.timeDeltas[index] ?? 0;
  elapsed += us;
  if (elapsed < keepFrom) return;
  const node = byId.get(id)!;
  if (node.callFrame.functionName === '(idle)') {
    idle += us;
    return;
  }
  busy += us;
  self.set(label(node), (self.get(label(node)) ?? 0) + us);
  areas.set(area(node), (areas.get(area(node)) ?? 0) + us);
  const seen = new Set<string>();
  for (let cursor: number | undefined = id; cursor !== undefined; cursor = parentOf.get(cursor)) {
    const name = label(byId.get(cursor)!);
    if (seen.has(name)) continue;
    seen.add(name);
    inclusive.set(name, (inclusive.get(name) ?? 0) + us);
  }
});

const pct = (us: number): string => `${((100 * us) / busy).toFixed(1).padStart(5)}%`;
const print = (title: string, map: Map<string, number>, count: number): void => {
  console.log(`\n${title}`);
  for (const [name, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, count)) console.log(`${pct(us)}  ${name}`);
};
console.log(`busy ${(busy / 1e6).toFixed(2)} s, idle ${(idle / 1e6).toFixed(2)} s; percentages are of busy time`);
print('self time by area:', areas, 25);
print(`self time by function (top ${top}):`, self, top);
print(`inclusive time by function (top ${top}):`, inclusive, top);
