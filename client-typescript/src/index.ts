// The starter API's typed client: the paths and schemas are generated from ../docs/api/openapi.json
// (`npm run generate`), the calls go through openapi-fetch, and the live lines through `watch` (./watch.ts).
import createClient, { type Client, type Middleware } from "openapi-fetch";

import type { components, paths } from "./generated/api.js";
import { authorization, DEFAULT_TIMEOUT_MS } from "./http.js";

export type { components, paths } from "./generated/api.js";
export { watch, WatchRefused, type WatchOptions } from "./watch.js";
export { authorization, DEFAULT_TIMEOUT_MS, retryAfterS } from "./http.js";

type Schemas = components["schemas"];
export type Admission = Schemas["Admission"];
export type AnswerBody = Schemas["AnswerBody"];
export type AnswerResult = Schemas["AnswerResult"];
export type CloseAnswer = Schemas["CloseAnswer"];
export type DeliveredAnswer = Schemas["DeliveredAnswer"];
export type EndEvent = Schemas["EndEvent"];
export type ErrorBody = Schemas["ErrorBody"];
export type GoalBody = Schemas["GoalBody"];
export type GoalRemoved = Schemas["GoalRemoved"];
export type GoalView = Schemas["GoalView"];
export type HelperView = Schemas["HelperView"];
export type LineEvent = Schemas["LineEvent"];
export type PendingBody = Schemas["PendingBody"];
export type ReadAnswer = Schemas["ReadAnswer"];
export type StartBody = Schemas["StartBody"];
export type UsageReport = Schemas["UsageReport"];
export type WatchEvent = Schemas["WatchEvent"];

export type StarterClient = Client<paths>;

export interface ClientOptions {
  /** The service's address, e.g. `http://127.0.0.1:8340` (no `/v1`). */
  baseUrl: string;
  /** HELPER_API_TOKEN, when the service has one: sent as `Authorization: Bearer …`. */
  token?: string;
  /** Each request's bound. A write is answered within HELPER_STARTER_TIMEOUT_MS (10 s) of arriving. */
  timeoutMs?: number;
  fetch?: typeof globalThis.fetch;
}

/** A client of every route: `client.POST("/v1/owners/{owner}/helpers", { params: { path: { owner } }, body })`
 * answers `{ data, error, response }`, `data` typed by the 2xx statuses, `error` an ErrorBody. */
export function createStarterClient(options: ClientOptions): StarterClient {
  const client = createClient<paths>({
    baseUrl: options.baseUrl,
    headers: authorization(options.token),
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  client.use(bounded(options.timeoutMs ?? DEFAULT_TIMEOUT_MS));
  return client;
}

/** Every request ends within `timeoutMs`, or with the caller's own signal, whichever comes first. */
function bounded(timeoutMs: number): Middleware {
  return {
    onRequest({ request }) {
      return new Request(request, { signal: AbortSignal.any([request.signal, AbortSignal.timeout(timeoutMs)]) });
    },
  };
}

/** Whether a 2xx answer of a write is the 202's: accepted, durable, but not answered in time. */
export function isPending<T extends object>(data: T | PendingBody): data is PendingBody {
  return "pending" in data;
}
