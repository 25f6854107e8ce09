from __future__ import annotations

from executor.limits import SandboxLimits
from executor.models import Status
from executor.run import RunOutcome, judge

LIMITS = SandboxLimits(timeout_s=5, memory_mb=512)


def verdict(
    outcome: RunOutcome, oom: bool = False, exit_code: int | None = None
) -> tuple[Status, str]:
    return judge(outcome, oom, exit_code, LIMITS)


def test_status_and_message_for_each_way_a_run_ends() -> None:
    assert verdict(RunOutcome(status="ok")) == (Status.OK, "")
    assert verdict(RunOutcome(status="error"))[0] is Status.ERROR
    assert verdict(RunOutcome(timed_out=True)) == (
        Status.TIMEOUT,
        "The code ran longer than the 5 s time limit; it was interrupted.",
    )
    assert "it was stopped" in verdict(RunOutcome(timed_out=True, killed_by_host=True))[1]
    assert verdict(RunOutcome(status="died", kernel_oom=True))[0] is Status.MEMORY
    assert verdict(RunOutcome(status="lost"), oom=True)[0] is Status.MEMORY
    assert verdict(RunOutcome(status="died", kernel_exit_code=-11)) == (
        Status.KILLED,
        "The Python kernel died from SIGSEGV (segmentation fault) while running the code.",
    )
    assert verdict(RunOutcome(status="lost"), exit_code=137)[1] == (
        "The sandbox stopped unexpectedly from SIGKILL (killed)."
    )
    assert (
        verdict(RunOutcome(status="lost"), exit_code=2)[1]
        == "The sandbox stopped unexpectedly with exit code 2."
    )


def test_a_stop_on_request() -> None:
    assert verdict(RunOutcome(stopped=True, status="error")) == (
        Status.KILLED,
        "The run was stopped on request.",
    )
    assert not RunOutcome(stopped=True, killed_by_host=True, status="lost").sandbox_usable
    assert RunOutcome(status="error").sandbox_usable
