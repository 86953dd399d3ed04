import { spawn, type ChildProcess } from 'node:child_process';

/** An entry point of this repository running in a child process, with its output so far. */
export interface Started {
  child: ChildProcess;
  /** Its exit code, once its output is all read ('close' comes after 'exit'). */
  exited: Promise<number | null>;
  out: () => string;
  err: () => string;
}

/**
 * Runs a TypeScript entry point (`src/main.ts`, `src/cli/main.ts`) with tsx in a child process, as a
 * newcomer runs it, under `env`. `children`, when given, collects it, so that a test can kill what is left.
 */
export function startScript(script: string, args: string[], env: NodeJS.ProcessEnv, children?: ChildProcess[]): Started {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { env });
  children?.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, exited, out: () => stdout, err: () => stderr };
}
