import type { Usage } from './schemas.js';

/**
 * Reading and editing engine answers as text. Parsing and re-serialising a completion costs more than
 * proxying it (rollouts carry logprobs for every token), and the gateway only needs two things: the
 * `usage` object, and `model` swapped for the id the client sent.
 */

/**
 * Sets the top-level `model` of the first JSON object in `text` (a body, or one `data: {...}` event)
 * to the client's id, whatever the engine wrote there (its adapter name, an alias, null). Engines
 * write `model` before `choices`, so the scan stops early; text without a top-level `model` is
 * returned unchanged.
 */
export function modelRewriter(to: string, encoding: 'utf16' | 'latin1' = 'utf16'): (text: string) => string {
  // latin1: `text` holds a body's UTF-8 bytes one per character, and so must the new value.
  const replacement = encoding === 'latin1' ? Buffer.from(JSON.stringify(to)).toString('latin1') : JSON.stringify(to);
  return (text) => {
    const span = topLevelModelValue(text);
    if (!span) return text;
    const [start, end] = span;
    if (end - start === replacement.length && text.startsWith(replacement, start)) return text;
    return text.slice(0, start) + replacement + text.slice(end);
  };
}

/** [start, end) of the value of the first object's top-level "model" key, or undefined. */
export function topLevelModelValue(text: string): [number, number] | undefined {
  let i = text.indexOf('{');
  if (i === -1) return undefined;
  let depth = 0;
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const close = stringEnd(text, i);
      if (close === -1) return undefined;
      if (depth === 1 && close - i === 6 && text.startsWith('"model"', i)) {
        let j = close + 1;
        while (isSpace(text[j])) j++;
        if (text[j] === ':') {
          j++;
          while (isSpace(text[j])) j++;
          const end = valueEnd(text, j);
          return end === -1 ? undefined : [j, end];
        }
      }
      i = close;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (--depth === 0) return undefined;
    }
  }
  return undefined;
}

/** The index of the quote closing the string that opens at `from`, or -1. */
function stringEnd(text: string, from: number): number {
  for (let j = from + 1; j < text.length; j++) {
    if (text[j] === '\\') j++;
    else if (text[j] === '"') return j;
  }
  return -1;
}

/** The end (exclusive) of the JSON value starting at `from`, or -1 when it is cut off. */
function valueEnd(text: string, from: number): number {
  if (text[from] === '"') {
    const close = stringEnd(text, from);
    return close === -1 ? -1 : close + 1;
  }
  let depth = 0;
  for (let j = from; j < text.length; j++) {
    const c = text[j];
    if (c === '"') {
      j = stringEnd(text, j);
      if (j === -1) return -1;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (depth === 0) return j;
      depth--;
    } else if (c === ',' && depth === 0) return j;
  }
  return -1;
}

function isSpace(c: string | undefined): boolean {
  return c === ' ' || c === '\n' || c === '\r' || c === '\t';
}

/**
 * The top-level `usage` of a completion body. vLLM writes it after `choices`, so the last `"usage"`
 * key that is not inside a string is it; falls back to parsing the whole body when that reading fails.
 */
export function readUsage(text: string): Usage | undefined {
  let at = text.length;
  while ((at = text.lastIndexOf('"usage"', at - 1)) > 0 && text[at - 1] === '\\');
  if (at > 0) {
    const object = objectAfterColon(text, at + 7);
    if (object === null) return undefined;
    if (object !== undefined) {
      try {
        return JSON.parse(object) as Usage;
      } catch {
        // fall through
      }
    }
  }
  try {
    return (JSON.parse(text) as { usage?: Usage | null }).usage ?? undefined;
  } catch {
    return undefined;
  }
}

/** The `{...}` after `: ` at `from`, null for `: null`, undefined when it cannot be read. */
function objectAfterColon(text: string, from: number): string | null | undefined {
  let i = from;
  while (text[i] === ' ') i++;
  if (text[i] !== ':') return undefined;
  i++;
  while (text[i] === ' ') i++;
  if (text.startsWith('null', i)) return null;
  if (text[i] !== '{') return undefined;
  let depth = 0;
  let inString = false;
  for (let j = i; j < text.length; j++) {
    const c = text[j];
    if (inString) {
      if (c === '\\') j++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return text.slice(i, j + 1);
  }
  return undefined;
}
