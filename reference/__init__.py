"""Stand-ins for what lies outside the project: the reference core (an agent runtime with eve's session API and
ceilings) and the reference chat (Iva's side of the chat bridge). They serve the local stack, the tests and the
benches; a deployment talks to the real core and chat instead."""
