"""The agent: one turn of a conversation, from the user's message to one answer.

With a model, it asks the model (chat completions with one `python` tool), runs each tool
call in the conversation's session, publishes charts and files, feeds a trimmed result back,
and repeats until the model answers, within a step limit and a time budget. Without a
model, a fenced code block or `/run ...` runs directly. Every turn ends with exactly one
`Answer` or `Failure` event.

Longer than most modules: the tool-calling loop and its failure handling read best
as one piece (every path must end in exactly one Answer or Failure).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import openai

from bot import logs
from bot.agent.context import fit
from bot.agent.detach import (
    FOR_MODEL,
    FOR_PERSON,
    QUEUED_BEHIND,
    Background,
    DetachedRun,
    OutputSink,
    minutes,
)
from bot.agent.history import History
from bot.agent.llm import Completions, EmptyReply, Reply, ToolCall
from bot.agent.prompt import code_tool, summary_request, system_prompt, tool_result
from bot.agent.run_outputs import artifact_sources
from bot.agent.tokens import Counter
from bot.agent.turn import Turn
from bot.errors import Refused
from bot.events import (
    Answer,
    AnswerDelta,
    ArtifactsPublished,
    CodeStarted,
    ExecutionFinished,
    Failure,
    Notice,
    RunDetached,
    Thinking,
    TurnEvent,
)
from bot.fences import (
    as_run,
    background_asked,
    beside_asked,
    direct_code,
    direct_language,
    named_by_flag,
)
from bot.metrics import Metrics
from bot.sandbox_words import spoken, with_refusals
from bot.text import names_line
from executor import ExecutionResult, Executor, ExecutorError, RunClock, language_named
from executor.run_scope import TITLES
from executor.session import Restore
from storage.artifacts import Artifact, ArtifactLimits, publish
from storage.base import Storage
from storage.intake import Fetcher, IncomingFile, IntakeLimits, receive

log = logging.getLogger(__name__)
Emit = Callable[[TurnEvent], Awaitable[None] | None]
NO_MODEL = (
    "No model is configured, so I can only run code: send Python in a ``` block or as "
    "`/run <code>`. To chat in plain language, set OPENAI_API_KEY (and OPENAI_MODEL, or "
    "OPENAI_BASE_URL for Ollama, vLLM, LM Studio) in .env."
)

UNFINISHED = {
    "length": (
        "The model's reply was cut off by its length limit, so its code was not run. "
        "Ask for less at once.",
        "The reply was cut off by the model's length limit.",
    ),
    "content_filter": (
        "The provider's content filter stopped the model's reply, so its code was not run. "
        "Try asking in other words.",
        "The provider's content filter stopped the reply here.",
    ),
    "": (
        "The model's reply ended early, before it was complete, so its code was not run. "
        "Try again.",
        "The reply ended early and may be incomplete.",
    ),
}
"""Why a reply that did not finish is not used as it is (with code; without): by finish
reason, "" for none or one not known."""


class RestoreGate(Protocol):
    """How a turn may load a saved workspace's variables (unpickling runs code): the place's
    policy, as the conversation layer applies it."""

    def unasked(self) -> tuple[Restore, str]:
        """With nobody asked; and why not, for the person, when they may not load."""

    async def restore(self, by_run: bool = True) -> Restore:
        """For a run that has no card of its own (a direct run); may ask a person."""


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    attachments: Sequence[IncomingFile] = ()
    user: str = ""
    server: str = ""
    """The Discord guild or Slack workspace, for per-server quotas."""
    fetch: Fetcher | None = None
    """How to download the attachments' URLs (with the platform's credentials); by default
    the agent's fetcher."""
    context: str = ""
    """Facts from the platform about where the person is (Slack's assistant view: the
    channel they have open), given to the model beside the system prompt for this turn,
    never as their words nor kept in the history."""
    agent: bool = False
    """A direct run written by the person's coding agent (MCP), not typed by them: its code
    passes the place's approval policy as the model's code does."""


@dataclass(frozen=True, slots=True)
class AgentLimits:
    max_steps: int = 8
    budget_s: float = 300.0
    history_tokens: int = 16_000
    """Tokens of earlier messages (and their summary) sent with each request."""
    stream: bool = True
    """Stream replies (text shown as it is written); off for servers that cannot stream
    with tools."""
    result_chars: int = 6_000
    vision: bool = False
    """Show charts to the model as images (for models that accept image input)."""
    max_pictures: int = 4


class Agent:
    def __init__(
        self,
        executor: Executor,
        storage: Storage,
        history: History,
        client: openai.AsyncOpenAI | None = None,
        model: str = "",
        limits: AgentLimits | None = None,
        artifact_limits: ArtifactLimits | None = None,
        intake_limits: IntakeLimits | None = None,
        fetch: Fetcher | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.executor = executor
        self.storage = storage
        self.history = history
        self.client = client
        self.model = model
        self.limits = limits or AgentLimits()
        self.artifact_limits = artifact_limits or ArtifactLimits()
        self.intake_limits = intake_limits or IntakeLimits()
        self.fetch = fetch
        self.metrics = metrics
        self.refusals: Callable[[str], list[str]] | None = None
        """What the egress proxy refused a conversation since last asked (allowlist mode)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self.counter = Counter.for_model(model)
        self.completions = (
            None if client is None else Completions(client, model, self.limits.stream)
        )

    async def turn(
        self,
        conversation: str,
        message: UserMessage,
        emit: Emit,
        turn: Turn | None = None,
        restores: RestoreGate | None = None,
    ) -> None:
        """Handle one message; turns of one conversation run one at a time, in order.
        `restores`: the place's rule for loading saved variables (None: as code runs)."""
        turn = turn or Turn(conversation)
        logs.conversation_id.set(conversation)
        logs.turn_id.set(uuid.uuid4().hex[:12])
        started = time.monotonic()
        ending: list[str] = []

        async def watched(event: TurnEvent) -> None:
            if isinstance(event, Answer | Failure):
                ending.append("answer" if isinstance(event, Answer) else "failure")
            await _call(emit, event)

        async with self._locks.setdefault(conversation, asyncio.Lock()):
            try:
                await self._turn(conversation, message, watched, turn, restores)
            except ExecutorError as exc:
                await _call(watched, Failure(f"The sandbox could not run the code: {exc}"))
            except Refused as exc:  # a quota reached between two runs of the turn
                await _call(watched, Failure(str(exc)))
        outcome = ending[0] if ending else "none"
        seconds = time.monotonic() - started
        log.info("turn finished: %s in %.2f s in %s", outcome, seconds, conversation)
        if self.metrics is not None:
            self.metrics.turn(conversation, outcome, seconds)

    async def reset(self, conversation: str) -> None:
        """Forget the conversation's history and end its session."""
        async with self._locks.setdefault(conversation, asyncio.Lock()):
            await self.history.forget(conversation)
            await self.executor.session(conversation).close()

    async def _turn(
        self,
        conversation: str,
        message: UserMessage,
        emit: Emit,
        turn: Turn,
        restores: RestoreGate | None,
    ) -> None:
        session = self.executor.session(conversation)
        previews: dict[str, str] = {}
        files: list[str] = []
        if message.attachments:
            intake = await receive(
                message.attachments, message.fetch or self.fetch, self.intake_limits
            )
            if intake.message():
                await _call(emit, Notice(intake.message()))
            if intake.files:
                await session.put_files(intake.files)
                files = list(intake.files)
                previews = await session.preview(intake.tabular)
                await self._withheld(conversation, emit, restores)
        named = direct_language(message.text)
        language = self._language(named) or "python"
        direct = direct_code(message.text, language)
        if direct is not None and (
            refusal := self._refused_language(named, from_fence=not named_by_flag(message.text))
        ):
            await _call(emit, Answer(refusal))
            return
        if direct is not None:
            restore = Restore.VARIABLES if restores is None else await restores.restore()
            if message.agent:
                decision = await turn.approval(as_run(direct, language))
                if not decision.runs:
                    await _call(
                        emit, Answer(f"The agent's code was not run ({decision.verdict.value}).")
                    )
                    return
                direct = decision.code
            at_once = background_asked(message.text)
            if beside_asked(message.text):
                turn.beside.set()
            await self._run(
                conversation, direct, emit, turn, restore, background_now=at_once, language=language
            )
            # The run report (code, output, status) is the whole answer: no separate "Done.".
            await _call(emit, Answer(""))
            return
        if self.client is None:
            await _call(emit, Answer(NO_MODEL))
            return
        await self._converse(conversation, message, files, previews, emit, turn)

    async def _converse(
        self,
        conversation: str,
        message: UserMessage,
        files: list[str],
        previews: dict[str, str],
        emit: Emit,
        turn: Turn,
    ) -> None:
        assert self.client is not None
        earlier: list[dict[str, Any]] = []
        limits = self.executor.limits
        system = system_prompt(
            limits.network, doors=limits.egress == "allowlist", languages=limits.other_languages
        )
        if message.context:
            system = f"{system}\n\n{message.context}"
        user = {"role": "user", "content": _user_content(message.text, files, previews)}
        new: list[dict[str, Any]] = [user]
        shown: list[dict[str, Any]] = []
        turn.budget_started = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.budget_s):
                for step in range(1, self.limits.max_steps + 1):
                    if turn.stop_requested.is_set():
                        await _call(emit, Failure("Stopped."))
                        return
                    await _call(emit, Thinking(step))
                    if step == 1:
                        # Writing the history's summary is a model call too: Stop cancels it.
                        turn.model_call = asyncio.create_task(
                            fit(
                                self.history,
                                conversation,
                                self.counter,
                                self.limits.history_tokens,
                                self._summarise,
                            )
                        )
                        try:
                            context = await turn.model_call
                        finally:
                            turn.model_call = None
                        if turn.stop_requested.is_set():
                            await _call(emit, Failure("Stopped."))
                            return
                        earlier = context.messages
                        if context.note:
                            system = f"{system}\n\n{context.note}"
                    messages = [{"role": "system", "content": system}, *earlier, *new, *shown]
                    turn.model_call = asyncio.create_task(self._ask(messages, emit))
                    try:
                        reply = await turn.model_call
                    finally:
                        turn.model_call = None
                    calls = reply.tool_calls
                    # Some servers end a reply with tool calls as "stop"; anything else (its
                    # length limit, a content filter, a stream that broke off) may leave the
                    # code half written, so none of it runs.
                    if reply.finish_reason not in ("tool_calls", "stop"):
                        await self._unfinished(conversation, new, reply, emit)
                        return
                    if not calls:
                        text = reply.content
                        new.append({"role": "assistant", "content": text})
                        await self.history.append(conversation, new)
                        await _call(emit, Answer(text))
                        return
                    new.append(_assistant_with_calls(reply.content, calls))
                    charts: list[Artifact] = []
                    for call in calls:
                        content, manifest = await self._tool(conversation, call, emit, turn)
                        new.append({"role": "tool", "tool_call_id": call.id, "content": content})
                        charts += [a for a in manifest if a.inline_image and a.content]
                    # Pictures go to vision models for the next step only, never into history.
                    shown = (
                        _pictures(charts, self.limits.max_pictures) if self.limits.vision else []
                    )
                await self.history.append(conversation, new)
                await _call(
                    emit,
                    Failure(
                        f"I stopped after {self.limits.max_steps} steps without a final answer. "
                        "Ask again, perhaps in smaller parts."
                    ),
                )
        except asyncio.CancelledError:
            if not turn.stop_requested.is_set():
                raise
            await _call(emit, Failure("Stopped."))
        except TimeoutError:
            await _call(
                emit,
                Failure(f"The turn took longer than {self.limits.budget_s:g} s and was stopped."),
            )
        except openai.OpenAIError as exc:
            if self.metrics is not None:
                self.metrics.llm_error(type(exc).__name__)
            await _call(
                emit,
                Failure(
                    f"The model is not available right now ({_describe(exc)}). Try again later."
                ),
            )

    async def _withheld(self, conversation: str, emit: Emit, restores: RestoreGate | None) -> None:
        """Files started the session (and brought back a saved workspace's files): say when
        its variables may not load here without a person (policy off or approve)."""
        if restores is None:
            return
        mode, why = restores.unasked()
        if mode is Restore.VARIABLES:
            return
        names = await self.executor.session(conversation).restorable()
        if names:
            await _call(emit, Notice(f"{why} Not loaded: {names_line(names)}. The files are back."))

    async def _ask(self, messages: list[dict[str, Any]], emit: Emit) -> Reply:
        assert self.completions is not None

        async def written(text: str) -> None:
            await _call(emit, AnswerDelta(text))

        tool = code_tool(self.executor.limits.other_languages)
        reply = await self.completions.reply(messages, [tool], written)
        self._count_usage(reply)
        return reply

    async def _summarise(self, earlier: str, messages: list[dict[str, Any]], words: int) -> str:
        """The one extra call that folds old messages into the conversation's summary."""
        assert self.completions is not None
        reply = await self.completions.reply(summary_request(earlier, messages, words))
        self._count_usage(reply)
        if not reply.content.strip():
            raise EmptyReply("the model wrote an empty summary")
        return reply.content

    def _count_usage(self, reply: Reply) -> None:
        if self.metrics is not None and reply.prompt_tokens is not None:
            self.metrics.usage(reply.prompt_tokens, reply.completion_tokens or 0)

    async def _tool(
        self, conversation: str, call: Any, emit: Emit, turn: Turn
    ) -> tuple[str, list[Artifact]]:
        if call.function.name != "python":
            return f"There is no tool named {call.function.name!r}; use `python`.", []
        try:
            arguments = json.loads(call.function.arguments or "{}")
            code = arguments["code"]
            named = arguments.get("language") or "python"
            if not isinstance(code, str) or not isinstance(named, str):
                raise TypeError("code and language must be strings")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return f'The tool arguments were not valid ({exc}); send {{"code": "..."}}.', []
        if refusal := self._refused_language(named):
            return refusal, []
        language = self._language(named) or "python"
        # The place's policy may want a person to approve (or edit) the model's code first;
        # they see the lines that run.
        decision = await turn.approval(as_run(code, language))
        if not decision.runs:
            return decision.for_model(), []
        ran = await self._run(
            conversation, decision.code, emit, turn, decision.restore, language=language
        )
        if ran is None:
            assert turn.background is not None
            return decision.for_model() + FOR_MODEL.format(
                minutes=minutes(turn.background.max_s)
            ), []
        result, manifest = ran
        told = tool_result(result, manifest, self.limits.result_chars)
        return decision.for_model() + told, manifest

    async def _run(
        self,
        conversation: str,
        code: str,
        emit: Emit,
        turn: Turn,
        restore: Restore,
        background_now: bool = False,
        language: str = "python",
    ) -> tuple[ExecutionResult, list[Artifact]] | None:
        """Run code for the turn: its result and published files, or None when the run went
        on in the background (`turn.background` took it)."""
        await _call(emit, CodeStarted(code, language))
        turn.may_run()
        logs.run_id.set(uuid.uuid4().hex[:12])
        if self.refusals is not None:
            self.refusals(conversation)  # what came before this run is not this run's
        background = turn.background
        if background is not None and background.busy() and not turn.beside.is_set():
            await _call(emit, Notice(QUEUED_BEHIND))
        sink = OutputSink(emit)
        went = asyncio.Event()
        clock = RunClock(self.executor.limits.timeout_s)
        if background is not None:

            def at_limit() -> bool:
                # The code goes on in the background rather than stop, if it may.
                if background.refusal() is not None:
                    return False
                clock.extend(background.max_s)
                went.set()
                return True

            clock.on_limit = at_limit
        # A Stop pressed while the sandbox is still starting applies to this run as well.
        run_id = uuid.uuid4().hex
        running = asyncio.create_task(
            self.executor.session(conversation).run(
                code,
                on_output=sink,
                stop=turn.stop_requested,
                restore=restore,
                on_input=turn.ask_input,
                clock=clock,
                run_id=run_id,
                beside=turn.beside,
                language=language,
            )
        )
        if background is None:
            raw = await _owned(running)
        else:
            if background_now and (why := background.refusal()) is not None:
                await _call(emit, Notice(f"{why} So this run stays in the foreground."))
                background_now = False
            if background_now:
                went.set()
            ended = await self._until_done_or_gone(running, went, background, turn)
            if ended is None:
                clock.extend(background.max_s)
                sink.hold()
                told = FOR_PERSON.format(minutes=minutes(background.max_s))
                await _call(emit, RunDetached(told))
                await background.take(
                    DetachedRun(
                        conversation,
                        code,
                        running,
                        sink,
                        clock,
                        turn.stop_requested,
                        lambda result, to: self._finished(conversation, result, to),
                        run_id,
                    )
                )
                return None
            raw = ended
        return await self._finished(conversation, raw, emit)

    def followed(
        self, conversation: str, code: str, run_id: str, max_s: float, stop: asyncio.Event
    ) -> DetachedRun:
        """A background run that an earlier process of the bot left going (executor
        `Session.keep`), taken over: its output from the start goes to the sink's emit once
        the conversation layer gives it one. `max_s`: the time it has left."""
        sink = OutputSink(lambda _: None)
        sink.hold()
        clock = RunClock(max_s)
        running = asyncio.create_task(
            self.executor.session(conversation).follow(
                run_id, on_output=sink, stop=stop, clock=clock
            )
        )
        return DetachedRun(
            conversation,
            code,
            running,
            sink,
            clock,
            stop,
            lambda result, to: self._finished(conversation, result, to),
            run_id,
        )

    def _language(self, named: str) -> str | None:
        """The offered language a name stands for (Python for none), or None."""
        if not named:
            return "python"
        language = language_named(named)
        offered = ("python", *self.executor.limits.other_languages)
        return language if language in offered else None

    def _refused_language(self, named: str, from_fence: bool = False) -> str:
        """Why code in the named language cannot run here ("" when it can). A fence's tag
        that names no language at all (```text) is not a refusal: the code is Python."""
        if not named or self._language(named) is not None:
            return ""
        if from_fence and language_named(named) is None:
            return ""
        offered = ", ".join(
            TITLES[name] for name in ("python", *self.executor.limits.other_languages)
        )
        return f"This sandbox does not run {named[:40]!r} code; it runs {offered}."

    async def _until_done_or_gone(
        self,
        running: asyncio.Task[ExecutionResult],
        went: asyncio.Event,
        background: Background,
        turn: Turn,
    ) -> ExecutionResult | None:
        """The run's result, or None once it goes to the background: at its time limit (the
        clock says so), on Keep running, or before the turn's time budget runs out (early
        enough for the model to answer)."""
        deadline = None
        if turn.budget_started is not None:
            margin = min(30.0, self.limits.budget_s / 5)
            deadline = turn.budget_started + self.limits.budget_s - margin
        signals = [
            asyncio.ensure_future(went.wait()),
            asyncio.ensure_future(background.keep_running.wait()),
        ]
        try:
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait(
                    {running, *signals}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if running in done:
                    return running.result()
                if went.is_set() or background.keep_running.is_set():
                    return None
                if background.refusal() is None:
                    return None  # the turn's budget is nearly spent
                deadline = None  # it may not go: it ends with its limit, as any run
        except asyncio.CancelledError:
            await _cancelled(running)
            raise
        finally:
            for signal in signals:
                signal.cancel()

    async def _finished(
        self, conversation: str, raw: ExecutionResult, emit: Emit
    ) -> tuple[ExecutionResult, list[Artifact]]:
        """The ended run told to `emit`: its status, then its published files."""
        result = spoken(raw)
        if self.refusals is not None:
            result = with_refusals(result, self.refusals(conversation))
        seconds = result.duration_ms / 1000
        log.info("run finished: %s in %.2f s", result.status.value, seconds)
        if self.metrics is not None:
            self.metrics.run(result.status.value, seconds)
        await _call(
            emit,
            ExecutionFinished(
                result.status,
                result.duration_ms,
                result.message,
                result.session_restarted,
                result.workspace,
            ),
        )
        manifest = await publish(
            self.storage, conversation, artifact_sources(result), self.artifact_limits
        )
        if manifest:
            if self.metrics is not None:
                self.metrics.published(manifest)
            await _call(emit, ArtifactsPublished(manifest))
        return result, manifest

    async def _unfinished(
        self, conversation: str, new: list[dict[str, Any]], reply: Reply, emit: Emit
    ) -> None:
        """A reply that did not finish: its text with a note saying why, or, when it had
        code, a failure saying why the code was not run."""
        await self.history.append(conversation, new)
        why, note = UNFINISHED.get(reply.finish_reason or "", UNFINISHED[""])
        if reply.tool_calls:
            await _call(emit, Failure(why))
        else:
            await _call(emit, Answer(f"{reply.content}\n\n({note})".strip()))


async def _owned(running: asyncio.Task[ExecutionResult]) -> ExecutionResult:
    """The run's result; cancelling the wait cancels the run, as awaiting it directly would."""
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await _cancelled(running)
        raise


async def _cancelled(running: asyncio.Task[ExecutionResult]) -> None:
    """Cancel the run and wait until it has wound down (its sandbox interrupted)."""
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await running


def _user_content(text: str, files: list[str], previews: dict[str, str]) -> str:
    if not files:
        return text
    lines = [text, "", "Attached files, now in /mnt/data:"]
    for name in files:
        lines.append(f"- {name}")
        if name in previews:
            lines.append("  " + previews[name].replace("\n", "\n  "))
    return "\n".join(lines)


def _pictures(charts: list[Artifact], limit: int) -> list[dict[str, Any]]:
    if not charts:
        return []
    parts: list[dict[str, Any]] = [{"type": "text", "text": "The charts from the last run:"}]
    for chart in charts[:limit]:
        encoded = base64.b64encode(chart.content or b"").decode()
        url = f"data:{chart.content_type};base64,{encoded}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return [{"role": "user", "content": parts}]


def _assistant_with_calls(content: str | None, calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content or "",
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in calls
        ],
    }


def _describe(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "it did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return "it could not be reached"
    return type(exc).__name__


async def _call(emit: Emit, event: TurnEvent) -> None:
    returned = emit(event)
    if inspect.isawaitable(returned):
        await returned
