"""The executor's integration suite, run as it is on Pods: every test here is one of the
Docker integration tests that speaks only the executor's API, collected again in this
folder so that it gets this folder's `executor` (the Kubernetes backend, runc, driven by the
bot's service account). What only Docker can show (containers removed with the engine's
API, its leftovers) has its Kubernetes counterpart in test_kubernetes_executor.py."""

from __future__ import annotations

import pytest

from tests.integration.test_notebook_mode import (
    test_cells_run_in_order_and_stop_at_first_error,
    test_chart_is_inline_png_not_a_file,
    test_each_run_gets_a_fresh_sandbox,
    test_executed_notebook_is_valid_nbformat,
    test_input_files_in_and_changed_files_out,
    test_rich_mime_bundles,
    test_streams_and_last_expression,
    test_syntax_error_is_a_result,
)
from tests.integration.test_sessions import (
    test_a_dead_kernel_restarts_the_session_and_says_so,
    test_a_link_written_by_code_is_never_followed,
    test_a_new_session_has_the_data_stack_loaded_and_nothing_visible,
    test_a_stop_set_before_the_run_starts_runs_nothing,
    test_closing_a_session_forgets_it_quietly,
    test_container_limits_cannot_change_per_session_run,
    test_export_as_a_notebook,
    test_files_into_and_out_of_a_live_session,
    test_idle_sessions_end_and_the_next_run_says_so,
    test_output_streams_while_the_code_runs,
    test_runs_on_one_session_queue_in_order,
    test_sessions_never_see_each_other,
    test_stop_freezes_code_that_ignores_it_and_the_session_restarts,
    test_stop_interrupts_and_keeps_state,
    test_timeout_in_a_session_keeps_state,
    test_variables_and_files_carry_over,
)

pytestmark = pytest.mark.kubernetes

__all__ = [
    "test_a_dead_kernel_restarts_the_session_and_says_so",
    "test_a_link_written_by_code_is_never_followed",
    "test_a_new_session_has_the_data_stack_loaded_and_nothing_visible",
    "test_a_stop_set_before_the_run_starts_runs_nothing",
    "test_cells_run_in_order_and_stop_at_first_error",
    "test_chart_is_inline_png_not_a_file",
    "test_closing_a_session_forgets_it_quietly",
    "test_container_limits_cannot_change_per_session_run",
    "test_each_run_gets_a_fresh_sandbox",
    "test_executed_notebook_is_valid_nbformat",
    "test_export_as_a_notebook",
    "test_files_into_and_out_of_a_live_session",
    "test_idle_sessions_end_and_the_next_run_says_so",
    "test_input_files_in_and_changed_files_out",
    "test_output_streams_while_the_code_runs",
    "test_rich_mime_bundles",
    "test_runs_on_one_session_queue_in_order",
    "test_sessions_never_see_each_other",
    "test_stop_freezes_code_that_ignores_it_and_the_session_restarts",
    "test_stop_interrupts_and_keeps_state",
    "test_streams_and_last_expression",
    "test_syntax_error_is_a_result",
    "test_timeout_in_a_session_keeps_state",
    "test_variables_and_files_carry_over",
]
