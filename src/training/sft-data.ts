import { request } from 'undici';
import type { Principal } from '../auth/principal.js';
import { AppError, ForbiddenError, UnprocessableError } from '../errors.js';
import { isRefusedValue } from '../db/refusals.js';
import { boundedDepth } from '../http/json-depth.js';
import { unstorableStringAt } from '../http/json-body.js';
import { JsonLinesError, readJsonLines } from '../http/json-lines.js';
import { WandbRequestError } from '../wandb/service.js';
import { SFTRow } from './schemas.js';

/** Rows are stored as job inputs, so they keep the storage nesting bound too. */
const StoredRow = boundedDepth(SFTRow);

/**
 * Resolves an SFT job's `training_data_url` into its rows at job creation: a tracing-API ref of a
 * dataset object or table, or the digest of a JSONL file stored through the tracing API, read by the
 * tracing area's resolver; a `wandb-artifact:///entity/project/name:alias` dataset artifact's train.jsonl; or, only when SFT_ALLOW_HTTP_URLS is on, an http(s) URL fetched here (off by
 * default: a server that fetches URLs its users name can be pointed at its own network).
 * Every failure is the caller's 422 on `training_data_url`, except a project the key cannot reach (403).
 */

export type ResolveTracingRows = (args: { entities: ReadonlySet<string>; url: string }) => Promise<unknown[]>;
/** The bytes of a `wandb-artifact:///` URL's `train.jsonl`; throws WandbRequestError when it names nothing usable. */
export type ReadWandbArtifact = (principal: Principal, url: string) => Promise<Buffer>;

const LOC = ['body', 'training_data_url'];
const HTTP_TIMEOUT_MS = 30_000;

function unresolvable(url: string, why: string): UnprocessableError {
  return new UnprocessableError(`Value error, training_data_url ${url} cannot be used: ${why}`, LOC, { input: url, ctx: { error: why } });
}

/** The rows of a JSON Lines file (src/http/json-lines.ts); a problem is the 422 on `training_data_url`. */
function downloadedRows(bytes: Uint8Array, url: string): unknown[] {
  try {
    return readJsonLines(bytes);
  } catch (error) {
    if (error instanceof JsonLinesError) throw unresolvable(url, error.message);
    throw error;
  }
}

export class SftDataResolver {
  constructor(
    private readonly options: {
      resolveTracingRows: ResolveTracingRows;
      readWandbArtifact?: ReadWandbArtifact;
      allowHttpUrls: boolean;
      /** The most an http(s) download may be, in bytes (the request body limit). */
      maxHttpBytes: number;
    },
  ) {}

  /** The rows to train on, each checked to be a chat transcript (`messages`, optionally `tools`). */
  async resolve(principal: Principal, url: string): Promise<unknown[]> {
    const rows = /^https?:\/\//i.test(url)
      ? await this.fetchHttp(url)
      : url.startsWith('wandb-artifact:///')
        ? await this.fromWandbArtifact(principal, url)
        : await this.fromTracing(principal, url);
    if (rows.length === 0) throw unresolvable(url, 'it has no rows');
    for (const [index, row] of rows.entries()) {
      const parsed = StoredRow.safeParse(row);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const where = issue.path.length ? ` at ${issue.path.join('.')}` : '';
        throw unresolvable(url, `row ${index} is not a training row (${issue.message}${where}); each row needs "messages", a list of chat messages`);
      }
      const unstorable = unstorableStringAt(row);
      if (unstorable) {
        throw unresolvable(url, `row ${index} holds U+0000 or a lone UTF-16 surrogate${unstorable.length ? ` at ${unstorable.join('.')}` : ''}, which cannot be stored; remove or replace it`);
      }
    }
    return rows;
  }

  private async fromTracing(principal: Principal, url: string): Promise<unknown[]> {
    try {
      return await this.options.resolveTracingRows({ entities: principal.entities, url });
    } catch (error) {
      if (error instanceof ForbiddenError) throw error;
      if (error instanceof AppError && error.statusCode < 500) throw unresolvable(url, error.message);
      // A part of the ref the database cannot take as a value (a number out of range, say) names nothing.
      if (isRefusedValue(error)) throw unresolvable(url, 'it names nothing that can exist (a part of it is out of range)');
      throw error;
    }
  }

  /** A dataset artifact's train.jsonl, as ART's train_sft uploads it (docs/training.md, "W&B API"). */
  private async fromWandbArtifact(principal: Principal, url: string): Promise<unknown[]> {
    const read = this.options.readWandbArtifact;
    if (!read) throw unresolvable(url, 'this server does not serve W&B artifacts');
    let bytes: Buffer;
    try {
      bytes = await read(principal, url);
    } catch (error) {
      if (error instanceof WandbRequestError) {
        if (error.message.startsWith('This API key cannot reach entity')) throw new ForbiddenError(error.message, { param: 'training_data_url' });
        throw unresolvable(url, error.message);
      }
      throw error;
    }
    return downloadedRows(bytes, url);
  }

  private async fetchHttp(url: string): Promise<unknown[]> {
    if (!this.options.allowHttpUrls) {
      throw unresolvable(
        url,
        'http(s) URLs are disabled on this server (SFT_ALLOW_HTTP_URLS=false, as fetching user-named URLs is a server-side request forgery risk); store the data through the tracing API and send its ref, or ask the operator to set SFT_ALLOW_HTTP_URLS=true',
      );
    }
    const abort = AbortSignal.timeout(HTTP_TIMEOUT_MS);
    let response: Awaited<ReturnType<typeof request>>;
    try {
      // undici follows no redirects by default, so a URL cannot bounce the request elsewhere.
      response = await request(url, { method: 'GET', signal: abort });
    } catch (error) {
      throw unresolvable(url, `the download failed (${error instanceof Error ? error.message : String(error)})`);
    }
    if (response.statusCode < 200 || response.statusCode >= 300) {
      await response.body.dump();
      throw unresolvable(url, `the server answered HTTP ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of response.body) {
        size += (chunk as Buffer).length;
        if (size > this.options.maxHttpBytes) {
          response.body.destroy();
          throw unresolvable(url, `it is larger than the limit of ${this.options.maxHttpBytes} bytes`);
        }
        chunks.push(chunk as Buffer);
      }
    } catch (error) {
      if (error instanceof UnprocessableError) throw error;
      throw unresolvable(url, `the download failed (${error instanceof Error ? error.message : String(error)})`);
    }
    return downloadedRows(Buffer.concat(chunks), url);
  }
}
