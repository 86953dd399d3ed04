import { useCallback, useEffect, useState } from 'preact/hooks';

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/**
 * Runs `load` when `key` changes (and on reload); keeps the last data while reloading. A reload that fails
 * keeps the data of the same key beside its error (a poll's passing failure); a load for another key that
 * fails drops the old key's data, which would otherwise pass for the answer.
 */
export function useLoad<T>(key: string, load: () => Promise<T>): Loaded<T> {
  const [loaded, setLoaded] = useState<{ key: string; data: T } | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setError(undefined);
    load().then(
      (value) => live && setLoaded({ key, data: value }),
      (err: Error) => {
        if (!live) return;
        setError(err.message);
        setLoaded((last) => (last?.key === key ? last : undefined));
      },
    );
    return () => {
      live = false;
    };
  }, [key, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data: loaded?.data, error, reload };
}
