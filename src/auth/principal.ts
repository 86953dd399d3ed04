import { ForbiddenError, InvalidRequestError } from '../errors.js';

export type KeyKind = 'user' | 'worker';

/** Who is calling: the key, its user, and the entities whose projects the key reaches. */
export interface Principal {
  readonly keyId: string;
  readonly keyKind: KeyKind;
  readonly userId: string;
  readonly username: string;
  readonly isAdmin: boolean;
  /** The user's own entity: the default when a request names none. */
  readonly entity: string;
  readonly entities: ReadonlySet<string>;
}

export interface ProjectRef {
  readonly entity: string;
  readonly project: string;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Splits `entity/project`, rejecting anything else with a message saying what to send. */
export function parseProjectId(projectId: string, param = 'project_id'): ProjectRef {
  const parts = projectId.split('/');
  if (parts.length !== 2 || !NAME.test(parts[0]) || !NAME.test(parts[1])) {
    throw new InvalidRequestError(
      `Invalid project id ${JSON.stringify(projectId)}: expected "entity/project" (letters, digits, '.', '_' and '-').`,
      { param },
    );
  }
  return { entity: parts[0], project: parts[1] };
}

export function canReachEntity(principal: Principal, entity: string): boolean {
  return principal.entities.has(entity);
}

/** Throws 403 unless the key reaches the project's entity. */
export function requireProject(principal: Principal, projectId: string, param = 'project_id'): ProjectRef {
  const ref = parseProjectId(projectId, param);
  if (!canReachEntity(principal, ref.entity)) {
    throw new ForbiddenError(`This API key cannot reach project ${projectId}.`, { param });
  }
  return ref;
}
