"""A JavaScript or TypeScript cell's last value as its result: the image's one change to
tslab (applied exactly once, or the build fails), the hook Node loads before tslab, and the
runner's turning of the hook's marked display into an execute_result."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from executor import languages as languages_module
from executor.errors import ImageBuildError
from executor.image import CONTEXT_DIR, content_hash, inputs, patch_tslab
from executor.languages import KERNELSPECS, TSLAB, TSLAB_PATCH, TSLAB_PATCH_FILE, TSLAB_RESULT

EXECUTOR_JS = """        if (converted.lastExpressionVar &&
            exports[converted.lastExpressionVar] != null) {
            let ret = exports[converted.lastExpressionVar];
            delete exports[converted.lastExpressionVar];
            console.log(ret);
        }
        return true;
"""


def _tslab(tmp_path: Path, text: str) -> Path:
    path = tmp_path / TSLAB_PATCH_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_the_patch_hands_the_last_value_to_the_hook(tmp_path: Path) -> None:
    path = _tslab(tmp_path, EXECUTOR_JS)
    patch_tslab(tmp_path)
    patched = path.read_text()
    assert "\n            console.log(ret);" not in patched
    assert 'globalThis[Symbol.for("cellmate.result")]' in patched
    assert patched == EXECUTOR_JS.replace(*TSLAB_PATCH)
    # Without the hook tslab prints the value, as it did.
    assert "else console.log(ret);" in patched


@pytest.mark.parametrize(
    "text", [EXECUTOR_JS.replace("console.log(ret);", "display(ret);"), EXECUTOR_JS * 2]
)
def test_a_tslab_without_the_exact_text_once_fails_the_build(tmp_path: Path, text: str) -> None:
    path = _tslab(tmp_path, text)
    before = path.read_text()
    with pytest.raises(ImageBuildError, match="tslab changed"):
        patch_tslab(tmp_path)
    assert path.read_text() == before


def test_the_patch_and_the_hook_are_in_the_javascript_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    js, r = content_hash(languages=("javascript",)), content_hash(languages=("r",))
    monkeypatch.setattr(languages_module, "TSLAB_PATCH", (TSLAB_PATCH[0], "show(ret);"))
    assert content_hash(languages=("javascript",)) != js
    assert content_hash(languages=("r",)) == r
    assert ("runner/tslab_result.js", CONTEXT_DIR / "runner/tslab_result.js") in inputs()


def test_node_loads_the_hook_before_tslab_in_both_kernels() -> None:
    for name in ("javascript", "typescript"):
        argv = KERNELSPECS["javascript"][name]["argv"]
        assert isinstance(argv, list)
        assert argv[:4] == ["/usr/bin/node", "--require", TSLAB_RESULT, TSLAB]
    assert Path(TSLAB_RESULT).name == "tslab_result.js"
    assert (CONTEXT_DIR / "runner" / Path(TSLAB_RESULT).name).is_file()


@pytest.fixture(scope="module")
def results() -> ModuleType:
    """The sandbox's runner/results.py, loaded by its path (it needs nothing installed)."""
    path = CONTEXT_DIR / "runner" / "results.py"
    spec = importlib.util.spec_from_file_location("_cellmate_results_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _display(metadata: dict[str, object]) -> dict[str, object]:
    return {
        "msg_type": "display_data",
        "header": {"msg_type": "display_data", "msg_id": "m1"},
        "parent_header": {"msg_id": "p1"},
        "content": {"data": {"text/plain": "2"}, "metadata": metadata, "transient": {}},
    }


def test_a_marked_display_becomes_the_execute_result(results: ModuleType) -> None:
    made = results.as_result(_display({"cellmate/result": True, "other": 1}))
    assert made["msg_type"] == made["header"]["msg_type"] == "execute_result"
    assert made["header"]["msg_id"] == "m1"
    assert made["parent_header"] == {"msg_id": "p1"}
    assert made["content"] == {
        "data": {"text/plain": "2"},
        "metadata": {"other": 1},
        "execution_count": None,
    }


@pytest.mark.parametrize(
    "msg",
    [
        _display({}),
        _display({"cellmate/result": "yes"}),
        {**_display({"cellmate/result": True}), "msg_type": "update_display_data"},
        {"msg_type": "stream", "content": {"name": "stdout", "text": "2\n"}},
    ],
)
def test_anything_else_passes_unchanged(results: ModuleType, msg: dict[str, object]) -> None:
    assert results.as_result(msg) is msg


def test_the_hook_and_the_runner_use_the_same_mark(results: ModuleType) -> None:
    hook = (CONTEXT_DIR / "runner" / "tslab_result.js").read_text()
    assert f"const MARK = {json.dumps(results.RESULT_MARK)};" in hook
    assert 'Symbol.for("cellmate.result")' in hook
