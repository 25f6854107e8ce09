"""A run's language, environment variables and working folder, as the host checks them
(`executor.run_scope`) and the runner's decoder takes them (wire `Run`)."""

from __future__ import annotations

import pytest

from executor import InvalidInput, wire
from executor.run_scope import RunScope, language_named, run_scope


@pytest.mark.parametrize(
    ("name", "language"),
    [
        ("python", "python"),
        ("Py", "python"),
        ("R", "r"),
        ("js", "javascript"),
        ("node", "javascript"),
        ("TypeScript", "typescript"),
        ("ts", "typescript"),
        ("sh", "bash"),
        (" bash ", "bash"),
        ("cobol", None),
        ("", None),
    ],
)
def test_language_names(name: str, language: str | None) -> None:
    assert language_named(name) == language


@pytest.mark.parametrize(
    ("cwd", "folder"),
    [
        (None, ""),
        ("", ""),
        ("/mnt/data", ""),
        ("/mnt/data/", ""),
        ("/mnt/data/out/q3", "out/q3"),
        ("out/./q3/", "out/q3"),
        ("a b/ünï", "a b/ünï"),
    ],
)
def test_working_folders_inside_mnt_data(cwd: str | None, folder: str) -> None:
    assert run_scope(cwd=cwd) == RunScope("python", {}, folder)


@pytest.mark.parametrize(
    "cwd",
    [
        "../etc",
        "/etc",
        "/mnt/datax",
        "/mnt/data/../etc",
        "a/../../b",
        "a/..",
        "in\x00x",
        "x" * 1001,
    ],
)
def test_working_folders_out_of_mnt_data_are_refused(cwd: str) -> None:
    with pytest.raises(InvalidInput, match="working folder"):
        run_scope(cwd=cwd)


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"SLACK_BOT_TOKEN": "x"}, "bot's own"),
        ({"cellmate_anything": "x"}, "bot's own"),
        ({"AZURE_STORAGE_KEY": "x"}, "bot's own"),
        ({"1BAD": "x"}, "not an environment variable name"),
        ({"A-B": "x"}, "not an environment variable name"),
        ({"A=B": "x"}, "not an environment variable name"),
        ({"": "x"}, "not an environment variable name"),
        ({"NUL": "a\x00b"}, "NUL"),
        ({f"V{i}": "x" for i in range(101)}, "More than 100"),
        ({"BIG": "x" * 40_000}, "longer than 32000"),
        ({"N": 1}, "text"),
    ],
)
def test_env_names_and_values_are_checked(env: dict[str, str], reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        run_scope(env=env)


def test_unknown_languages_are_refused_with_the_ones_there_are() -> None:
    with pytest.raises(InvalidInput, match=r"no language 'cobol'.*Python, R, JavaScript"):
        run_scope("cobol")


def test_a_run_round_trips_through_the_wire() -> None:
    run = wire.Run(id="r1", cells=("x <- 1",), language="r", env={"A": "1 '2'"}, cwd="out/q3")
    decoded = wire.decode_request(wire.dumps(wire.encode(run)))
    assert decoded == run


@pytest.mark.parametrize(
    "fields",
    [
        {"language": "cobol"},
        {"language": "r", "kernel": "beside"},
        {"env": {"A-B": "1"}},
        {"env": {"A": "a\x00"}},
        {"cwd": "../x"},
        {"cwd": "/etc"},
    ],
)
def test_the_runner_refuses_what_the_host_would_not_send(fields: dict[str, object]) -> None:
    line = wire.dumps({"op": "run", "id": "r1", "cells": ["1"], **fields})
    with pytest.raises(wire.Malformed):
        wire.decode_request(line)


def test_an_interrupt_names_its_language() -> None:
    interrupt = wire.Interrupt(language="bash")
    assert wire.decode_request(wire.dumps(wire.encode(interrupt))) == interrupt
