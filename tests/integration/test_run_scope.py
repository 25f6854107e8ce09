"""A run's own environment variables and working folder (`Session.run(env=, cwd=)`) with the
real Python kernel under runc and runsc: they hold for that run, and are gone after it;
folders that lead out of /mnt/data are refused, several ways."""

from __future__ import annotations

import pytest

from executor import Executor, InvalidInput, Status

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

SHOW = "import os\nprint(os.environ.get('REPORT'), os.environ.get('HOME'), os.getcwd())"


async def test_env_and_folder_hold_for_one_run(executor: Executor) -> None:
    session = executor.session("scope")
    before = await session.run(SHOW)
    assert before.stdout == "None /tmp/home /mnt/data\n"

    scoped = await session.run(
        SHOW, env={"REPORT": "Q3 'quoted' \"twice\"", "HOME": "/x"}, cwd="out/q3"
    )
    assert scoped.status is Status.OK, scoped.message
    assert scoped.stdout == "Q3 'quoted' \"twice\" /x /mnt/data/out/q3\n"

    # A child process sees the run's variables and folder too.
    child = await session.run(
        "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $REPORT; pwd'], "
        "capture_output=True, text=True).stdout)",
        env={"REPORT": "child"},
        cwd="/mnt/data/out",
    )
    assert child.stdout == "child\n/mnt/data/out\n\n"

    after = await session.run(SHOW)
    assert after.stdout == "None /tmp/home /mnt/data\n"


async def test_env_is_put_back_after_a_failing_run(executor: Executor) -> None:
    session = executor.session("scope-error")
    await session.run("import os\nos.environ['KEEP'] = 'mine'")
    failed = await session.run(
        "import os\nos.chdir('/tmp')\nraise ValueError(os.environ['KEEP'])",
        env={"KEEP": "run's"},
        cwd="work",
    )
    assert failed.status is Status.ERROR
    assert failed.error is not None
    assert "run's" in failed.error.value
    after = await session.run("import os\nprint(os.environ['KEEP'], os.getcwd())")
    assert after.stdout == "mine /mnt/data\n"


async def test_folders_outside_mnt_data_are_refused(executor: Executor) -> None:
    # (The variants are in tests/unit/test_run_scope.py: the host refuses them.)
    with pytest.raises(InvalidInput, match="working folder"):
        await executor.session("scope-out").run("print(1)", cwd="../etc")


async def test_a_folder_through_a_link_out_of_mnt_data_is_refused(executor: Executor) -> None:
    session = executor.session("scope-link")
    await session.run("import os\nos.symlink('/tmp', 'away')")
    through = await session.run("print('ran')", cwd="away/inside")
    assert through.status is Status.ERROR
    assert through.stdout == ""
    assert through.error is not None
    assert through.error.name == "WorkingFolderError"
    assert "leads out of /mnt/data" in through.error.value


async def test_an_unknown_language_is_refused_before_anything_runs(executor: Executor) -> None:
    with pytest.raises(InvalidInput, match="no language 'cobol'"):
        await executor.session("scope-lang").run("DISPLAY 'HI'", language="cobol")


async def test_a_folder_that_is_a_file_is_refused(executor: Executor) -> None:
    session = executor.session("scope-file")
    await session.run("open('notes.txt', 'w').write('x')")
    for cwd in ("notes.txt", "notes.txt/inside"):
        refused = await session.run("print('ran')", cwd=cwd)
        assert refused.status is Status.ERROR
        assert refused.stdout == ""
        assert refused.error is not None
        assert refused.error.name == "WorkingFolderError"
    assert (await session.run("print(open('notes.txt').read())")).stdout == "x\n"
