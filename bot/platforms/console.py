"""The console chat (`cellmate chat`): the agent in a terminal, or fed by a pipe.

In a terminal it reads one message per line (a line starting with ``` reads on to the closing
fence), shows the code being run and its output as it streams, and Ctrl-C (or /stop) stops the
running turn; /keep, typed while it runs, lets its run go on in the background instead, as
Keep running does on Discord and Slack, and /beside, typed while its code waits for the run
in the background, runs that code now in a second kernel beside it, as Run beside does
(lines typed while a turn runs are read at once, see `console_keys`; other lines wait for
the turn to end). A run in the background prints its output here as it comes, then a line
saying it ended; /stop ends it sooner. From a pipe it reads messages separated by blank
lines (a blank line inside a fenced block does not end a message), answers each in turn,
and exits at the end of input. Commands: /reset, /files, /restore, /export, /attach PATH,
/policy [MODE], /network ..., /schedule ..., /run [--background|--beside] CODE, /keep,
/beside, /stop, /mcp [token|revoke [N]] (a coding agent's token, see `bot.mcp`), /quit. A
schedule's runs, and a coding agent's, are printed here as they happen, while the chat
runs.
Where the policy is approve, the model's code is shown first and runs only after y (or e, to
edit it: lines up to one holding only a dot run instead); n declines it. When code hits a
closed network door, the door is named at once and, once the turn ends, the console asks
whether to allow it once (o), in the console (c) or not (n); an allow runs the code again.
When the running code calls `input()` or `getpass()`, its prompt is asked here (a password
without echo), and the answer goes to the code.

A turn's events are printed by the console's reply, `console_reply.Renderer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from traceback import format_exception
from typing import TextIO

from bot.agent import UserMessage
from bot.conversations import (
    AccessRules,
    Admission,
    ConversationKey,
    Conversations,
    Person,
    Place,
    Refused,
)
from bot.conversations.approval import (
    Verdict,
    restore_heading,
    restore_text,
    restoring_of,
    shown_names,
)
from bot.conversations.doors import DoorCard, DoorChoice
from bot.conversations.mcp_tokens import mcp_command
from bot.conversations.network import parse_network
from bot.conversations.policy import parse_command
from bot.events import ApprovalRequested, InputRequested, TurnEvent
from bot.platforms.console_keys import Keyboard
from bot.platforms.console_reply import Renderer
from bot.terminal import clean, show_name
from bot.text import human_size
from storage.intake import IncomingFile

log = logging.getLogger(__name__)

# The console is one person's own conversation, as a DM is.
CONVERSATION = ConversationKey("console", "dm", "console")


async def _operator() -> bool:
    return True  # the console is the operator's own terminal


ME = Person("console", Place("console"), moderates=_operator)
Read = Callable[[str], Awaitable[str | None]]
"""Shows a prompt and reads one line of input (None at the end of input)."""
APPROVAL_PROMPT = "Run this code? [y]es/[n]o/[e]dit "
RESTORE_PROMPT = "Load them? [y]es/[n]o "
DOOR_PROMPT = "Allow it? [o]nce/[c]hannel/[n]o "
DOOR_WORDS = {
    "o": DoorChoice.ONCE,
    "once": DoorChoice.ONCE,
    "c": DoorChoice.CHANNEL,
    "channel": DoorChoice.CHANNEL,
    "n": DoorChoice.DENY,
    "no": DoorChoice.DENY,
}
NETWORK_USAGE = "Use /network, /network allow HOST[:PORT] [once|channel] or /network deny HOST."
HELP = (
    "Type a message, or Python in a ``` block. Commands: /attach PATH, /files, /restore, "
    "/export, /reset, /policy [auto|approve|off], /network [allow|deny HOST], "
    "/schedule [WHEN|list|cancel N|run-now N], /run --background CODE, "
    "/run --beside CODE, /mcp [token|revoke [N]], /quit. "
    "While a turn runs, Ctrl-C (or /stop) stops it and /keep lets its run go on in the "
    "background; /stop then ends the run in the background. While a turn's code waits for "
    "that run to end, /beside runs it now in a second kernel beside it (the conversation's "
    "files, not its variables)."
)
NOTHING_TO_KEEP = (
    "Nothing is running: /keep, typed while a turn runs, lets its run go on in the background "
    "(/run --background CODE starts one there)."
)
NOTHING_WAITS = (
    "Nothing is running: /beside, typed while a turn's code waits for the run in the "
    "background, runs it now beside that run (/run --beside CODE does so at once)."
)
RUNNING_BESIDE = "Running it now beside the run in the background …"
BESIDE_NEXT = "Its next code runs beside the run in the background."
WAITING_HINT = (
    "⌛ Still waiting for the run in the background: /beside runs it now; Ctrl-C stops it."
)
NOTHING_IN_BACKGROUND = "No run is going on in the background."
STOPPING_BACKGROUND = "Stopping the run in the background …"
KEEPING_NEXT = "Its next run goes on in the background as it starts."


class Console:
    def __init__(self, conversations: Conversations, out: TextIO, exports: Path) -> None:
        self.conversations = conversations
        self.out = out
        self.exports = exports
        self.attachments: list[IncomingFile] = []
        self.renderer: Renderer | None = None
        self.door = Admission(AccessRules())
        self.read: Read | None = None
        """How to ask the person something while a turn runs (set by the input loop)."""
        self.read_secret: Read | None = None
        """How to ask for a password: without echoing it, in a terminal (else `read`)."""
        self.doors: list[DoorCard] = []
        """Closed doors met by the code, asked about once its turn ends."""
        self.prompt_again: Callable[[], None] = lambda: None
        """Shows the prompt waiting for the person again, after a run in the background
        printed over it (set by the input loop)."""
        self.fresh_line: Callable[[], None] = lambda: None
        """Leaves the line of a prompt that waits for the person (set by the input loop)."""
        self._acting: set[asyncio.Task[None]] = set()
        conversations.doorbells["console"] = self._ring
        conversations.post_with("console", ConsolePoster(self))

    async def handle(self, text: str, interactive: bool) -> bool:
        """Handle one message or command; False once the user asked to quit.

        A message that fails in an unforeseen way is reported, and the chat goes on.
        """
        try:
            return await self._handle(text, interactive)
        except Exception as exc:
            # The log shares the terminal, and the error may quote names the sandbox chose.
            log.error("console message failed\n%s", clean("".join(format_exception(exc))))
            self._say(f"✗ This message failed ({type(exc).__name__}); the chat goes on.")
            return True

    async def _handle(self, text: str, interactive: bool) -> bool:
        command, _, argument = text.strip().partition(" ")
        if command == "/quit":
            return False
        if command == "/help":
            self._say(HELP)
        elif command == "/reset":
            await self.conversations.reset(self.door, ME, CONVERSATION)
            self._say(
                "Forgot the conversation and restarted the session: its variables and its "
                "files in /mnt/data are gone."
            )
        elif command == "/files":
            listed = await self.conversations.files(self.door, ME, CONVERSATION)
            lines = [f"{show_name(path)} ({human_size(size)})" for path, size in listed.files]
            heading = [listed.heading] if listed.heading and lines else []
            self._say("\n".join(heading + lines) or "No files in /mnt/data.")
        elif command == "/restore":
            # Under the approve policy the saved variables are named and asked about here.
            asking = Renderer(self.out, interactive)
            asking.approve = self._approve
            self._say(await self.conversations.restore(self.door, ME, CONVERSATION, asking))
        elif command == "/export":
            await self._export()
        elif command == "/policy":
            self._say(await self._policy(argument))
        elif command == "/network":
            asked = parse_network(argument)
            if asked is None:
                self._say(NETWORK_USAGE)
            else:
                self._say(
                    await self.conversations.network_command(self.door, ME, CONVERSATION, asked)
                )
        elif command == "/schedule":
            self._say(
                await self.conversations.schedule_command(self.door, ME, CONVERSATION, argument)
            )
        elif command == "/mcp":
            self._say(
                mcp_command(self.conversations.mcp, ME.user, "you", CONVERSATION, "", argument)
            )
        elif command == "/attach":
            self._attach(argument.strip())
        elif command == "/keep":
            await self.keep()
        elif command == "/beside":
            await self.beside()
        elif command == "/stop":
            await self.stop_command()
        elif text.strip():
            message = UserMessage(text, list(self.attachments), user=ME.user)
            self.attachments.clear()
            self.renderer = Renderer(self.out, interactive)
            self.renderer.approve = self._approve
            self.renderer.answer_input = self._answer_input
            self.renderer.hint = self._hint()
            self.renderer.waiting_hint = WAITING_HINT
            try:
                await self.conversations.turn(self.door, ME, CONVERSATION, message, self.renderer)
            finally:
                self.renderer = None
            rerun = await self._answer_doors()
            if rerun is not None:
                again = rerun if rerun.startswith("```") else f"```python\n{rerun}\n```"
                return await self._handle(again, interactive)
        return True

    async def _ring(self, card: DoorCard) -> None:
        """A closed door is named at once; it is asked about when the turn has ended."""
        self._say(f"🚪 {card.text}")
        self.doors.append(card)

    async def _answer_doors(self) -> str | None:
        """Ask about each closed door the turn met; the code to run again, if any."""
        rerun = None
        while self.doors:
            card = self.doors.pop(0)
            self._say(f"🚪 {card.door} is closed.")
            while (word := (await self._ask(DOOR_PROMPT) or "n").strip().lower()) not in DOOR_WORDS:
                self._say("Answer o (allow for the next run), c (allow in the console) or n.")
            try:
                answer = await self.conversations.answer_door(
                    self.door, ME, card.key, DOOR_WORDS[word]
                )
            except Refused as exc:
                self._say(f"✗ {exc}")
                continue
            self._say(answer.outcome("you"))
            rerun = answer.rerun or rerun
        return rerun

    async def _policy(self, argument: str) -> str:
        asked = parse_command(argument)
        if asked is None:
            return "Use /policy auto, /policy approve or /policy off (or /policy to see it)."
        return await self.conversations.policy_command(self.door, ME, CONVERSATION, asked.mode)

    async def _approve(self, event: ApprovalRequested) -> None:
        """Show the model's code (and the saved variables a yes loads first) and ask whether
        it runs; no answer (end of input) declines."""
        heading = restore_heading(event)
        self._say(heading.removesuffix(".") + ":" if event.code else heading)
        if restoring_of(event):
            self._say(restore_text(event))
            self._say(shown_names(restoring_of(event)))
        if event.code:
            if restoring_of(event):
                self._say("The code:")
            self._say(event.code)
        while True:
            answer = await self._ask(APPROVAL_PROMPT if event.code else RESTORE_PROMPT)
            word = (answer or "n").strip().lower()
            if word in ("y", "yes"):
                verdict, code = Verdict.RUN, ""
            elif word in ("n", "no"):
                verdict, code = Verdict.CANCELLED, ""
            elif word in ("e", "edit") and event.code:
                verdict, code = Verdict.EDITED, await self._edited()
            else:
                self._say("Answer y (run it), n (do not run it) or e (edit it first).")
                continue
            try:
                await self.conversations.decide(self.door, ME, event.key, verdict, code)
                return
            except Refused as exc:
                self._say(f"✗ {exc}")
                if verdict is not Verdict.EDITED:
                    return

    async def _answer_input(self, event: InputRequested) -> None:
        """The code's `input()` or `getpass()`: asked here, answered for the code (the end of
        input answers nothing, and the code gets EOFError)."""
        if event.password:
            self._say("⌨️ The code asks for a password (getpass); it is not shown as you type.")
        else:
            self._say("⌨️ The code asks for input:")
        prompt = clean(event.prompt) or ("Password: " if event.password else "> ")
        read = self.read_secret if event.password and self.read_secret else self.read
        answer = None if read is None else await read(prompt)
        try:
            await self.conversations.answer_input(self.door, ME, event.key, answer)
        except Refused as exc:
            self._say(f"✗ {exc}")

    async def _edited(self) -> str:
        self._say("Type the code to run instead; end it with a line holding only a dot (.).")
        lines: list[str] = []
        while (line := await self._ask("...  ")) is not None and line.strip() != ".":
            lines.append(line)
        return "\n".join(lines)

    async def _ask(self, prompt: str) -> str | None:
        return None if self.read is None else await self.read(prompt)

    def stop(self) -> None:
        """Ctrl-C: stop the running turn (nothing when none runs)."""
        if self.renderer is not None and self.renderer.stop_key is not None:
            self._act(self.conversations.stop(self.door, ME, self.renderer.stop_key))
            self._say("Stopping …")

    async def stop_command(self) -> None:
        """/stop: the running turn, as Ctrl-C; else this conversation's runs in the
        background."""
        if self.renderer is not None and self.renderer.stop_key is not None:
            self.stop()
            return
        runs = self.conversations.background.runs
        mine = [stop_key for stop_key, run in runs.items() if run.key == CONVERSATION]
        if not mine:
            self._say(NOTHING_IN_BACKGROUND)
            return
        for stop_key in mine:
            why = await self.conversations.stop(self.door, ME, stop_key)
            if why is not None:
                self._say(f"✗ {why}")
                return
        self._say(STOPPING_BACKGROUND)

    async def keep(self) -> None:
        """/keep: the running turn's run goes on in the background, as Keep running does."""
        renderer = self.renderer
        if renderer is None or renderer.stop_key is None:
            self._say(NOTHING_TO_KEEP)
            return
        try:
            why = await self.conversations.keep_running(self.door, ME, renderer.stop_key)
        except Refused as exc:
            why = str(exc)
        if why is not None:
            self._say(f"✗ {why}")
        elif not renderer.running:
            self._say(KEEPING_NEXT)

    async def beside(self) -> None:
        """/beside: the running turn's code that waits for the run in the background runs
        now, beside it, as Run beside does."""
        renderer = self.renderer
        if renderer is None or renderer.stop_key is None:
            self._say(NOTHING_WAITS)
            return
        try:
            why = await self.conversations.run_beside(self.door, ME, renderer.stop_key)
        except Refused as exc:
            why = str(exc)
        if why is not None:
            self._say(f"✗ {why}")
        elif renderer.waiting:
            renderer.waiting = False
            self._say(RUNNING_BESIDE)
        else:
            self._say(BESIDE_NEXT)

    def act_on_turn(self, line: str) -> bool:
        """A line typed while a message is handled: /keep, /beside and /stop act at once
        (True); anything else waits for its turn."""
        command = line.strip()
        if command == "/keep":
            self._act(self.keep())
        elif command == "/beside":
            self._act(self.beside())
        elif command == "/stop":
            self._act(self.stop_command())
        else:
            return False
        return True

    def _act(self, acting: Awaitable[object]) -> None:
        async def act() -> None:
            try:
                await acting
            except Refused as exc:
                self._say(f"✗ {exc}")
            except Exception as exc:
                log.error("console command failed\n%s", clean("".join(format_exception(exc))))
                self._say(f"✗ That failed ({type(exc).__name__}).")

        task = asyncio.get_running_loop().create_task(act())
        self._acting.add(task)
        task.add_done_callback(self._acting.discard)

    def _hint(self) -> str:
        """What a run that goes on a while is told, in a terminal."""
        if self.conversations.background.hooks(CONVERSATION, ME.user, "") is None:
            return "⌛ Still running: Ctrl-C stops it."
        return "⌛ Still running: Ctrl-C stops it; /keep lets it go on in the background."

    async def _export(self) -> None:
        notebook = await self.conversations.export(self.door, ME, CONVERSATION)
        if notebook is None:
            self._say("Nothing to export yet: no code has run in this session.")
            return
        self.exports.mkdir(parents=True, exist_ok=True)
        path = self.exports / f"session-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
        path.write_text(json.dumps(notebook, indent=1))
        self._say(f"Exported the session to {show_name(str(path.resolve()))}")

    def _attach(self, argument: str) -> None:
        path = Path(argument).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            self._say(f"Cannot attach {show_name(argument)}: {exc.strerror or exc}")
            return
        self.attachments.append(IncomingFile(path.name, len(data), data))
        self._say(
            f"Attached {show_name(path.name)} ({human_size(len(data))}); "
            "it goes with your next message."
        )

    def _say(self, text: str) -> None:
        self.out.write(clean(text) + "\n")
        self.out.flush()


class ConsolePoster:
    """Schedules' runs, printed in the console between (or beside) the chat's turns."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.door = console.door

    async def person(self, user: str, key: ConversationKey) -> Person:
        return ME

    def mention(self, user: str) -> str:
        return "you"

    async def reply_in(self, key: ConversationKey, owner: str) -> Renderer:
        aside = AsideRenderer(self.console)
        aside.approve = self.console._approve  # an agent's run (MCP) may need a yes here
        return aside

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        mention = f"{self.mention(notify)} "
        if notify and text.startswith(mention):
            # Addressed to the console's own person: "you your run ended" says "Your run ended".
            text = text[len(mention) :][:1].upper() + text[len(mention) + 1 :]
        self.console.fresh_line()
        self.console._say(text)
        self.console.prompt_again()


class AsideRenderer(Renderer):
    """What is printed beside the chat (a schedule's run, a run in the background): on a line
    of its own when it comes while the prompt waits for the next message."""

    def __init__(self, console: Console) -> None:
        super().__init__(console.out, False)
        self.console = console

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        self.console.fresh_line()
        return super().__call__(event)

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        self.console.fresh_line()
        await super().finish(rerun, notices)

    async def failed(self, text: str) -> None:
        self.console.fresh_line()
        await super().failed(text)

    async def refused(self, text: str) -> None:
        self.console.fresh_line()
        await super().refused(text)


class MessageSplitter:
    """Messages separated by blank lines; a blank line inside a ``` block belongs to it."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._fenced = False

    def feed(self, line: str) -> str | None:
        """Take one line; return a message when this line completed one."""
        line = line.rstrip("\r\n")
        if line.strip().startswith("```"):
            self._fenced = not self._fenced
        if not line.strip() and not self._fenced:
            return self.flush()
        self._lines.append(line)
        return None

    def flush(self) -> str | None:
        message, self._lines = "\n".join(self._lines), []
        return message or None


async def run_piped(console: Console, source: TextIO) -> None:
    """Answer each message as soon as it is complete; stop at the end of input or /quit."""
    splitter = MessageSplitter()

    async def read(prompt: str) -> str | None:
        console.out.write(prompt)
        console.out.flush()
        line = await asyncio.to_thread(source.readline)
        if line:
            console.out.write("\n")
        return line.rstrip("\r\n") if line else None

    console.read = read
    while True:
        line = await asyncio.to_thread(source.readline)
        message = splitter.feed(line) if line else splitter.flush()
        if message is not None and not await console.handle(message, interactive=False):
            return
        if not line:
            return


async def run_interactive(console: Console, banner: str, fd: int | None = None) -> None:
    """The chat in a terminal (`fd`: its input, standard input unless told) until /quit or
    Ctrl-D. While a message is handled, lines typed are read at once: /keep, /beside and
    /stop act on the running turn, and other lines wait to be the next messages (the turn's
    questions take the lines typed after they ask)."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno() if fd is None else fd
    keyboard = Keyboard(fd, console.out)
    typed_ahead: deque[str | None] = deque()

    async def line(prompt: str) -> str | None:
        """The next line of a message: one typed while the last was handled, else a new one."""
        if typed_ahead:
            ahead = typed_ahead.popleft()
            if ahead is not None:
                console.out.write(f"{prompt}{ahead}\n")
                console.out.flush()
            return ahead
        return await keyboard.ask(prompt)

    async def read_secret(prompt: str) -> str | None:
        keyboard.pause()  # getpass reads the terminal itself, without echo
        try:
            return await asyncio.to_thread(getpass.getpass, prompt)
        except EOFError:
            return None
        finally:
            keyboard.listen()

    async def watch() -> None:
        """Lines typed while a message is handled."""
        fenced = False
        while True:
            typed = await keyboard.typed()
            if typed is not None and not fenced and console.act_on_turn(typed):
                continue
            typed_ahead.append(typed)
            if typed is None:
                return
            if typed.strip().startswith("```"):
                fenced = not fenced

    console.read = keyboard.ask
    console.read_secret = read_secret if os.isatty(fd) else None
    console.prompt_again = keyboard.prompt_again
    console.fresh_line = keyboard.fresh_line
    console.out.write(f"{banner}\n{HELP}\n")
    loop.add_signal_handler(signal.SIGINT, console.stop)
    keyboard.listen()
    try:
        while (message := await _read_message(line)) is not None:
            watching = loop.create_task(watch())
            try:
                going_on = await console.handle(message, interactive=True)
            finally:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            if not going_on:
                break
    finally:
        keyboard.pause()
        console.read = console.read_secret = None
        console.prompt_again = console.fresh_line = lambda: None
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


async def _read_message(line: Read) -> str | None:
    """One message: a line, or a ``` block to its closing fence (None at the end of input)."""
    first = await line("you> ")
    if first is None or not first.strip().startswith("```"):
        return first
    lines = [first]
    while True:
        more = await line("...  ")
        if more is None:
            return None
        lines.append(more)
        if more.strip().startswith("```"):
            return "\n".join(lines)


def is_terminal() -> bool:
    return sys.stdin.isatty()
