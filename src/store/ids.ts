import { randomBytes } from 'node:crypto';

/** Short random identifiers with a type prefix, readable in logs and admin output. */
export function newId(prefix: 'team' | 'key'): string {
  return `${prefix}_${randomBytes(8).toString('hex')}`;
}
