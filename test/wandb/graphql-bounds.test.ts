import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../../src/app.js';
import { WandbService } from '../../src/wandb/service.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, databaseFingerprint } from '../helpers/tenants.js';
import * as h from './helpers.js';

let app: App;
let owner: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  ({ owner } = await createTenants(app));
  project = uniqueName('p');
  const committed = await h.uploadAndCommit(app, owner, { 'train.jsonl': Buffer.from('{"messages": []}\n') }, { project, name: 'ds' });
  expect(committed.committed.errors).toBeUndefined();
});
afterAll(async () => {
  await app.close();
});

const gql = (query: string, variables: Record<string, unknown> = {}) => h.gql(app, owner, query, variables);

/** wandb 0.31's ProjectArtifacts, verbatim: the largest document the SDK sends (shared/reference/wandb-traffic-sample.jsonl). */
const PROJECT_ARTIFACTS = `query ProjectArtifacts ($entity: String!, $project: String!, $type: String!, $collection: String!, $cursor: String, $perPage: Int = 50, $order: String, $filters: JSONString, $includeAliases: Boolean = true) {
	project(entityName: $entity, name: $project) {
		artifactType(name: $type) {
			artifactCollection(name: $collection) {
				__typename
				artifacts(after: $cursor, first: $perPage, order: $order, filters: $filters) {
					totalCount
					pageInfo {
						... PageInfoFragment
					}
					edges {
						version
						node {
							... ArtifactFragment
						}
					}
				}
			}
		}
	}
}
fragment ArtifactAliasFragment on ArtifactAlias {
	__typename
	id
	alias
}
fragment ArtifactFragment on Artifact {
	__typename
	id
	artifactSequence {
		... SourceCollectionInfoFragment
	}
	versionIndex
	artifactType {
		name
	}
	description
	metadata
	ttlDurationSeconds
	ttlIsInherited
	tags {
		... TagFragment
	}
	historyStep
	state
	size
	digest
	commitHash
	fileCount
	createdAt
	updatedAt
	aliases @include(if: $includeAliases) {
		artifactCollection {
			... CollectionInfoFragment
		}
		... ArtifactAliasFragment
	}
}
fragment CollectionInfoFragment on ArtifactCollection {
	__typename
	name
	project {
		... ProjectInfoFragment
	}
}
fragment PageInfoFragment on PageInfo {
	__typename
	endCursor
	hasNextPage
}
fragment ProjectInfoFragment on Project {
	id
	internalId
	name
	entity {
		name
	}
}
fragment SourceCollectionInfoFragment on ArtifactSequence {
	__typename
	name
	project {
		... ProjectInfoFragment
	}
}
fragment TagFragment on Tag {
	__typename
	id
	name
}
`;

/** `levels` fragments on Project, each asking for `width` aliased artifactCollection fields that spread the one before. */
function fragmentChain(levels: number, width: number): string {
  const fragments = ['fragment F0 on Project { id }'];
  for (let i = 1; i <= levels; i++) {
    const fields = Array.from({ length: width }, (_, k) => `a${k}: artifactCollection(name: "ds") { project { ...F${i - 1} } }`).join(' ');
    fragments.push(`fragment F${i} on Project { ${fields} }`);
  }
  return `{ project(name: "${project}") { ...F${levels} } }\n${fragments.join('\n')}`;
}

describe('GraphQL bounds on the work one document asks for', () => {
  it('answers the largest document the wandb SDK sends', async () => {
    const answer = await gql(PROJECT_ARTIFACTS, { entity: owner.entity, project, type: 'dataset', collection: 'ds', cursor: null, perPage: 50, filters: '{"state": "COMMITTED"}', order: null });
    expect(answer.errors).toBeUndefined();
    expect(answer.data!.project.artifactType.artifactCollection.artifacts.totalCount).toBe(1);
  });

  it('refuses a selection set of 4,000 repeated fields before validating it', async () => {
    const answer = await gql(`{ viewer { ${Array(4000).fill('id').join(' ')} } }`);
    expect(answer).toEqual({ errors: [{ message: 'A selection set holds 4000 fields; at most 100 are allowed.' }] });
  });

  it('refuses more than 300 fields in one document, however they are spread over selection sets', async () => {
    const fragments = Array.from({ length: 4 }, (_, i) => `fragment U${i} on User { ${Array(80).fill('id').join(' ')} }`).join('\n');
    const answer = await gql(`{ viewer { ...U0 ...U1 ...U2 ...U3 } }\n${fragments}`);
    expect(answer).toEqual({ errors: [{ message: 'The document holds more than 300 fields.' }] });
  });

  it('stops parsing a document of 20,000 tokens', async () => {
    const answer = await gql(`{ viewer { ${Array(19_990).fill('id').join(' ')} } }`);
    expect(answer).toEqual({ errors: [{ message: 'Syntax Error: Document contains more that 5000 tokens. Parsing aborted.' }] });
  });

  it('refuses a fragment chain nested deeper than 16 levels once expanded, resolving nothing', async () => {
    const find = vi.spyOn(WandbService.prototype, 'collection');
    try {
      const answer = await gql(fragmentChain(12, 2));
      expect(answer).toEqual({ errors: [{ message: 'The query nests fields 26 levels deep once fragments are expanded; at most 16 are allowed.' }] });
      expect(find).not.toHaveBeenCalled();
    } finally {
      find.mockRestore();
    }
  });

  it('refuses a shallow fragment chain that expands to more than 2,000 fields', async () => {
    const answer = await gql(fragmentChain(5, 4));
    expect(answer).toEqual({ errors: [{ message: 'The query asks for more than 2000 fields once fragments are expanded.' }] });
  });

  it('refuses pages of artifacts each asking for a page of files when the full pages would pass 100,000 values, resolving nothing', async () => {
    const find = vi.spyOn(WandbService.prototype, 'collection');
    try {
      const query = `query($n: Int = 1000) { project(name: "${project}") { artifactCollection(name: "ds") { artifacts(first: $n) { edges { node { files(first: $n) { edges { node { name } } } } } } } } }`;
      const message = 'The query asks for more than 100000 values once its paged lists are full (first: N, 50 when not given); ask for smaller pages.';
      expect(await gql(query)).toEqual({ errors: [{ message }] });
      expect(await gql(query, { n: 10_000 })).toEqual({ errors: [{ message }] });
      expect(find).not.toHaveBeenCalled();
      // Pages of 50 (the default) are within the bound, and answered.
      const answer = await gql(query, { n: null });
      expect(answer.errors).toBeUndefined();
      expect(answer.data!.project.artifactCollection.artifacts.edges[0].node.files.edges).toEqual([{ node: { name: 'train.jsonl' } }]);
    } finally {
      find.mockRestore();
    }
  });

  it('still answers a short fragment chain', async () => {
    const answer = await gql(fragmentChain(2, 2));
    const level1 = { project: { id: expect.any(String) } };
    const level2 = { project: { a0: level1, a1: level1 } };
    expect(answer).toEqual({ data: { project: { a0: level2, a1: level2 } } });
  });
});

describe('GraphQL bad input is a GraphQL error, never a 5xx or a bare 422', () => {
  it('answers a filters argument that is not JSON with a GraphQL error', async () => {
    const answer = await gql(`{ project(name: "${project}") { artifactCollection(name: "ds") { artifacts(filters: "{bad") { totalCount } } } }`);
    expect(answer).toEqual({
      // `artifacts` is non-null in W&B's schema: its null reaches the collection.
      data: { project: { artifactCollection: null } },
      errors: [{ message: 'Argument "filters" is not valid JSON.', path: ['project', 'artifactCollection', 'artifacts'] }],
    });
  });

  it('refuses U+0000 written as a GraphQL escape in a string argument, storing nothing', async () => {
    const before = await databaseFingerprint(app);
    const message = 'A string in the query holds U+0000, which is not text that can be stored; remove it.';
    const upsert = await gql(`mutation { upsertBucket(input: {name: "${uniqueName('r')}", modelName: "${project}", displayName: "a\\u0000b"}) { inserted } }`);
    expect(upsert).toEqual({ errors: [{ message }] });
    const read = await gql(`{ project(name: "${project}") { artifactCollection(name: "d\\u0000s") { name } } }`);
    expect(read).toEqual({ errors: [{ message }] });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('refuses U+0000 and lone surrogates in variables, naming the variable, storing nothing', async () => {
    const before = await databaseFingerprint(app);
    const upsert = 'mutation($input: UpsertBucketInput!) { upsertBucket(input: $input) { inserted } }';
    const input = { name: uniqueName('r'), modelName: project };
    expect(await gql(upsert, { input: { ...input, displayName: 'a\u0000b' } })).toEqual({
      errors: [{ message: 'Variable $input.displayName holds U+0000, which is not text that can be stored; remove it.' }],
    });
    expect(await gql(upsert, { input: { ...input, config: '{"x": {"value": "\ud800"}}' } })).toEqual({
      errors: [{ message: 'Variable $input.config holds a lone UTF-16 surrogate (U+D800), which is not text that can be stored; remove it.' }],
    });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('reports a value the database refuses inside a resolver in errors, with the field null', async () => {
    const refused = Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: '22021' });
    const find = vi.spyOn(WandbService.prototype, 'collection').mockRejectedValueOnce(refused);
    try {
      const answer = await gql(`{ project(name: "${project}") { artifactCollection(name: "ds") { name } } }`);
      expect(answer).toEqual({
        data: { project: { artifactCollection: null } },
        errors: [{ message: 'A value in the request is out of the range or form that can be stored.', path: ['project', 'artifactCollection'] }],
      });
    } finally {
      find.mockRestore();
    }
  });

  it('answers a collection that does not exist with null and no error', async () => {
    expect(await gql(`{ project(name: "${project}") { artifactCollection(name: "missing") { name } } }`)).toEqual({ data: { project: { artifactCollection: null } } });
  });
});
