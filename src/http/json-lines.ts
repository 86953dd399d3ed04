/**
 * JSON Lines training data (an uploaded file, a W&B dataset artifact's train.jsonl, a download), read the
 * same way wherever it comes from: UTF-8 only (a byte that is not is refused, not replaced by U+FFFD,
 * which would train on text nobody wrote), a leading byte order mark skipped, lines ending in `\n` or
 * `\r\n`, blank lines skipped. A problem is a JsonLinesError saying where, for the caller's error form.
 */

export class JsonLinesError extends Error {}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The values of a JSON Lines text, in order. */
export function readJsonLines(bytes: Uint8Array): unknown[] {
  let text: string;
  try {
    text = UTF8.decode(bytes);
  } catch {
    throw new JsonLinesError('it is not UTF-8 text (save it as UTF-8)');
  }
  const rows: unknown[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      rows.push(JSON.parse(line));
    } catch (error) {
      throw new JsonLinesError(`line ${i + 1} is not valid JSON (${(error as Error).message})`);
    }
  }
  return rows;
}

