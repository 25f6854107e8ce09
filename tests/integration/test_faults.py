"""Hostile and broken code, with real containers under runc and runsc.

Each case must end with the right status and a specific message, leave nothing behind (the
autouse fixture checks), and not affect the next run.
"""

from __future__ import annotations

import json

import docker
import pytest

from executor import Executor, InvalidInput, SandboxLimits, Status, default_tag
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.support.network import listening_on_host, reach_code
from tests.support.sandboxes import live_sandboxes

pytestmark = pytest.mark.docker


async def healthy(executor: Executor) -> None:
    """The next run after a fault works normally."""
    result = await executor.run_notebook("print(sum(range(10)))")
    assert result.status is Status.OK
    assert result.stdout == "45\n"


async def test_infinite_loop_times_out(executor: Executor) -> None:
    result = await executor.run_notebook("while True:\n    pass", timeout_s=3)
    assert result.status is Status.TIMEOUT
    assert "3 s time limit" in result.message
    await healthy(executor)


async def test_sleep_beyond_the_limit_times_out(executor: Executor) -> None:
    # A new sandbox's first cell waits for its warm-up (the data stack's imports), which on
    # a loaded machine takes seconds: the limit leaves room for that before the print.
    result = await executor.run_notebook(
        "print('start', flush=True)\nimport time\ntime.sleep(600)", timeout_s=20
    )
    assert result.status is Status.TIMEOUT
    assert result.stdout == "start\n"  # output from before the limit is kept


async def test_code_that_ignores_interrupts_is_killed(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "open('partial.txt', 'w').write('written before the limit')\n"
        "while True:\n"
        "    time.sleep(0.1)",
        timeout_s=3,
    )
    assert result.status is Status.TIMEOUT
    assert "it was stopped" in result.message
    # Files written before the kill still come back.
    assert [(f.path, f.content) for f in result.files] == [
        ("partial.txt", b"written before the limit")
    ]
    await healthy(executor)


async def test_memory_bomb(executor: Executor) -> None:
    result = await executor.run_notebook(
        "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))", memory_mb=512
    )
    assert result.status is Status.MEMORY
    assert "out of memory" in result.message
    assert "512 MB" in result.message
    await healthy(executor)


async def test_fork_bomb(executor: Executor) -> None:
    result = await executor.run_notebook("import os\nwhile True:\n    os.fork()", timeout_s=10)
    assert result.status is not Status.OK
    assert result.message
    await healthy(executor)


async def test_filling_mnt_data(executor: Executor) -> None:
    result = await executor.run_notebook(
        "chunk = b'0' * (64 * 1024 * 1024)\n"
        "for i in range(20):\n"
        "    open(f'/mnt/data/part{i}', 'wb').write(chunk)",
        data_mb=256,
    )
    assert result.status is Status.ERROR
    assert result.error is not None
    assert "No space left on device" in result.error.value
    assert all(f.size <= 50_000_000 for f in result.files)


async def test_one_huge_file_hits_the_file_size_limit(executor: Executor) -> None:
    result = await executor.run_notebook(
        "open('/mnt/data/big', 'wb').write(b'0' * (40 * 1024 * 1024))", file_size_mb=16
    )
    assert result.status is Status.ERROR
    assert result.error is not None
    assert "File too large" in result.error.value


async def test_filling_tmp(executor: Executor) -> None:
    result = await executor.run_notebook(
        "open('/tmp/big', 'wb').write(b'0' * (400 * 1024 * 1024))", tmp_mb=64
    )
    assert result.status is Status.ERROR
    assert result.error is not None
    assert "No space left on device" in result.error.value


async def test_a_hundred_megabytes_of_output_is_cut(executor: Executor) -> None:
    result = await executor.run_notebook(
        "line = 'x' * 9_999\nfor _ in range(10_000):\n    print(line)", timeout_s=60
    )
    assert result.status is Status.OK
    assert result.output_truncated
    assert 900_000 <= len(result.stdout) <= 1_000_000
    assert "Output was cut at 1,000,000 bytes" in result.message


async def test_non_utf8_bytes_on_stdout(executor: Executor) -> None:
    result = await executor.run_notebook(
        # Written below Python, straight to the descriptor; the kernel forwards such output
        # from a thread, so the code gives it a moment before the cell ends.
        "import os, time\nos.write(1, b'bad \\xff\\xfe end\\n')\ntime.sleep(1)\nprint('after')"
    )
    assert result.status is Status.OK
    assert "after\n" in result.stdout
    assert "bad \ufffd\ufffd end" in result.stdout


async def test_input_is_refused_clearly(executor: Executor) -> None:
    result = await executor.run_notebook("name = input('name? ')")
    assert result.status is Status.ERROR
    assert result.error is not None
    assert result.error.name == "StdinNotImplementedError"
    assert "input requests" in result.error.value


@pytest.mark.parametrize(
    ("code", "signal_name"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
        ("import ctypes\nctypes.string_at(0)", "SIGSEGV"),
    ],
)
async def test_kernel_that_dies(executor: Executor, code: str, signal_name: str) -> None:
    result = await executor.run_notebook(["print('before')", code, "print('after')"])
    assert result.status is Status.KILLED
    assert "kernel died" in result.message
    assert signal_name in result.message
    assert result.stdout == "before\n"
    await healthy(executor)


async def test_root_and_etc_are_not_writable(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import os\n"
        "for path in ['/evil', '/etc/evil', '/opt/venv/evil', '/usr/evil']:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as e:\n"
        "        print('refused', path, e.strerror)\n"
        "print(os.getuid(), os.getgid())"
    )
    assert result.status is Status.OK
    assert "WROTE" not in result.stdout
    assert result.stdout.count("refused") == 4
    assert result.stdout.splitlines()[-1] == "61000 61000"


async def test_bot_secrets_are_not_in_the_sandbox(
    executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cellmate-test-secret")
    monkeypatch.setenv("DISCORD_TOKEN", "discord-cellmate-test-secret")
    result = await executor.run_notebook(
        "import os, glob\n"
        "seen = [repr(dict(os.environ))]\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        seen.append(open(path, 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('\\n'.join(seen))"
    )
    assert result.status is Status.OK
    assert "HOME=" in result.stdout  # the dump itself worked
    assert "cellmate-test-secret" not in result.stdout
    assert "OPENAI_API_KEY" not in result.stdout


async def test_no_network(executor: Executor) -> None:
    """Listeners this test starts on the host's own addresses (Docker's bridge among them)
    are out of the sandbox's reach, and no route leaves it: neither a default route nor
    one to a DNS server (read from its routing table; nothing is sent to them)."""
    async with listening_on_host() as listeners:
        result = await executor.run_notebook(reach_code(listeners.targets))
    assert result.status is Status.OK, result.message
    seen = json.loads(result.stdout)
    assert set(seen["outcomes"]) == {host for host, _ in listeners.targets}
    assert "connected" not in seen["outcomes"].values(), seen
    assert listeners.reached_by == []
    assert seen["default_route"] is False
    assert seen["routed_dns_servers"] == []


async def test_network_is_opt_in(docker_client: docker.DockerClient) -> None:
    code = (
        "routes = open('/proc/net/route').readlines()[1:]\n"
        "print(any(line.split()[1] == '00000000' for line in routes))"
    )
    async with Executor(
        default_tag(), limits=SandboxLimits(network=True), instance=TEST_INSTANCE, pool=NO_POOL
    ) as ex:
        enabled = await ex.run_notebook(code)
        disabled = await ex.run_notebook(code, network=False)
    assert enabled.stdout == "True\n"  # a default route exists only when the operator allows it
    assert disabled.stdout == "False\n"


async def test_links_and_fifos_never_come_back(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd')\n"
        "os.symlink('/proc/self/environ', 'environ')\n"
        "os.mkfifo('pipe')\n"
        "open('real.txt', 'w').write('real')"
    )
    assert result.status is Status.OK
    assert [(f.path, f.content) for f in result.files] == [("real.txt", b"real")]
    reasons = {s.path: s.reason for s in result.skipped_files}
    assert "link" in reasons["passwd"]
    assert "/etc/passwd" in reasons["passwd"]
    assert "link" in reasons["environ"]


async def test_ten_thousand_files(executor: Executor) -> None:
    result = await executor.run_notebook(
        "for i in range(10_000):\n    open(f'/mnt/data/f{i:05}.txt', 'w').write(str(i))"
    )
    assert result.status is Status.OK
    assert len(result.files) == 100
    assert any("9,900 more files not returned" in s.reason for s in result.skipped_files)
    assert len(result.skipped_files) <= 2


async def test_deep_folders_are_capped(executor: Executor) -> None:
    result = await executor.run_notebook(
        "import os\n"
        "os.makedirs('a/b/c/d/e/f/g/h/i/j')\n"
        "open('a/b/c/d/e/f/g/h/i/j/deep.txt', 'w').write('x')"
    )
    assert result.files == ()
    assert "nested deeper" in result.skipped_files[0].reason


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/passwd", "a/../../b", "..", ""])
async def test_bad_input_file_names_are_refused_before_any_sandbox(
    executor: Executor, docker_client: docker.DockerClient, name: str
) -> None:
    with pytest.raises(InvalidInput, match="input file name"):
        await executor.run_notebook("print(1)", files={name: b"x"})
    assert live_sandboxes(docker_client) == []


async def test_too_many_input_files_are_refused(executor: Executor) -> None:
    with pytest.raises(InvalidInput, match="at most 20 are allowed"):
        await executor.run_notebook("print(1)", files={f"f{i}": b"" for i in range(21)})


async def test_code_that_tries_to_kill_the_runner(executor: Executor, runtime: str) -> None:
    # The runner is the sandbox's init: under runc, signals from inside never reach it;
    # gVisor delivers SIGKILL to it, and the sandbox is then reported as stopped.
    result = await executor.run_notebook(
        [
            "print('before')",
            "import os, signal, time\n"
            "for signum in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):\n"
            "    os.kill(os.getppid(), signum)\n"
            "time.sleep(0.5)\n"
            "print('after', os.getppid())",
        ]
    )
    if runtime == "runc":
        assert result.status is Status.OK, result.message
        assert result.stdout == "before\nafter 1\n"
    else:
        assert result.status is Status.KILLED
        assert result.message.startswith("The sandbox stopped unexpectedly")
        assert result.stdout == "before\n"
    await healthy(executor)


async def test_forged_events_are_ignored(executor: Executor, runtime: str) -> None:
    # Sandboxed code writes protocol events into every pipe of another process that it can
    # open (under gVisor that includes the runner's own output), each line in one atomic
    # write so that it cannot garble the runner's own lines; the host only trusts
    # events sealed with the runner's key, so the result holds only the real output.
    result = await executor.run_notebook(
        "import json, os\n"
        "output = {'output_type': 'stream', 'name': 'stdout', 'text': 'y' * 1000}\n"
        "event = (json.dumps({'type': 'output', 'cell': 0, 'output': output}) + '\\n').encode()\n"
        "forged = 0\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    try:\n"
        "        fds = os.listdir(f'/proc/{pid}/fd')\n"
        "    except OSError:\n"
        "        continue\n"
        "    for fd in fds:\n"
        "        try:\n"
        "            if os.readlink(f'/proc/{pid}/fd/{fd}').startswith(('pipe:', 'host:')):\n"
        "                out = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY)\n"
        "                for _ in range(200):\n"
        "                    os.write(out, event)\n"
        "                forged += 1\n"
        "        except OSError:\n"
        "            pass\n"
        "print('forged into', forged)",
    )
    assert result.status is Status.OK, result.message
    # Under runc not one descriptor of the runner opens; gVisor lets its pipes open (how
    # many depends on how the runner lays out its descriptors), and the lines reach it.
    reached = int(result.stdout.removeprefix("forged into "))
    assert result.stdout == f"forged into {reached}\n"
    assert reached == 0 if runtime == "runc" else reached >= 2
    assert not result.results
    await healthy(executor)
