// The server's routes, with the API key when it asks for one, and its server-sent events.
// The key is kept in this browser's storage only; nothing here prints or shows it.
const KEY = "specli.apiKey";

export class Unauthorized extends Error {}

export function headers(extra = {}) {
  const key = localStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

export function saveKey(key) { localStorage.setItem(KEY, key.trim()); }
export function forgetKey() { localStorage.removeItem(KEY); }
export function hasKey() { return localStorage.getItem(KEY) !== null; }

async function errorMessage(res) {
  try {
    const body = await res.json();
    return body.error?.message || body.error || JSON.stringify(body);
  } catch {
    return `${res.status} ${res.statusText}`;
  }
}

export async function getJSON(path) {
  const res = await fetch(path, { headers: headers() });
  if (res.status === 401) throw new Unauthorized(await errorMessage(res));
  if (!res.ok) throw new Error(await errorMessage(res));
  return res.json();
}

export async function getText(path) {
  const res = await fetch(path, { headers: headers() });
  if (res.status === 401) throw new Unauthorized(await errorMessage(res));
  if (!res.ok) throw new Error(await errorMessage(res));
  return res.text();
}

// POST `body` to the chat route and call onChunk with each streamed chunk, until [DONE].
export async function streamChat(body, onChunk, signal) {
  const res = await fetch("/v1/chat/completions", {
    method: "POST", signal, body: JSON.stringify(body),
    headers: headers({ "Content-Type": "application/json" }),
  });
  if (res.status === 401) throw new Unauthorized(await errorMessage(res));
  if (!res.ok) throw new Error(await errorMessage(res));
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue; // keep-alive comments
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
        onChunk(chunk);
      }
    }
  }
}

// Prometheus text: {"name{labels}": value} for the samples, comments left out.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}
