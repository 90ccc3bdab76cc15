import bs58 from 'bs58';
import { rememberPasses } from './remembered-passes.js';

/**
 * A Solana public key: base58, at most 44 characters, exactly 32 bytes once decoded. Keys found
 * valid are remembered: decoding one is most of what checking a `getAssetsByGroup` call's
 * params costs, and a client pages through the same collection call after call.
 */
export const isBase58PublicKey = rememberPasses((value) => {
  if (value.length === 0 || value.length > 44) return false;
  const bytes = bs58.decodeUnsafe(value);
  return bytes !== undefined && bytes.length === 32;
});

export function isBase58(value: string): boolean {
  return value.length > 0 && bs58.decodeUnsafe(value) !== undefined;
}

export function decodeBase58(value: string): Uint8Array | undefined {
  return bs58.decodeUnsafe(value);
}

export function encodeBase58(bytes: Uint8Array): string {
  return bs58.encode(bytes);
}
