import type { Usage } from './schemas.js';

/**
 * Reading and editing engine answers as text. Parsing and re-serialising a completion costs more than
 * proxying it (rollouts carry logprobs for every token), and the gateway only needs two things: the
 * `usage` object, and `model` swapped for the id the client sent.
 */

/** Replaces the first `"model": "<from>"` with the client's id; engines write `model` before `choices`. */
export function modelRewriter(from: string, to: string): (text: string) => string {
  const needle = `"model":${JSON.stringify(from)}`;
  const replacement = `"model":${JSON.stringify(to)}`;
  const spaced = new RegExp(`"model"\\s*:\\s*${escapeRegExp(JSON.stringify(from))}`);
  return (text) => {
    if (text.includes(needle)) return text.replace(needle, () => replacement);
    return spaced.test(text) ? text.replace(spaced, () => replacement) : text;
  };
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

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
