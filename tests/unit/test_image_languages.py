"""Which languages go into the sandbox image: the option, the tag that follows it (the same
computation when the image is built and when the bot looks for it), the label that says so,
and the build context each choice sends."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from bot.agent.prompt import system_prompt
from bot.settings import load_settings
from executor import languages as languages_module
from executor.image import CONTEXT_DIR, build_context, content_hash, default_tag, image_languages
from executor.languages import (
    KERNELSPECS,
    LABEL,
    LANGUAGES,
    NPM_DIR,
    NPM_LOCK_SHA256,
    configured_languages,
    kernelspec_files,
    offered,
    parse_languages,
)


def test_languages_are_read_in_canonical_order() -> None:
    assert parse_languages("bash, R ,javascript") == ("r", "javascript", "bash")
    assert parse_languages("bash,bash") == ("bash",)
    assert parse_languages("none") == ()
    assert parse_languages(" , ") == ()
    # TypeScript comes in JavaScript's kernel package.
    assert parse_languages("typescript") == ("javascript",)
    assert offered(parse_languages("bash,ts".replace("ts", "typescript"))) == (
        "javascript",
        "typescript",
        "bash",
    )


def test_an_unknown_language_is_refused() -> None:
    with pytest.raises(ValueError, match="cobol"):
        parse_languages("r,cobol")


def test_all_languages_unless_the_setting_says_otherwise() -> None:
    assert configured_languages({}) == LANGUAGES
    # An empty value means the default, as for every setting (.env.example lists them empty).
    assert configured_languages({"CELLMATE_SANDBOX_LANGUAGES": ""}) == LANGUAGES
    assert configured_languages({"CELLMATE_SANDBOX_LANGUAGES": "none"}) == ()
    assert configured_languages({"CELLMATE_SANDBOX_LANGUAGES": "bash,r"}) == ("r", "bash")


def test_each_language_set_has_its_own_tag() -> None:
    sets = [(), ("r",), ("bash",), ("r", "bash"), LANGUAGES]
    tags = {default_tag(languages=languages) for languages in sets}
    assert len(tags) == len(sets)
    assert default_tag(languages=("r", "bash")) == default_tag(languages=parse_languages("bash,r"))


def test_the_bot_finds_the_image_built_for_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CELLMATE_SANDBOX_LANGUAGES", raising=False)
    assert default_tag() == default_tag(languages=LANGUAGES)
    monkeypatch.setenv("CELLMATE_SANDBOX_LANGUAGES", "r")
    assert default_tag() == default_tag(languages=("r",))
    monkeypatch.setenv("CELLMATE_SANDBOX_LANGUAGES", "none")
    assert default_tag() == default_tag(languages=())


def test_the_bot_settings_and_the_build_agree_on_the_image(tmp_path: Path) -> None:
    # The bot reads the setting from .env as well; the tag it looks for is the one built.
    env = tmp_path / ".env"
    env.write_text("CELLMATE_SANDBOX_LANGUAGES=r,typescript\n")
    settings = load_settings(env_file=env, environ={})
    assert settings.sandbox.image_languages == ("r", "javascript")
    assert settings.sandbox.other_languages == ("r", "javascript", "typescript")
    assert settings.image == default_tag(languages=("r", "javascript"))


def _copy_context(dest: Path) -> None:
    ignore = shutil.ignore_patterns("wheels", "node_modules", "__pycache__")
    shutil.copytree(CONTEXT_DIR, dest, ignore=ignore, dirs_exist_ok=True)


def test_a_kernelspec_change_moves_only_the_tags_of_its_language(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = {languages: content_hash(languages=languages) for languages in [(), ("r",), ("bash",)]}
    changed = {**KERNELSPECS, "r": {"r": {**KERNELSPECS["r"]["r"], "display_name": "R 4"}}}
    monkeypatch.setattr(languages_module, "KERNELSPECS", changed)
    assert content_hash(languages=("r",)) != before[("r",)]
    assert content_hash(languages=("bash",)) == before[("bash",)]
    assert content_hash(languages=()) == before[()]


def test_the_npm_lock_file_moves_the_javascript_tag_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    js, r = content_hash(languages=("javascript",)), content_hash(languages=("r",))
    monkeypatch.setattr(languages_module, "NPM_LOCK_SHA256", "0" * 64)
    assert content_hash(languages=("javascript",)) != js
    assert content_hash(languages=("r",)) == r


def test_the_lock_file_is_the_one_the_tag_names() -> None:
    lock = (CONTEXT_DIR / NPM_DIR / "package-lock.json").read_bytes()
    assert hashlib.sha256(lock).hexdigest() == NPM_LOCK_SHA256


def test_every_kernelspec_is_a_jupyter_kernelspec() -> None:
    files = kernelspec_files(LANGUAGES)
    assert set(files) == {
        f"kernels/{name}/kernel.json" for name in ("r", "javascript", "typescript", "bash")
    }
    for content in files.values():
        spec = json.loads(content)
        assert "{connection_file}" in spec["argv"]
        assert spec["argv"][0].startswith("/")
        assert spec["display_name"]
        assert spec["language"]
    assert kernelspec_files(()) == {}


def test_the_context_carries_the_chosen_kernelspecs_and_debs(tmp_path: Path) -> None:
    _copy_context(tmp_path)
    (tmp_path / "wheels").mkdir()
    deb = tmp_path / "r-base-core_4.2_amd64.deb"
    deb.write_bytes(b"deb")
    out = io.BytesIO()
    build_context(tmp_path, out, ("r", "bash"), [deb])
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        names = set(tar.getnames())
        assert all(member.uid == 0 for member in tar.getmembers())
    assert {
        "kernels/r/kernel.json",
        "kernels/bash/kernel.json",
        "debs/r-base-core_4.2_amd64.deb",
    } <= names
    assert not any(name.startswith(("kernels/javascript", "npm/")) for name in names)
    assert {"debs", "npm", "kernels"} <= names  # the Dockerfile copies them whatever the choice


class _Images:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def get(self, tag: str) -> _Images:
        return self


class _Client:
    def __init__(self, labels: dict[str, str]) -> None:
        self.images = _Images(labels)


def test_the_image_label_names_its_languages() -> None:
    labelled = _Client({LABEL: "r,javascript,bash"})
    assert image_languages(labelled, "t") == LANGUAGES  # type: ignore[arg-type]
    assert image_languages(_Client({LABEL: ""}), "t") == ()  # type: ignore[arg-type]
    assert image_languages(_Client({}), "t") == ()  # type: ignore[arg-type]


def test_the_tag_needs_no_file_the_bots_image_lacks(tmp_path: Path) -> None:
    """The bot's image carries the Dockerfile, the requirements and the runner (and the
    executor package): from those alone it computes the tag of every language set."""
    for name in ("Dockerfile", "requirements.txt", "cellmate_runner.py"):
        shutil.copy(CONTEXT_DIR / name, tmp_path / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(CONTEXT_DIR / "runner", tmp_path / "runner", ignore=ignore)
    for languages in [(), ("javascript",), LANGUAGES]:
        assert content_hash(tmp_path, languages) == content_hash(CONTEXT_DIR, languages)


@pytest.mark.parametrize(
    ("languages", "said"),
    [
        (
            ("r",),
            "Python's and R's variables (and R's attached packages) come back after a "
            "session restart.\n",
        ),
        (
            ("r", "bash"),
            "Python's and R's variables (and R's attached packages) come back "
            "after a session restart: keep other languages' results in files.\n",
        ),
        (
            ("javascript",),
            "Only Python's variables come back after a session restart: keep "
            "other languages' results in files.\n",
        ),
    ],
)
def test_the_prompt_says_which_languages_variables_come_back(
    languages: tuple[str, ...], said: str
) -> None:
    assert said in system_prompt(network=False, languages=languages)
