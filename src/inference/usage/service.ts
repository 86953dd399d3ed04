import type { Kysely } from 'kysely';
import { requireProject, type Principal } from '../../auth/principal.js';
import type { Database } from '../../db/schema.js';
import { UnprocessableError } from '../../errors.js';
import { sumUsage } from './repository.js';
import type { UsageQuery, UsageReport } from './schemas.js';
import type { UsageWriter } from './writer.js';

/** Usage sums for one project the caller reaches. */
export class UsageService {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly writer: UsageWriter,
  ) {}

  async report(principal: Principal, query: UsageQuery): Promise<UsageReport> {
    const projectId = query.project ?? `${principal.entity}/inference`;
    const { entity, project } = requireProject(principal, projectId, 'project');
    const from = query.from === undefined ? undefined : new Date(query.from);
    const to = query.to === undefined ? undefined : new Date(query.to);
    if (from && to && from > to) {
      throw new UnprocessableError('Value error, from must not be after to', ['query', 'from'], { input: query.from });
    }
    // Read your own writes: rows still buffered in this process are written first.
    await this.writer.flush();
    const data = await sumUsage(this.db, { entity, project, from, to, groupBy: query.group_by });
    return {
      object: 'list',
      project: projectId,
      from: from?.toISOString() ?? null,
      to: to?.toISOString() ?? null,
      group_by: query.group_by ?? null,
      data,
    };
  }
}
