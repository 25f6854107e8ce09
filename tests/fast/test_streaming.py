"""Streamed replies: the agent assembles text and tool calls from the stream of the real
openai client (against the scripted model server), and the console shows the answer as it
is written; on the fake sandbox (no Docker)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.standins.openai_server import Reply, ScriptedModel, runs, says
from bot.agent import Agent
from bot.agent.llm import _Assembly
from bot.conversations import Conversations
from bot.events import Answer, AnswerDelta, CodeStarted, Failure, Thinking
from bot.metrics import Metrics
from bot.platforms.console import Console, run_piped
from executor import Executor
from executor.fake_backend import FakeBackend, FakeRun, stdout
from tests.support.agent_turns import final, turn

ANSWER = (
    "The mean of the column is 4.2, and the median is 4.0; the distribution is slightly "
    "skewed to the right, with two outliers above 9."
)
FIRST = "rows = [1, 2, 3]\nprint('rows:', len(rows))"
SECOND = "total = sum(range(10))\nprint('total:', total)"


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend(
        {
            FIRST: FakeRun(outputs=[stdout("rows: 3\n")]),
            SECOND: FakeRun(outputs=[stdout("total: 45\n")]),
        }
    )


async def test_the_answer_arrives_as_it_is_written_and_ends_in_one_answer(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(Reply(content=ANSWER, pieces=12))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-text", "describe it")
    assert final(events) == Answer(ANSWER)
    drafts = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert len(drafts) == 12
    assert all(ANSWER.startswith(draft) for draft in drafts)
    assert [len(d) for d in drafts] == sorted({len(d) for d in drafts})  # growing, never back
    assert drafts[-1] == ANSWER
    request = model.requests[0]
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}


async def test_tool_calls_are_assembled_from_many_fragments(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    model.script(Reply(code=FIRST, more_code=(SECOND,), pieces=15), says("3 rows; total 45."))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-calls", "count")
    assert final(events) == Answer("3 rows; total 45.")
    assert [e.code for e in events if isinstance(e, CodeStarted)] == [FIRST, SECOND]
    assert fake_backend.runs == [FIRST, SECOND]
    # What goes back to the model pairs each whole call with its own result.
    messages = model.requests[1]["messages"]
    calls = messages[-3]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [
        '{"code": "rows = [1, 2, 3]\\nprint(\'rows:\', len(rows))"}',
        '{"code": "total = sum(range(10))\\nprint(\'total:\', total)"}',
    ]
    results = messages[-2:]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
    assert "rows: 3" in results[0]["content"]
    assert "total: 45" in results[1]["content"]


async def test_a_streamed_reply_cut_off_by_length_never_runs_its_code(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    model.script(Reply(code="open('/mnt/data/half', 'w')", finish_reason="length", pieces=6))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-cut", "a long program")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert "cut off by its length limit, so its code was not run" in ending.message
    assert not any(isinstance(e, CodeStarted) for e in events)
    assert fake_backend.runs == []
    assert model.requests[0]["stream"] is True


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (
            Reply(code="open('/mnt/data/half', 'w')", finish_reason="content_filter", pieces=3),
            "The provider's content filter stopped the model's reply, so its code was not run.",
        ),
        (
            Reply(code="open('/mnt/data/half', 'w')", more_code=(FIRST,), unfinished=True),
            "The model's reply ended early, before it was complete, so its code was not run.",
        ),
    ],
)
async def test_a_reply_that_did_not_finish_never_runs_its_code(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
    reply: Reply,
    why: str,
) -> None:
    model.script(reply)
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-unfinished", "a program")
    ending = final(events)
    assert isinstance(ending, Failure)
    assert why in ending.message
    assert [e for e in events if isinstance(e, Answer | Failure)] == [ending]
    assert not any(isinstance(e, CodeStarted) for e in events)
    assert fake_backend.runs == []


async def test_text_that_did_not_finish_is_kept_with_a_note_saying_why(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(
        Reply(content="The first half of", finish_reason="content_filter", pieces=2),
        Reply(content="The first half of", unfinished=True, pieces=2),
    )
    agent = make_agent(fake_executor, model, tmp_path)
    assert final(await turn(agent, "s-filtered", "explain")) == Answer(
        "The first half of\n\n(The provider's content filter stopped the reply here.)"
    )
    assert final(await turn(agent, "s-broken", "explain")) == Answer(
        "The first half of\n\n(The reply ended early and may be incomplete.)"
    )


async def test_some_servers_end_a_reply_with_tool_calls_as_stop_and_its_code_runs(
    make_agent: Callable[..., Agent],
    fake_executor: Executor,
    fake_backend: FakeBackend,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    model.script(Reply(code=FIRST, finish_reason="stop", pieces=3), says("Three rows."))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-stop", "count")
    assert final(events) == Answer("Three rows.")
    assert fake_backend.runs == [FIRST]


async def test_a_cut_off_streamed_text_is_kept_with_a_note(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(Reply(content="The first half of", finish_reason="length", pieces=4))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-cut-text", "explain")
    assert final(events) == Answer(
        "The first half of\n\n(The reply was cut off by the model's length limit.)"
    )


async def test_usage_from_the_streams_last_chunk_is_counted(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    agent = make_agent(fake_executor, model, tmp_path)
    agent.metrics = Metrics()
    model.script(runs(FIRST), says("done"))
    await turn(agent, "s-usage", "count")
    exposition = agent.metrics.exposition().decode()
    assert 'cellmate_llm_tokens_total{kind="prompt"} 20.0' in exposition
    assert 'cellmate_llm_tokens_total{kind="completion"} 10.0' in exposition


async def test_a_server_that_refuses_stream_options_still_streams(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.refuse_stream_options = True
    model.script(says("first"), says("second"))
    agent = make_agent(fake_executor, model, tmp_path)
    assert final(await turn(agent, "s-options", "one")) == Answer("first")
    assert final(await turn(agent, "s-options", "two")) == Answer("second")
    # Refused once; after that the agent streams without asking for usage.
    assert ["stream_options" in r for r in model.requests] == [True, False, False]
    assert all(r["stream"] for r in model.requests)


async def test_streaming_can_be_turned_off(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(runs(FIRST), says("whole"))
    agent = make_agent(fake_executor, model, tmp_path, stream=False)
    events = await turn(agent, "s-off", "count")
    assert final(events) == Answer("whole")
    assert not any(isinstance(e, AnswerDelta) for e in events)
    assert [r.get("stream") for r in model.requests] == [None, None]


async def test_text_before_a_tool_call_is_shown_then_the_answer_starts_afresh(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(Reply(content="Let me count.", code=FIRST, pieces=3), says("Three."))
    events = await turn(make_agent(fake_executor, model, tmp_path), "s-pre", "count")
    shown = [
        type(e).__name__ if not isinstance(e, AnswerDelta) else e.text
        for e in events
        if isinstance(e, AnswerDelta | Thinking | CodeStarted | Answer)
    ]
    assert shown[0] == "Thinking"
    assert shown[shown.index("CodeStarted") - 1] == "Let me count."
    assert shown[-3:] == ["Thinking", "Three.", "Answer"]


class Typed(io.StringIO):
    """A terminal that remembers each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


async def test_the_console_prints_the_answer_as_it_is_written(
    make_agent: Callable[..., Agent], fake_executor: Executor, model: ScriptedModel, tmp_path: Path
) -> None:
    model.script(runs(FIRST), Reply(content=ANSWER + "\x1b[31m red", pieces=10))
    out = Typed()
    console = Console(
        Conversations(make_agent(fake_executor, model, tmp_path)), out, tmp_path / "exports"
    )
    await run_piped(console, io.StringIO("count the rows\n"))
    printed = out.getvalue()
    assert "rows: 3\n" in printed
    assert printed.endswith(f"{ANSWER} red\n")  # escape sequences never reach the terminal
    assert printed.count(ANSWER) == 1
    # The answer came in pieces, each written as it arrived.
    pieces = [w for w in out.writes if w and w in ANSWER and len(w) < len(ANSWER)]
    assert len(pieces) >= 5


def _chunk(call_id: str | None, arguments: str, finish: str | None = None) -> SimpleNamespace:
    """A streamed chunk as the openai client parses it, from a server that sends no index
    (the client's parser lets a missing index through)."""
    function = SimpleNamespace(name="python" if call_id else None, arguments=arguments)
    call = SimpleNamespace(index=None, id=call_id, function=function)
    delta = SimpleNamespace(content=None, tool_calls=[call])
    choice = SimpleNamespace(index=0, delta=delta, finish_reason=finish)
    return SimpleNamespace(usage=None, choices=[choice])


def test_fragments_without_an_index_join_the_call_their_id_names() -> None:
    assembly = _Assembly()
    assembly.add(_chunk("A", '{"code": "print('))
    assembly.add(_chunk("B", '{"code": "x = '))
    assembly.add(_chunk("A", '1)"}'))
    assembly.add(_chunk("B", "2"))
    assembly.add(_chunk(None, '"}', finish="tool_calls"))  # no id: the newest call goes on
    calls = assembly.reply().tool_calls
    assert [(c.id, c.function.arguments) for c in calls] == [
        ("A", '{"code": "print(1)"}'),
        ("B", '{"code": "x = 2"}'),
    ]
