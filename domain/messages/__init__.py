"""The messages between the parts, one module per kind:

- `updates`: what a caller asks the coordinator, and each reply;
- `signals`: what the workflows signal each other;
- `workflows`: each workflow's start input and result;
- `activities`: every activity's input and result.

The request `admit` takes is the domain's own shape, `domain.requests.HelperRequest`, kept there beside the rules
that admit it. The names the messages travel under (workflows, updates, signals, queries, activities) are in
`protocol.names`.

Temporal carries them as pydantic JSON, and recorded histories replay them: a field's name and type never change.
`updates` and `signals` import nothing of the owner book, whose state holds their shapes; `workflows` and
`activities` carry the book's `OwnerBook` and `EventState`, and the book's state never imports them, so no import
runs in a circle.
"""
