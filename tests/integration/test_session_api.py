"""The session API that users of E2B-style SDKs expect, with the real kernel under runc and
runsc: files in folders (put, list recursively, get, make_dir, remove, rename, info),
execution counts, DataFrames as structured data, and environment variables the operator
allows (never the bot's own)."""

from __future__ import annotations

import pytest

from executor import Executor, InvalidInput, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]


async def test_files_in_folders(executor: Executor) -> None:
    session = executor.session("files")
    await session.put_files({"in/sales.csv": b"a,b\n1,2\n", "top.txt": b"top"})
    listed = {(f.path, f.type, f.size) for f in await session.files()}
    assert listed == {("in", "dir", 0), ("in/sales.csv", "file", 8), ("top.txt", "file", 3)}
    assert [f.path for f in await session.files("in")] == ["in/sales.csv"]
    assert [f.path for f in await session.files(recursive=False)] == ["in", "top.txt"]
    assert await session.get_file("in/sales.csv") == b"a,b\n1,2\n"
    info = await session.info("in/sales.csv")
    assert info is not None
    assert (info.type, info.size) == ("file", 8)
    assert info.modified > 0
    assert await session.info("missing.txt") is None

    await session.make_dir("out/charts")
    await session.rename("in/sales.csv", "out/charts/sales.csv")
    seen = await session.run(
        "import os\nprint(sorted(os.listdir('out/charts')), os.path.exists('in/sales.csv'))"
    )
    assert seen.stdout == "['sales.csv'] False\n"
    with pytest.raises(InvalidInput, match="already exists"):
        await session.rename("top.txt", "out/charts/sales.csv")
    await session.remove("out")
    await session.remove("top.txt")
    assert [f.path for f in await session.files()] == ["in"]
    with pytest.raises(InvalidInput, match=r"could not remove 'nothing\.txt': FileNotFoundError"):
        await session.remove("nothing.txt")


@pytest.mark.parametrize("path", ["../etc", "/etc/passwd", "a/../../b", "in\x00x"])
async def test_file_operations_stay_in_mnt_data(executor: Executor, path: str) -> None:
    session = executor.session("escape")
    for attempt in (
        session.make_dir(path),
        session.remove(path),
        session.rename("x", path),
        session.put_files({path: b"x"}),
    ):
        with pytest.raises(InvalidInput):
            await attempt


async def test_links_are_not_followed_by_file_operations(executor: Executor) -> None:
    session = executor.session("links")
    made = await session.run(
        "import os\nos.symlink('/etc', 'etc')\nos.symlink('/etc/hostname', 'h')"
    )
    assert made.status is Status.OK
    with pytest.raises(InvalidInput, match="goes through a link"):
        await session.make_dir("etc/evil")
    await session.remove("h")  # the link goes, not what it points to
    kinds = {f.path: f.type for f in await session.files()}
    assert kinds == {"etc": "link"}
    after = await session.run("print(os.path.exists('/etc/hostname'))")
    assert after.stdout == "True\n"


async def test_execution_counts_and_dataframes_as_structured_data(executor: Executor) -> None:
    session = executor.session("counts")
    first = await session.run(
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"
    )
    second = await session.run("df")
    assert (first.execution_count, second.execution_count) == (1, 2)
    bundle = second.results[-1].data
    assert "text/html" in bundle
    table = bundle["application/vnd.dataresource+json"]
    assert [field["name"] for field in table["schema"]["fields"]] == ["index", "a", "b"]
    assert table["data"] == [{"index": 0, "a": 1, "b": "x"}, {"index": 1, "a": 2, "b": "y"}]
    notebook = await executor.run_notebook(["x = 1", "x + 1"])
    assert notebook.execution_count == 2


async def test_only_allowed_environment_variables_can_be_set(runtime: str) -> None:
    limits = SandboxLimits(runtime=runtime, env_allowed=("REPORT_TITLE",))  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session("env")
        await session.set_env({"REPORT_TITLE": "Q3 \"sales\"'); import os; os.remove('x"})
        seen = await session.run("import os\nprint(os.environ['REPORT_TITLE'])")
        assert seen.stdout == "Q3 \"sales\"'); import os; os.remove('x\n"
        for name in ("OTHER", "OPENAI_API_KEY", "CELLMATE_SANDBOX_NETWORK"):
            with pytest.raises(InvalidInput, match="is not allowed in sandboxes"):
                await session.set_env({name: "x"})
    with pytest.raises(ValueError, match="cannot be allowed in sandboxes"):
        SandboxLimits(env_allowed=("DISCORD_TOKEN",))


async def test_pillows_show_puts_the_picture_in_the_answer(executor: Executor) -> None:
    shown = await executor.session("pil").run(
        "import numpy\nfrom PIL import Image\n"
        "image = Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype('uint8'))\n"
        "image.show()\nprint('shown')"
    )
    assert shown.status is Status.OK, shown.message
    assert shown.stdout == "shown\n"
    pictures = [r.image_bytes("image/png") for r in shown.results if "image/png" in r.data]
    assert len(pictures) == 1
    assert pictures[0] is not None
    assert pictures[0].startswith(b"\x89PNG")
