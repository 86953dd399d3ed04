import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { sendNotFound } from '../http/error-handler.js';
import { sessionRoutes } from './session.js';

/**
 * Sent on every /ui/ response: no inline script or style, nothing from another host (docs/ui.md). Styles
 * set through the CSSOM (uPlot's sizing) are allowed by `style-src 'self'`.
 */
export const UI_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "form-action 'self'",
].join('; ');

const NOT_BUILT = 'The web UI is not built. Run "npm run build" (it bundles ui/ into dist/ui/), then restart the server.\n';

/** dist/ui at the repository root, found from this file whether it runs from src/ (tsx) or dist/src/ (built). */
export function uiBuildDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return path.join(dir, 'dist', 'ui');
}

/**
 * The single-page app, registered under /ui: static files, and index.html for every other /ui/ path so
 * that deep links load. The pages carry no data, so they need no key; the API they call does. When the
 * UI was not built, every page says how to build it.
 */
export async function uiPages(ui: FastifyInstance, options: { root: string }): Promise<void> {
  ui.addHook('onRoute', (route) => {
    route.config = { ...route.config, auth: 'none' };
    route.schema = { ...route.schema, hide: true };
  });
  ui.addHook('onSend', async (_request, reply) => {
    reply.header('content-security-policy', UI_CSP);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('cross-origin-opener-policy', 'same-origin');
    reply.header('permissions-policy', 'camera=(), microphone=(), geolocation=()');
  });
  if (!fs.existsSync(path.join(options.root, 'index.html'))) {
    const notBuilt = async (_request: unknown, reply: FastifyReply) => reply.status(503).type('text/plain; charset=utf-8').send(NOT_BUILT);
    ui.get('/', notBuilt);
    ui.get('/*', notBuilt);
    return;
  }
  await ui.register(fastifyStatic, {
    root: options.root,
    prefix: '/',
    index: ['index.html'],
    wildcard: false,
    setHeaders(res, filePath) {
      // Asset names carry a content hash; index.html names the current ones and is revalidated.
      res.header('cache-control', filePath.endsWith('index.html') ? 'no-cache' : 'public, max-age=31536000, immutable');
    },
  });
  // Client-side routes (/ui/models/...) get the app, which shows its own "not found" for unknown paths,
  // to GET and HEAD (link checkers and uptime probes ask with HEAD); other methods there are a 405.
  // /ui/api/* and missing assets stay 404s.
  ui.setNotFoundHandler(async (request, reply) => {
    const pathname = request.url.split('?', 1)[0];
    if (pathname.startsWith('/ui/api/') || pathname.startsWith('/ui/assets/')) return sendNotFound(request, reply);
    if (request.method !== 'GET' && request.method !== 'HEAD') return sendNotFound(request, reply, ['GET', 'HEAD']);
    reply.header('cache-control', 'no-cache');
    return reply.sendFile('index.html');
  });
}

/** The web UI: its session and project routes, and the pages under /ui/ (docs/ui.md). */
export async function uiPlugin(app: FastifyInstance): Promise<void> {
  await app.register(sessionRoutes);
  await app.register(uiPages, { prefix: '/ui', root: uiBuildDir() });
  app.get('/', { config: { auth: 'none' }, schema: { hide: true } }, async (_request, reply) => reply.redirect('/ui/'));
}
