"""The owner book: the coordinator's state for one owner (`domain.book.state`) and the rules that change it, one
module per concern: `admission`, `answering`, `closing`, `delivery`, `outbox`, `retention`, `slots` (and
`follow_up`, which admission and answering share), and what the coordinator writes from it, `writes`. Callers use
the modules by name (`admission.judge(book, …)`); this package exports the state's types."""

from domain.book.state import (
    AwaitEarlier,
    ChatEventRecord,
    Entry,
    EventKind,
    EventState,
    Judgement,
    OwnerBook,
    Refusal,
    RefusalCode,
)

__all__ = [
    "AwaitEarlier",
    "ChatEventRecord",
    "Entry",
    "EventKind",
    "EventState",
    "Judgement",
    "OwnerBook",
    "Refusal",
    "RefusalCode",
]
