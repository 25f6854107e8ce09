"""What a session run has to tell beyond its own outcome, as data: why the conversation's
previous session ended, that a session carried on across a restart of the bot, and what
became of a saved workspace. Callers phrase it for people (the bot: `bot/sandbox_words.py`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Ending(enum.Enum):
    """Why a conversation's previous session ended."""

    IDLE = "idle"
    """It ran nothing for the idle timeout (`Ended.seconds`)."""
    LIFETIME = "lifetime"
    """It reached its maximum lifetime (`Ended.seconds`)."""
    MADE_ROOM = "made room"
    """It was idle while another conversation needed a sandbox."""
    OUT_OF_MEMORY = "memory"
    TIME_LIMIT = "timeout"
    """Its last run was stopped at the time limit."""
    STOPPED_ON_REQUEST = "stopped"
    KERNEL_DIED = "kernel died"
    SANDBOX_STOPPED = "sandbox stopped"
    """Its sandbox went (removed from outside, or everything in it ended)."""
    FLOODED = "flooded"
    """Its sandbox wrote too much outside its protocol and the backend stopped it."""
    CHANNEL_DAMAGED = "channel damaged"
    """Code in its sandbox broke the runner's messages (wrote into their channel); the host
    stopped it, since what the runner said could no longer be trusted to be whole."""


@dataclass(frozen=True, slots=True)
class Ended:
    reason: Ending
    seconds: float = 0.0
    """The idle timeout or the lifetime it reached."""


class Held(enum.Enum):
    """Why nothing more may be restored into a session: a restore happens at most once, so
    it never runs twice nor replaces newer variables with older ones."""

    RESTORED = "restored"
    """The workspace was already restored into it."""
    RAN_WITHOUT = "ran without"
    """Code already ran in it without the saved variables."""
    FAILED = "failed"
    """The workspace could not be restored into it."""


class WorkspaceEvent(enum.Enum):
    RESTORED = "restored"
    """Files and variables came back: `names`, and `missing` with why."""
    FILES_BACK = "files back"
    """The files (`names`) came back; the variables (`withheld`) were not loaded."""
    WAITING = "waiting"
    """Without automatic restore: one is saved, holding `names`; /restore brings it back."""
    NOT_RESTORED = "not restored"
    """It could not be restored (`why`); the session starts empty."""
    NOT_SAVED = "not saved"
    """The last session's could not be saved (`why`; '' when it took too long)."""
    NONE_SAVED = "none saved"
    NOT_KEPT = "not kept"
    """Workspaces are not kept by this executor."""
    HELD = "held"
    """Nothing more may be restored into this session (`held` says why)."""
    RESUMED = "resumed"
    """The session was resumed from its memory snapshot (taken at `saved_at`): every
    variable is back as it was; its files (`names`) were put back, `missing` what was not."""


@dataclass(frozen=True, slots=True)
class WorkspaceNews:
    event: WorkspaceEvent
    saved_at: float = 0.0
    """When the workspace was saved (epoch seconds)."""
    names: tuple[str, ...] = ()
    withheld: tuple[str, ...] = ()
    missing: Mapping[str, str] = field(default_factory=dict)
    """Variables and files not restored, with why (as the sandbox or the save said)."""
    why: str = ""
    """What the store or the sandbox said when the whole save or restore failed."""
    held: Held | None = None
    packages: tuple[str, ...] = ()
    """Packages (`name==version`) the session had installed, installed again."""
    packages_missing: tuple[str, ...] = ()
    """Packages it had that could not be installed again (`packages_why` says why)."""
    packages_why: str = ""
    snapshot_why: str = ""
    """Why the session's memory snapshot could not be taken or resumed, when its workspace
    came back instead ('' when there was none to resume, or it was)."""


def ending_of_run(status: str, message: str, alive: bool, damaged: bool = False) -> Ended:
    """Why a session ends after a run that left its sandbox unusable."""
    if damaged:
        return Ended(Ending.CHANNEL_DAMAGED)
    if status == "memory":
        return Ended(Ending.OUT_OF_MEMORY)
    if status == "timeout":
        return Ended(Ending.TIME_LIMIT)
    if "stopped on request" in message:
        return Ended(Ending.STOPPED_ON_REQUEST)
    if message.startswith("The sandbox stopped") or not alive:
        # The whole sandbox went (deleted from outside; under gVisor the kernel may be
        # reported dead first as everything in it ends).
        return Ended(Ending.SANDBOX_STOPPED)
    return Ended(Ending.KERNEL_DIED)


def ending_of_sandbox(sandbox: object) -> Ended:
    """Why a session ends whose sandbox is gone."""
    # A backend that cut a sandbox off for writing outside its protocol says so.
    if getattr(sandbox, "flooded", False):
        return Ended(Ending.FLOODED)
    return Ended(Ending.SANDBOX_STOPPED)
