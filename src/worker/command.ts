import fs from 'node:fs';
import path from 'node:path';

/**
 * Splits a command line into argv the way a POSIX shell would for plain words: whitespace separates,
 * single quotes keep everything literally, double quotes keep whitespace and honour \" \\ \$ \`, and a
 * backslash outside quotes escapes the next character. No expansion, pipes or redirections: the trainer
 * is run without a shell, so that signals reach it and not an intermediate `sh` (wrap it in
 * `sh -c '...'` to get a shell on purpose).
 */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: "'" | '"' | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") quote = undefined;
      else word += c;
    } else if (quote === '"') {
      if (c === '"') quote = undefined;
      else if (c === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) word += line[++i];
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === '\\' && i + 1 < line.length) {
      word += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unterminated ${quote} quote in the command line`);
  if (inWord) words.push(word);
  return words;
}

/**
 * The path of an executable as spawn would find it, or undefined. Checked once at start, so that a typo
 * in --command stops the worker instead of failing every job it claims.
 */
export function findExecutable(name: string, env: Readonly<Record<string, string | undefined>>, cwd = process.cwd()): string | undefined {
  const executable = (file: string) => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (name.includes('/')) {
    const file = path.resolve(cwd, name);
    return executable(file) ? file : undefined;
  }
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const file = path.join(dir, name);
    if (executable(file)) return file;
  }
  return undefined;
}
