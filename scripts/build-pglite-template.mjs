// `npm run build`'s last step: the tarball a first start loads instead of running PGlite's initdb
// (src/db/pglite-template.ts), written once per PGlite release. Plain JavaScript over the compiled code,
// which the build has just written: tsx's own start would cost a second.
import { initdbTemplatePath, writeInitdbTemplate } from '../dist/src/db/pglite-template.js';

const file = initdbTemplatePath();
const started = performance.now();
if (await writeInitdbTemplate(file)) {
  console.log(`embedded database template written in ${((performance.now() - started) / 1000).toFixed(1)} s: ${file}`);
}
