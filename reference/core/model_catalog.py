"""The models this core offers, by the name a CreateSession request selects.

Always `scripted` (deterministic: tests, demo, benchmarks); with an OpenAI-compatible API configured
(`OpenAIConfig`), also `openai:<model>` for each configured model. Any other name is refused at create
with a 400 `unknown_model`.

A factory turns a request into a ready model, or raises `ValueError` (e.g. `ScriptError`) for a request
the model cannot run; create answers that with a 400 Problem. Tests and the demo may pass their own
catalog to `create_app` / `running_core`, e.g. a model that records every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.core_api import CreateSession
from reference.core.latches import LatchHolds
from reference.core.model import Model
from reference.core.openai_model import OpenAIChatModel, OpenAIConfig
from reference.core.script import ScriptEnd, parse_script
from reference.core.scripted_model import MODEL_NAME, ScriptedModel


@dataclass(frozen=True)
class TurnFaults:
    """How a turn misbehaves on cancel, for simulating slow or silent cores; a real model has none."""

    cancel_delay_ms: int = 0  # a cancel stops the turn only after this delay
    ignores_cancel: bool = False  # a cancel never stops the turn (a core that stays silent)


@dataclass(frozen=True)
class PreparedModel:
    model: Model
    faults: TurnFaults = field(default_factory=TurnFaults)
    holds: LatchHolds = field(default_factory=LatchHolds)  # demo and tests: where the turn waits on latches


ModelFactory = Callable[[CreateSession], PreparedModel]


def scripted(request: CreateSession) -> PreparedModel:
    script = parse_script(request.task, request.boundary, request.language)
    faults = TurnFaults(cancel_delay_ms=script.cancel_delay_ms, ignores_cancel=script.end is ScriptEnd.HANG)
    return PreparedModel(ScriptedModel(script, request.task, request.language), faults, script.holds)


def openai_factory(config: OpenAIConfig, model: str) -> ModelFactory:
    """Sessions on `model` at the configured OpenAI-compatible API (no faults: cancel stops at once)."""

    def factory(request: CreateSession) -> PreparedModel:
        return PreparedModel(OpenAIChatModel(config, model))

    return factory


def default_models(openai: OpenAIConfig | None = None) -> dict[str, ModelFactory]:
    """The scripted model, plus `openai:<model>` for each configured model when `openai` is set."""
    models: dict[str, ModelFactory] = {MODEL_NAME: scripted}
    if openai is not None:
        for name, model in openai.catalog_names.items():
            models[name] = openai_factory(openai, model)
    return models
