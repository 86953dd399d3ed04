import { InvalidRequestError } from '../errors.js';

/**
 * weave refs (reference §3.4): `weave:///<entity>/<project>/<kind>/<target>[/<edge>/<value>...]`.
 * Object and op targets are `<name>:<digest>`, table targets `<digest>`, call targets `<id>`. Names and
 * edge values are percent-encoded as Python's `quote(x, safe="")` does; entity and project are not.
 */

export const REF_SCHEME = 'weave:///';

export type RefEdge = 'key' | 'attr' | 'index' | 'id';
const EDGES: readonly string[] = ['key', 'attr', 'index', 'id'] satisfies RefEdge[];

export interface RefPathStep {
  edge: RefEdge;
  value: string;
}

interface RefBase {
  entity: string;
  project: string;
  /** Walk into the referenced value: dict keys, attributes, list indices, table row digests. */
  path: RefPathStep[];
}

export interface ObjectRef extends RefBase {
  kind: 'object' | 'op';
  name: string;
  /** An object digest, or `*` (any version) where filters allow it. */
  digest: string;
}

export interface TableRef extends RefBase {
  kind: 'table';
  digest: string;
}

export interface CallRef extends RefBase {
  kind: 'call';
  id: string;
}

export type WeaveRef = ObjectRef | TableRef | CallRef;

export function isWeaveRef(value: unknown): value is string {
  return typeof value === 'string' && value.startsWith(REF_SCHEME);
}

/** Parses a `weave:///` ref; anything malformed is a 400. */
export function parseRef(uri: string): WeaveRef {
  const invalid = (why: string) => new InvalidRequestError(`Invalid ref ${uri}: ${why}`, { code: 'invalid_ref' });
  if (!uri.startsWith(REF_SCHEME)) throw invalid(`must start with ${REF_SCHEME}`);
  const parts = uri.slice(REF_SCHEME.length).split('/');
  if (parts.length < 4) throw invalid('expected <entity>/<project>/<kind>/<target>');
  const [entity, project, kind, target, ...rest] = parts;
  if (!entity || !project) throw invalid('entity and project must not be empty');
  if (!target) throw invalid('target must not be empty');
  if (rest.length % 2 !== 0) throw invalid('the path after the target must be /<edge>/<value> pairs');

  const path: RefPathStep[] = [];
  for (let i = 0; i < rest.length; i += 2) {
    if (!EDGES.includes(rest[i])) throw invalid(`unknown edge "${rest[i]}" (expected key, attr, index or id)`);
    const value = unquote(rest[i + 1], invalid);
    if (rest[i] === 'index' && !/^-?[0-9]+$/.test(value)) throw invalid('an index edge needs an integer');
    path.push({ edge: rest[i] as RefEdge, value });
  }

  switch (kind) {
    case 'object':
    case 'op': {
      const pieces = target.split(':');
      if (pieces.length !== 2 || !pieces[0] || !pieces[1]) throw invalid('expected <name>:<digest>');
      return { kind, entity, project, name: unquote(pieces[0], invalid), digest: pieces[1], path };
    }
    case 'table':
      return { kind, entity, project, digest: target, path };
    case 'call':
      return { kind, entity, project, id: unquote(target, invalid), path };
    default:
      throw invalid(`unknown kind "${kind}" (expected object, op, table or call)`);
  }
}

export function formatRef(ref: WeaveRef): string {
  const base = `${REF_SCHEME}${ref.entity}/${ref.project}/${ref.kind}/${refTarget(ref)}`;
  return base + ref.path.map((step) => `/${step.edge}/${quote(step.value)}`).join('');
}

/** The `entity/project` a ref points into, as project ids are stored. */
export function refProjectId(ref: WeaveRef): string {
  return `${ref.entity}/${ref.project}`;
}

function refTarget(ref: WeaveRef): string {
  switch (ref.kind) {
    case 'object':
    case 'op':
      return `${quote(ref.name)}:${ref.digest}`;
    case 'table':
      return ref.digest;
    case 'call':
      return quote(ref.id);
  }
}

/** Python's `urllib.parse.quote(s, safe="")`: only A-Z a-z 0-9 _ . - ~ stay as they are. */
export function quote(value: string): string {
  try {
    return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  } catch {
    throw new InvalidRequestError('A ref segment is not valid Unicode', { code: 'invalid_ref' });
  }
}

function unquote(value: string, invalid: (why: string) => Error): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw invalid(`bad percent-encoding in "${value}"`);
  }
}

/**
 * The most UTF-8 bytes of a ref in the input_refs / output_refs columns: their GIN indexes refuse an entry
 * past about 2,700 bytes, which would refuse the whole write of the call (and its batch or export).
 */
export const INDEXED_REF_BYTES = 2000;

/**
 * Every distinct `weave:///` string anywhere in a value, for the calls' input_refs / output_refs columns
 * that the ref filters match (reference §3.7). One longer than INDEXED_REF_BYTES stays in the payload only.
 */
export function extractRefs(value: unknown): string[] {
  const found = new Set<string>();
  const visit = (inner: unknown): void => {
    if (isWeaveRef(inner)) {
      if (inner.length <= INDEXED_REF_BYTES / 3 || Buffer.byteLength(inner) <= INDEXED_REF_BYTES) found.add(inner);
    } else if (Array.isArray(inner)) inner.forEach(visit);
    else if (inner !== null && typeof inner === 'object') Object.values(inner).forEach(visit);
  };
  visit(value);
  return [...found];
}
