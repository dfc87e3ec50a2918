"""The owner's answer to a question or an authorization wait (R49): one authoritative answer, and the follow-up
that goes on from it.

- What an outcome takes comes with the helper's finished notice (`asked_of`): a structured question takes one
  of its options, or free text where it allows it; a plain-text question takes free text under the id
  `question`; an authorization wait takes `grant` or `deny` under the id `authorization`. A grant may carry, as its
  text, the action granted: the one asked or a narrowing of it (the same tool, some of its targets), never a wider or
  another one (R55). The edit rides in `text` so that a coordinator of an earlier build, which takes exactly one of
  an option and a text, refuses it instead of granting the whole action.
- The first valid answer is recorded in the book entry (`record`) and is the only one: a later answer to
  the same question, the same or another the question takes, gets the first back and starts nothing
  (`Repeated`). An answer to
  another question than the one waiting, an option not offered, free text where none is taken, a grant whose
  item does not parse as a boundary item or that widens the action asked, or a helper that is not in this owner's
  book is refused, and nothing is written.
- Every answer but `deny` admits a follow-up (`follow_up_request`), through the same admission rules as
  `start --follow-up`; its helper id is derived from the question's (`answer_helper_id`). If that admission is
  refused, so is the answer, unrecorded, and it can be given again. `deny` starts nothing: the outcome is
  delivered (the owner answered it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypeAlias

from contracts.core_api import MAX_CHOICE_ID_CHARS, QuestionChoices
from domain.audit import WaitEndKind, WaitRecord
from domain.book import delivery, waits
from domain.book.admission import Admit, AlreadyAdmitted
from domain.book.admission import decide as decide_admission
from domain.book.state import (
    AwaitEarlier,
    Entry,
    Judgement,
    OwnerBook,
    Refusal,
    RefusalCode,
    other_owner,
    refusal,
    still_working,
    unknown_helper,
)
from domain.boundary import (
    BoundaryError,
    GrantedAction,
    beyond,
    control_character_problem,
    parse_boundary,
    parse_item,
)
from domain.ids import ID_MAX_CHARS, check_id
from domain.limits import ANSWER_TEXT_MAX_CHARS, HELPER_BOUNDARY_ITEM_MAX_CHARS, HELPER_BOUNDARY_MAX_ITEMS
from domain.messages.signals import AUTHORIZATION_QUESTION_ID, PLAIN_QUESTION_ID, Asked
from domain.messages.updates import DECIDER_MAX_CHARS, Decider, OwnerAnswer
from domain.outcome import OutcomeKind
from domain.requests import HelperRequest, check_utf8
from domain.rows import RowState
from domain.texts import text

GRANT: Final = "grant"
DENY: Final = "deny"
# The suffix of a follow-up's helper id (`answer_helper_id`).
ANSWER_SUFFIX: Final = ".answer"
_DIGEST_CHARS = 8


@dataclass(frozen=True)
class Repeated:
    """The question was answered already: the first answer, and whether this one is the same."""

    entry: Entry
    same: bool


@dataclass(frozen=True)
class TakeAnswer:
    """A first, valid answer: record it, then admit its follow-up as decided (None: a denial, nothing starts)."""

    follow_up: HelperRequest | None
    admission: Admit | None


# Take the answer, give the first one back, or wait for the helper's finished notice.
Verdict: TypeAlias = Repeated | TakeAnswer | AwaitEarlier


def asked_of(
    kind: OutcomeKind,
    *,
    choices: QuestionChoices | None,
    authorization_action: str | None,
    model: str,
    boundary: tuple[str, ...],
) -> Asked | None:
    """What an outcome takes as an answer; None for an outcome that waits for nobody."""
    if kind is OutcomeKind.QUESTION:
        question_id = choices.question_id if choices is not None else PLAIN_QUESTION_ID
        return Asked(question_id=question_id, choices=choices, model=model, boundary=boundary)
    if kind is OutcomeKind.AUTHORIZATION:
        # One character over the item bound is kept, so an overlong item is refused at grant, not cut to fit.
        grant = (authorization_action or "")[: HELPER_BOUNDARY_ITEM_MAX_CHARS + 1].strip() or None
        return Asked(question_id=AUTHORIZATION_QUESTION_ID, grant=grant, model=model, boundary=boundary)
    return None


def answer_problems(answer: OwnerAnswer, decider: Decider | None = None) -> list[str]:
    """The answer's own bounds, wherever it enters (the starter, the coordinator's validator): a question id and
    an option id of 1-64 printable characters, exactly one of an option and a text (an authorization's `grant` may
    carry both: its text is the action granted, a boundary item), a text of 1-4,000 characters without control
    characters other than line breaks and tabs; who answered and via what (`by`, `via`) of 1-64 characters without
    control characters."""
    problems = _decider_problems(decider) if decider is not None else []
    for field, value in (("question_id", answer.question_id), ("option_id", answer.option_id), ("text", answer.text)):
        try:
            check_utf8(field, value or "")
        except ValueError as error:
            return [str(error)]
    for field, value in (("question_id", answer.question_id), ("option_id", answer.option_id)):
        if value is not None and (not 0 < len(value) <= MAX_CHOICE_ID_CHARS or not value.isprintable()):
            problems.append(f"{field}: use 1-{MAX_CHOICE_ID_CHARS} printable characters")
    if narrows(answer):
        try:
            parse_item(answer.text or "")
        except BoundaryError as error:
            problems.append(f"text (the action granted): {error}")
        return problems
    if (answer.option_id is None) == (answer.text is None):
        problems.append("answer with exactly one of option_id and text (or grant with the action granted as text)")
    if answer.text is not None:
        if not answer.text.strip():
            problems.append("text is empty")
        elif len(answer.text) > ANSWER_TEXT_MAX_CHARS:
            problems.append(f"text has {len(answer.text)} characters; at most {ANSWER_TEXT_MAX_CHARS} are allowed")
        elif (problem := control_character_problem("text", answer.text, "\n\t\r")) is not None:
            problems.append(problem)
    return problems


def narrows(answer: OwnerAnswer) -> bool:
    """An authorization's grant that names the action granted (R55): checked against the one asked (`_offered`)."""
    return answer.question_id == AUTHORIZATION_QUESTION_ID and answer.option_id == GRANT and answer.text is not None


def _decider_problems(decider: Decider) -> list[str]:
    problems = []
    for field, value in (("by", decider.by), ("via", decider.via)):
        if value is None:
            continue
        try:
            check_utf8(field, value)
        except ValueError as error:
            return [str(error)]
        if not value.strip() or len(value) > DECIDER_MAX_CHARS:
            problems.append(f"{field}: use 1-{DECIDER_MAX_CHARS} characters")
        elif (problem := control_character_problem(field, value)) is not None:
            problems.append(problem)
    return problems


def answer_helper_id(helper_id: str) -> str:
    """The follow-up's helper id: the question's id with `.answer` appended; an id too long for that keeps its first
    characters and a digest of the whole, so two long ids never share a follow-up."""
    derived = helper_id + ANSWER_SUFFIX
    if len(derived) > ID_MAX_CHARS:
        digest = hashlib.sha256(helper_id.encode()).hexdigest()[:_DIGEST_CHARS]
        keep = ID_MAX_CHARS - len(ANSWER_SUFFIX) - 1 - _DIGEST_CHARS
        derived = f"{helper_id[:keep]}{ANSWER_SUFFIX}.{digest}"
    return check_id("helper id", derived)


def judge(
    book: OwnerBook,
    owner: str,
    helper_id: str,
    answer: OwnerAnswer,
    *,
    arrived_at: datetime,
    waited: bool = False,
    decider: Decider | None = None,
) -> Judgement[Verdict]:
    """The whole judgement of an owner's answer, as the coordinator's validator and its handler both make it: the
    owner, the answer's own bounds (`answer_problems`), then, once the helper's finished notice is in the book or was
    `waited` for, the answer's rules (`decide`) and its follow-up's admission by the admission rules. A
    follow-up that would be refused refuses the answer, which is then not recorded: the owner can answer again."""
    wrong_owner = other_owner(book, owner, book.language)
    if wrong_owner is not None:
        return wrong_owner
    problems = answer_problems(answer, decider)
    if problems:
        return Refusal(code=RefusalCode.INVALID_REQUEST, message="; ".join(problems))
    if not waited and still_working(book, helper_id):
        return AwaitEarlier()
    decision = decide(book, helper_id, answer, arrived_at=arrived_at)
    if decision is not None:
        return decision
    follow_up = follow_up_request(book, book.entries[helper_id], answer)
    if follow_up is None:
        return TakeAnswer(None, None)
    admission = decide_admission(book, follow_up)
    if isinstance(admission, AlreadyAdmitted):  # excluded by `decide`: never admits over another helper
        return refusal(
            RefusalCode.NOT_ANSWERABLE,
            "refused.answer_id_taken",
            follow_up.language,
            helper_id=helper_id,
            follow_up=follow_up.helper_id,
        )
    if isinstance(admission, Refusal):
        return admission
    return TakeAnswer(follow_up, admission)


def decide(book: OwnerBook, helper_id: str, answer: OwnerAnswer, *, arrived_at: datetime) -> Judgement[Repeated | None]:
    """None for a first valid answer (take it); `Repeated` when the question was answered already; or the refusal.

    `arrived_at` is when the coordinator took the answer in. One that came before the helper's outcome was decided
    (its `finished_at`) answers a question nobody could have seen, however right it is: not answerable. The
    coordinator waits for the finished notice of a helper still working when an answer arrives (its row can show the
    outcome a moment before the notice), so the outcome's time is known when this decides."""
    language = book.language
    entry = book.entries.get(helper_id)
    if entry is None:  # another owner's helper is not in this book either
        expired = next((wait for wait in book.recently_expired if wait.helper_id == helper_id), None)
        if expired is not None:
            return _expired(helper_id, expired.expired_at, language)
        return unknown_helper(helper_id, language)
    language = entry.language
    if entry.state is RowState.EXPIRED and entry.expired_at is not None:
        return _expired(helper_id, entry.expired_at, language)
    if waits.past_bound(entry, arrived_at):
        assert entry.wait_ends_at is not None
        return _expired(helper_id, entry.wait_ends_at, language)
    asked = entry.asked
    if asked is None or entry.state.is_open:
        return refusal(RefusalCode.NOT_ANSWERABLE, "refused.answer_nothing_asked", language, helper_id=helper_id)
    if entry.finished_at is not None and arrived_at < entry.finished_at:
        return refusal(RefusalCode.NOT_ANSWERABLE, "refused.answer_before_asked", language, helper_id=helper_id)
    if answer.question_id != asked.question_id:
        return refusal(
            RefusalCode.STALE_QUESTION,
            "refused.answer_stale" if entry.answer is None else "refused.answer_stale_answered",
            language,
            helper_id=helper_id,
            question_id=answer.question_id,
            asked=asked.question_id,
        )
    not_offered = _offered(asked, answer, helper_id, language)
    if not_offered is not None:
        return not_offered
    if entry.answer is not None:
        return Repeated(entry, same=entry.answer == answer)
    if entry.state is RowState.CLOSED or entry.close_requested:
        return refusal(RefusalCode.NOT_ANSWERABLE, "refused.answer_closed", language, helper_id=helper_id)
    if entry.followed_up_by is not None:
        return refusal(
            RefusalCode.NOT_ANSWERABLE,
            "refused.answer_followed_up",
            language,
            helper_id=helper_id,
            follow_up=entry.followed_up_by,
        )
    follow_up_id = answer_helper_id(helper_id)
    if follow_up_id in book.entries:  # a helper of that id was started by hand: the answer cannot take its place
        return refusal(
            RefusalCode.NOT_ANSWERABLE, "refused.answer_id_taken", language, helper_id=helper_id, follow_up=follow_up_id
        )
    return None


def _expired(helper_id: str, expired_at: datetime, language: str) -> Refusal:
    """The wait ended unanswered: nothing was done, and an answer now starts nothing (R54)."""
    return refusal(RefusalCode.EXPIRED, "refused.answer_expired", language, helper_id=helper_id, at=_moment(expired_at))


def late(record: WaitRecord) -> Refusal:
    """An answer to a wait whose helper the coordinator no longer knows, refused with how the wait ended, as its
    record says (R56); an expired one as the coordinator refuses it while it still knows the helper."""
    if record.ended is WaitEndKind.EXPIRED:
        return _expired(record.helper_id, record.ended_at, record.language)
    how = text(f"wait_ended.{record.ended.value}", record.language)
    at = _moment(record.ended_at)
    return refusal(
        RefusalCode.WAIT_ENDED, "refused.answer_wait_ended", record.language, helper_id=record.helper_id, at=at, how=how
    )


def _moment(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _offered(asked: Asked, answer: OwnerAnswer, helper_id: str, language: str) -> Refusal | None:
    """An option that was offered, free text where it is taken, a grant whose item is a boundary item (R41)."""
    if asked.question_id == AUTHORIZATION_QUESTION_ID:
        if answer.option_id not in (GRANT, DENY):
            return refusal(RefusalCode.NOT_OFFERED, "refused.answer_grant_or_deny", language, helper_id=helper_id)
        if answer.option_id == GRANT:
            problem = grant_problem(asked)
            if problem is not None:
                return refusal(
                    RefusalCode.GRANT_REFUSED, "refused.grant_unparsed", language, helper_id=helper_id, why=problem
                )
            if narrows(answer):
                assert asked.grant is not None and answer.text is not None
                wider = beyond(parse_item(asked.grant), parse_item(answer.text))
                if wider is not None:
                    return refusal(
                        RefusalCode.GRANT_WIDENS,
                        "refused.grant_widens",
                        language,
                        helper_id=helper_id,
                        asked=asked.grant,
                        wider=str(wider),
                    )
        return None
    options = [option.id for option in asked.choices.options] if asked.choices is not None else []
    free_text = asked.choices.free_text if asked.choices is not None else True
    if answer.option_id is not None and answer.option_id not in options:
        return refusal(
            RefusalCode.NOT_OFFERED,
            "refused.answer_not_offered",
            language,
            helper_id=helper_id,
            option_id=answer.option_id,
            options=", ".join(options) or "-",
        )
    if answer.text is not None and not free_text:
        return refusal(
            RefusalCode.NOT_OFFERED,
            "refused.answer_no_free_text",
            language,
            helper_id=helper_id,
            options=", ".join(options),
        )
    return None


def grant_problem(asked: Asked) -> str | None:
    """Why the item an authorization wait asked for cannot be granted, or None: it must parse as every boundary
    item does (R41), and the boundary with it must stay within its bounds."""
    if asked.grant is None:
        return "the core named no action"
    if len(asked.grant) > HELPER_BOUNDARY_ITEM_MAX_CHARS:
        return f"the action has more than {HELPER_BOUNDARY_ITEM_MAX_CHARS} characters"
    try:
        parse_item(asked.grant)
    except BoundaryError as error:
        return str(error)
    if asked.grant not in asked.boundary and len(asked.boundary) >= HELPER_BOUNDARY_MAX_ITEMS:
        return f"the boundary already names {HELPER_BOUNDARY_MAX_ITEMS} actions"
    return None


def granted_item(asked: Asked, answer: OwnerAnswer | None) -> str | None:
    """The action a valid grant grants: the one it names (a narrowing, in the grammar's own spelling) or else the one
    asked; None for any other answer."""
    if asked.question_id != AUTHORIZATION_QUESTION_ID or answer is None or answer.option_id != GRANT:
        return None
    if narrows(answer):
        return str(parse_item(answer.text or ""))
    return asked.grant


def follow_up_request(book: OwnerBook, entry: Entry, answer: OwnerAnswer) -> HelperRequest | None:
    """The follow-up that goes on from a valid answer, in the owner's language and on the question's model; None for
    `deny`, which starts nothing. A grant's follow-up carries the action granted beside the question's boundary, to
    be performed once (R55); a core that cannot honour a grant once gets it in the boundary instead
    (`activities.follow_ups.create_request`)."""
    asked = entry.asked
    assert asked is not None
    language = entry.language
    granted = granted_item(asked, answer)
    if asked.question_id == AUTHORIZATION_QUESTION_ID:
        if granted is None:
            return None
        task = text("answer.task.grant", language, item=granted)
    elif answer.option_id is not None:
        assert asked.choices is not None
        label = next(option.label for option in asked.choices.options if option.id == answer.option_id)
        task = text("answer.task.option", language, question_id=asked.question_id, label=label)
    else:
        task = text("answer.task.text", language, question_id=asked.question_id, answer=answer.text or "")
    request = HelperRequest(
        owner=book.owner,
        helper_id=answer_helper_id(entry.helper_id),
        task=task,
        boundary=asked.boundary,
        language=language,
        model=asked.model,
        follow_up=entry.helper_id,
        granted_action=GrantedAction(action=granted, asked=asked.grant or granted) if granted is not None else None,
    )
    parse_boundary(request.boundary)  # the question's own boundary, admitted with it
    return request


def record(book: OwnerBook, helper_id: str, answer: OwnerAnswer) -> Entry:
    """The first valid answer becomes the one: later answers get it back (`decide`)."""
    entry = book.entries[helper_id]
    entry.answer = answer
    return entry


def withdraw(book: OwnerBook, helper_id: str) -> None:
    """The follow-up could not be admitted after all (its write failed): the answer was not taken."""
    entry = book.entries.get(helper_id)
    if entry is not None:
        entry.answer = None


def deny(book: OwnerBook, entry: Entry, now: datetime) -> bool:
    """A denied authorization is answered: its outcome is delivered, nothing starts. True if the row changes."""
    changed = delivery.deliver_one(book, entry, now)
    if changed:
        entry.generation += 1
    return changed
