"""Notebook mode with real containers: what a caller gets back from ordinary code."""

from __future__ import annotations

import asyncio
import base64
import io

import docker
import pytest
from PIL import Image

from executor import Executor, SandboxLimits, Status, default_tag
from executor.docker_backend import DockerBackend
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.support.sandboxes import live_sandboxes

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]


async def test_streams_and_last_expression(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import sys\nprint('hello')\nprint('careful', file=sys.stderr)\n6 * 7"
    )
    assert result.status is Status.OK
    assert result.stdout == "hello\n"
    assert result.stderr == "careful\n"
    assert [r.text for r in result.results if r.is_main_result] == ["42"]
    assert result.error is None
    assert result.message == ""
    assert result.duration_ms > 0


async def test_chart_is_inline_png_not_a_file(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('trend')\nplt.show()"
    )
    assert result.status is Status.OK
    images = [r for r in result.results if "image/png" in r.data]
    assert len(images) == 1
    with Image.open(io.BytesIO(base64.b64decode(images[0].data["image/png"]))) as picture:
        assert picture.format == "PNG"
        assert picture.size[0] >= 400
    assert result.files == ()


async def test_rich_mime_bundles(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import pandas as pd\n"
        "from IPython.display import SVG, JSON, display\n"
        'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>\'))\n'
        "display(JSON({'answer': 42}))\n"
        "pd.DataFrame({'a': [1, 2]})"
    )
    assert result.status is Status.OK
    kinds = [set(r.data) for r in result.results]
    assert any("image/svg+xml" in k for k in kinds)
    assert any("application/json" in k for k in kinds)
    table = result.results[-1]
    assert table.is_main_result
    assert "<table" in table.data["text/html"]
    assert "a" in table.text


async def test_input_files_in_and_changed_files_out(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import os\n"
        "import pandas as pd\n"
        "df = pd.read_csv('sales.csv')\n"
        "df['double'] = df['amount'] * 2\n"
        "os.makedirs('out', exist_ok=True)\n"
        "df.to_csv('out/doubled.csv', index=False)\n"
        "open('notes.txt', 'a').write('seen\\n')\n"
        "print(len(df))",
        files={"sales.csv": b"amount\n1\n2\n3\n", "notes.txt": b"first\n", "keep.txt": b"same"},
    )
    assert result.status is Status.OK, result.error
    assert result.stdout == "3\n"
    files = {f.path: f.content for f in result.files}
    assert files["out/doubled.csv"] == b"amount,double\n1,2\n2,4\n3,6\n"
    assert files["notes.txt"] == b"first\nseen\n"
    assert "sales.csv" not in files  # unchanged inputs are not outputs
    assert "keep.txt" not in files


async def test_cells_run_in_order_and_stop_at_first_error(executor: Executor) -> None:
    result = await executor.run_notebook(["x = 21", "print(x * 2)", "1 / 0", "print('never')"])
    assert result.status is Status.ERROR
    assert result.stdout == "42\n"
    assert result.error is not None
    assert result.error.name == "ZeroDivisionError"
    assert result.error.value == "division by zero"
    assert all("\x1b" not in line for line in result.error.traceback)
    assert "never" not in result.stdout
    assert result.notebook is not None
    cells = result.notebook["cells"]
    assert [c["source"] for c in cells] == ["x = 21", "print(x * 2)", "1 / 0"]
    assert cells[1]["outputs"][0]["text"] == "42\n"


async def test_syntax_error_is_a_result(executor: Executor) -> None:
    result = await executor.run_notebook("def broken(:\n    pass")
    assert result.status is Status.ERROR
    assert result.error is not None
    assert result.error.name == "SyntaxError"


async def test_executed_notebook_is_valid_nbformat(executor: Executor) -> None:
    import nbformat

    result = await executor.run_notebook(["a = 1", "a + 1"])
    assert result.notebook is not None
    notebook = nbformat.from_dict(result.notebook)
    nbformat.validate(notebook)
    assert notebook.cells[1].outputs[0]["data"]["text/plain"] == "2"


async def test_each_run_gets_a_fresh_sandbox(executor: Executor) -> None:
    first = await executor.run_notebook(
        "open('/mnt/data/mark', 'w').write('x'); import os; os.getpid()"
    )
    second = await executor.run_notebook("import os; os.path.exists('/mnt/data/mark')")
    assert first.status is Status.OK
    assert [r.text for r in second.results] == ["False"]


async def test_cancelled_run_removes_its_container(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    limits = SandboxLimits(runtime=runtime)  # type: ignore[arg-type]
    async with Executor(
        default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL
    ) as executor:
        task = asyncio.create_task(executor.run_notebook("import time; time.sleep(60)"))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if live_sandboxes(docker_client):
                break
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert live_sandboxes(docker_client) == []


async def test_leftovers_of_a_crash_are_removed_at_start(
    docker_client: docker.DockerClient,
) -> None:
    # What a process killed mid-run leaves: a labelled volume and a running container.
    labels = DockerBackend(default_tag(), instance=TEST_INSTANCE).labels
    docker_client.volumes.create(name="cellmate-orphan-test", labels=labels)
    orphan = docker_client.containers.run(
        default_tag(), name="cellmate-orphan-test", labels=labels, stdin_open=True, detach=True
    )
    assert len(live_sandboxes(docker_client)) == 2
    async with Executor(default_tag(), instance=TEST_INSTANCE):
        pass
    assert live_sandboxes(docker_client) == []
    with pytest.raises(docker.errors.NotFound):
        orphan.reload()
