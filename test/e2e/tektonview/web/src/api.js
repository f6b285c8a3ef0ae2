// Reads the Kubernetes API through the page's own server (main.go), which
// proxies GETs under /api and /apis with its service account: the pages
// only read, as the Tekton Dashboard does in its read-only mode.
import { useEffect, useState } from 'react';

// kubeURL builds a Kubernetes API path, as the dashboard's getKubeAPI does.
export function kubeURL({ group, version, kind, namespace, name, subResource, labelSelector, query }) {
  const base = group === 'core' ? `/api/${version}` : `/apis/${group}/${version}`;
  let path = base;
  if (namespace && namespace !== '*') {
    path += `/namespaces/${encodeURIComponent(namespace)}`;
  }
  path += `/${kind}`;
  if (name) {
    path += `/${encodeURIComponent(name)}`;
  }
  if (subResource) {
    path += `/${subResource}`;
  }
  const params = new URLSearchParams(query || {});
  if (labelSelector) {
    params.set('labelSelector', labelSelector);
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

export const tekton = (kind, args = {}) => kubeURL({ group: 'tekton.dev', version: 'v1', kind, ...args });
export const tektonBeta = (kind, args = {}) => kubeURL({ group: 'tekton.dev', version: 'v1beta1', kind, ...args });

async function get(url, accept = 'application/json') {
  const res = await fetch(url, { headers: { Accept: accept } });
  if (!res.ok) {
    const text = await res.text();
    let message = text;
    try {
      message = JSON.parse(text).message || text;
    } catch {
      // not JSON: the text as it is
    }
    const err = new Error(`${res.status}: ${message}`);
    err.status = res.status;
    throw err;
  }
  return accept === 'application/json' ? res.json() : res.text();
}

// usePoll reads url now and every interval ms (the dashboard watches over a
// websocket; polling shows the same objects a little later).
export function usePoll(url, { interval = 2000, enabled = true } = {}) {
  const [state, setState] = useState({ data: undefined, error: null, loading: true });
  useEffect(() => {
    if (!enabled || !url) {
      setState({ data: undefined, error: null, loading: false });
      return undefined;
    }
    let stopped = false;
    let timer;
    setState({ data: undefined, error: null, loading: true });
    async function tick() {
      try {
        const data = await get(url);
        if (!stopped) setState({ data, error: null, loading: false });
      } catch (error) {
        if (!stopped) setState(s => ({ ...s, error, loading: false }));
      }
      if (!stopped) timer = setTimeout(tick, interval);
    }
    tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [url, enabled, interval]);
  return state;
}

// fetchLogs is the step's container log, as the dashboard reads it
// (GET pods/log with timestamps), for the Log component.
export function fetchLogs({ stepStatus, taskRun }) {
  const podName = taskRun?.status?.podName;
  const container = stepStatus?.container;
  if (!podName || !container) {
    return Promise.resolve('');
  }
  return get(
    kubeURL({
      group: 'core',
      version: 'v1',
      kind: 'pods',
      namespace: taskRun.metadata.namespace,
      name: podName,
      subResource: 'log',
      query: { container, timestamps: 'true' }
    }),
    'text/plain,*/*'
  );
}

export function byNewest(items = []) {
  return [...items].sort(
    (a, b) => new Date(b.metadata.creationTimestamp).getTime() - new Date(a.metadata.creationTimestamp).getTime()
  );
}
