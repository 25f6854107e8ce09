"""A JavaScript or TypeScript cell's last value comes back as the run's result, as Python's
does (an execute_result: text/plain, `is_main_result`), not as stdout; what the cell prints
stays stdout; `undefined` and a cell that fails give none. Real kernels, under runc and
runsc."""

from __future__ import annotations

import pytest

from executor import Executor, Status

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

DEFINE = {"javascript": "var x = 41;", "typescript": "const x: number = 41;"}


@pytest.mark.parametrize("language", ["javascript", "typescript"])
async def test_the_last_value_is_the_result(executor: Executor, language: str) -> None:
    session = executor.session(f"js-result-{language}")

    async def value(code: str) -> tuple[list[str], str]:
        """The run's results' text (each the main result) and its stdout."""
        run = await session.run(code, language=language)
        assert run.status is Status.OK, run.message
        assert all(result.is_main_result for result in run.results)
        return [result.text for result in run.results], run.stdout

    two = await session.run("1 + 1", language=language)
    python = await session.run("1 + 1")
    assert two.stdout == ""
    assert two.results == python.results  # the same kind of result as Python's, "2"
    assert [r.text for r in two.results] == ["2"]

    assert await value("({ a: 1, b: 'x' })") == (["{ a: 1, b: 'x' }"], "")
    assert await value("'hi' + '!'") == (["hi!"], "")  # a string as console.log shows it
    assert await value("[1, 2, 3].map((n) => n * 2)") == (["[ 2, 4, 6 ]"], "")
    assert await value("await Promise.resolve('later')") == (["later"], "")
    assert await value("console.log('printed')") == ([], "printed\n")
    assert await value("console.log('first');\n7") == (["7"], "first\n")
    assert await value("undefined") == ([], "")

    # A value that shows itself (Deno's convention) adds its MIME types to the text.
    shows = await session.run(
        '({ [Symbol.for("Jupyter.display")]() { return { "text/html": "<b>hi</b>" }; } })',
        language=language,
    )
    assert shows.status is Status.OK, shows.message
    assert [set(r.data) for r in shows.results] == [{"text/plain", "text/html"}]
    assert shows.results[0].data["text/html"] == "<b>hi</b>"
    assert await value("null") == ([], "")

    failed = await session.run("JSON.parse('not json');\n7", language=language)
    assert failed.status is Status.ERROR
    assert failed.results == ()
    assert "7" not in failed.stdout

    # The kernel keeps its variables across runs, and gives their values as results.
    assert (await session.run(DEFINE[language], language=language)).status is Status.OK
    assert await value("x + 1") == (["42"], "")
    assert await value("x + 1") == (["42"], "")
