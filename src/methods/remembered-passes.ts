/**
 * A string check that remembers the strings it passed, for params clients send again and again
 * (the block a batch of 50 names, the collection a wallet pages through): a set lookup instead of
 * the check, and the string's hash, which the lookup computes, is kept with the string, so a
 * cache lookup that follows does not compute it again. At most `max` strings are remembered; past
 * that the set starts over. Only strings that passed enter it, so it can never let a failing one
 * through.
 */
export function rememberPasses(check: (value: string) => boolean, max = 4_096): (value: string) => boolean {
  const passed = new Set<string>();
  return (value) => {
    if (passed.has(value)) return true;
    if (!check(value)) return false;
    if (passed.size >= max) passed.clear();
    passed.add(value);
    return true;
  };
}
