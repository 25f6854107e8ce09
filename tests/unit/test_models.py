from __future__ import annotations

from executor.models import OutputCollector, Status, clean_text


def test_clean_text_strips_ansi_and_lone_surrogates() -> None:
    assert clean_text("\x1b[31mValueError\x1b[39m: bad") == "ValueError: bad"
    assert clean_text("\x1b]8;;http://x\x07link\x1b]8;;\x07") == "link"
    assert clean_text("bad \udcff byte") == "bad ? byte"
    assert clean_text(None) == ""


def test_collector_folds_nbformat_outputs() -> None:
    collector = OutputCollector()
    _add_all(
        collector,
        [
            {"output_type": "stream", "name": "stdout", "text": "a\n"},
            {"output_type": "stream", "name": "stderr", "text": ["warn", "ing\n"]},
            {
                "output_type": "display_data",
                "data": {"image/png": "iVBO", "text/plain": ["<Figure>"]},
                "metadata": {},
            },
            {
                "output_type": "execute_result",
                "data": {"text/plain": "42"},
                "metadata": {},
                "execution_count": 1,
            },
            {
                "output_type": "error",
                "ename": "KeyError",
                "evalue": "'x'",
                "traceback": ["\x1b[0;31mKeyError\x1b[0m: 'x'"],
            },
        ],
    )
    assert collector.stdout == ["a\n"]
    assert collector.stderr == ["warning\n"]
    chart, value = collector.results
    assert chart.image_types == ["image/png"]
    assert chart.text == "<Figure>"
    assert not chart.is_main_result
    assert value.is_main_result
    assert value.text == "42"
    assert collector.error is not None
    assert collector.error.traceback == ("KeyError: 'x'",)


def test_collector_ignores_malformed_outputs() -> None:
    collector = OutputCollector()
    _add_all(
        collector,
        [{"output_type": "display_data", "data": "not a bundle"}, {"output_type": "unknown"}, {}],
    )
    assert collector.results == []
    assert collector.error is None


def test_status_values_are_the_documented_strings() -> None:
    assert [s.value for s in Status] == ["ok", "error", "timeout", "memory", "killed"]


def test_collector_caps_what_a_runaway_runner_sends() -> None:
    collector = OutputCollector(text_limit=10, rich_limit=8)
    for _ in range(5):
        collector.add({"output_type": "stream", "name": "stdout", "text": "abcd"})
    collector.add({"output_type": "display_data", "data": {"text/plain": "12345"}})
    collector.add({"output_type": "display_data", "data": {"text/plain": "12345"}})
    assert "".join(collector.stdout) == "abcdabcdab"
    assert len(collector.results) == 1
    assert collector.truncated


def test_collector_keeps_a_number_of_results_and_counts_the_rest() -> None:
    collector = OutputCollector(rich_count_limit=3)
    for _ in range(10):
        collector.add({"output_type": "display_data", "data": {}})
    collector.add({"output_type": "stream", "name": "stdout", "text": "after\n"})
    assert len(collector.results) == 3
    assert collector.dropped == 7
    assert collector.stdout == ["after\n"]
    assert not collector.truncated
    result = collector.result(Status.OK, "", dropped_results=collector.dropped)
    assert result.to_json()["dropped_results"] == 7


def test_collector_caps_text_in_bytes_without_splitting_a_character() -> None:
    collector = OutputCollector(text_limit=7, rich_limit=9)
    collector.add({"output_type": "stream", "name": "stdout", "text": "ééééé"})
    collector.add({"output_type": "display_data", "data": {"text/plain": "éééé"}})
    collector.add({"output_type": "display_data", "data": {"text/plain": "éééééé"}})
    assert collector.stdout == ["ééé"]
    assert [r.text for r in collector.results] == ["éééé"]
    assert collector.truncated


def _add_all(collector: OutputCollector, outputs: list[dict[str, object]]) -> None:
    for output in outputs:
        collector.add(output)
