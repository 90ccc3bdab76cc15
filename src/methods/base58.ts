import bs58 from 'bs58';

/** A Solana public key: base58, at most 44 characters, exactly 32 bytes once decoded. */
export function isBase58PublicKey(value: string): boolean {
  if (value.length === 0 || value.length > 44) return false;
  const bytes = bs58.decodeUnsafe(value);
  return bytes !== undefined && bytes.length === 32;
}

export function isBase58(value: string): boolean {
  return value.length > 0 && bs58.decodeUnsafe(value) !== undefined;
}

export function decodeBase58(value: string): Uint8Array | undefined {
  return bs58.decodeUnsafe(value);
}

export function encodeBase58(bytes: Uint8Array): string {
  return bs58.encode(bytes);
}
