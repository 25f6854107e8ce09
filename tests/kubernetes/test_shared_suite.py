"""The executor's integration suite, run as it is on Pods: every test here is one of the
Docker integration tests that speaks only the executor's API (sessions, notebook runs, the
warm pool, hostile and broken code, isolation), collected again in this folder so that it
gets this folder's fixtures (the Kubernetes backend driven by the bot's service account; on
runc, and on gVisor too where the outcome can differ: see ON_GVISOR_TOO in conftest.py).
What only Docker can show (containers removed with the engine's API, its leftovers) has its
Kubernetes counterpart in test_kubernetes_executor.py.

Not run here: the fork bomb (a Pod has no process limit of its own; the kubelet's
podPidsLimit is the cluster's, see the README) and the tests that use Docker's API (a
network-enabled sandbox, another sandbox user, the shutdown count); the restart has its
own Kubernetes test (test_restart.py)."""

from __future__ import annotations

import pytest

from tests.integration.test_faults import (
    test_a_hundred_megabytes_of_output_is_cut,
    test_bot_secrets_are_not_in_the_sandbox,
    test_code_that_ignores_interrupts_is_killed,
    test_code_that_tries_to_kill_the_runner,
    test_deep_folders_are_capped,
    test_filling_mnt_data,
    test_filling_tmp,
    test_forged_events_are_ignored,
    test_infinite_loop_times_out,
    test_input_is_refused_clearly,
    test_kernel_that_dies,
    test_links_and_fifos_never_come_back,
    test_memory_bomb,
    test_no_network,
    test_non_utf8_bytes_on_stdout,
    test_one_huge_file_hits_the_file_size_limit,
    test_root_and_etc_are_not_writable,
    test_sleep_beyond_the_limit_times_out,
    test_ten_thousand_files,
    test_too_many_input_files_are_refused,
)
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
from tests.integration.test_pool import (
    test_a_session_and_notebook_runs_start_from_the_pool,
    test_a_waiting_session_gets_the_sandbox_an_idle_one_no_longer_uses,
    test_an_idle_session_makes_room_when_every_sandbox_is_taken,
    test_the_pool_fills_and_never_hands_a_sandbox_out_twice,
    test_when_full_callers_queue_with_their_position_then_get_busy,
)
from tests.integration.test_sandbox_isolation import (
    test_code_runs_as_a_user_no_host_account_has,
    test_files_never_come_from_outside_mnt_data_while_a_folder_is_swapped,
    test_notebook_files_never_come_from_outside_mnt_data,
    test_processes_a_run_leaves_behind_are_ended,
    test_results_are_capped_in_number,
    test_text_output_is_capped_in_bytes,
    test_the_runner_cannot_be_read_and_its_events_cannot_be_forged,
    test_thousands_of_tiny_charts_are_capped,
)
from tests.integration.test_sessions import (
    test_a_dead_kernel_restarts_the_session_and_says_so,
    test_a_link_written_by_code_is_never_followed,
    test_a_new_session_warms_the_data_stack_up_and_shows_nothing,
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
    "test_a_hundred_megabytes_of_output_is_cut",
    "test_a_link_written_by_code_is_never_followed",
    "test_a_new_session_warms_the_data_stack_up_and_shows_nothing",
    "test_a_session_and_notebook_runs_start_from_the_pool",
    "test_a_stop_set_before_the_run_starts_runs_nothing",
    "test_a_waiting_session_gets_the_sandbox_an_idle_one_no_longer_uses",
    "test_an_idle_session_makes_room_when_every_sandbox_is_taken",
    "test_bot_secrets_are_not_in_the_sandbox",
    "test_cells_run_in_order_and_stop_at_first_error",
    "test_chart_is_inline_png_not_a_file",
    "test_closing_a_session_forgets_it_quietly",
    "test_code_runs_as_a_user_no_host_account_has",
    "test_code_that_ignores_interrupts_is_killed",
    "test_code_that_tries_to_kill_the_runner",
    "test_container_limits_cannot_change_per_session_run",
    "test_deep_folders_are_capped",
    "test_each_run_gets_a_fresh_sandbox",
    "test_executed_notebook_is_valid_nbformat",
    "test_export_as_a_notebook",
    "test_files_into_and_out_of_a_live_session",
    "test_files_never_come_from_outside_mnt_data_while_a_folder_is_swapped",
    "test_filling_mnt_data",
    "test_filling_tmp",
    "test_forged_events_are_ignored",
    "test_idle_sessions_end_and_the_next_run_says_so",
    "test_infinite_loop_times_out",
    "test_input_files_in_and_changed_files_out",
    "test_input_is_refused_clearly",
    "test_kernel_that_dies",
    "test_links_and_fifos_never_come_back",
    "test_memory_bomb",
    "test_no_network",
    "test_non_utf8_bytes_on_stdout",
    "test_notebook_files_never_come_from_outside_mnt_data",
    "test_one_huge_file_hits_the_file_size_limit",
    "test_output_streams_while_the_code_runs",
    "test_processes_a_run_leaves_behind_are_ended",
    "test_results_are_capped_in_number",
    "test_rich_mime_bundles",
    "test_root_and_etc_are_not_writable",
    "test_runs_on_one_session_queue_in_order",
    "test_sessions_never_see_each_other",
    "test_sleep_beyond_the_limit_times_out",
    "test_stop_freezes_code_that_ignores_it_and_the_session_restarts",
    "test_stop_interrupts_and_keeps_state",
    "test_streams_and_last_expression",
    "test_syntax_error_is_a_result",
    "test_ten_thousand_files",
    "test_text_output_is_capped_in_bytes",
    "test_the_pool_fills_and_never_hands_a_sandbox_out_twice",
    "test_the_runner_cannot_be_read_and_its_events_cannot_be_forged",
    "test_thousands_of_tiny_charts_are_capped",
    "test_timeout_in_a_session_keeps_state",
    "test_too_many_input_files_are_refused",
    "test_variables_and_files_carry_over",
    "test_when_full_callers_queue_with_their_position_then_get_busy",
]
