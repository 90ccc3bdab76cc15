/**
 * The V8 heap settings the gateway runs with. Each large answer is held from its first byte until
 * its last is written (it must be validated before any of it goes out), and V8 counts the memory
 * of those buffers against the old generation's limit. At Node's defaults, once a gateway has
 * been idle for a while (V8 then shrinks that limit to just above what is live), every few MiB
 * of answers start a full mark-compact collection. Measured (docs/benchmarks.md, "Large answers
 * in parts, and the young generation"): the bench's `getAssetsByGroup` rows ran about seven full
 * collections a second, and at limit 100 the gateway used 934–1,005 µs of CPU per request; with
 * `--initial-old-space-size=128` (the limit never set below 128 MiB) and `--max-semi-space-size=64`
 * (a young generation that what a request holds rarely outlives), 438 µs, at 0.87× the streaming
 * proxy's requests per second. The peak RSS of those runs was 20–100 MiB higher.
 *
 * The young generation was later halved, to 32 MiB semi-spaces: under steady small requests it
 * grows to its largest size and stays there, and two 64 MiB semi-spaces were 128 MiB of the
 * gateway's RSS. Once the old generation's floor was set, short bench invocations showed no
 * loss from the smaller size in the page and hit rows (docs/benchmarks.md, "Where the RSS after
 * the run goes").
 *
 * The same limit leaves a burst's buffers unfreed for as long as small requests take to fill it,
 * so `--expose-gc` lets the gateway ask for one full collection once a burst is over
 * (src/startup/heap-collection.ts).
 *
 * V8 reads these only when the process starts, so they are Node flags: the `tollgate` command
 * (dist/cli.js) carries them in its first line, `npm start` passes them, and workers of
 * `serve --workers` inherit them, as they do {@link GATEWAY_ENVIRONMENT}. `tollgate serve` started
 * another way without them says so. That first line must stay within 127 characters: Linux
 * kernels before 5.1 (RHEL 8's, say) cut a longer one, and the flag cut with it would stop Node
 * at start. Setting a collector flag at run time is no way round it: V8 aborted at its next
 * collection after `--single-threaded-gc` was set so (docs/benchmarks.md, "Node flags tried in
 * pairs").
 */
export const GATEWAY_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=32', '--initial-old-space-size=128', '--expose-gc'];

/**
 * The C allocator's setting the gateway runs with, an environment variable because glibc reads it
 * only when the process starts (other C libraries ignore it).
 *
 * Node allocates a buffer's memory with `malloc`. glibc maps a large allocation (128 KiB or more
 * at first) as memory of its own, which `free` gives back to the system at once; but once such a
 * mapping has been freed, glibc raises that threshold to the freed size, and from then on
 * allocations of that size come from its heap, which gives memory back only from its top. The
 * bench's rows fit that: the answer buffer pool's 2 MiB buffers mapped until the first burst's
 * were dropped and taken from the heap after it, so a later burst's stayed resident after they
 * were dropped, under whatever lay above them. In the bench's runs without this setting the heap
 * held 128–196 MiB after the 1.6 MiB pages, of which V8 counted almost none as live; in the first
 * full bench with it, 44–98 MiB (docs/benchmarks.md, "Where the RSS after the run goes").
 * A fixed threshold (setting it turns the raising off) keeps every allocation of 1 MiB or more
 * mapped and given back when freed: the pool's buffers, which it keeps while answers come, so
 * they are mapped once per burst, not once per answer. A socket read's chunks (64 KiB at most)
 * stay in the heap.
 */
export const GATEWAY_ENVIRONMENT: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: String(1024 * 1024) };

/** {@link GATEWAY_ENVIRONMENT} as a shell writes it before a command: `NAME=value ...`. */
export const GATEWAY_ENVIRONMENT_ASSIGNMENTS = Object.entries(GATEWAY_ENVIRONMENT)
  .map(([name, value]) => `${name}=${value}`)
  .join(' ');

/** The names in {@link GATEWAY_ENVIRONMENT} that this process's environment does not set (to any value). */
export function missingGatewayEnvironment(environment: NodeJS.ProcessEnv = process.env): string[] {
  return Object.keys(GATEWAY_ENVIRONMENT).filter((name) => environment[name] === undefined);
}

/** A flag's name in one spelling (Node takes `_` for `-` in V8 flags). */
const flagName = (flag: string): string => flag.replace(/^--/, '').split('=')[0]!.replaceAll('_', '-');

/**
 * The gateway's flags (by name, whatever their value) that this process was not started with,
 * neither on its command line nor in `NODE_OPTIONS`.
 */
export function missingGatewayFlags(execArgv: readonly string[] = process.execArgv, nodeOptions: string = process.env['NODE_OPTIONS'] ?? ''): string[] {
  const given = new Set([...nodeOptions.split(/\s+/), ...execArgv].filter((flag) => flag.startsWith('--')).map(flagName));
  return GATEWAY_NODE_FLAGS.filter((flag) => !given.has(flagName(flag)));
}
