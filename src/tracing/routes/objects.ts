import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { LosslessJson } from '../json.js';
import { depsOf, projectFor } from '../http/access.js';
import { losslessBody } from '../http/body.js';
import { sendLosslessJson } from '../http/jsonl.js';
import { tags } from '../schemas/common.js';
import { ObjCreateBody, ObjCreateResponse, ObjDeleteBody, ObjDeleteResponse, ObjQueryBody, ObjQueryResponse, ObjReadBody, ObjReadResponse } from '../schemas/objects.js';
import * as objects from '../services/objects.js';
import { principalOf } from '../../auth/plugin.js';

export const objectRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);

  app.post(
    '/obj/create',
    {
      config: { losslessBody: true },
      schema: {
        tags,
        summary: 'Publish an object version',
        description: 'The digest is computed over the value as sent (1.0 and 1 differ). Publishing the same value again returns the same digest.',
        body: ObjCreateBody,
        response: { 200: ObjCreateResponse },
      },
    },
    async (request) => {
      const { obj } = request.body;
      const projectId = projectFor(request, obj.project_id);
      const lossless = losslessBody(request) as { obj: { val: LosslessJson } };
      return objects.createObject(deps, {
        projectId,
        objectId: obj.object_id,
        val: lossless.obj.val ?? null,
        builtinObjectClass: obj.builtin_object_class ?? obj.set_base_object_class,
        expectedDigest: obj.expected_digest,
        userId: principalOf(request).userId,
      });
    },
  );

  // Stored values are sent losslessly (`1.0`, big integers as stored): the body bypasses the schema's serializer.
  app.post('/obj/read', { schema: { tags, summary: 'Read an object version', body: ObjReadBody, response: { 200: ObjReadResponse } } }, async (request, reply) => {
    const { body } = request;
    const projectId = projectFor(request, body.project_id);
    const obj = await objects.readObject(deps, { projectId, objectId: body.object_id, digest: body.digest, metadataOnly: body.metadata_only ?? false, includeTagsAndAliases: body.include_tags_and_aliases ?? false });
    return sendLosslessJson(reply, { obj });
  });

  app.post('/objs/query', { schema: { tags, summary: 'Query object versions', body: ObjQueryBody, response: { 200: ObjQueryResponse } } }, async (request, reply) => {
    const { body } = request;
    const projectId = projectFor(request, body.project_id);
    const objs = await objects.queryObjects(deps, {
      projectId,
      filter: body.filter,
      sortBy: body.sort_by,
      limit: body.limit,
      offset: body.offset,
      metadataOnly: body.metadata_only,
      includeStorageSize: body.include_storage_size,
      includeTagsAndAliases: body.include_tags_and_aliases,
    });
    return sendLosslessJson(reply, { objs });
  });

  app.post('/obj/delete', { schema: { tags, summary: 'Delete object versions', body: ObjDeleteBody, response: { 200: ObjDeleteResponse } } }, async (request) => {
    const projectId = projectFor(request, request.body.project_id);
    return { num_deleted: await objects.deleteObject(deps, { projectId, objectId: request.body.object_id, digests: request.body.digests }) };
  });
};
