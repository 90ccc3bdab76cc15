import { generateSecret, hashSecret } from '../auth/api-key.js';
import type { ApiKey, KeyDirectory, NewKey } from '../store/index.js';

/** Issues a key: the secret is generated here, returned once, and only its hash is stored. */
export async function issueKey(store: Pick<KeyDirectory, 'createKey'>, key: Omit<NewKey, 'secretHash'>): Promise<{ key: ApiKey; secret: string }> {
  const secret = generateSecret();
  const created = await store.createKey({ ...key, secretHash: hashSecret(secret) });
  return { key: created, secret };
}
