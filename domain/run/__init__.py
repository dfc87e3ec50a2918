"""The helper's rules, as the owner book is the coordinator's: the run's state and every rule of it
(`helper_run`), how a running helper ends (`ending`, with the owner's sentences in `ending_texts`), what a session
snapshot means (`follow`), and what becomes of a session after its outcome (`cleanup`, `kept_sessions`,
`follow_up_task`). Pure functions over plain data; `workflows/helper.py` and the session activities do the I/O."""
