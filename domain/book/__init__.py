"""The owner book: the coordinator's state for one owner (`domain.book.state`) and the rules that change it, one
module per concern: `admission`, `answering`, `closing`, `delivery`, `outbox`, `retention`, `slots` (and
`follow_up`, which admission and answering share). Callers use the modules by name (`admission.judge(book, …)`);
this package exports the state's types."""

from domain.book.state import (
    Asked,
    AwaitEarlier,
    ChatEventRecord,
    Entry,
    EventState,
    FinishedNotice,
    Judgement,
    OwnerAnswer,
    OwnerBook,
    Refusal,
    RefusalCode,
)

__all__ = [
    "Asked",
    "AwaitEarlier",
    "ChatEventRecord",
    "Entry",
    "EventState",
    "FinishedNotice",
    "Judgement",
    "OwnerAnswer",
    "OwnerBook",
    "Refusal",
    "RefusalCode",
]
