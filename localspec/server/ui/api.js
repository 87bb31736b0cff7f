// The server's own API: /health, /v1/models (with each model's state), POST /models/load and
// streamed /v1/chat/completions (Server-Sent Events).
// Failures become ApiError with the server's own message; aborting the signal closes the
// connection, which is what makes the server cancel the generation.

const KEY = 'localspec.apiKey';

export class ApiError extends Error {
  constructor(status, message, { retryAfter = null, code = null } = {}) {
    super(message);
    this.status = status; // 0: the server could not be reached
    this.retryAfter = retryAfter;
    this.code = code;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || '';
}

export function setApiKey(key, remember) {
  forgetApiKey();
  (remember ? localStorage : sessionStorage).setItem(KEY, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

const unreachable = () =>
  new ApiError(0, `Cannot reach the localspec server at ${location.origin}: is \`localspec serve\` still running?`);

async function request(path, init = {}) {
  let resp;
  try {
    resp = await fetch(path, { ...init, headers: headers() });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw unreachable();
  }
  if (!resp.ok) throw await failure(resp);
  return resp;
}

async function failure(resp) {
  let message = `${resp.status} ${resp.statusText}`.trim();
  let code = null;
  try {
    const body = await resp.json();
    if (body && body.error) ({ message, code } = body.error);
  } catch {
    // not our JSON (a proxy's page): the status line says enough
  }
  return new ApiError(resp.status, message, { retryAfter: resp.headers.get('Retry-After'), code });
}

export async function health() {
  return (await request('/health')).json();
}

export async function models() {
  return (await request('/v1/models')).json();
}

// A router's model, loaded now (answers once it is, or with why not)
export async function loadModel(model) {
  return (await request('/models/load', { method: 'POST', body: JSON.stringify({ model }) })).json();
}

// Yields each streamed chunk object; returns at [DONE]. An error the server sends down the stream
// (headers already sent) is thrown as ApiError too.
export async function* streamChat(body, signal) {
  const resp = await request('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal });
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      let part;
      try {
        part = await reader.read();
      } catch (e) {
        if (e.name === 'AbortError') throw e;
        throw new ApiError(0, 'The connection to the server was lost in the middle of the reply.');
      }
      if (part.done) return;
      buf += part.value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const data = buf
          .slice(0, end)
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(line[5] === ' ' ? 6 : 5))
          .join('\n');
        buf = buf.slice(end + 2);
        if (!data) continue; // a keep-alive comment
        if (data === '[DONE]') return;
        const obj = JSON.parse(data);
        if (obj.error) throw new ApiError(500, obj.error.message, { code: obj.error.code });
        yield obj;
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // a consumer that stopped early closes the connection too
  }
}
