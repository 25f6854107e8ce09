"""R's variables in a workspace, with the real kernels under runc and runsc: a data frame, a
function, a fitted model, a list and the packages attached come back beside Python's
variables after a session ends and after a restart; what cannot be kept (a connection,
past the cap) is named; a variable named like R's own functions does not break the save;
with files only, R's variables are never loaded; an R variable holding a getpass() answer
is never saved."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bot.sandbox_words import restored, spoken
from bot.workspaces import StoredWorkspaces
from executor import Status
from executor.session import Restore
from executor.workspace import unpack
from tests.integration.conftest import RUNTIMES
from tests.support.prompts import answering
from tests.support.workspaces import end_idle_sessions, local_store, saving_executor

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

SECRET = b"r" * 32

WORK_R = """
library(ggplot2)
df <- data.frame(city = c("Oslo", "Lima"), sales = c(3, 4))
double <- function(v) v * 2
model <- lm(sales ~ seq_along(sales), data = df)
con <- file("/tmp/scratch.txt", "w")
huge <- as.raw(sample(0:255, 3e6, replace = TRUE))
my.list <- list(a = 1, b = "two")
save <- "a variable named save"
ls <- "and one named ls"
plot <- ggplot(df, aes(city, sales)) + geom_col()
"""

CHECK_R = """
cat(sum(df$sales), double(21), my.list$b, class(model), class(plot)[2],
    exists("con"), exists("huge"), "ggplot2" %in% .packages(), save, "\\n")
"""


@pytest.fixture
def store(tmp_path: Path) -> StoredWorkspaces:
    return local_store(tmp_path, SECRET)


async def test_r_variables_survive_an_idle_end_and_a_restart(
    runtime: str, store: StoredWorkspaces
) -> None:
    async with saving_executor(runtime, store, idle_timeout_s=0.5) as first:
        session = first.session("conv-r")
        python = spoken(await session.run("x = 41"))
        assert python.status is Status.OK, python.message
        made = spoken(await session.run(WORK_R, language="r"))
        assert made.status is Status.OK, made.message
        await end_idle_sessions(first)

        back = spoken(await session.run(CHECK_R, language="r"))
        assert back.status is Status.OK, back.message
        assert back.stdout == "7 42 two lm ggplot FALSE FALSE TRUE a variable named save \n"
        for name in ("x", "df (R)", "double (R)", "model (R)", "my.list (R)", "save (R)"):
            assert name in back.message
        assert "con (R) (an open connection)" in back.message
        assert "huge (R) (too large" in back.message
        assert "R variables (" not in back.message  # no longer named as lost
        assert (await session.run("print(x + 1)")).stdout == "42\n"

        other = spoken(
            await first.session("conv-other").run('cat(exists("my.list"))', language="r")
        )
        assert other.stdout == "FALSE"  # another conversation's R kernel has none of it

    async with saving_executor(runtime, store) as second:  # the first one saved conv-r on exit
        again = spoken(
            await second.session("conv-r").run("cat(double(max(df$sales)))", language="r")
        )
        assert again.status is Status.OK, again.message
        assert again.stdout == "8"
        assert again.message.startswith("Restored your workspace from a moment ago: ")


@pytest.mark.parametrize("runtime", RUNTIMES)  # a rule against hostile code: both runtimes
async def test_with_files_only_r_variables_are_never_loaded(
    runtime: str, store: StoredWorkspaces
) -> None:
    async with saving_executor(runtime, store, idle_timeout_s=0.5) as ex:
        session = ex.session("conv-files")
        made = await session.run(
            'sales <- data.frame(a = 1:3)\nwrite.csv(sales, "kept.csv")', language="r"
        )
        assert made.status is Status.OK
        await end_idle_sessions(ex)
        done = await session.restore(Restore.FILES)
        assert done.withheld == ("sales (R)",)
        assert "kept.csv" in restored(done)
        after = spoken(
            await session.run(
                'cat(exists("sales"), file.exists("kept.csv"))', language="r", restore=Restore.FILES
            )
        )
        assert after.stdout == "FALSE TRUE", after.message
        assert "its variables were not loaded: sales (R)" in after.message


async def test_an_r_session_whose_kernel_never_started_saves_python_alone(
    runtime: str, store: StoredWorkspaces
) -> None:
    async with saving_executor(runtime, store, idle_timeout_s=0.5) as ex:
        session = ex.session("conv-py")
        assert (await session.run("y = 'b'")).status is Status.OK
        await end_idle_sessions(ex)
        back = spoken(await session.run("print(y)"))
        assert back.stdout == "b\n"
        assert back.message.endswith("Restored your workspace from a moment ago: y.")


HIDDEN = "pa55-w0rd-in-R"


async def test_an_r_variable_holding_a_getpass_answer_is_never_saved(
    runtime: str, store: StoredWorkspaces
) -> None:
    _, on_input = answering(HIDDEN)
    async with saving_executor(runtime, store) as ex:
        session = ex.session("conv-secret")
        asked = await session.run(
            "from getpass import getpass\nopen('/tmp/t', 'w').write(getpass('Token: '))",
            on_input=on_input,
        )
        assert asked.status is Status.OK, asked.message
        kept = await session.run(
            'token <- readLines("/tmp/t", warn = FALSE)\n'
            'login <- list(user = "ada", token = token)\n'
            "shout <- toupper(token)\n"
            'plain <- "nothing to hide"',
            language="r",
        )
        assert kept.status is Status.OK, kept.message
    packed = await store.load("conv-secret")  # saved when the executor ended
    assert packed is not None
    saved = unpack(packed, 100, 100_000_000)
    assert saved.r_saved == ("plain", "shout")  # upper case is no longer the answer
    for name in ("token", "login"):
        assert "getpass" in saved.skipped[f"{name} (R)"]
    assert HIDDEN.encode() not in gzip.decompress(saved.r_variables)


@pytest.mark.parametrize("runtime", ["runc"])
async def test_r_names_no_python_name_could_have_come_back_whole_and_drawn_safely(
    runtime: str, store: StoredWorkspaces
) -> None:
    """R names may hold anything (line breaks, bidirectional marks, quotes, 5,000
    characters): the values come back under their own names, and the note draws each name
    on one line, escaped and cut."""
    async with saving_executor(runtime, store, idle_timeout_s=0.5) as ex:
        session = ex.session("conv-names")
        made = await session.run(
            'assign("evil\\n@everyone \\u202e", 1)\n'
            'assign(strrep("n", 5000), 2)\n'
            'assign("`; system(\\"id\\")", 3)\n'
            "ok <- 4",
            language="r",
        )
        assert made.status is Status.OK, made.message
        await end_idle_sessions(ex)
        back = spoken(
            await session.run(
                'cat(ok, get(strrep("n", 5000)), get("`; system(\\"id\\")"), '
                'get("evil\\n@everyone \\u202e"))',
                language="r",
            )
        )
        assert back.stdout == "4 2 3 1", back.message
        assert "\n" not in back.message
        assert "\u202e" not in back.message
        assert "evil\\n@everyone \\u202e (R)" in back.message
        assert "(5,004 characters)" in back.message
        assert len(back.message) < 400
