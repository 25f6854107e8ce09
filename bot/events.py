"""The one event stream of a turn, which every front end renders the same way."""

from __future__ import annotations

from dataclasses import dataclass, field

from executor.models import OutputEvent, Status
from storage.artifacts import Artifact


@dataclass(frozen=True, slots=True)
class Thinking:
    """The model is being asked (step N of the turn)."""

    step: int


@dataclass(frozen=True, slots=True)
class CodeStarted:
    code: str


@dataclass(frozen=True, slots=True)
class OutputChunk:
    output: OutputEvent


@dataclass(frozen=True, slots=True)
class ExecutionFinished:
    status: Status
    duration_ms: int
    message: str = ""
    session_restarted: bool = False
    workspace: str = ""
    """What became of the conversation's saved workspace for this run, if anything."""


@dataclass(frozen=True, slots=True)
class ArtifactsPublished:
    artifacts: list[Artifact] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know that is not the answer (a refused attachment)."""

    text: str


@dataclass(frozen=True, slots=True)
class Answer:
    text: str


@dataclass(frozen=True, slots=True)
class Failure:
    """The turn could not finish; `message` says why, for the user."""

    message: str


TurnEvent = (
    Thinking
    | CodeStarted
    | OutputChunk
    | ExecutionFinished
    | ArtifactsPublished
    | Notice
    | Answer
    | Failure
)
