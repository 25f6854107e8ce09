from __future__ import annotations

import shutil
from pathlib import Path

from executor.image import CONTEXT_DIR, CONTEXT_FILES, content_hash, inputs


def test_tag_changes_exactly_when_an_input_changes(tmp_path: Path) -> None:
    for name in CONTEXT_FILES:
        shutil.copy(CONTEXT_DIR / name, tmp_path / name)
    original = content_hash(tmp_path)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "extra.whl").write_bytes(b"downloaded wheels are not inputs")
    assert content_hash(tmp_path) == original
    with (tmp_path / "requirements.txt").open("a") as requirements:
        requirements.write("tabulate==0.9.0\n")
    assert content_hash(tmp_path) != original

    # The R code the runner loads into the R kernel is an input as its modules are.
    (tmp_path / "runner").mkdir()
    changed = content_hash(tmp_path)
    (tmp_path / "runner" / "charts.R").write_text("local({})\n")
    assert content_hash(tmp_path) != changed
    assert "runner/charts.R" in dict(inputs())


def test_the_image_pins_every_package() -> None:
    lines = [
        line
        for line in (CONTEXT_DIR / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert all("==" in line for line in lines)
    names = {line.split("==")[0] for line in lines}
    wanted = (
        "ipykernel nbclient nbconvert numpy pandas matplotlib scipy seaborn openpyxl pillow "
        "sympy scikit-learn tabulate"
    )
    assert set(wanted.split()) <= names
