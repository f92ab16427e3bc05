// Every call goes through the public API with the operator's key (this tab only).
const KEY = "memserve.key";

export const keyStore = {
  get: () => sessionStorage.getItem(KEY),
  set: (key) => sessionStorage.setItem(KEY, key),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function url(path, query) {
  const u = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, String(v));
  }
  return u;
}

// The raw response (export streams JSON Lines); a non-2xx answer throws ApiError.
export async function fetchRaw(method, path, { query, body, headers } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${keyStore.get() || ""}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(url(path, query), init);
  if (!res.ok) {
    let code = "http_" + res.status;
    let message = res.statusText || "request failed";
    try {
      const err = (await res.json()).error || {};
      code = err.code || code;
      message = err.message || message;
    } catch (_) { /* not JSON */ }
    throw new ApiError(res.status, code, message);
  }
  return res;
}

export async function call(method, path, options = {}) {
  const res = await fetchRaw(method, path, options);
  return res.status === 204 ? null : res.json();
}

export const get = (path, query) => call("GET", path, { query });
