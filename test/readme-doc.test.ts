// The README and docs/architecture.md stay in step with the code: the README's Commands are
// what `tollgate --help` prints, its Layout names every folder of src/, and every source file
// docs/architecture.md names exists.

import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { CLI, ROOT, ensureBuilt } from './helpers/build.js';

const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const ARCHITECTURE = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8');

/** The text of a `## heading` section, up to the next `## `. */
function section(text: string, heading: string): string {
  const start = text.indexOf(`\n## ${heading}\n`);
  expect(start, heading).toBeGreaterThanOrEqual(0);
  const rest = text.slice(start + heading.length + 5);
  const next = rest.indexOf('\n## ');
  return next < 0 ? rest : rest.slice(0, next);
}

describe('README', () => {
  beforeAll(ensureBuilt);

  it('lists every command with every flag exactly as `tollgate --help` prints them', () => {
    const help = execFileSync(process.execPath, [CLI, '--help'], { encoding: 'utf8' });
    const usage = help
      .split('\n')
      .filter((line) => line.startsWith('  '))
      .map((line) => line.slice(2));
    expect(usage.length).toBeGreaterThan(10);
    const commands = section(README, 'Commands');
    const block = /```\n([\s\S]*?)```/.exec(commands)?.[1]?.trimEnd().split('\n');
    expect(block).toEqual(usage);
  });

  it('names every folder of src/ in its Layout', () => {
    const layout = README.slice(README.indexOf('\nLayout'), README.indexOf('\nTests are in `test/`'));
    const folders = readdirSync(join(ROOT, 'src')).filter((name) => statSync(join(ROOT, 'src', name)).isDirectory());
    expect(folders.length).toBeGreaterThan(10);
    const missing = folders.filter((folder) => !layout.includes(`\`src/${folder}\``));
    expect(missing).toEqual([]);
  });
});

describe('docs/architecture.md', () => {
  it('names only source files that exist', () => {
    const named = [...new Set([...ARCHITECTURE.matchAll(/\b([a-z-]+(?:\/[a-z-]+)*\/[a-z-]+\.ts)\b/g)].map((match) => match[1]!))];
    expect(named.length).toBeGreaterThan(15);
    const absent = named.filter((file) => !existsSync(join(ROOT, 'src', file)));
    expect(absent).toEqual([]);
  });

  it('is linked from the README', () => {
    expect(README).toContain('(docs/architecture.md)');
  });
});
