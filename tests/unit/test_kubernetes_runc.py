"""runc on Kubernetes takes an explicit setting: without it the bot refuses to start and says
which setting to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.ops.cli import main
from bot.settings import SettingsError, load_settings
from executor.kubernetes_backend import KubernetesBackend

KUBERNETES = {"CELLMATE_EXECUTOR_BACKEND": "kubernetes"}


@pytest.mark.parametrize("runtime", [{}, {"CELLMATE_SANDBOX_RUNTIME": "runc"}])
def test_runc_on_kubernetes_is_refused_without_the_setting(runtime: dict[str, str]) -> None:
    settings = load_settings({**KUBERNETES, **runtime}, env_file=None)
    with pytest.raises(SettingsError) as refused:
        settings.sandbox_backend()
    message = str(refused.value)
    assert "needs CELLMATE_KUBERNETES_ALLOW_RUNC=1" in message
    assert "CELLMATE_SANDBOX_RUNTIME=runsc" in message
    assert settings.runc_refusal() == message


@pytest.mark.parametrize(
    "chosen",
    [
        {"CELLMATE_SANDBOX_RUNTIME": "runsc"},
        {"CELLMATE_KUBERNETES_ALLOW_RUNC": "1"},
        {"CELLMATE_SANDBOX_RUNTIME": "runc", "CELLMATE_KUBERNETES_ALLOW_RUNC": "true"},
    ],
)
def test_gvisor_or_the_explicit_setting_starts(chosen: dict[str, str]) -> None:
    settings = load_settings({**KUBERNETES, **chosen}, env_file=None)
    assert settings.runc_refusal() is None
    assert isinstance(settings.sandbox_backend(), KubernetesBackend)


def test_docker_with_runc_needs_no_setting() -> None:
    settings = load_settings({"CELLMATE_SANDBOX_RUNTIME": "runc"}, env_file=None)
    assert settings.runc_refusal() is None
    assert settings.sandbox_backend() is None


def test_the_command_line_refuses_to_start_and_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "code.py"
    code.write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("CELLMATE_EXECUTOR_BACKEND", "kubernetes")
    monkeypatch.setenv("CELLMATE_SANDBOX_RUNTIME", "runc")
    monkeypatch.setenv("CELLMATE_DATA_DIR", str(tmp_path))
    assert main(["exec", str(code)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cellmate: bad setting: CELLMATE_SANDBOX_RUNTIME=runc on Kubernetes")
    assert "CELLMATE_KUBERNETES_ALLOW_RUNC=1" in err
