/**
 * Method-name globs (`*` matches any run of characters) as the method settings use them
 * (`denyMethods`, `allowMethods`, the default deny list). A leaf module: the catalogue, the
 * config schema's checks and the subscription settings all match with it.
 */

/** `*` matches any run of characters; every other character is itself. */
export function globToRegExp(glob: string): RegExp {
  const body = glob
    .split('*')
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${body}$`);
}

/** One matcher for a list of globs (undefined for an empty list). */
export function globsMatcher(globs: readonly string[]): ((method: string) => boolean) | undefined {
  if (globs.length === 0) return undefined;
  const regex = new RegExp(globs.map((glob) => globToRegExp(glob).source).join('|'));
  return (method) => regex.test(method);
}

/**
 * Whether some method name matches both globs. Denied patterns are names or `prefix*`, which is
 * what this decides exactly for: an `allowMethods` entry that overlaps none of them allows nothing.
 */
export function globsOverlap(a: string, b: string): boolean {
  if (!a.includes('*')) return globToRegExp(b).test(a);
  if (!b.includes('*')) return globToRegExp(a).test(b);
  const prefixA = a.slice(0, a.indexOf('*'));
  const prefixB = b.slice(0, b.indexOf('*'));
  return prefixA.startsWith(prefixB) || prefixB.startsWith(prefixA);
}
