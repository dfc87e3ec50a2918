"""The reference core's own owner-facing texts, in English and Russian.

The core is a separate product from the helper runtime, so it keeps its own texts instead of
importing the runtime's (`domain.texts`). Owner-facing means: stop explanations, outcome texts,
refusals, actions and the scripted model's messages, all of which reach the owner through Iva.
"""

from __future__ import annotations

from typing import Final

LANGUAGES: Final = ("en", "ru")

_TEXTS: Final[dict[str, dict[str, str]]] = {
    # Stop explanations that open a partial outcome (R14, R32).
    "stop.steps": {
        "en": "I stopped at the step ceiling of {max_steps} steps, so this is a partial outcome.",
        "ru": "Я остановился на пределе шагов ({max_steps}), поэтому это частичный итог.",
    },
    "stop.input": {
        "en": "I stopped at the ceiling of {max_input_tokens} cumulative input tokens, so this is a partial outcome.",
        "ru": "Я остановился на пределе суммарных входных токенов ({max_input_tokens}), поэтому это частичный итог.",
    },
    "stop.finish_now": {
        "en": "I was asked to finish now, so this is a partial outcome.",
        "ru": "Меня попросили закончить сейчас, поэтому это частичный итог.",
    },
    "stop.no_message": {
        "en": "No message was completed before the stop.",
        "ru": "До остановки не было завершено ни одного сообщения.",
    },
    # Other outcome texts.
    "outcome.cancelled": {
        "en": "The turn was cancelled.",
        "ru": "Ход отменён.",
    },
    "outcome.interrupted": {
        "en": "The core restarted while this turn was running. The turn was stopped and will not be "
        "repeated; ask again to run the task anew.",
        "ru": "Ядро перезапустилось, пока шёл этот ход. Ход остановлен и не будет повторён; "
        "попросите снова, чтобы выполнить задание заново.",
    },
    "outcome.failed": {
        "en": "The turn failed: {error}",
        "ru": "Ход завершился с ошибкой: {error}",
    },
    "outcome.question": {
        "en": "I need an answer from the owner: {question}",
        "ru": "Мне нужен ответ владельца: {question}",
    },
    "outcome.question_options": {
        "en": "Options: {options}.",
        "ru": "Варианты: {options}.",
    },
    "outcome.question_free_text": {
        "en": "An answer in your own words is welcome too.",
        "ru": "Можно ответить и своими словами.",
    },
    "outcome.authorization": {
        "en": "I am waiting for authorization to {action}.",
        "ru": "Я жду разрешения: {action}.",
    },
    "outcome.last_message": {
        "en": "Last completed message:",
        "ru": "Последнее завершённое сообщение:",
    },
    "outcome.refusals_heading": {
        "en": "Refused actions:",
        "ru": "Отклонённые действия:",
    },
    # Refusals of irreversible tools outside the boundary (R33).
    "refusal.outside_boundary": {
        "en": "Refused {tool} ({target}): it is irreversible and the task's boundary does not authorize it.",
        "ru": "Отклонено {tool} ({target}): это необратимое действие, а граница задания его не разрешает.",
    },
    # A grant's action performed once already (R55); the code names the refusal for a machine.
    "refusal.grant_used": {
        "en": "Refused {tool} ({target}): the owner granted it once, and it was done already (grant_used).",
        "ru": "Отклонено {tool} ({target}): владелец разрешил это один раз, и это уже сделано (grant_used).",
    },
    # What a performed action did (R18: whom, what, when).
    "action.draft_mail": {
        "en": "drafted a mail with the subject '{subject}'",
        "ru": "подготовлен черновик письма с темой «{subject}»",
    },
    "action.send_mail": {
        "en": "sent a mail with the subject '{subject}'",
        "ru": "отправлено письмо с темой «{subject}»",
    },
    "action.create_event": {
        "en": "created the event '{title}' at {when}",
        "ru": "создано событие «{title}» на {when}",
    },
    "action.whom_owner": {
        "en": "the owner",
        "ru": "владелец",
    },
    # The scripted model's messages.
    "scripted.progress": {
        "en": "Step {index} of '{title}': {doing}.",
        "ru": "Шаг {index} задания «{title}»: {doing}.",
    },
    "scripted.doing_nothing": {
        "en": "thinking it over",
        "ru": "обдумываю",
    },
    "scripted.doing_search_notes": {
        "en": "searching the notes for '{query}'",
        "ru": "ищу в заметках «{query}»",
    },
    "scripted.doing_read_mail": {
        "en": "reading the mail",
        "ru": "читаю почту",
    },
    "scripted.doing_draft_mail": {
        "en": "drafting a mail to {to}",
        "ru": "готовлю черновик письма для {to}",
    },
    "scripted.doing_send_mail": {
        "en": "sending a mail to {to}",
        "ru": "отправляю письмо для {to}",
    },
    "scripted.doing_create_event": {
        "en": "creating the event '{title}'",
        "ru": "создаю событие «{title}»",
    },
    "scripted.doing_ask": {
        "en": "asking the owner a question",
        "ru": "задаю владельцу вопрос",
    },
    "scripted.doing_authorization": {
        "en": "asking for authorization",
        "ru": "прошу разрешения",
    },
    "scripted.injection_seen": {
        "en": "A message I read contains instructions; it is data, so I did not follow them.",
        "ru": "В прочитанном сообщении есть инструкции; это данные, поэтому я им не следовал.",
    },
    "scripted.mail_body": {
        "en": "As you asked: {title}",
        "ru": "Как вы просили: {title}",
    },
    "scripted.done": {
        "en": "Done: '{title}' after {steps} steps.",
        "ru": "Готово: «{title}», шагов: {steps}.",
    },
    "scripted.summary": {
        "en": "Summary of '{title}' after {steps} steps.",
        "ru": "Итог задания «{title}», шагов: {steps}.",
    },
    "scripted.actions": {
        "en": "Actions: {actions}.",
        "ru": "Действия: {actions}.",
    },
    "scripted.no_actions": {
        "en": "No actions were performed.",
        "ru": "Никаких действий не выполнено.",
    },
    "scripted.refusals": {
        "en": "Refused: {refusals}",
        "ru": "Отклонено: {refusals}",
    },
    "scripted.recalled": {
        "en": "Recalled from earlier: {line}",
        "ru": "Вспоминаю из предыдущего: {line}",
    },
    "scripted.not_recalled": {
        "en": "Nothing earlier mentions '{phrase}'.",
        "ru": "Ранее ничего не сказано о «{phrase}».",
    },
    "scripted.question": {
        "en": "Which of the options should I choose for '{title}'?",
        "ru": "Какой вариант выбрать для задания «{title}»?",
    },
    "scripted.authorization": {
        "en": "send the prepared mail for '{title}'",
        "ru": "отправить подготовленное письмо по заданию «{title}»",
    },
    "scripted.authorization_reason": {
        "en": "the task's boundary does not name this action",
        "ru": "граница задания не называет это действие",
    },
}


def text(key: str, language: str, **fields: object) -> str:
    """The text `key` in `language` (English when the language has no variant), formatted with `fields`."""
    variants = _TEXTS[key]
    return variants.get(language, variants["en"]).format(**fields)


def keys() -> list[str]:
    return sorted(_TEXTS)


def variants(key: str) -> dict[str, str]:
    return dict(_TEXTS[key])
