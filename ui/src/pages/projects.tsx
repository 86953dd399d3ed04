import { api } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { projectPath } from '../lib/router.js';
import { Link, Loading, NameLink, Problem, useTitle } from '../lib/ui.js';

interface Project {
  id: string;
  entity: string;
  project: string;
  models: number;
}

/** Home: the projects the key reaches. */
export function ProjectsPage() {
  useTitle('Projects');
  const { data, error } = useLoad('projects', () => api<{ data: Project[] }>('/v1/projects'));
  return (
    <main>
      <h1>Projects</h1>
      <Problem error={error} />
      {!data && !error && <Loading what="projects" />}
      {data && data.data.length === 0 && (
        <div class="empty">
          <p>No projects yet. A project appears when it holds a model, a trace or usage. From ART:</p>
          <pre>{`import art
from art.serverless.backend import ServerlessBackend

backend = ServerlessBackend(api_key="ty_…", base_url="${window.location.origin}/v1")
model = art.TrainableModel(name="agent-001", project="my-project", base_model="Qwen/Qwen3-14B-Instruct")
# ART 0.5.20 and later also need run_name="agent-001"
await model.register(backend)`}</pre>
        </div>
      )}
      {data && data.data.length > 0 && (
        <div class="table-scroll">
          <table>
            <thead>
              <tr>
                <th>Project</th>
                <th>Models</th>
                <th>Traces</th>
                <th>Usage</th>
              </tr>
            </thead>
            <tbody>
              {data.data.map((p) => (
                <tr key={p.id}>
                  <td>
                    <NameLink to={projectPath(p.id, 'models')} name={p.id} />
                  </td>
                  <td>{p.models}</td>
                  <td>
                    <Link to={projectPath(p.id, 'traces')}>traces</Link>
                  </td>
                  <td>
                    <Link to={projectPath(p.id, 'usage')}>usage</Link>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </main>
  );
}
