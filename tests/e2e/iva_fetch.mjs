// Iva's side of the starter API, as a TypeScript service would call it: Node's built-in fetch, no packages.
// Usage: node iva_fetch.mjs <base URL> <owner> <helper id> [refusals | <question task>]. Prints one JSON object:
// what each call answered. With `refusals`, three starts at once to a service that cannot take them: what each
// answered, with its Retry-After. With a question task, a helper that asks the structured question `venue` (options
// `walk` and `taxi`) is started after the rest, and answered once its outcome is in.
const [base, owner, helperId, mode] = process.argv.slice(2);
const api = `${base}/v1/owners/${owner}`;
const bound = () => AbortSignal.timeout(60_000);

async function call(method, path, body) {
  const response = await fetch(`${api}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: bound(),
  });
  const retryAfter = response.headers.get("retry-after");
  return { status: response.status, body: await response.json(), ...(retryAfter ? { retryAfter } : {}) };
}

// Server-Sent Events from fetch's body stream: events are separated by a blank line. With `lastEventId`, the
// watch goes on after that line, as an EventSource's does when it connects again.
async function watch(path, lastEventId) {
  const headers = { accept: "text/event-stream", ...(lastEventId ? { "last-event-id": lastEventId } : {}) };
  const response = await fetch(`${api}${path}`, { headers, signal: bound() });
  const events = [];
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of response.body) {
    buffered += decoder.decode(chunk, { stream: true });
    let split;
    while ((split = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, split);
      buffered = buffered.slice(split + 2);
      const event = { event: "message", data: "" };
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event.event = line.slice(7);
        else if (line.startsWith("data: ")) event.data += line.slice(6);
        else if (line.startsWith("id: ")) event.id = line.slice(4);
      }
      if (event.data) events.push({ ...event, data: JSON.parse(event.data) });
    }
  }
  return { status: response.status, contentType: response.headers.get("content-type"), events };
}

const answers = {};
if (mode === "refusals") {
  const starts = [0, 1, 2].map((n) =>
    call("POST", "/helpers", { helper_id: `${helperId}-${n}`, model: "scripted", task: "Find the Q3 report" }),
  );
  answers.starts = await Promise.all(starts);
  process.stdout.write(JSON.stringify(answers));
  process.exit(0);
}
answers.start = await call("POST", "/helpers", { helper_id: helperId, model: "scripted", task: "Find the Q3 report" });
answers.again = await call("POST", "/helpers", { helper_id: helperId, model: "scripted", task: "Find the Q3 report" });
answers.invalid = await call("POST", "/helpers", { helper_id: "no spaces", model: "scripted", task: "x" });
answers.watch = await watch(`/helpers/${helperId}/watch`); // ends by itself with the outcome
// The connection dropped just before the outcome's line (after the first, if the outcome came first): the watch
// resumed from the line before it.
const headline = answers.watch.events.findIndex((event) => / · outcome /.test(event.data.text ?? ""));
answers.resumedFrom = answers.watch.events[Math.max(headline - 1, 0)].id;
answers.resumed = await watch(`/helpers/${helperId}/watch`, answers.resumedFrom);
answers.list = await call("GET", "/helpers");
answers.unreported = await call("GET", "/unreported");
answers.read = await call("POST", "/read", { turn: "turn-1", helper_ids: [helperId] });
answers.delivered = await call("POST", "/delivered", { turn: "turn-1", answer_chars: 120 });
answers.close = await call("POST", `/helpers/${helperId}/close`);
answers.after = await call("GET", "/helpers");
if (mode !== undefined) {
  const asking = `${helperId}-ask`;
  answers.ask = await call("POST", "/helpers", { helper_id: asking, model: "scripted", task: mode });
  answers.asked = await watch(`/helpers/${asking}/watch`);
  answers.answer = await call("POST", `/helpers/${asking}/answer`, { question_id: "venue", option_id: "walk" });
}
process.stdout.write(JSON.stringify(answers));
