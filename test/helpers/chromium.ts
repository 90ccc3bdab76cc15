// Where the browser tests find Chromium: $TOLLGATE_CHROMIUM, or `chromium` / `chromium-browser` /
// `google-chrome` on the PATH (Debian's `chromium` package; .ci/run installs it). Without one the
// tests fail with this message; TOLLGATE_SKIP_BROWSER=1 skips them on a machine without a browser.

import { execFileSync } from 'node:child_process';

export const SKIP_BROWSER_TESTS = process.env.TOLLGATE_SKIP_BROWSER === '1';

export const CHROMIUM_MISSING =
  'Chromium not found: install it (apt-get install -y chromium), set TOLLGATE_CHROMIUM=/path/to/chrome, or skip the browser tests locally with TOLLGATE_SKIP_BROWSER=1';

export function findChromium(): string | undefined {
  if (process.env.TOLLGATE_CHROMIUM) return process.env.TOLLGATE_CHROMIUM;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('which', [name], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  return undefined;
}
