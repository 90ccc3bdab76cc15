// The default log destination (src/logging/line-writer.ts): lines are batched into few writes,
// yet every line arrives, in order, and a process that exits right after logging loses none.

import { execFileSync, spawn } from 'node:child_process';
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

  it('writes lines of any text and any length as their UTF-8 bytes, in order', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tollgate-lines-')), 'out.log');
    const fd = openSync(file, 'w');
    const writer = createLineWriter(fd);
    // Characters of one to four UTF-8 bytes and a lone surrogate; lengths from empty to past the
    // writer's 64 KiB buffer (a 30,000-character line of three-byte characters is 90,000 bytes).
    const pieces = ['a', 'é', '€', '😀', '\ud800', '"\\'];
    const lines: string[] = [];
    let seed = 7;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31);
    for (let index = 0; index < 2_000; index += 1) {
      const length = index % 97 === 0 ? 20_000 + (next() % 15_000) : next() % 400;
      let text = '';
      while (text.length < length) text += pieces[next() % pieces.length];
      lines.push(`{"n":${index},"text":"${text}"}\n`);
    }
    for (const line of lines) writer.write(line);
    await new Promise<void>((resolve, reject) => writer.flush((error) => (error === undefined ? resolve() : reject(error))));
    closeSync(fd);
    expect(readFileSync(file).equals(Buffer.from(lines.join('')))).toBe(true);
  });

  it('keeps what a full non-blocking pipe refuses and writes it, in order, once the reader reads', async () => {
    const writer = new URL('../dist/logging/line-writer.js', import.meta.url).href;
    // Standard output is a pipe the parent does not read until told "written": about 2 MiB of lines
    // cannot fit in it. Reading process.stdout makes the pipe non-blocking (libuv), so the writer
    // meets EAGAIN; with a blocking pipe the child would never say "written" and the test would time out.
    const script = `import { createLineWriter } from ${JSON.stringify(writer)};
      void process.stdout;
      const w = createLineWriter(1);
      for (let n = 0; n < 20000; n += 1) w.write('{"n":' + n + ',"pad":"' + 'é'.repeat(50) + '"}\\n');
      process.stderr.write('written\\n');
      process.stdin.resume();
      process.stdin.on('end', () => process.exit(0));`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stdout.pause();
    await new Promise<void>((resolve, reject) => {
      child.stderr.on('data', (data: Buffer) => (data.toString().includes('written') ? resolve() : undefined));
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before writing`)));
    });
    let output = '';
    child.stdout.setEncoding('utf8');
    await new Promise<void>((resolve) => {
      child.stdout.on('data', (text: string) => {
        output += text;
        if (output.endsWith('\n') && output.split('\n').length > 20_000) resolve();
      });
      child.stdout.resume();
    });
    child.stdin.end();
    const numbers = output.trim().split('\n').map((line) => (JSON.parse(line) as { n: number; pad: string }).n);
    expect(numbers).toEqual(Array.from({ length: 20_000 }, (_, n) => n));
    expect(output.trim().split('\n').every((line) => line.includes('é'.repeat(50)))).toBe(true);
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
