import fs from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import * as esbuild from 'esbuild';

/**
 * Bundles the web UI (ui/) into dist/ui: hashed assets under assets/ and an index.html naming them.
 * Asset URLs are absolute (/ui/assets/...) so that deep links load them; a <base> tag would break the CSP's base-uri 'none'.
 * Prints the gzipped size of the entry script (budget: 60 KB, docs/ui.md).
 */
const root = path.resolve(import.meta.dirname, '..');
const out = path.join(root, 'dist', 'ui');
fs.rmSync(out, { recursive: true, force: true });

const result = await esbuild.build({
  entryPoints: { main: path.join(root, 'ui/src/main.tsx'), styles: path.join(root, 'ui/styles.css') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  entryNames: '[name]-[hash]',
  outdir: path.join(out, 'assets'),
  metafile: true,
  legalComments: 'none',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});

const outputs = Object.keys(result.metafile.outputs).map((file) => path.basename(file));
const entry = outputs.find((name) => name.startsWith('main-') && name.endsWith('.js'));
const styles = outputs.find((name) => name.endsWith('.css'));
if (!entry || !styles) throw new Error(`build produced no entry script or stylesheet: ${outputs.join(', ')}`);
const html = fs
  .readFileSync(path.join(root, 'ui/index.html'), 'utf8')
  .replace('%ENTRY%', entry)
  .replace('%STYLES%', styles);
fs.writeFileSync(path.join(out, 'index.html'), html);

const gzipped = gzipSync(fs.readFileSync(path.join(out, 'assets', entry))).length;
console.log(`web UI built in dist/ui: ${entry} ${(gzipped / 1024).toFixed(1)} KB gzipped (budget 60 KB)`);
