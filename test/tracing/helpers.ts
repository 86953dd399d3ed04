import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import type { App } from '../../src/app.js';
import type { TestUser } from '../helpers/app.js';

/** A JSON POST to a tracing route as `user`, with the weave SDKs' Basic auth. */
export async function post(app: App, user: TestUser, url: string, body: unknown) {
  return app.inject({
    method: 'POST',
    url: `/traces${url}`,
    headers: { authorization: basicAuth(user.key), 'content-type': 'application/json' },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

export function basicAuth(key: string): string {
  return `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;
}

/** JSON Lines as parsed rows. */
export function lines(text: string): Record<string, unknown>[] {
  return text.split('\n').filter((line) => line.trim() !== '').map((line) => JSON.parse(line));
}

let clock = Date.parse('2025-01-01T00:00:00Z');
/** Strictly increasing ISO timestamps, so default (started_at) order is creation order. */
export function tick(ms = 1000): string {
  clock += ms;
  return new Date(clock).toISOString();
}

export interface CallSpec {
  id: string;
  trace_id?: string;
  parent_id?: string | null;
  op_name?: string;
  inputs?: Record<string, unknown>;
  output?: unknown;
  exception?: string;
  summary?: Record<string, unknown>;
  display_name?: string;
  attributes?: Record<string, unknown>;
  thread_id?: string;
  turn_id?: string;
  started_at?: string;
  ended_at?: string | null;
}

/** start (and end unless ended_at is null) items of /call/upsert_batch for `projectId`. */
export function callItems(projectId: string, spec: CallSpec): unknown[] {
  const started = spec.started_at ?? tick();
  const start = {
    mode: 'start',
    req: {
      start: {
        project_id: projectId,
        id: spec.id,
        trace_id: spec.trace_id ?? spec.id,
        parent_id: spec.parent_id ?? undefined,
        op_name: spec.op_name ?? `weave:///${projectId}/op/predict:abc`,
        display_name: spec.display_name,
        thread_id: spec.thread_id,
        turn_id: spec.turn_id,
        started_at: started,
        attributes: spec.attributes ?? {},
        inputs: spec.inputs ?? {},
      },
    },
  };
  if (spec.ended_at === null) return [start];
  const ended = spec.ended_at ?? new Date(Date.parse(started) + 250).toISOString();
  const end = {
    mode: 'end',
    req: { end: { project_id: projectId, id: spec.id, ended_at: ended, output: spec.output ?? null, exception: spec.exception, summary: spec.summary ?? {} } },
  };
  return [start, end];
}

/**
 * Runs a fixture script that drives the npm weave SDK in a child process against `baseUrl`, with the
 * key and project in its environment, and returns the JSON of its last stdout line. The SDK appends
 * batch errors to weave_errors.log in its working directory, so it runs in a temporary one.
 */
export async function runWeaveFixture<T>(script: string, args: { baseUrl: string; key: string; project: string; env?: Record<string, string> }): Promise<T> {
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'weave-sdk-'));
  const loader = pathToFileURL(path.resolve('node_modules/tsx/dist/loader.mjs')).href;
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', loader, path.resolve(script)], {
    cwd,
    env: {
      ...process.env,
      WF_TRACE_SERVER_URL: `${args.baseUrl}/traces`,
      WANDB_API_KEY: args.key,
      WEAVE_PRINT_CALL_LINK: 'false',
      TEST_PROJECT: args.project,
      NODE_OPTIONS: '',
      ...args.env,
    },
    timeout: 90_000,
  });
  return JSON.parse(stdout.trim().split('\n').pop()!) as T;
}
