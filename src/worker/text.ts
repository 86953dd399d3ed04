import { cleanString } from '../tracing/sanitize.js';

/**
 * Cutting the trainer's text without splitting a UTF-16 surrogate pair: half a pair is a lone surrogate,
 * which the server cannot store (PostgreSQL refuses it) and so refuses the whole request.
 */

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/** The first `max` UTF-16 code units of `text`, one fewer where the cut would split a surrogate pair. */
export function headOf(text: string, max: number): string {
  if (text.length <= max) return text;
  return text.slice(0, isHighSurrogate(text.charCodeAt(max - 1)) ? max - 1 : max);
}

/** The last `max` UTF-16 code units of `text`, one fewer where the cut would split a surrogate pair. */
export function tailOf(text: string, max: number): string {
  if (text.length <= max) return text;
  const start = text.length - max;
  return text.slice(isLowSurrogate(text.charCodeAt(start)) ? start + 1 : start);
}

/**
 * `text` as the server stores it: U+0000 and lone surrogates replaced by U+FFFD, and at most `max` code
 * units. A longer text loses its middle (marked `…`), so that both what happened (its start) and the
 * reason a trainer printed last (its end) stay.
 */
export function storableText(text: string, max: number): string {
  const clean = cleanString(text);
  if (clean.length <= max) return clean;
  const head = Math.floor((max - 1) / 2);
  return `${headOf(clean, head)}…${tailOf(clean, max - 1 - head)}`;
}
