// The default log destination (src/logging/line-writer.ts): lines are batched into few writes,
// yet every line arrives, in order, and a process that exits right after logging loses none.

import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLineWriter } from '../src/logging/line-writer.js';

describe('line writer', () => {
  it('writes every line in order; flush calls back once all are written', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tollgate-lines-')), 'out.log');
    const fd = openSync(file, 'w');
    const writer = createLineWriter(fd);
    const lines = Array.from({ length: 5_000 }, (_, index) => `{"n":${index},"pad":"${'x'.repeat(index % 300)}"}\n`);
    // In bursts, as requests finish, crossing the size that forces a write before the timer.
    for (let index = 0; index < lines.length; index += 1) {
      writer.write(lines[index]!);
      if (index % 500 === 499) await new Promise((resolve) => setImmediate(resolve));
    }
    await new Promise<void>((resolve, reject) => writer.flush((error) => (error === undefined ? resolve() : reject(error))));
    closeSync(fd);
    expect(readFileSync(file, 'utf8')).toBe(lines.join(''));
  });

  it('writes what is pending when the process exits at once after logging', () => {
    const logger = new URL('../dist/logging/logger.js', import.meta.url).href;
    const script = `import { createLogger } from ${JSON.stringify(logger)};
      const log = createLogger({ level: 'info' });
      for (let n = 0; n < 1000; n += 1) log.info({ n }, 'line');
      process.exit(0);`;
    const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    const numbers = output.trim().split('\n').map((line) => (JSON.parse(line) as { n: number }).n);
    expect(numbers).toEqual(Array.from({ length: 1000 }, (_, n) => n));
  });
});
