// Builds (`npm run build`) only when the build's inputs changed since the last build or dist/ is
// incomplete: `npm ci` runs it as `prepare` (the build happens at install time) and `npm start`
// (scripts/start.mjs) before the server, where on an unchanged checkout it costs a directory walk of
// about 10 ms instead of a build (10 s on a quiet machine, 30-110 s on a busy one). Plain JavaScript:
// tsx's own start would cost a second. The fingerprint is every input file's path, size and mtime; it is
// taken before the build, so an edit made while building is built next time.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(import.meta.dirname, '..');
const INPUTS = [
  'src',
  'migrations',
  'ui',
  'scripts/build-ui.ts',
  'scripts/build-pglite-template.mjs',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
];
const OUTPUTS = ['dist/src/main.js', 'dist/ui/index.html'];
const stampFile = path.join(root, 'dist', '.build-inputs');

function fingerprint() {
  const hash = createHash('sha256');
  const visit = (relative) => {
    const full = path.join(root, relative);
    let stat;
    try {
      stat = fs.statSync(full);
    } catch {
      hash.update(`${relative} missing\n`);
      return;
    }
    if (stat.isDirectory()) {
      for (const entry of fs.readdirSync(full).sort()) visit(path.join(relative, entry));
    } else {
      hash.update(`${relative} ${stat.size} ${stat.mtimeMs}\n`);
    }
  };
  INPUTS.forEach(visit);
  return hash.digest('hex');
}

/** Runs `npm run build` when the build is missing or older than its inputs; exits the process when the build fails. */
export function buildIfStale() {
  const current = fingerprint();
  const built = OUTPUTS.every((file) => fs.existsSync(path.join(root, file)));
  const previous = fs.existsSync(stampFile) ? fs.readFileSync(stampFile, 'utf8').trim() : '';
  if (built && previous === current) return;

  console.error(built ? 'sources changed since the last build: building (npm run build)' : 'no build yet: building (npm run build)');
  const result = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
  fs.writeFileSync(stampFile, `${current}\n`);
}

// Run as a script (not imported by scripts/start.mjs); Node resolves this module's URL through symbolic links.
if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) buildIfStale();
