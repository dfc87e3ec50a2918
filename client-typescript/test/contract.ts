// The starter's whole contract through the typed client, against a running service (tests/e2e/test_typescript_client.py
// starts one on a real stack and runs this). Usage: node dist/test/contract.js '<plan JSON>'. Every check is an
// assertion here; the last line printed is a JSON summary of each call's status, for the Python side to check too.
import assert from "node:assert/strict";

import { frames } from "../src/watch.js";
import {
  createStarterClient,
  isPending,
  retryAfterS,
  watch,
  WatchRefused,
  type ErrorBody,
  type WatchEvent,
} from "../src/index.js";

interface Plan {
  baseUrl: string;
  owner: string;
  mode: "contract" | "refusals";
  /** A task the scripted model completes at once, one that runs for minutes, and one that asks a question. */
  tasks: { quick: string; slow: string; question: string; authorization: string };
}

const plan = JSON.parse(process.argv[2] ?? "{}") as Plan;
const client = createStarterClient({ baseUrl: plan.baseUrl, timeoutMs: 30_000 });
const owner = { owner: plan.owner };
const statuses: Record<string, number | number[]> = {};

function refusal(name: string, status: number, error: ErrorBody | undefined, expected: number, code: string): ErrorBody {
  statuses[name] = status;
  assert.equal(status, expected, `${name}: ${JSON.stringify(error)}`);
  assert.ok(error !== undefined, name);
  assert.equal(error.error.code, code, `${name}: ${JSON.stringify(error)}`);
  return error;
}

async function events(options: { helperId?: string; lastEventId?: string; once?: boolean }): Promise<WatchEvent[]> {
  const seen: WatchEvent[] = [];
  for await (const event of watch({ baseUrl: plan.baseUrl, owner: plan.owner, signal: AbortSignal.timeout(60_000), ...options })) {
    seen.push(event);
  }
  return seen;
}

/** What an event says, without the moment of the poll that found it. */
function said(event: WatchEvent): unknown[] {
  return event.event === "line" ? [event.event, event.id, event.data.helper_id, event.data.text] : [event.event, event.data];
}

/** The reader parses as the standard says: CRLF, CR or LF line ends (split across chunks too), comments, data
 * lines joined, a frame without data (retry) kept apart, the space after the colon dropped once. */
async function parsing(): Promise<void> {
  const text = "retry: 1000\r\n\r\n: ping\n\nevent: line\rid: 7\rdata: {\"a\":\rdata:  1}\r\revent: end\r\ndata: {}\r\n\r\n";
  const bytes = new TextEncoder().encode(text);
  async function* chunks(): AsyncGenerator<Uint8Array> {
    for (let at = 0; at < bytes.length; at += 3) yield bytes.slice(at, at + 3);
  }
  const parsed = [];
  for await (const frame of frames(chunks())) parsed.push(frame);
  assert.deepEqual(parsed, [
    { event: "message", data: "", retry: 1000 },
    { event: "line", id: "7", data: '{"a":\n 1}' },
    { event: "end", data: "{}" },
  ]);
}

/** A fetch whose first connection breaks after the stream's first line, as a dropped connection does; the headers
 * of each connection are kept. */
function droppingFetch(sent: Headers[]): typeof globalThis.fetch {
  return async (input, init) => {
    sent.push(new Headers(init?.headers));
    const response = await fetch(input, init);
    if (sent.length > 1 || response.body === null) return response;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) return controller.close();
        text += decoder.decode(value, { stream: true });
        const line = /event: line\r?\n(?:[^\r\n]+\r?\n)*\r?\n/.exec(text);
        if (line === null) return controller.enqueue(value);
        controller.enqueue(new TextEncoder().encode(text.slice(0, line.index + line[0].length)));
        await reader.cancel();
        controller.error(new Error("the connection dropped"));
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

async function refusals(): Promise<void> {
  // Three starts at once to a service that sends one write at a time to a task queue no worker polls.
  const answers = await Promise.all(
    [0, 1, 2].map((n) =>
      client.POST("/v1/owners/{owner}/helpers", {
        params: { path: owner },
        body: { helper_id: `q-${n}`, model: "scripted", task: plan.tasks.quick },
      }),
    ),
  );
  statuses.starts = answers.map(({ response }) => response.status).sort();
  assert.deepEqual(statuses.starts, [429, 429, 503]);
  for (const { error, response } of answers) {
    assert.ok(error !== undefined);
    assert.equal(error.error.code, response.status === 429 ? "busy" : "unavailable");
    assert.equal(retryAfterS(response), error.error.retry_after_s);
    assert.ok((error.error.retry_after_s ?? 0) >= 1);
    assert.match(error.error.message, /nothing was taken/);
  }
}

async function contract(): Promise<void> {
  const helper = { ...owner, helper_id: "report-q3" };
  const body = { helper_id: "report-q3", model: "scripted", task: plan.tasks.quick };

  // start, and the same start again: the same helper.
  const started = await client.POST("/v1/owners/{owner}/helpers", { params: { path: owner }, body });
  statuses.start = started.response.status;
  assert.equal(started.response.status, 201, JSON.stringify(started.error));
  assert.ok(started.data !== undefined && !isPending(started.data));
  assert.deepEqual([started.data.helper_id, started.data.existing], ["report-q3", false]);
  const again = await client.POST("/v1/owners/{owner}/helpers", { params: { path: owner }, body });
  statuses.again = again.response.status;
  assert.equal(again.response.status, 200);
  assert.ok(again.data !== undefined && !isPending(again.data) && again.data.existing);

  // Refusals of a start: an invalid id (422, naming the field), a model the core does not offer (422), a follow-up
  // of no helper (404).
  const invalid = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { ...body, helper_id: "no spaces" },
  });
  const problems = refusal("invalid", invalid.response.status, invalid.error, 422, "invalid_request").error.problems;
  assert.ok(problems?.some((problem) => problem.startsWith("helper_id")), JSON.stringify(problems));
  const unknownModel = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { ...body, helper_id: "other-model", model: "no-such-model" },
  });
  const offered = refusal("unknown_model", unknownModel.response.status, unknownModel.error, 422, "invalid_request");
  assert.ok(offered.error.problems?.some((problem) => /^model: not offered; use one of: .*scripted/.test(problem)));
  const noEarlier = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { ...body, helper_id: "goes-on", follow_up: "never-was" },
  });
  refusal("follow_up_unknown", noEarlier.response.status, noEarlier.error, 404, "unknown_helper");

  // watch to the end: typed lines, then `end` with the outcome.
  const watched = await events({ helperId: "report-q3" });
  const lines = watched.filter((event) => event.event === "line");
  assert.ok(lines[0]?.data.text.startsWith("admitted"), JSON.stringify(lines[0]));
  assert.ok(lines.every((line) => line.data.helper_id === "report-q3" && line.data.owner === plan.owner));
  assert.deepEqual(watched.at(-1), { event: "end", data: { reason: "outcome", outcome_kind: "completed" } });
  // The connection dropped just before the outcome's line: resumed from the line before it (Last-Event-ID),
  // exactly the lines after it, then the same end.
  const headline = Math.max(watched.findIndex((event) => event.event === "line" && / · outcome /.test(event.data.text)), 1);
  const before = watched[headline - 1];
  assert.ok(before?.event === "line");
  const resumed = await events({ helperId: "report-q3", lastEventId: before.id });
  assert.deepEqual(resumed.map(said), watched.slice(headline).map(said));
  // A Last-Event-ID of no line of this watch is refused before the stream starts; an unknown helper's is a 404.
  await assert.rejects(events({ helperId: "report-q3", lastEventId: "not-a-line" }), (error) => {
    assert.ok(error instanceof WatchRefused);
    statuses.watch_bad_id = error.status;
    return error.status === 422 && error.body.error.code === "invalid_request";
  });
  await assert.rejects(events({ helperId: "never-was", once: true }), (error) => {
    assert.ok(error instanceof WatchRefused);
    statuses.watch_unknown = error.status;
    return error.status === 404 && error.body.error.code === "unknown_helper";
  });
  const current = await events({ once: true });
  assert.deepEqual(current.at(-1), { event: "end", data: { reason: "once", outcome_kind: null } });

  // unreported, read, delivered.
  const unreported = await client.GET("/v1/owners/{owner}/unreported", { params: { path: owner } });
  statuses.unreported = unreported.response.status;
  assert.deepEqual(unreported.data?.map((view) => view.helper_id), ["report-q3"]);
  assert.ok(unreported.data?.[0]?.summary);
  const readUnknown = await client.POST("/v1/owners/{owner}/read", {
    params: { path: owner },
    body: { turn: "turn-1", helper_ids: ["never-was"] },
  });
  refusal("read_unknown", readUnknown.response.status, readUnknown.error, 404, "unknown_helper");
  const read = await client.POST("/v1/owners/{owner}/read", {
    params: { path: owner },
    body: { turn: "turn-1", helper_ids: ["report-q3"] },
  });
  statuses.read = read.response.status;
  assert.ok(read.data !== undefined && !isPending(read.data));
  assert.deepEqual(read.data.read, ["report-q3"]);
  const delivered = await client.POST("/v1/owners/{owner}/delivered", {
    params: { path: owner },
    body: { turn: "turn-1", answer_chars: 120 },
  });
  statuses.delivered = delivered.response.status;
  assert.deepEqual(delivered.data, { owner: plan.owner, turn: "turn-1", delivered: ["report-q3"] });

  // list, show (and an unknown helper's 404), usage.
  const listed = await client.GET("/v1/owners/{owner}/helpers", { params: { path: owner, query: { state: ["delivered"] } } });
  statuses.list = listed.response.status;
  assert.deepEqual(listed.data?.map((view) => [view.helper_id, view.state]), [["report-q3", "delivered"]]);
  const shown = await client.GET("/v1/owners/{owner}/helpers/{helper_id}", { params: { path: helper } });
  statuses.show = shown.response.status;
  assert.equal(shown.data?.outcome_kind, "completed");
  assert.ok(shown.data?.full_text);
  const unknown = await client.GET("/v1/owners/{owner}/helpers/{helper_id}", {
    params: { path: { ...owner, helper_id: "never-was" } },
  });
  refusal("show_unknown", unknown.response.status, unknown.error, 404, "unknown_helper");
  const usage = await client.GET("/v1/owners/{owner}/usage", { params: { path: owner } });
  statuses.usage = usage.response.status;
  assert.ok(usage.data?.helpers.some((line) => line.helper_id === "report-q3" && line.outcome_kind === "completed"));
  assert.ok(usage.data?.by_model.some((total) => total.model === "scripted" && total.helpers >= 1));

  // close: removed; the list is empty.
  const closed = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/close", { params: { path: helper } });
  statuses.close = closed.response.status;
  assert.ok(closed.data !== undefined && !isPending(closed.data) && closed.data.removed);
  const after = await client.GET("/v1/owners/{owner}/helpers", { params: { path: owner } });
  assert.deepEqual(after.data, []);

  // Too many open: three running helpers, the fourth refused with their ids (409); then each closed.
  const slow = ["long-1", "long-2", "long-3"];
  for (const helperId of slow) {
    const admitted = await client.POST("/v1/owners/{owner}/helpers", {
      params: { path: owner },
      body: { helper_id: helperId, model: "scripted", task: plan.tasks.slow },
    });
    assert.equal(admitted.response.status, 201, JSON.stringify(admitted.error));
  }
  const fourth = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { helper_id: "long-4", model: "scripted", task: plan.tasks.slow },
  });
  const tooMany = refusal("too_many_open", fourth.response.status, fourth.error, 409, "too_many_open");
  assert.deepEqual([...(tooMany.error.open_ids ?? [])].sort(), slow);
  for (const helperId of slow) {
    const stopped = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/close", {
      params: { path: { ...owner, helper_id: helperId } },
    });
    assert.equal(stopped.response.status, 200, JSON.stringify(stopped.error));
  }

  // answer: a question, a refused option (409, the question still takes its answer), the answer, and the same
  // question answered again (repeated, starts nothing).
  const asking = { ...owner, helper_id: "pick-venue" };
  const ask = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { helper_id: "pick-venue", model: "scripted", task: plan.tasks.question },
  });
  assert.equal(ask.response.status, 201, JSON.stringify(ask.error));
  const asked = await events({ helperId: "pick-venue" });
  const question = asked.find((event) => event.event === "line" && event.data.choices !== null);
  assert.ok(question?.event === "line" && question.data.choices !== null);
  assert.deepEqual(question.data.choices.options?.map((option) => option.id), ["walk", "taxi"]);
  assert.deepEqual(asked.at(-1), { event: "end", data: { reason: "outcome", outcome_kind: "question" } });
  // A connection that drops after its first line (the question's headline) is opened again from it (`reconnects`): the lines are those of
  // a watch that did not drop, and the second connection named the first line's id in Last-Event-ID.
  const whole = await events({ helperId: "pick-venue" });
  const sent: Headers[] = [];
  const reconnected: WatchEvent[] = [];
  const options = { baseUrl: plan.baseUrl, owner: plan.owner, helperId: "pick-venue", signal: AbortSignal.timeout(60_000) };
  for await (const event of watch({ ...options, reconnects: 1, fetch: droppingFetch(sent) })) reconnected.push(event);
  assert.deepEqual(reconnected.map(said), whole.map(said));
  const first = reconnected[0];
  assert.ok(first?.event === "line" && whole.length > 2, JSON.stringify(whole));
  assert.deepEqual(sent.map((headers) => headers.get("last-event-id")), [null, first.id]);
  // Without `reconnects`, the drop is the caller's.
  await assert.rejects(async () => {
    for await (const _ of watch({ ...options, fetch: droppingFetch([]) }));
  }, /the connection dropped/);
  // The owner's waits in one place: the question, what it offers, when it expires (none before delivery).
  const waiting = await client.GET("/v1/owners/{owner}/waits", { params: { path: owner } });
  statuses.waits = waiting.response.status;
  assert.deepEqual(waiting.data?.map((wait) => [wait.helper_id, wait.kind, wait.question_id, wait.expires_at]), [
    ["pick-venue", "question", "venue", null],
  ]);
  const notOffered = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/answer", {
    params: { path: asking },
    body: { question_id: "venue", option_id: "bike" },
  });
  refusal("not_offered", notOffered.response.status, notOffered.error, 409, "not_offered");
  const answered = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/answer", {
    params: { path: asking },
    body: { question_id: "venue", option_id: "walk" },
  });
  statuses.answer = answered.response.status;
  assert.ok(answered.data !== undefined && !isPending(answered.data), JSON.stringify(answered.error));
  assert.deepEqual([answered.data.option_id, answered.data.repeated], ["walk", false]);
  assert.equal(answered.data.follow_up?.helper_id, "pick-venue.answer");
  const twice = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/answer", {
    params: { path: asking },
    body: { question_id: "venue", option_id: "taxi" },
  });
  assert.ok(twice.data !== undefined && !isPending(twice.data));
  assert.deepEqual([twice.data.option_id, twice.data.repeated, twice.data.same], ["walk", true, false]);
  // Several answers in one call, each judged alone: the answered question's is repeated, an unknown helper's refused.
  const batch = await client.POST("/v1/owners/{owner}/waits/answers", {
    params: { path: owner },
    body: {
      answers: [
        { helper_id: "pick-venue", question_id: "venue", option_id: "taxi", by: "owner", via: "telegram" },
        { helper_id: "never-was", question_id: "venue", option_id: "walk" },
      ],
    },
  });
  statuses.answers = batch.response.status;
  assert.ok(batch.data !== undefined && !isPending(batch.data), JSON.stringify(batch.error));
  assert.deepEqual(
    batch.data.answers.map((item) => [item.helper_id, item.result?.repeated ?? null, item.error?.code ?? null]),
    [["pick-venue", true, null], ["never-was", null, "unknown_helper"]],
  );
  // The record of the wait that ended: what was shown, its digest, how it ended; no waits left.
  const audit = await client.GET("/v1/owners/{owner}/audit", { params: { path: owner, query: { helper_id: "pick-venue" } } });
  statuses.audit = audit.response.status;
  const [record] = audit.data?.records ?? [];
  assert.ok(record !== undefined && audit.data?.next === null, JSON.stringify(audit.data));
  assert.deepEqual([record.ended, record.answer?.option_id, record.shown_sha256.length], ["answered", "walk", 64]);
  const none = await client.GET("/v1/owners/{owner}/waits", { params: { path: owner } });
  assert.deepEqual(none.data, []);

  // An authorization wait: a grant may narrow the action asked (409 grant_widens for one that adds an address, the
  // wait still taking its answer), and the answer says what was asked beside what was granted.
  const authorizing = { ...owner, helper_id: "notify" };
  const notify = await client.POST("/v1/owners/{owner}/helpers", {
    params: { path: owner },
    body: { helper_id: "notify", model: "scripted", task: plan.tasks.authorization },
  });
  assert.equal(notify.response.status, 201, JSON.stringify(notify.error));
  const waited = await events({ helperId: "notify" });
  assert.deepEqual(waited.at(-1), { event: "end", data: { reason: "outcome", outcome_kind: "authorization" } });
  const wider = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/answer", {
    params: { path: authorizing },
    body: { question_id: "authorization", option_id: "grant", text: "send_mail to bob@example.com, dave@example.com" },
  });
  const widens = refusal("grant_widens", wider.response.status, wider.error, 409, "grant_widens");
  assert.ok(widens.error.message.includes("dave@example.com"), JSON.stringify(widens));
  const granted = await client.POST("/v1/owners/{owner}/helpers/{helper_id}/answer", {
    params: { path: authorizing },
    body: { question_id: "authorization", option_id: "grant", text: "send_mail to carol@example.com" },
  });
  statuses.grant = granted.response.status;
  assert.ok(granted.data !== undefined && !isPending(granted.data), JSON.stringify(granted.error));
  assert.deepEqual(
    [granted.data.asked, granted.data.granted, granted.data.follow_up?.helper_id],
    ["send_mail to bob@example.com, carol@example.com", "send_mail to carol@example.com", "notify.answer"],
  );

  // Goals: add (and again: 409), list, pause, resume, remove (and again: 404).
  const goal = { ...owner, goal_id: "weekly-report" };
  const goalBody = { goal_id: "weekly-report", every: "7d", model: "scripted", task: plan.tasks.quick };
  const added = await client.POST("/v1/owners/{owner}/goals", { params: { path: owner }, body: goalBody });
  statuses.goal_add = added.response.status;
  assert.equal(added.response.status, 201, JSON.stringify(added.error));
  assert.deepEqual([added.data?.goal_id, added.data?.every_ms, added.data?.paused], ["weekly-report", 604_800_000, false]);
  const twiceAdded = await client.POST("/v1/owners/{owner}/goals", { params: { path: owner }, body: goalBody });
  refusal("goal_exists", twiceAdded.response.status, twiceAdded.error, 409, "goal_exists");
  const badEvery = await client.POST("/v1/owners/{owner}/goals", {
    params: { path: owner },
    body: { ...goalBody, goal_id: "too-often", every: "10s" },
  });
  const everyProblems = refusal("goal_invalid", badEvery.response.status, badEvery.error, 422, "invalid_request");
  assert.ok(everyProblems.error.problems?.some((problem) => problem.startsWith("every")), JSON.stringify(everyProblems));
  const goals = await client.GET("/v1/owners/{owner}/goals", { params: { path: owner } });
  statuses.goal_list = goals.response.status;
  assert.deepEqual(goals.data?.map((view) => view.goal_id), ["weekly-report"]);
  const paused = await client.POST("/v1/owners/{owner}/goals/{goal_id}/pause", { params: { path: goal } });
  statuses.goal_pause = paused.response.status;
  assert.equal(paused.data?.paused, true);
  const resumed2 = await client.POST("/v1/owners/{owner}/goals/{goal_id}/resume", { params: { path: goal } });
  statuses.goal_resume = resumed2.response.status;
  assert.equal(resumed2.data?.paused, false);
  const removed = await client.DELETE("/v1/owners/{owner}/goals/{goal_id}", { params: { path: goal } });
  statuses.goal_remove = removed.response.status;
  assert.deepEqual(removed.data, { owner: plan.owner, goal_id: "weekly-report", removed: true });
  const removedAgain = await client.DELETE("/v1/owners/{owner}/goals/{goal_id}", { params: { path: goal } });
  refusal("goal_unknown", removedAgain.response.status, removedAgain.error, 404, "unknown_goal");
}

await parsing();
await (plan.mode === "refusals" ? refusals() : contract());
process.stdout.write(`${JSON.stringify(statuses)}\n`);
