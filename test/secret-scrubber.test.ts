// The scrubber of client texts (src/logging/redaction.ts) remembers the texts it found clean, so a
// client's user agent is scrubbed once, not on every request. What it returns must not depend on
// that memory: the same as a scrubber that has never seen the text, whatever came before,
// including secrets added after a text was found clean.

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createSecretScrubber } from '../src/logging/redaction.js';

const MAX_LOGGED = 200;
const SECRET = 'upstream-credential-0123456789';
const KEY = `tg_${'Ab3'.repeat(11)}`;

describe('scrubClientText', () => {
  it('scrubs a text it found clean once a secret it holds is added', () => {
    const scrubber = createSecretScrubber();
    const userAgent = `sdk/1.0 (${SECRET})`;
    expect(scrubber.scrubClientText(userAgent, MAX_LOGGED)).toBe(userAgent);
    expect(scrubber.scrubClientText(userAgent, MAX_LOGGED)).toBe(userAgent);
    scrubber.add([SECRET]);
    expect(scrubber.scrubClientText(userAgent, MAX_LOGGED)).toBe('sdk/1.0 ([redacted])');
  });

  it('bounds a remembered text to each call’s own length', () => {
    const scrubber = createSecretScrubber();
    const userAgent = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36';
    expect(scrubber.scrubClientText(userAgent, MAX_LOGGED)).toBe(userAgent);
    expect(scrubber.scrubClientText(userAgent, 10)).toBe(`${userAgent.slice(0, 10)}…(+${userAgent.length - 10} chars)`);
  });

  it('answers as a scrubber that never saw the text, over any sequence of texts and added secrets', () => {
    // Few distinct texts, so that most calls find one already seen; more calls than the memory
    // holds, so that it also starts again while the property runs.
    const text = fc.oneof(
      fc.constantFrom('viem/2.21.0', 'node', `sdk/1.0 ${SECRET}`, `agent ${KEY}`, `https://user:pass@host/`, 'x'.repeat(600)),
      fc.string({ maxLength: 40 }),
      fc.integer({ min: 0, max: 1_500 }).map((n) => `client-${n}`),
    );
    const step = fc.oneof({ weight: 20, arbitrary: text.map((value) => ({ scrub: value })) }, { weight: 1, arbitrary: fc.constantFrom(SECRET, 'client-77', 'another-secret-value').map((secret) => ({ add: secret })) });
    fc.assert(
      fc.property(fc.array(step, { minLength: 1_100, maxLength: 2_500 }), (steps) => {
        const remembering = createSecretScrubber();
        const known: string[] = [];
        for (const next of steps) {
          if ('add' in next) {
            remembering.add([next.add]);
            known.push(next.add);
            continue;
          }
          const fresh = createSecretScrubber(known);
          expect(remembering.scrubClientText(next.scrub, MAX_LOGGED)).toBe(fresh.scrubClientText(next.scrub, MAX_LOGGED));
        }
      }),
      { numRuns: 30, seed: 1127 },
    );
  });
});
