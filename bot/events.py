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
    language: str = "python"


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
class RunDetached:
    """The run went on in the background: its end is reported elsewhere (`text` says so)."""

    text: str


@dataclass(frozen=True, slots=True)
class ArtifactsPublished:
    artifacts: list[Artifact] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know that is not the answer (a refused attachment)."""

    text: str


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """The model's reply so far, while it is being written; the one `Answer` still follows."""

    text: str


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """Code the model wrote waits for a person's decision (the place's policy is approve);
    the front end shows it with Run, Edit and Cancel, named by `key`."""

    key: str
    code: str
    requester: str
    """Who asked (a user id)."""
    approvers: str
    """Who may decide: "requester" (who asked, or a moderator) or "moderators"."""
    timeout_s: float


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """What became of the code waiting under `key`: its Run, Edit and Cancel go away."""

    key: str
    verdict: str
    """One of: run, edited, cancelled, timed out, stopped."""
    by: str = ""
    """Who decided (a user id); '' when nobody did."""


@dataclass(frozen=True, slots=True)
class InputRequested:
    """The running code waits in `input()` (or `getpass()`: `password`) for `person` to
    answer; the front end shows the prompt with an Answer control, named by `key`."""

    key: str
    prompt: str
    password: bool
    person: str
    """Whose turn it is (a user id): only they may answer."""
    timeout_s: float


@dataclass(frozen=True, slots=True)
class InputAnswered:
    """What became of the input waiting under `key`: its Answer control goes away."""

    key: str
    outcome: str
    """One of: answered, timed out, stopped."""
    shown: str = ""
    """The answer as the thread may show it: the text of an `input()`, `••••` for a
    `getpass()` (whose answer is shown nowhere); '' when none came."""
    by: str = ""


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
    | RunDetached
    | ArtifactsPublished
    | Notice
    | ApprovalRequested
    | ApprovalDecided
    | InputRequested
    | InputAnswered
    | AnswerDelta
    | Answer
    | Failure
)
