// `npm start`: the build check (scripts/build-if-stale.mjs), then the server, in one process: a
// `prestart` script would cost npm a lifecycle step, a shell and a second Node start.
import { buildIfStale } from './build-if-stale.mjs';

buildIfStale();
await import('../dist/src/main.js');
