// The live lines (`GET …/watch`, Server-Sent Events) as typed events: each `event:`'s `data:` parsed as JSON into
// the document's WatchEvent (WatchLine, WatchEnd, WatchError). A generator cannot type a stream; these schemas
// are the document's, so a change in the service shows up here at `npm run build`.
import type { components } from "./generated/api.js";
import { authorization, DEFAULT_TIMEOUT_MS, retryAfterS } from "./http.js";

type Schemas = components["schemas"];
type WatchEvent = Schemas["WatchEvent"];
type ErrorBody = Schemas["ErrorBody"];

export interface WatchOptions {
  /** The service's address, e.g. `http://127.0.0.1:8340`. */
  baseUrl: string;
  owner: string;
  /** One helper: the stream ends by itself once it has its outcome. Without it, all the owner's helpers. */
  helperId?: string;
  /** The current lines, then `end` (reason `once`). */
  once?: boolean;
  /** The id of the last line the caller has: the stream sends exactly the lines after it (Last-Event-ID). */
  lastEventId?: string;
  token?: string;
  /** The caller's bound on the whole watch, e.g. `AbortSignal.timeout(60_000)`. */
  signal?: AbortSignal;
  /** Until the stream's headers arrive (default 15 s). */
  connectTimeoutMs?: number;
  /** A stream silent this long is taken as dropped (default 45 s; the service pings an idle one every 15 s). */
  idleTimeoutMs?: number;
  /** A dropped stream is opened again from its last line's id, after the stream's `retry:`, this many times
   * (default 0: a drop is thrown). */
  reconnects?: number;
  fetch?: typeof globalThis.fetch;
}

/** The service refused the watch before the stream began (an unknown helper's 404, a Last-Event-ID of no line of
 * this watch's 422, too many streams' 503, …). */
export class WatchRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
    readonly retryAfterS: number | undefined,
  ) {
    super(`watch refused: ${status} ${body.error.code}: ${body.error.message}`);
    this.name = "WatchRefused";
  }
}

/** One event as it was sent, before its data is parsed. */
export interface Frame {
  event: string;
  data: string;
  id?: string;
  retry?: number;
}

/** The events of the watch, until `end` or `error` (each ends the stream) or the caller's signal. */
export async function* watch(options: WatchOptions): AsyncGenerator<WatchEvent, void, undefined> {
  let lastEventId = options.lastEventId;
  let retryMs = 1_000;
  let reconnects = options.reconnects ?? 0;
  for (;;) {
    let dropped: unknown;
    try {
      for await (const frame of connect(options, lastEventId)) {
        if (frame.retry !== undefined) retryMs = frame.retry;
        const event = typed(frame);
        if (event === undefined) continue;
        if (event.event === "line") lastEventId = event.id;
        yield event;
        if (event.event !== "line") return;
      }
      dropped = new Error("the live-lines stream ended before its end event");
    } catch (error) {
      if (error instanceof WatchRefused || options.signal?.aborted) throw error;
      dropped = error;
    }
    if (reconnects-- <= 0) throw dropped;
    await delay(retryMs, options.signal);
  }
}

/** A frame as a WatchEvent; undefined for a frame without data (`retry:`) and for an event this client does not
 * know (a newer service's). */
export function typed(frame: Frame): WatchEvent | undefined {
  if (frame.data === "") return undefined;
  switch (frame.event) {
    case "line":
      if (frame.id === undefined) throw new Error("a live line without an id");
      return { event: "line", id: frame.id, data: JSON.parse(frame.data) as Schemas["LineEvent"] };
    case "end":
      return { event: "end", data: JSON.parse(frame.data) as Schemas["EndEvent"] };
    case "error":
      return { event: "error", data: JSON.parse(frame.data) as ErrorBody };
    default:
      return undefined;
  }
}

/** The frames of a text/event-stream body, as the Server-Sent Events standard reads them: `field: value` lines,
 * a blank line ends a frame, `:` starts a comment, data lines join with a line break. */
export async function* frames(body: AsyncIterable<Uint8Array>): AsyncGenerator<Frame, void, undefined> {
  const decoder = new TextDecoder();
  let buffer = "";
  let frame: Frame = { event: "message", data: "" };
  let data: string[] = [];
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let end = lineEnd(buffer); end !== undefined; end = lineEnd(buffer)) {
      const line = buffer.slice(0, end.at);
      buffer = buffer.slice(end.at + end.length);
      if (line === "") {
        if (data.length > 0 || frame.retry !== undefined) yield { ...frame, data: data.join("\n") };
        frame = { event: "message", data: "" };
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const raw = colon < 0 ? "" : line.slice(colon + 1);
      const value = raw.startsWith(" ") ? raw.slice(1) : raw;
      if (field === "event") frame.event = value;
      else if (field === "data") data.push(value);
      else if (field === "id" && !value.includes("\0")) frame.id = value;
      else if (field === "retry" && /^\d+$/.test(value)) frame.retry = Number(value);
    }
  }
}

function lineEnd(buffer: string): { at: number; length: number } | undefined {
  const match = /\r\n|\r|\n/.exec(buffer);
  if (match === null) return undefined;
  if (match[0] === "\r" && match.index === buffer.length - 1) return undefined; // maybe half of \r\n
  return { at: match.index, length: match[0].length };
}

async function* connect(options: WatchOptions, lastEventId: string | undefined): AsyncGenerator<Frame> {
  const base = `${options.baseUrl.replace(/\/+$/, "")}/v1/owners/${encodeURIComponent(options.owner)}`;
  const url = new URL(
    options.helperId === undefined ? `${base}/watch` : `${base}/helpers/${encodeURIComponent(options.helperId)}/watch`,
  );
  if (options.once) url.searchParams.set("once", "true");
  const headers: Record<string, string> = { accept: "text/event-stream", ...authorization(options.token) };
  if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;

  // One controller bounds the connection, then each silence; the caller's signal bounds it all.
  const timer = new AbortController();
  const signal = options.signal ? AbortSignal.any([timer.signal, options.signal]) : timer.signal;
  let timeout = setTimeout(() => timer.abort(new Error("no answer to the watch in time")), options.connectTimeoutMs ?? DEFAULT_TIMEOUT_MS);
  const silence = () => {
    clearTimeout(timeout);
    timeout = setTimeout(() => timer.abort(new Error("the live-lines stream went silent")), options.idleTimeoutMs ?? 45_000);
  };
  try {
    const response = await (options.fetch ?? fetch)(url, { headers, signal });
    if (!response.ok) {
      throw new WatchRefused(response.status, (await response.json()) as ErrorBody, retryAfterS(response));
    }
    if (!response.headers.get("content-type")?.startsWith("text/event-stream") || response.body === null) {
      throw new Error(`the watch answered ${response.headers.get("content-type") ?? "no body"}, not text/event-stream`);
    }
    silence();
    for await (const frame of frames(watched(response.body, silence))) yield frame;
  } finally {
    clearTimeout(timeout);
    timer.abort(); // the connection closes when the caller stops reading early
  }
}

async function* watched(body: ReadableStream<Uint8Array>, onChunk: () => void): AsyncGenerator<Uint8Array> {
  for await (const chunk of body) {
    onChunk();
    yield chunk;
  }
}

function delay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const timeout = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timeout);
      reject(signal.reason);
    }, { once: true });
  });
}
