import { hash, randomBytes } from 'node:crypto';

/**
 * API keys are `ty_` followed by 40 base62 characters (about 238 random bits). Only a SHA-256 hash is
 * stored: a key this random needs no slow hash, and lookups by hash stay one index probe.
 */
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const KEY_PREFIX = 'ty_';
const SECRET_LENGTH = 40;
const DISPLAY_LENGTH = KEY_PREFIX.length + 8;

export function generateApiKey(): string {
  let secret = '';
  while (secret.length < SECRET_LENGTH) {
    for (const byte of randomBytes(SECRET_LENGTH * 2)) {
      // 248 = 4 * 62: rejecting the rest keeps every character equally likely.
      if (byte < 248 && secret.length < SECRET_LENGTH) secret += ALPHABET[byte % 62];
    }
  }
  return KEY_PREFIX + secret;
}

export function hashApiKey(key: string): string {
  // The one-shot form: no Hash object per request (every authenticated request hashes its key).
  return hash('sha256', key, 'hex');
}

/** The part of a key that may be shown again, to tell keys apart in a listing. */
export function displayPrefix(key: string): string {
  return key.slice(0, DISPLAY_LENGTH);
}
