"""The service's routes by concern, each on its router: an owner's helpers and the chat's reads and deliveries
(`helpers`), Goals (`goals`), live lines (`live_lines`), and the probes and metrics (`probes`). Every /v1 route
runs a console-script command (`starter.commands`) and replies as `starter.service.replies` says."""

from typing import Annotated

from fastapi import Path

from starter.service.bodies import GOAL_ID_SCHEMA, ID_SCHEMA

# The path parameters, described as the console script checks them (the checks are `starter.commands`').
Owner = Annotated[str, Path(description="the owner's id", json_schema_extra=ID_SCHEMA)]
HelperId = Annotated[str, Path(description="the helper's id", json_schema_extra=ID_SCHEMA)]
GoalId = Annotated[str, Path(description="the Goal's id", json_schema_extra=GOAL_ID_SCHEMA)]

OWNER_PREFIX = "/v1/owners/{owner}"
