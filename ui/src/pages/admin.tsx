import { useEffect, useRef, useState } from 'preact/hooks';
import { api, session } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { appPath } from '../lib/router.js';
import { Badge, keepFocusNear, Problem, useTitle, when } from '../lib/ui.js';

interface User {
  id: string;
  username: string;
  entity: string;
  is_admin: boolean;
  created_at: string;
}
interface Key {
  id: string;
  name: string;
  kind: 'user' | 'worker';
  prefix: string;
  username: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}
/** GET /v1/admin/backups */
interface Backups {
  unavailable: string | null;
  backup_dir: string;
  keep: number;
  interval_hours: number;
  next_due: string | null;
  data: { path: string; created_at: string; bytes: number; adapters: number }[];
  has_more: boolean;
  cut_short: string[];
}
interface Check {
  success: boolean;
  duration_ms: number;
  error?: string;
}

/** Bytes as MB (or kB below one MB), as the backups table shows them. */
function size(bytes: number): string {
  return bytes >= 1_000_000 ? `${(bytes / 1_000_000).toFixed(1)} MB` : `${Math.ceil(bytes / 1_000)} kB`;
}

function field(form: HTMLFormElement, name: string): string {
  return (form.elements.namedItem(name) as HTMLInputElement).value.trim();
}

/** Users, teams, keys (the secret shown once), the system check and recent workers; admin keys only. */
export function AdminPage() {
  useTitle('Admin');
  if (!session.value?.is_admin) {
    return (
      <main>
        <h1>Admin</h1>
        <p class="problem">This page needs an admin key.</p>
      </main>
    );
  }
  return <Admin />;
}

function Admin() {
  const users = useLoad('users', () => api<{ data: User[] }>('/v1/admin/users'));
  const keys = useLoad('keys', () => api<{ data: Key[] }>('/v1/admin/keys'));
  const teams = useLoad('teams', () => api<{ data: { id: string; name: string; members: { username: string; role: string }[] }[] }>('/v1/admin/teams'));
  // The first page, the 100 most recently seen: one row per worker id and key (two tenants may name theirs alike).
  const workers = useLoad('workers', () =>
    api<{
      data: { id: string; worker_id: string; api_key_id: string | null; last_seen_at: string; resident_trainers: { base_model: string; model_id: string | null }[] }[];
      has_more: boolean;
    }>('/v1/admin/workers'),
  );
  const keyOf = (id: string | null) => keys.data?.data.find((k) => k.id === id);
  const backups = useLoad('backups', () => api<Backups>('/v1/admin/backups'));
  const checks = useLoad('checks', () => api<{ healthy: boolean; checks: Record<string, Check> }>('/ui/api/system-check'));
  const [secret, setSecret] = useState<string | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [done, setDone] = useState<string | undefined>(undefined);
  // One click, one backup: the button waits for the one it asked for (the database is held meanwhile).
  const [backingUp, setBackingUp] = useState(false);

  async function run(action: () => Promise<unknown>, message: string) {
    setError(undefined);
    setDone(undefined);
    try {
      await action();
      setDone(message);
    } catch (err) {
      setError((err as Error).message);
    }
  }

  // The outcome of a form is told at the top of the page: it is brought into view, as the form may be far below.
  const outcome = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (error || done) outcome.current?.scrollIntoView({ block: 'nearest' });
  }, [error, done]);

  return (
    <main>
      <h1>Admin</h1>
      <div ref={outcome}>
        <Problem error={error ?? users.error ?? keys.error} />
        {/* Always there, so that a screen reader hears what is written into it. */}
        <div role="status" data-outcome>
          {done && <p class="ok">{done}</p>}
        </div>
      </div>
      <section>
        <h2>System check</h2>
        <Problem error={checks.error} />
        <div class="table-scroll">
          <table aria-label="System check">
            <tbody>
              {Object.entries(checks.data?.checks ?? {}).map(([name, c]) => (
                <tr key={name}>
                  <td>{name}</td>
                  <td>
                    <Badge status={c.success ? 'ok' : 'failed'} />
                  </td>
                  <td>{c.error ?? `${c.duration_ms} ms`}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
      <section>
        <h2>Workers seen recently</h2>
        {workers.data && workers.data.data.length === 0 && <p class="muted">No trainer worker has called in recently.</p>}
        <ul>
          {(workers.data?.data ?? []).map((w) => (
            <li key={w.id} data-worker={w.worker_id}>
              {w.worker_id}{' '}
              <span class="muted">
                {keyOf(w.api_key_id) ? `key ${keyOf(w.api_key_id)!.prefix}… of ${keyOf(w.api_key_id)!.username}, ` : ''}last seen {when(w.last_seen_at)}
              </span>
              {w.resident_trainers.length > 0 && (
                <ul aria-label={`Resident trainers of ${w.worker_id}`}>
                  {w.resident_trainers.map((r, i) => (
                    <li key={i}>
                      resident trainer: <code>{r.base_model}</code>{' '}
                      <span class="muted">{r.model_id ? `holding model ${r.model_id}` : 'no model held'}</span>
                    </li>
                  ))}
                </ul>
              )}
            </li>
          ))}
        </ul>
        {workers.data?.has_more && <p class="muted">The 100 most recently seen; more called in (GET /v1/admin/workers pages them).</p>}
      </section>
      <section>
        <h2>Backups</h2>
        <Problem error={backups.error} />
        {backups.data?.unavailable && <p class="muted">{backups.data.unavailable}</p>}
        {backups.data && !backups.data.unavailable && (
          <>
            <p class="muted" data-backup-settings>
              In <code>{backups.data.backup_dir}</code>;{' '}
              {backups.data.interval_hours > 0
                ? `every ${backups.data.interval_hours} h, the next due ${when(backups.data.next_due)}`
                : 'taken only when asked (BACKUP_INTERVAL_HOURS)'}
              ; {backups.data.keep > 0 ? `the newest ${backups.data.keep} kept` : 'all kept (BACKUP_KEEP)'}. To restore one, stop the server
              and run <code>npm run cli -- restore &lt;path&gt;</code>.
            </p>
            {backups.data.data.length === 0 && <p class="muted">No backup of this database yet.</p>}
            {backups.data.data.length > 0 && (
              <div class="table-scroll">
                <table aria-label="Backups">
                  <thead>
                    <tr>
                      <th>Taken</th>
                      <th>Size</th>
                      <th>Adapters</th>
                      <th>Path</th>
                    </tr>
                  </thead>
                  <tbody>
                    {backups.data.data.map((b) => (
                      <tr key={b.path}>
                        <td>{when(b.created_at)}</td>
                        <td>{size(b.bytes)}</td>
                        <td>{b.adapters}</td>
                        <td>
                          <code>{b.path}</code>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
            {backups.data.has_more && <p class="muted">The 100 newest; GET /v1/admin/backups?limit= lists more.</p>}
            {backups.data.cut_short.length > 0 && (
              <p class="muted">{backups.data.cut_short.length} cut short (a process stopped during one); the next backup deletes them.</p>
            )}
            <button
              type="button"
              disabled={backingUp}
              onClick={() => {
                setBackingUp(true);
                void run(async () => {
                  await api('/v1/admin/backups', { method: 'POST' });
                  backups.reload();
                }, 'Backup taken.').finally(() => setBackingUp(false));
              }}
            >
              {backingUp ? 'Backing up…' : 'Back up now'}
            </button>
          </>
        )}
      </section>
      <section>
        <h2>Users</h2>
        <div class="table-scroll">
          <table aria-label="Users">
            <thead>
              <tr>
                <th>User</th>
                <th>Admin</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {(users.data?.data ?? []).map((u) => (
                <tr key={u.id}>
                  <td>{u.username}</td>
                  <td>{u.is_admin ? 'yes' : ''}</td>
                  <td>{when(u.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        <form
          class="controls"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget as HTMLFormElement;
            void run(async () => {
              await api('/v1/admin/users', { method: 'POST', body: { username: field(form, 'username'), is_admin: (form.elements.namedItem('is_admin') as HTMLInputElement).checked } });
              form.reset();
              users.reload();
            }, 'User created.');
          }}
        >
          <label>
            Username <input name="username" required />
          </label>
          <label>
            <input type="checkbox" name="is_admin" /> admin
          </label>
          <button type="submit">Create user</button>
        </form>
      </section>
      <section>
        <h2>Teams</h2>
        <Problem error={teams.error} />
        <div class="table-scroll">
          <table aria-label="Teams">
            <thead>
              <tr>
                <th>Team</th>
                <th>Members</th>
              </tr>
            </thead>
            <tbody>
              {(teams.data?.data ?? []).map((t) => (
                <tr key={t.id} data-team={t.name}>
                  <td>{t.name}</td>
                  <td>{t.members.length ? t.members.map((m) => `${m.username}${m.role === 'admin' ? ' (admin)' : ''}`).join(', ') : <span class="muted">none</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        <form
          class="controls"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget as HTMLFormElement;
            void run(async () => {
              await api('/v1/admin/teams', { method: 'POST', body: { name: field(form, 'team') } });
              teams.reload();
            }, 'Team created.');
          }}
        >
          <label>
            Team name <input name="team" required />
          </label>
          <button type="submit">Create team</button>
        </form>
        <form
          class="controls"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget as HTMLFormElement;
            void run(async () => {
              await api(appPath`/v1/admin/teams/${field(form, 'team')}/members`, { method: 'POST', body: { username: field(form, 'member') } });
              teams.reload();
            }, 'Member added.');
          }}
        >
          <label>
            Team <input name="team" required />
          </label>
          <label>
            Member's username <input name="member" required />
          </label>
          <button type="submit">Add member</button>
        </form>
      </section>
      <section>
        <h2>API keys</h2>
        {secret && (
          <div class="secret" role="status">
            <p>The new key, shown only now: copy it.</p>
            <code data-secret>{secret}</code>
          </div>
        )}
        <form
          class="controls"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget as HTMLFormElement;
            void run(async () => {
              const created = await api<{ key: string }>('/v1/admin/keys', {
                method: 'POST',
                body: { username: field(form, 'key_user'), name: field(form, 'key_name') || undefined, kind: field(form, 'kind') },
              });
              setSecret(created.key);
              keys.reload();
            }, 'Key created.');
          }}
        >
          <label>
            Key for user <input name="key_user" required />
          </label>
          <label>
            Key name <input name="key_name" placeholder="optional" />
          </label>
          <label>
            Kind
            <select name="kind">
              <option value="user">user</option>
              <option value="worker">worker</option>
            </select>
          </label>
          <button type="submit">Create key</button>
        </form>
        <div class="table-scroll">
          <table aria-label="API keys">
            <thead>
              <tr>
                <th>Prefix</th>
                <th>Name</th>
                <th>User</th>
                <th>Kind</th>
                <th>Last used</th>
                <th>Revoked</th>
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {(keys.data?.data ?? []).map((k) => (
                <tr key={k.id} data-key={k.id}>
                  <td>
                    <code>{k.prefix}…</code>
                  </td>
                  <td>{k.name}</td>
                  <td>{k.username}</td>
                  <td>{k.kind}</td>
                  <td>{when(k.last_used_at)}</td>
                  <td>{when(k.revoked_at)}</td>
                  <td>
                    {!k.revoked_at && (
                      <button
                        type="button"
                        class="danger"
                        aria-label={`Revoke key ${k.prefix}… of ${k.username}`}
                        onClick={(e) => {
                          const button = e.currentTarget;
                          if (!window.confirm(`Revoke key ${k.prefix}…?`)) return;
                          // The button goes with the key's revocation: the focus goes to the key's row.
                          keepFocusNear(button, () => document.querySelector<HTMLElement>(`tr[data-key="${k.id}"] td`));
                          void run(async () => {
                            await api(appPath`/v1/admin/keys/${k.id}/revoke`, { method: 'POST' });
                            // The key just shown is no use once revoked: it leaves the screen.
                            if (secret?.startsWith(k.prefix)) setSecret(undefined);
                            keys.reload();
                          }, 'Key revoked.');
                        }}
                      >
                        Revoke
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
    </main>
  );
}
