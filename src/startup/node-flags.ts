/**
 * The V8 young generation the gateway runs with. Each large answer is held from its first byte
 * until its last is written (it must be validated before any of it goes out), and with Node's
 * default semi-spaces (16 MiB) what a busy gateway holds outlives the young generation's
 * collections and is promoted. Measured with 167 KiB `getAssetsByGroup` pages after a gateway had
 * served bursts of 1.6 MiB ones with idle gaps between them: V8 then ran a full (mark-compact)
 * collection every 60 ms or so, 295 in 15 s, and the CPU per request doubled (1,089 µs against
 * 465 µs); with 64 MiB semi-spaces it ran 17 in the same load, and the peak RSS did not grow.
 *
 * V8 reads the size only when the process starts, so it is a Node flag: the `tollgate` command
 * (dist/cli.js) carries it in its first line (`#!/usr/bin/env -S node --max-semi-space-size=64`),
 * `npm start` passes it, and workers of `serve --workers` inherit it. `tollgate serve` started
 * another way without it says so in its log at start.
 */
export const SEMI_SPACE_MIB = 64;

/** The flags to start Node with to run the gateway (bench/ and the tests start it so). */
export const GATEWAY_NODE_FLAGS: readonly string[] = [`--max-semi-space-size=${SEMI_SPACE_MIB}`];

const SEMI_SPACE_FLAG = /^--max[-_]semi[-_]space[-_]size(?:=(\d+))?$/;

/**
 * The semi-space size (MiB) this process was started with, if a flag set it: `NODE_OPTIONS`
 * first, then the command line's own flags, the last one winning as in Node. undefined: Node's default.
 */
export function semiSpaceMib(execArgv: readonly string[] = process.execArgv, nodeOptions: string = process.env['NODE_OPTIONS'] ?? ''): number | undefined {
  const flags = [...nodeOptions.split(/\s+/).filter((flag) => flag !== ''), ...execArgv];
  let size: number | undefined;
  flags.forEach((flag, index) => {
    const match = SEMI_SPACE_FLAG.exec(flag);
    if (match === null) return;
    const value = match[1] ?? flags[index + 1];
    if (value !== undefined && /^\d+$/.test(value)) size = Number(value);
  });
  return size;
}
