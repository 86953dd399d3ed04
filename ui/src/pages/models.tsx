import { allPages } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { appPath } from '../lib/router.js';
import type { Model } from '../lib/types.js';
import { Loading, NameLink, Problem, ProjectTabs, useTitle, when } from '../lib/ui.js';

/** The models of one project. */
export function ModelsPage(props: { project: string }) {
  const slash = props.project.indexOf('/');
  const [entity, project] = [props.project.slice(0, slash), props.project.slice(slash + 1)];
  useTitle(`Models · ${props.project}`);
  const { data, error } = useLoad(props.project, () =>
    allPages<Model>(`/v1/preview/models?entity=${encodeURIComponent(entity)}&project=${encodeURIComponent(project)}`),
  );
  return (
    <main>
      <ProjectTabs project={props.project} active="models" />
      <h1>Models</h1>
      <Problem error={error} />
      {!data && !error && <Loading what="models" />}
      {data && data.length === 0 && <p class="empty">No models in this project yet: register one with the ART client (`model.register(backend)`).</p>}
      {data && data.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Models">
            <thead>
              <tr>
                <th>Name</th>
                <th>Base model</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {data.map((m) => (
                <tr key={m.id}>
                  <td>
                    <NameLink to={appPath`/models/${m.id}`} name={m.name} />
                  </td>
                  <td>{m.base_model}</td>
                  <td>{when(m.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </main>
  );
}
