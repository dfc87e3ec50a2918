"""Every owner-facing text the runtime writes, in English and Russian (R32).

Texts are looked up by key and formatted with named fields; an unknown language falls back to
English only for internal callers (requests with an unknown language are refused at admission).

Durations and counts are passed already said, by `domain.durations.say_duration` and `say_count`
("30 seconds", "1,5 минуты", "1,000,000 tokens"), and every text is phrased so that their plain
form fits. Failure texts name a plain `reason.*` sentence, never a technical error string (R32).
"""

from __future__ import annotations

from typing import Final

SUPPORTED_LANGUAGES: Final = ("en", "ru")

_TEXTS: Final[dict[str, dict[str, str]]] = {
    # Refusals at admission (R2, R3, R5).
    "refused.too_many_open": {
        "en": "Helper {helper_id} was not started: {max_open} helpers are already open ({open_ids}). "
        "Close one or wait until one finishes.",
        "ru": "Помощник {helper_id} не запущен: открытых помощников уже {max_open} ({open_ids}). "
        "Закройте одного или дождитесь, пока кто-то закончит.",
    },
    "refused.goal_needs_open_place": {
        "en": "Goal check {helper_id} was not started: it would take the last open place, "
        "which is kept for your own helpers ({open_ids} are open).",
        "ru": "Проверка цели {helper_id} не запущена: она заняла бы последнее свободное место, "
        "которое оставлено для ваших помощников (открыты: {open_ids}).",
    },
    "refused.rows_full": {
        "en": "Helper {helper_id} was not started: all {max_rows} rows are in use by pending, running, "
        "unreported or Goal helpers, and none can be removed.",
        "ru": "Помощник {helper_id} не запущен: все {max_rows} строк заняты ожидающими, работающими, "
        "непрочитанными помощниками или проверками целей, и удалить нечего.",
    },
    "refused.goal_needs_row_place": {
        "en": "Goal check {helper_id} was not started: it would take the last row place, "
        "which is kept for your own helpers.",
        "ru": "Проверка цели {helper_id} не запущена: она заняла бы последнее место для строки, "
        "которое оставлено для ваших помощников.",
    },
    "refused.wrong_owner": {
        "en": "This request is for {asked}, but it reached the helpers of {owner}; nothing was taken.",
        "ru": "Этот запрос для {asked}, но он попал к помощникам {owner}; ничего не принято.",
    },
    "refused.unknown_helper": {
        "en": "There is no helper {helper_id}.",
        "ru": "Помощника {helper_id} нет.",
    },
    # Follow-ups: only an outcome that waits for the owner can be continued.
    "refused.follow_up_still_open": {
        "en": "Helper {earlier} is still working; it can be followed up once it has an outcome.",
        "ru": "Помощник {earlier} ещё работает; продолжить его можно, когда будет результат.",
    },
    "refused.follow_up_kind": {
        "en": "Helper {earlier} has nothing to continue: only a question, an authorization wait or a partial "
        "outcome can be followed up. Start new work instead.",
        "ru": "У помощника {earlier} нечего продолжать: продолжить можно только вопрос, ожидание разрешения "
        "или частичный результат. Начните новую работу.",
    },
    "refused.follow_up_closed": {
        "en": "Helper {earlier} was closed; it can no longer be followed up.",
        "ru": "Помощник {earlier} закрыт; продолжить его больше нельзя.",
    },
    "refused.follow_up_gone": {
        "en": "Helper {earlier} was already followed up by {follow_up}, which is no longer kept.",
        "ru": "Помощника {earlier} уже продолжил {follow_up}, а его строка больше не хранится.",
    },
    "refused.not_unreported": {
        "en": "Helper {helper_id} has no unreported outcome to read.",
        "ru": "У помощника {helper_id} нет непрочитанного результата.",
    },
    # Answers to a question or an authorization wait (R49, domain.book.answer).
    "refused.answer_nothing_asked": {
        "en": "Helper {helper_id} has no question or authorization wait to answer.",
        "ru": "У помощника {helper_id} нет вопроса или ожидания разрешения, на которые можно ответить.",
    },
    "refused.answer_closed": {
        "en": "Helper {helper_id} was closed; its question can no longer be answered.",
        "ru": "Помощник {helper_id} закрыт; на его вопрос больше нельзя ответить.",
    },
    "refused.answer_expired": {
        "en": "Helper {helper_id}'s wait expired unanswered at {at}; nothing was done, and an answer now starts "
        "nothing. Start new work to go on.",
        "ru": "Ожидание помощника {helper_id} истекло без ответа в {at}; ничего не сделано, и ответ теперь ничего "
        "не запустит. Чтобы продолжить, начните новую работу.",
    },
    "refused.answer_wait_ended": {
        "en": "Helper {helper_id}'s wait ended at {at}: {how}. An answer now starts nothing; start new work to go on.",
        "ru": "Ожидание помощника {helper_id} завершилось в {at}: {how}. Ответ теперь ничего не запустит; чтобы "
        "продолжить, начните новую работу.",
    },
    "wait_ended.answered": {"en": "it was answered", "ru": "на него уже ответили"},
    "wait_ended.granted": {"en": "the authorization was granted", "ru": "разрешение уже дано"},
    "wait_ended.denied": {"en": "the authorization was denied", "ru": "в разрешении отказано"},
    "wait_ended.closed": {"en": "the helper was closed", "ru": "помощник закрыт"},
    "wait_ended.followed_up": {"en": "another helper continued it", "ru": "его продолжил другой помощник"},
    "wait_ended.removed": {
        "en": "its row was removed to make room",
        "ru": "его строку удалили, чтобы освободить место",
    },
    "refused.answer_followed_up": {
        "en": "Helper {helper_id} was already continued by {follow_up}; its question can no longer be answered.",
        "ru": "Помощника {helper_id} уже продолжил {follow_up}; на его вопрос больше нельзя ответить.",
    },
    "refused.answer_stale": {
        "en": "Helper {helper_id} did not ask question {question_id}; the question waiting is {asked}.",
        "ru": "Помощник {helper_id} не задавал вопрос {question_id}; ждёт ответа вопрос {asked}.",
    },
    "refused.answer_stale_answered": {
        "en": "Helper {helper_id} did not ask question {question_id}; its question {asked} was answered already.",
        "ru": "Помощник {helper_id} не задавал вопрос {question_id}; на его вопрос {asked} уже ответили.",
    },
    "refused.answer_before_asked": {
        "en": "Helper {helper_id} had not asked anything yet when this answer came; answer the question it asks.",
        "ru": (
            "Когда пришёл этот ответ, помощник {helper_id} ещё ничего не спросил; ответьте на вопрос, который он "
            "задаст."
        ),
    },
    "refused.answer_not_offered": {
        "en": "Helper {helper_id} did not offer option {option_id}; it offered: {options}.",
        "ru": "Помощник {helper_id} не предлагал вариант {option_id}; он предложил: {options}.",
    },
    "refused.answer_no_free_text": {
        "en": "Helper {helper_id} takes no answer in words; choose one of: {options}.",
        "ru": "Помощник {helper_id} не принимает ответ словами; выберите один из вариантов: {options}.",
    },
    "refused.answer_grant_or_deny": {
        "en": "Helper {helper_id} waits for an authorization: answer grant or deny.",
        "ru": "Помощник {helper_id} ждёт разрешения: ответьте grant (разрешить) или deny (отказать).",
    },
    "refused.grant_unparsed": {
        "en": "The authorization helper {helper_id} asked for cannot be granted: {why}. "
        "Start a follow-up with the boundary you mean instead.",
        "ru": "Разрешение, которое просил помощник {helper_id}, нельзя выдать: {why}. "
        "Вместо этого запустите продолжение с нужной вам границей полномочий.",
    },
    "refused.grant_widens": {
        "en": "Helper {helper_id} asked for: {asked}. A grant may narrow that action, never widen it, and this one "
        "goes beyond it: {wider}. Grant the action asked or part of its recipients, or deny.",
        "ru": "Помощник {helper_id} просил: {asked}. Разрешение может сузить это действие, но не расширить, а это "
        "выходит за его пределы: {wider}. Разрешите запрошенное действие или его часть либо откажите.",
    },
    "refused.answer_id_taken": {
        "en": "Helper {helper_id}'s answer would start helper {follow_up}, but that id is taken by another helper.",
        "ru": "Ответ помощнику {helper_id} запустил бы помощника {follow_up}, но этот идентификатор уже занят.",
    },
    # The task of the follow-up an answer starts; the core continues the session that asked (R49).
    "answer.task.option": {
        "en": "The owner answered your question ({question_id}) with: {label}\nGo on with the work from this answer.",
        "ru": "Владелец ответил на ваш вопрос ({question_id}): {label}\nПродолжайте работу с этим ответом.",
    },
    "answer.task.text": {
        "en": "The owner answered your question ({question_id}) in their own words:\n\n{answer}\n\n"
        "Go on with the work from this answer.",
        "ru": "Владелец ответил на ваш вопрос ({question_id}) своими словами:\n\n{answer}\n\n"
        "Продолжайте работу с этим ответом.",
    },
    "answer.task.grant": {
        "en": "The owner granted the authorization you asked for: {item}. You may perform that action once now; "
        "go on with the work.",
        "ru": "Владелец дал разрешение, которое вы просили: {item}. Теперь вы можете выполнить это действие один "
        "раз; продолжайте работу.",
    },
    # A follow-up's task when the core cannot continue the earlier session itself (domain.run.follow_up_task).
    "follow_up.task": {
        "en": "This continues earlier work: helper {earlier} ended with {ended_with}. Its outcome, in full:\n\n"
        "{context}\n\nThe owner's answer, which is your task now:\n\n{answer}",
        "ru": "Это продолжение прежней работы: помощник {earlier} закончил {ended_with}. Его результат целиком:"
        "\n\n{context}\n\nОтвет владельца — теперь это ваша задача:\n\n{answer}",
    },
    "follow_up.context_gone": {
        "en": "This continues the work of helper {earlier}, whose outcome is no longer kept. "
        "The owner's answer, which is your task now:\n\n{answer}",
        "ru": "Это продолжение работы помощника {earlier}, чей результат больше не хранится. "
        "Ответ владельца — теперь это ваша задача:\n\n{answer}",
    },
    "outcome.follows_up": {
        "en": "This helper continued the work of helper {earlier}, as the owner asked.",
        "ru": "Этот помощник продолжил работу помощника {earlier}, как просил владелец.",
    },
    "outcome.granted": {
        "en": "The owner granted, to be done once: {action} (asked for: {asked}).",
        "ru": "Владелец разрешил, на один раз: {action} (запрошено: {asked}).",
    },
    "follow_up.context_cut": {
        "en": "(the rest of the earlier outcome is left out)",
        "ru": "(остальная часть прежнего результата опущена)",
    },
    "follow_up.ended_with.question": {"en": "a question to the owner", "ru": "вопросом к владельцу"},
    "follow_up.ended_with.authorization": {
        "en": "a wait for the owner's authorization",
        "ru": "ожиданием разрешения владельца",
    },
    "follow_up.ended_with.partial": {"en": "a partial outcome", "ru": "частичным результатом"},
    "follow_up.ended_with.question.expired": {
        "en": "a question to the owner that expired unanswered (nothing was done)",
        "ru": "вопросом к владельцу, срок которого истёк без ответа (ничего не сделано)",
    },
    "follow_up.ended_with.authorization.expired": {
        "en": "a wait for the owner's authorization that expired unanswered: nothing was done, and it was not denied",
        "ru": "ожиданием разрешения владельца, срок которого истёк без ответа: ничего не сделано, и это не отказ",
    },
    # Stop explanations written into outcomes (R13, R15, R17, R24). Durations and counts arrive
    # already said (`domain.durations`), in the plain form: "45 minutes", "1 000 000 токенов".
    "stop.work_ceiling": {
        "en": "Stopped at the work ceiling of {ceiling} (the calls that wrap up may go past it); "
        "this is a partial outcome.",
        "ru": "Остановлено на пределе работы в {ceiling} (завершающие вызовы могут его превысить); "
        "это частичный результат.",
    },
    "stop.deadline": {
        "en": "Stopped at the deadline of {deadline}; this is a partial outcome.",
        "ru": "Остановлено по истечении срока ({deadline}); это частичный результат.",
    },
    "stop.hard_ceiling": {
        "en": "The core did not finish within {grace} after the deadline of {deadline}; "
        "this outcome is the last completed message.",
        "ru": "Срок ({deadline}) истёк, и ядро не завершило работу за дополнительное время ({grace}); "
        "этот результат — последнее завершённое сообщение.",
    },
    "stop.close_unconfirmed": {
        "en": "Closed by the owner. The core did not confirm the stop in time, so the work is being stopped "
        "separately. The last completed message is kept for manual reading.",
        "ru": "Закрыт владельцем. Ядро вовремя не подтвердило остановку, поэтому работа останавливается "
        "отдельно. Последнее завершённое сообщение сохранено для чтения.",
    },
    "stop.no_message": {
        "en": "No message was completed before the stop.",
        "ru": "До остановки не было завершено ни одного сообщения.",
    },
    "outcome.question": {
        "en": "The helper needs an answer: {question}",
        "ru": "Помощнику нужен ответ: {question}",
    },
    "outcome.options_heading": {
        "en": "Options to choose from:",
        "ru": "Варианты ответа:",
    },
    "outcome.free_text": {
        "en": "Or answer in your own words.",
        "ru": "Или ответьте своими словами.",
    },
    "outcome.authorization": {
        "en": "The helper stopped because it needs authorization: {needed}",
        "ru": "Помощник остановился, потому что ему нужно разрешение: {needed}",
    },
    # {reason} is one of the plain `reason.*` sentences below, never a technical error string.
    "outcome.interrupted": {
        "en": "The helper was interrupted: {reason}. Nothing was repeated; ask again to run the task anew.",
        "ru": "Помощник прерван: {reason}. Ничего не повторялось; попросите снова, чтобы выполнить задачу заново.",
    },
    "outcome.failed": {
        "en": "The helper failed: {reason}",
        "ru": "Помощник завершился с ошибкой: {reason}",
    },
    "outcome.closed": {
        "en": "Closed by the owner. The last completed message is kept for manual reading.",
        "ru": "Закрыт владельцем. Последнее завершённое сообщение сохранено для чтения.",
    },
    "outcome.core_unreachable": {
        "en": "the core could not be reached to start the work",
        "ru": "не удалось связаться с ядром, чтобы начать работу",
    },
    # Plain reasons for `outcome.failed` and `outcome.interrupted`, as the owner reads them (R32):
    # lower-case clauses without a final period; technical details go to logs and workflow details.
    "reason.turn_interrupted": {
        "en": "the core stopped the turn before it finished",
        "ru": "ядро остановило ход до его завершения",
    },
    "reason.session_lost": {
        "en": "the core lost the session (for example, after a restart)",
        "ru": "ядро потеряло сессию (например, после перезапуска)",
    },
    "reason.core_no_answer_start": {
        "en": "the core did not confirm the start of the work in time; if the work started anyway, it will be stopped",
        "ru": "ядро вовремя не подтвердило начало работы; если работа всё же началась, она будет остановлена",
    },
    "reason.core_rejected": {
        "en": "the core refused the task (for example, because the model is unknown)",
        "ru": "ядро отказалось принять задачу (например, потому что модель неизвестна)",
    },
    "reason.core_unreachable": {
        "en": "the core could not be reached",
        "ru": "не удалось связаться с ядром",
    },
    "reason.core_bad_answers": {
        "en": "the core kept sending answers that could not be read",
        "ru": "ядро раз за разом присылало ответы, которые невозможно прочитать",
    },
    "reason.core_silent": {
        "en": "the core gave no answer for {duration}",
        "ru": "ядро не отвечало дольше допустимого ({duration})",
    },
    "reason.core_failed": {
        "en": "the work failed in the core",
        "ru": "работа в ядре завершилась с ошибкой",
    },
    # {detail}: the short error the core reported for the work (for example "provider timed out").
    "reason.core_failed_detail": {
        "en": "the work failed in the core: {detail}",
        "ru": "работа в ядре завершилась с ошибкой: {detail}",
    },
    "outcome.actions_heading": {
        "en": "Actions performed:",
        "ru": "Выполненные действия:",
    },
    "summary.cut_mark": {
        "en": " … (cut; the full text is kept)",
        "ru": " … (сокращено; полный текст сохранён)",
    },
    # The chat's system event (R26).
    "event.ready": {
        "en": "Helper outcomes are ready to report: {helper_ids}.",
        "ru": "Готовы результаты помощников: {helper_ids}.",
    },
    "event.reminder.question": {
        "en": "Reminder: helper {helper_ids} is still waiting for the owner's answer to its question ({about}).",
        "ru": "Напоминание: помощник {helper_ids} всё ещё ждёт ответа владельца на свой вопрос ({about}).",
    },
    "event.reminder.authorization": {
        "en": "Reminder: helper {helper_ids} is still waiting for the owner to grant or deny: {about}.",
        "ru": "Напоминание: помощник {helper_ids} всё ещё ждёт, разрешит ли владелец: {about}.",
    },
    "event.expired.question": {
        "en": "Helper {helper_ids}'s question ({about}) expired unanswered; nothing was done.",
        "ru": "Вопрос помощника {helper_ids} ({about}) остался без ответа, и его срок истёк; ничего не сделано.",
    },
    "event.expired.authorization": {
        "en": "Helper {helper_ids}'s request to {about} expired unanswered; nothing was done, and it was not denied.",
        "ru": "Запрос помощника {helper_ids} ({about}) остался без ответа, и его срок истёк; ничего не сделано, "
        "и это не отказ.",
    },
}


def text(key: str, language: str, **fields: object) -> str:
    """The owner-facing text `key` in `language`, formatted with `fields`."""
    variants = _TEXTS[key]
    template = variants.get(language, variants["en"])
    return template.format(**fields)


def keys() -> list[str]:
    """All text keys, for tests that check every text exists in every supported language."""
    return sorted(_TEXTS)


def variants(key: str) -> dict[str, str]:
    return dict(_TEXTS[key])
