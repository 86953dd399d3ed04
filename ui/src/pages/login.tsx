import { useState } from 'preact/hooks';
import { api, ApiError, session, type Whoami } from '../lib/api.js';
import { location, navigate, safeNext } from '../lib/router.js';
import { useTitle } from '../lib/ui.js';

/** Sign-in: the pasted key is exchanged for an HttpOnly session cookie; the page never stores it. */
export function LoginPage() {
  useTitle('Sign in');
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  async function submit(event: Event) {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const input = form.elements.namedItem('api_key') as HTMLInputElement;
    setBusy(true);
    setError(undefined);
    try {
      session.value = await api<Whoami>('/ui/api/session', { method: 'POST', body: { api_key: input.value.trim() } });
      input.value = '';
      navigate(safeNext(location.value.query.get('next')), true);
    } catch (err) {
      setError(err instanceof ApiError ? err.message : 'Could not reach the server.');
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="login">
      <h1>Sign in to trainyard</h1>
      <form onSubmit={submit}>
        <label>
          API key
          <input name="api_key" type="password" autocomplete="off" required placeholder="ty_…" />
        </label>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
      {error && (
        <p class="problem" role="alert">
          {error}
        </p>
      )}
      <p class="muted">
        The first start prints an admin key and writes it to <code>DATA_DIR/admin-api-key</code>. Create more with{' '}
        <code>npm run cli -- keys create USER</code>.
      </p>
    </main>
  );
}
