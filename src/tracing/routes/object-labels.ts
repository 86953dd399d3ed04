import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { depsOf, projectFor } from '../http/access.js';
import { Empty, tags } from '../schemas/common.js';
import {
  AliasesListResponse,
  ObjectIdParams,
  ObjectVersionParams,
  ObjRemoveAliasesBody,
  ObjSetAliasesBody,
  ObjTagsBody,
  ProjectQuery,
  TagsListResponse,
} from '../schemas/objects.js';
import * as labels from '../services/object-labels.js';

/** Tags and aliases of object versions, at the paths the weave Python SDK's generated client uses. */
export const objectLabelRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.put(
    '/objs/:object_id/versions/:digest/tags',
    { schema: { tags, summary: 'Add tags to an object version', description: 'Adding a tag the version has changes nothing; 404 for no live version.', params: ObjectVersionParams, body: ObjTagsBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await labels.addTags(deps, { projectId, objectId: request.params.object_id, digest: request.params.digest, tags: request.body.tags });
      return {};
    },
  );

  app.post(
    '/objs/:object_id/versions/:digest/tags/remove',
    { schema: { tags, summary: 'Remove tags from an object version', params: ObjectVersionParams, body: ObjTagsBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await labels.removeTags(deps, { projectId, objectId: request.params.object_id, digest: request.params.digest, tags: request.body.tags });
      return {};
    },
  );

  app.put(
    '/objs/:object_id/aliases',
    {
      schema: {
        tags,
        summary: 'Point aliases at an object version',
        description: 'An alias names one version per object: setting it again moves it. "latest" and "v<N>" are reserved (400).',
        params: ObjectIdParams,
        body: ObjSetAliasesBody,
        response: { 200: Empty },
      },
    },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await labels.setAliases(deps, { projectId, objectId: request.params.object_id, digest: request.body.digest, aliases: request.body.aliases });
      return {};
    },
  );

  app.post(
    '/objs/:object_id/aliases/remove',
    { schema: { tags, summary: 'Remove aliases of an object', params: ObjectIdParams, body: ObjRemoveAliasesBody, response: { 200: Empty } } },
    async (request) => {
      const projectId = projectFor(request, request.body.project_id);
      await labels.removeAliases(deps, { projectId, objectId: request.params.object_id, aliases: request.body.aliases });
      return {};
    },
  );

  app.get('/tags', { schema: { tags, summary: "A project's tags", querystring: ProjectQuery, response: { 200: TagsListResponse } } }, async (request) => ({
    tags: await labels.listTags(deps, projectFor(request, request.query.project_id)),
  }));

  app.get('/aliases', { schema: { tags, summary: "A project's aliases", querystring: ProjectQuery, response: { 200: AliasesListResponse } } }, async (request) => ({
    aliases: await labels.listAliases(deps, projectFor(request, request.query.project_id)),
  }));
};
