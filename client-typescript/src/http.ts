// What the client and its live-lines reader send and read alike: the token, the bound, Retry-After.

/** Each request's bound unless the caller names another. A write is answered within HELPER_STARTER_TIMEOUT_MS
 * (10 s) of arriving. */
export const DEFAULT_TIMEOUT_MS = 15_000;

/** HELPER_API_TOKEN as the service takes it: `Authorization: Bearer …`; nothing without a token. */
export function authorization(token: string | undefined): Record<string, string> {
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Seconds to wait before asking again, from a 429 or 503 answer's Retry-After; undefined without one. */
export function retryAfterS(response: Response): number | undefined {
  const value = response.headers.get("retry-after");
  return value === null ? undefined : Number(value);
}
