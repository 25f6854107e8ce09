"""What a session run tells people beyond its own outcome, phrased from the executor's data
(`executor.session_news`): why the previous session ended, that a session carried on across
a restart, and what became of a saved workspace.

Names and reasons in a note can be any string (a variable's name, what the store said), so
each is shortened and made visible, and a note keeps a bounded length however many there
are: it stays well under one chat message.
"""

from __future__ import annotations

import dataclasses
import time
import unicodedata
from collections.abc import Mapping, Sequence

from executor.models import ExecutionResult
from executor.session import Restored
from executor.session_news import Ended, Ending, Held, WorkspaceEvent, WorkspaceNews
from executor.session_workspace import restored_news
from executor.workspace import Workspace

RESUMED_NOTE = (
    "The bot restarted since the last run; this session carried on, with its variables and files."
)
NAME_SHOWN = 48
"""Characters of one variable or file name a note shows (a name can be any string)."""
REASON_SHOWN = 120
"""Characters of one reason a note shows (reasons can quote what the sandbox said), per
variable that could not be saved or loaded: many may be listed."""
FAILURE_SHOWN = 300
"""The one reason a whole save or restore failed (the store's own wording fits)."""
NAMES_ROOM = 600
MISSING_ROOM = 700
"""Characters a note gives to what came back, and to what did not: with its words, a note
stays well under one chat message (Discord's 2,000 characters)."""
LISTED_AT_MOST = 200
"""Names considered for a note (thousands of variables are counted, not all shortened)."""
NAMES_SHOWN = 8
NAME_CHARS = 40
"""The short notes (a workspace waiting for /restore, files back without variables) name
this many, each cut to this many characters."""

ENDINGS = {
    Ending.MADE_ROOM: "it was idle while another conversation needed a sandbox",
    Ending.OUT_OF_MEMORY: "the previous one ran out of memory",
    Ending.TIME_LIMIT: "the previous run was stopped at the time limit",
    Ending.STOPPED_ON_REQUEST: "the previous run was stopped on request",
    Ending.KERNEL_DIED: "the previous one's kernel died",
    Ending.SANDBOX_STOPPED: "its sandbox had stopped",
    Ending.FLOODED: "its sandbox wrote too much outside its protocol and was stopped",
    Ending.CHANNEL_DAMAGED: (
        "code in its sandbox broke the runner's messages to the bot, so it was stopped"
    ),
}
HELD = {
    Held.RESTORED: "Your workspace was already restored into this session",
    Held.RAN_WITHOUT: "This session already ran code without the saved variables",
    Held.FAILED: "Your workspace could not be restored into this session",
}


BESIDE_NOTE = (
    "This ran in a second kernel beside the background run: it saw the conversation's "
    "files, not its variables, and what it defined is gone once neither runs."
)


def spoken(result: ExecutionResult) -> ExecutionResult:
    """A session run's result with its news phrased: `workspace` set, and `message`
    starting with why the session is new, what became of the workspace, or that it
    carried on across a restart."""
    message = result.message
    workspace = workspace_note(result.workspace_news) if result.workspace_news else ""
    ending = ended(result.ended) if result.ended else ""
    if ending and workspace:
        message = f"This is a new session ({ending}). {workspace} {message}".strip()
    elif ending:
        message = (
            f"This is a new session ({ending}); earlier variables and files are gone. {message}"
        ).strip()
    elif workspace:
        message = f"{workspace} {message}".strip()
    elif result.resumed:
        message = f"{RESUMED_NOTE} {message}".strip()
    if result.beside:
        message = f"{BESIDE_NOTE} {message}".strip()
    return dataclasses.replace(result, message=message, workspace=workspace)


CLOSED_DOOR = "is not open to this channel"
"""How the egress proxy's reason ends when no grant opens a door."""


def with_refusals(result: ExecutionResult, refused: Sequence[str]) -> ExecutionResult:
    """A run's result whose message ends with what the network refused it (the proxy's
    reasons), so the person and the model both know, and the model stops retrying."""
    if not refused:
        return result
    lines = [f"The network refused this run: {'; '.join(refused)}."]
    if any(reason.endswith(CLOSED_DOOR) for reason in refused):
        lines.append(
            "An admin or moderator can open it from the card in this thread or with "
            "/network allow HOST; retrying will not help until then."
        )
    return dataclasses.replace(result, message=" ".join([result.message, *lines]).strip())


def ended(why: Ended) -> str:
    """Why the previous session ended, as `This is a new session (...)` says it."""
    if why.reason is Ending.IDLE:
        return f"the previous one was idle for {duration(why.seconds)}"
    if why.reason is Ending.LIFETIME:
        return f"the previous one reached its {duration(why.seconds)} lifetime"
    return ENDINGS[why.reason]


def restored(done: Restored) -> str:
    """What /restore did, for the person who asked."""
    return workspace_note(done.news)


def workspace_note(news: WorkspaceNews) -> str:
    """One line: what became of a conversation's saved workspace (and of the memory
    snapshot its session was paused to, if it had one)."""
    line = _workspace_line(news)
    if not news.snapshot_why:
        return line
    why = f"Your paused session could not be kept in memory ({failure_reason(news.snapshot_why)})"
    if news.event is WorkspaceEvent.NONE_SAVED:
        return why + "."
    return f"{why}, so its saved workspace came back instead. {line}"


def _workspace_line(news: WorkspaceNews) -> str:
    event = news.event
    if event is WorkspaceEvent.RESUMED:
        line = f"Resumed your session from {_ago(news.saved_at)}: every variable is as you left it"
        if news.names:
            line += f", and its files are back ({_shown(news.names)})"
        if news.missing:
            items = [
                f"{shown(name, NAME_SHOWN)} ({shown(why, REASON_SHOWN)})"
                for name, why in list(news.missing.items())[:LISTED_AT_MOST]
            ]
            line += "; not back: " + listed(items, MISSING_ROOM, len(news.missing))
        return line + "."
    if event is WorkspaceEvent.RESTORED:
        return _restored_line(news.saved_at, news.names, news.missing) + _packages_line(news)
    if event is WorkspaceEvent.FILES_BACK:
        files = f" ({_shown(news.names)})" if news.names else ""
        line = f"The files of your workspace from {_ago(news.saved_at)} are back{files}"
        if news.withheld:
            line += f"; its variables were not loaded: {_shown(news.withheld)}"
        return line + "." + _packages_line(news)
    if event is WorkspaceEvent.WAITING:
        return (
            f"A workspace from {_ago(news.saved_at)} is saved "
            f"({_shown(news.names) or 'empty'}): /restore brings it back."
        )
    if event is WorkspaceEvent.NOT_RESTORED:
        return (
            f"Your saved workspace could not be restored ({failure_reason(news.why)}); "
            "this session starts empty."
        )
    if event is WorkspaceEvent.NOT_SAVED:
        why = failure_reason(news.why) if news.why else "it took too long"
        return (
            f"Your workspace could not be saved when the last session ended ({why}); "
            "earlier variables and files are gone."
        )
    if event is WorkspaceEvent.NONE_SAVED:
        return "There is no saved workspace for this conversation."
    if event is WorkspaceEvent.NOT_KEPT:
        return "Workspaces are not kept here (CELLMATE_WORKSPACE_ENABLED is off)."
    held = HELD[news.held] if news.held is not None else HELD[Held.RESTORED]
    return (
        f"{held}; a workspace is restored at most once per session (again, it would replace "
        "newer variables with older ones)."
    )


def _packages_line(news: WorkspaceNews) -> str:
    """What became of the packages the saved session had installed ('' when none)."""
    line = ""
    if news.packages:
        line += f" Installed its packages again: {_shown(news.packages)}."
    if news.packages_missing:
        line += (
            f" Its packages could not be installed again ({failure_reason(news.packages_why)}):"
            f" {_shown(news.packages_missing)}."
        )
    return line


def restored_note(workspace: Workspace, restored: list[str], failed: Mapping[str, str]) -> str:
    """One line for the user: what came back of `workspace`, from when, and what did not."""
    news = restored_news(workspace, restored, failed)
    return _restored_line(news.saved_at, news.names, news.missing)


def _restored_line(saved_at: float, back: Sequence[str], missing: Mapping[str, str]) -> str:
    """What came back, from when, and what did not; names and reasons shortened and made
    visible, and a bounded length however many there are."""
    line = f"Restored your workspace from {_ago(saved_at)}"
    if back:
        names = [shown(name, NAME_SHOWN) for name in back[:LISTED_AT_MOST]]
        line += ": " + listed(names, NAMES_ROOM, len(back))
    else:
        line += " (it was empty)"
    if missing:
        items = [
            f"{shown(name, NAME_SHOWN)} ({shown(why, REASON_SHOWN)})"
            for name, why in list(missing.items())[:LISTED_AT_MOST]
        ]
        line += "; not restored: " + listed(items, MISSING_ROOM, len(missing))
    return line + "."


def saved_note(workspace: Workspace) -> str:
    """Without automatic restore: that a workspace is saved, what it holds, and how to get
    it back; as bounded as `restored_note`."""
    everything = workspace.names
    names = [shown(name, NAME_SHOWN) for name in everything[:LISTED_AT_MOST]]
    held = listed(names, NAMES_ROOM, len(everything)) if names else "empty"
    return f"A workspace from {_ago(workspace.created)} is saved ({held}): /restore brings it back."


def failure_reason(why: object) -> str:
    """A reason quoted in a note (it may hold what the sandbox or the store said), bounded."""
    return shown(str(why), FAILURE_SHOWN)


def ago(seconds: float) -> str:
    """`20 min ago`, for people."""
    if seconds < 90:
        return "a moment ago"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"


def _ago(saved_at: float) -> str:
    return ago(time.time() - saved_at)


def duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _shown(names: Sequence[str]) -> str:
    """Names for a one-line note: the first few, each cut short, and how many more."""
    cut = [shown(name, NAME_CHARS) for name in names]
    more = len(cut) - NAMES_SHOWN
    return ", ".join(cut[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def shown(text: str, limit: int) -> str:
    """`text` for one line of a note: characters that end a line or that a chat or terminal
    may not draw (controls, bidirectional and zero-width marks) as visible escapes, and at
    most `limit` characters, saying how long it was when cut."""
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = _escaped(char)
        if size + len(piece) > limit:
            break
        pieces.append(piece)
        size += len(piece)
    else:
        return "".join(pieces)
    mark = f"… ({len(text):,} characters)"
    while pieces and size + len(mark) > limit:
        size -= len(pieces.pop())
    return "".join(pieces) + mark


SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    category = unicodedata.category(char)
    if category[0] != "C" and category not in ("Zl", "Zp"):
        return char
    code = ord(char)
    if char in SHORT_ESCAPES:
        return SHORT_ESCAPES[char]
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def listed(items: Sequence[str], room: int, total: int | None = None) -> str:
    """Items joined with commas within about `room` characters, then `and N more` (of
    `total`, when `items` are only the first ones)."""
    kept: list[str] = []
    used = 0
    for item in items:
        if kept and used + len(item) + 2 > room:
            break
        kept.append(item)
        used += len(item) + 2
    more = (len(items) if total is None else total) - len(kept)
    return ", ".join(kept) + (f" and {more:,} more" if more > 0 else "")
