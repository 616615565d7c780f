// Talking to shelly serve: JSON requests and event streams, and the token login they may need.

export class Unauthorized extends Error {}

// A JSON request; a non-2xx answer throws with the server's {"error": ...} text.
export async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) throw new Unauthorized(data.error || "unauthorized");
  if (!response.ok) throw new Error(data.error || `${method} ${path}: HTTP ${response.status}`);
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body ?? {});

// Follow an event stream: onEvent(event, id) for each event; the browser reconnects a dropped
// stream by itself and the server resumes after the last id it sent. Returns a stop function.
export function follow(path, onEvent, onState) {
  const source = new EventSource(path);
  source.onmessage = (message) => onEvent(JSON.parse(message.data), message.lastEventId);
  source.onopen = () => onState?.("live");
  source.onerror = () => onState?.(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
  return () => source.close();
}

// Calls fn at most once per `ms`, and once more after the last call (a burst of events -> one reload).
export function debounce(fn, ms) {
  let timer = null;
  let running = false;
  let again = false;
  const run = async () => {
    timer = null;
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } finally {
      running = false;
      if (again) { again = false; schedule(); }
    }
  };
  const schedule = () => { if (timer === null) timer = setTimeout(run, ms); };
  return schedule;
}
