"""Which tests are expensive, and which tests xdist workers must not run apart.

``tests/conftest.py`` applies these tables at collection (``pytest_collection_modifyitems``):

* the markers of pyproject's ``[tool.pytest.ini_options]``, by file or by test, so that
  ``bash scripts/test --fast`` (``-m "not (cluster or killpoint or airflow or s3 or fuzz or slow or connect)"``)
  runs what is cheap;
* an ``xdist_group`` for tests that share something outside their process (the standalone cluster
  of ``scripts/cluster`` under ``state/cluster``) or a module-scoped fixture that is costly to
  start on every worker (a moto S3 server, an Airflow metadata DB), for ``--dist loadgroup``
  (scripts/test runs ``--dist loadfile``: pytest-xdist 3.8 does not group under pytest 9.2, and
  the cluster's files take a file lock instead);
* an order: the costliest groups and tests first (``--no-loadscope-reorder`` keeps it), so that
  no worker starts a five-minute test when the others are done.

A key is a file name (``test_crash.py``: every test in it), a test's name within its file
(``test_graphs.py::test_pagerank_with_retractions``: every parametrization of it), or one parametrization
(``test_signed.py::test_retractions_through_all_and_multicast[direct-False-shuffle]``).
"""

from __future__ import annotations

#: The markers of the expensive kinds; ``--fast`` leaves out every test that has one.
EXPENSIVE = ("cluster", "killpoint", "airflow", "s3", "fuzz", "slow", "connect")

_CRASH = ("killpoint", "slow")

#: Markers by file or test (seconds are serial times on a 2-core machine, 2026-11-28).
MARKS: dict[str, tuple[str, ...]] = {
    # the Spark standalone cluster of scripts/cluster, started by the module when none is up
    "test_cluster.py": ("cluster", "slow"),
    "test_cluster_faults.py": ("cluster", "killpoint", "s3", "slow"),
    # SIGKILL at kill points (cbp/faults.py) or of whole processes, then recovery checked
    "test_crash.py": _CRASH,
    "test_evolution_crash.py": _CRASH,
    "test_durability.py": ("killpoint",),
    "test_backfill.py::test_kill_inside_a_backfill_upgrade_leaves_old_or_new": _CRASH,
    "test_broadcast.py::test_broadcast_and_multicast_epochs_survive_crashes": _CRASH,
    "test_framing.py::test_framed_outputs_survive_crashes": _CRASH,
    "test_keyed_rows.py::test_killed_runs_recover_keyed_rows": _CRASH,
    "test_rewind.py::test_rewind_multi_stage_with_loopback": _CRASH,
    "test_rewind.py::test_sigkill_at_every_step_of_a_rewind": _CRASH,
    "test_sources.py::test_sync_killed_anywhere_lands_each_version_once": _CRASH,
    "test_feeds_history.py::test_unfeed_killed_reads_as_before_or_after": _CRASH,
    "test_retention.py::test_kill_during_trimming_recovers_exactly": _CRASH,
    "test_follow.py::test_sigterm_or_ctrl_c_stops_the_follower_process_after_the_epoch_in_flight": ("killpoint",),
    # Airflow: DAGs run with dag.test(), triggers, task processes, airflow standalone
    "test_airflow.py": ("airflow", "slow"),
    "test_airflow_config.py": ("airflow",),
    "test_airflow_inbox.py": ("airflow",),
    "test_airflow_s3.py": ("airflow", "s3"),
    "test_airflow_safety.py": ("airflow", "slow"),
    "test_follow_airflow.py": ("airflow", "slow"),
    "test_sources_airflow.py": ("airflow",),
    "test_inbox_sandbox.py": ("airflow",),
    # homes and sources on a moto S3 server (tests/moto_s3.py)
    "test_s3_home.py": ("s3", "slow"),
    "test_evolution_s3.py": ("s3",),
    "test_follow_s3.py": ("s3",),
    "test_sources_s3.py": ("s3",),
    "test_rewind.py::test_rewind_on_s3_home_equals_fresh_run": ("s3",),
    # many generated inputs: fuzz targets and Hypothesis properties that run pipelines
    "test_fuzz_inputs.py": ("fuzz", "slow"),
    "test_fuzz_crawler.py": ("fuzz", "slow"),
    "test_keyed_rows.py::test_direct_per_key_matches_dict_model": ("fuzz",),
    "test_keyed_rows.py::test_direct_batch_matches_dict_model": ("fuzz",),
    "test_keyed_rows.py::test_blackbox_per_key_matches_dict_model": ("fuzz",),
    "test_keyed_rows.py::test_blackbox_batch_matches_dict_model": ("fuzz",),
    "test_graphs.py::test_clustering_random_signed_sequences": ("fuzz",),
    "test_url_count.py::test_url_count_property": ("fuzz",),
    # slow by themselves (over ~15 s serially)
    "test_graphs.py::test_pagerank_with_retractions": ("slow",),
    "test_graphs.py::test_pagerank_matches_networkx": ("slow",),
    "test_graphs.py::test_pagerank_work_follows_the_change": ("slow",),
    "test_batch.py::test_batch_equals_per_key_with_framing_and_a_loopback_flow": ("slow",),
    "test_jvmcache.py": ("slow",),
    "test_docs.py": ("slow",),
    "test_engine_memory.py": ("slow",),
    "test_delta_spark.py::test_cli_without_jars": ("slow",),  # a Spark driver of its own, without the jars
    "test_connect.py": ("connect", "slow"),  # a Spark Connect server (scripts/connect) and a client per test
    "test_codegen_reuse.py": (),  # Spark's CodegenMetrics over two shuffle-path epochs: cheap (~6 CPU s), no marker
    "test_sql_joins.py": ("slow",),
    "test_tpch.py": ("slow",),  # all 22 TPC-H queries (102 stages) through RF1, RF2 and updates (~165 s)
    "test_sql_subqueries.py": ("slow",),  # derived tables, scalar and correlated subqueries, NOT IN (~50 s)
    "test_sql_windows.py": ("slow",),  # windows, top-k, ORDER BY ... LIMIT against Spark SQL (~35 s)
    "test_sql_setops.py": ("slow",),  # CTEs, UNION/INTERSECT/EXCEPT, scalar subqueries in SELECT (~50 s)
    # narrow Delta columns and views reading views vs Spark SQL, ANSI on and off, an old home upgraded (~60 s loaded)
    "test_sql_intwidth.py": ("slow",),
    # views in non-ANSI mode against Spark SQL, a setting change under a home (~55 s loaded)
    "test_sql_ansi.py": ("slow",),
    # first builds by Spark SQL against per-key builds, through changes and upgrade (~60 s loaded)
    "test_view_bulkbuild.py": ("slow",),
    # 20 rounds with retention and compaction (~30 s loaded)
    "test_compaction.py::test_compaction_bounds_files_and_keeps_contents": ("slow",),
    "test_view_table.py": ("slow",),  # views' Delta tables read by Spark and delta-rs, kills, OPTIMIZE (~45 s)
    "test_sql_casts.py::test_views_with_casts_and_dates_equal_spark_sql_and_a_bad_value_fails_the_epoch": ("slow",),
    "test_sources_dv.py": ("slow",),  # Spark DML on a Delta table with deletion vectors (~80 s loaded)
    # a bad Delta source row deleted, then another updated, after failed runs: 2 homes vs Spark SQL (~65 s at load 14)
    "test_sql_unblock.py": ("slow",),
    # a type-widened Delta source refused until DROP FEATURE typeWidening, 2 homes vs Spark SQL (~60 s at load 10)
    "test_sql_source_features.py": ("slow",),
    "test_sql_frames.py": ("slow",),  # window frames (ROWS, RANGE offsets, IGNORE NULLS) vs Spark SQL, a property test
    # DISTINCT aggregates, SELECT DISTINCT ... GROUP BY vs Spark SQL: 3 epochs (~25 s loaded), a property test (~15 s)
    "test_sql_distinct.py::test_distinct_aggregates_equal_spark_sql_after_every_epoch": ("slow",),
    "test_sql_distinct.py::test_distinct_aggregates_through_change_sequences_equal_spark_sql": ("slow",),
    # intervals of two units, first_value(x, false), lead's default cast: 3 views, 2 epochs vs Spark SQL (~24 s loaded)
    "test_sql_intervals.py::test_intervals_and_window_arguments_equal_spark_sql_after_every_epoch": ("slow",),
    "test_task_memory.py": ("slow",),  # CBP_TASK_MEMORY_MB=1 over 3 MB of input: a shuffle epoch (~13 s)
    # over ~11 s (summed over their parameters) in the clean runs of 2026-11-29: out of --fast (<= 5 min)
    "test_delta_spark.py": ("slow",),  # Spark's Delta connector reads every version cbp wrote (244 s)
    "test_runaway.py": ("slow",),  # epoch time limits that must expire (97 s)
    "test_batch.py::test_bad_batch_output_is_refused_and_nothing_is_committed": ("slow",),  # 32 failing epochs
    "test_batch.py::test_batch_equals_per_key_whatever_the_keys_look_like": ("slow",),
    "test_broadcast.py::test_broadcast_and_multicast_delivery": ("slow",),
    "test_smallepoch.py::test_small_epochs_with_framing_a_loopback_flow_and_outer_grouping": ("slow",),
    "test_signed.py::test_url_count_with_retractions_matches_pandas": ("slow",),
    "test_sql_views.py::test_views_equal_spark_sql_after_every_epoch": ("slow",),
    "test_index_pages.py::test_paged_index_matches_a_dict_over_many_epochs": ("slow",),
    "test_model.py::test_updates_deletes_and_both_kinds_of_compaction": ("slow",),
    "test_bad_input.py::test_failing_translator_commits_nothing": ("slow",),
    "test_sources_reland.py::test_run_no_sync": ("slow",),
    "test_crawl_queue.py::test_crawl_loop_equals_from_scratch_after_every_round": ("slow",),
    "test_recrawl_pipeline.py::test_counts_follow_a_changing_web_round_after_round": ("slow",),
    "test_view_changes.py::test_cbp_sql_reads_a_view_by_name_as_its_contents": ("slow",),
    # 6 views sharing a join, a GROUP BY and a UNION ALL branch, 4 epochs against Spark SQL (~28 s at load 10);
    # the file's other tests: ~17 s, three upgrades of a home with data
    "test_view_sharing.py::test_shared_stages_stay_equal_to_spark_sql": ("slow",),
    "test_url_count.py::test_url_count_matches_pandas": ("slow",),
    "test_exit_clean.py::test_reading_a_table_then_exiting_never_aborts": ("slow",),
    "test_retention.py::test_retention_trims_history_and_logs_and_results_equal_from_scratch": ("slow",),
    "test_batch.py::test_url_count_vec_equals_url_count": ("slow",),
    "test_batch.py::test_json_fields_of_a_batch_result_are_parsed_and_checked": ("slow",),
    "test_backfill.py::test_added_stage_backfills_collected_increments_with_retractions": ("slow",),
    "test_arrow_feed.py::test_parquet_files_batches_and_dataframes_land_the_same": ("slow",),
    "test_keyed_outer.py::test_keys_visited_without_input_read_their_rows_as_asked": ("slow",),
    "test_graphs.py::test_clustering_matches_networkx": ("slow",),
    "test_crawl_queue.py::test_each_bad_page_kind_lands_and_runs_without_failing_the_epoch": ("slow",),
    "test_engine_stream.py::test_streamed_epochs_match_from_scratch": ("slow",),
    "test_set_diff.py::test_set_diff_matches_pandas": ("slow",),
    "test_sql_views.py::test_typed_views_with_min_max_and_distinct_equal_spark_sql": ("slow",),
    "test_recrawl_pipeline.py::test_versions_fed_directly_twice_in_one_feed_304_stale_and_old_records": ("slow",),
    # over ~7 s (summed over their parameters) in the clean run of 2026-11-30 (/tmp/times14.txt): out of --fast,
    # which had grown to 622 summed seconds (346 s on two workers); a test run on several paths keeps its
    # cheapest cases in --fast (the path each of them is about stays covered), its others go
    "test_types.py::test_json_lines_through_a_signed_translator": ("slow",),  # 12.8 s
    "test_quiet.py::test_a_real_cbp_run_prints_no_spark_or_jvm_line": ("slow",),  # a cbp run process, 10.9 s
    "test_view_changes.py::test_views_follow_mixed_updates_of_read_and_unread_columns": ("slow",),  # 9.8 s
    "test_view_changes.py::test_views_added_and_changed_under_a_home_that_ran": ("slow",),  # 7.3 s
    "test_views_properties.py::test_micro_views_equal_a_from_scratch_computation": ("fuzz",),  # Hypothesis, 9.1 s
    "test_schema_fastpath.py::test_check_json_fast_path_never_accepts_what_the_walk_refuses": (
        "slow",
    ),  # 1,500 examples
    "test_crawl_queue.py::test_landmark_variant_recomputes_the_whole_queue": ("slow",),  # 9.0 s
    "test_follow.py::test_a_follower_runs_feeds_made_by_another_process_and_holds_the_runner_lock": ("slow",),  # 8.6 s
    "test_url_count.py::test_mode_switch_keeps_results": ("slow",),  # 8.2 s
    # pyarrow's S3 client retries a refused connection with back-off, for each of four commands (7.9 s)
    "test_cli.py::test_an_unreachable_s3_home_is_home_unreachable_naming_the_endpoint": ("slow",),
    "test_graphs.py::test_clustering_emulated_multicast_gives_the_same_records": ("slow",),  # 7.6 s
    # cases: what stays in --fast is named after the ones that go
    "test_smallepoch.py::test_small_epochs_equal_the_shuffle_path[url_count_vec.yaml]": ("slow",),  # url_count stays
    "test_framing.py::test_field_framing_in_tasks_equals_framing_on_the_driver[tag]": ("slow",),  # [day] stays
    "test_arrow_transport.py::test_records_reach_the_translator_as_fed[False-False]": ("slow",),  # small epochs stay
    "test_arrow_transport.py::test_records_reach_the_translator_as_fed[False-True]": ("slow",),
    "test_signed.py::test_retractions_through_all_and_multicast[direct-False-shuffle]": ("slow",),  # small ones stay
    "test_signed.py::test_retractions_through_all_and_multicast[blackbox-False-shuffle]": ("slow",),
    "test_signed.py::test_retractions_through_all_and_multicast[blackbox-True-shuffle]": ("slow",),
    "test_batch.py::test_columnar_path_equals_key_groups_and_per_key[string]": ("slow",),  # [int] stays
    "test_signed_inputs.py::test_epoch_refuses_a_retraction_on_an_unsigned_input[blackbox]": ("slow",),
    "test_signed_inputs.py::test_epoch_refuses_a_retraction_on_an_unsigned_input[batch]": ("slow",),
    "test_signed_inputs.py::test_epoch_refuses_a_retraction_on_an_unsigned_input[shuffle]": ("slow",),
    "test_model.py::test_state_changed_in_place_is_written[64-blackbox]": ("slow",),  # [0-blackbox] stays
    "test_routing.py::test_a_null_route_field_is_a_key_of_its_own[blackbox-None-False]": ("slow",),
    "test_routing.py::test_a_null_route_field_is_a_key_of_its_own[direct-0-False]": ("slow",),
    "test_shipped_translators.py::test_shipped_pipeline_with_retractions[crawl_queue.yaml]": ("slow",),
    "test_shipped_translators.py::test_shipped_pipeline_with_retractions[crawl_queue_landmark.yaml]": ("slow",),
}

#: Tests that must run on one worker, one after the other: they share the standalone cluster.
GROUPS: dict[str, str] = {
    "test_cluster.py": "cluster",
    "test_cluster_faults.py": "cluster",
}

#: Files whose module-scoped fixture (an S3 server, an Airflow DB, Delta jars) is worth starting once.
WHOLE_FILES = (
    "test_s3_home.py",
    "test_evolution_s3.py",
    "test_follow_s3.py",
    "test_sources_s3.py",
    "test_airflow.py",
    "test_airflow_s3.py",
    "test_follow_airflow.py",
    "test_delta_spark.py",
)

#: Files whose tests xdist may hand to different workers one by one (each test has its own tmp_path and
#: nothing module-scoped): their long tests then run beside each other, not one after another.
SPLIT = (
    "test_crash.py",
    "test_graphs.py",
    "test_batch.py",
    "test_framing.py",
    "test_broadcast.py",
    "test_evolution_crash.py",
    "test_retention.py",
    "test_keyed_rows.py",
    "test_engine_memory.py",
    "test_model.py",
    "test_compaction.py",
)

#: Scheduled first, in this order (then everything else in collection order).
FIRST = (
    "test_cluster.py",  # the units by their summed seconds in the clean runs of 2026-11-29/30, largest first
    "test_cluster_faults.py",  # (the cluster's group: ~320 s on 2026-11-30)
    "test_delta_spark.py",  # ~270 s, one unit (its Delta session starts once)
    "test_tpch.py",  # ~105-140 s since all 22 queries compile
    "test_runaway.py",
    "test_airflow.py",
    "test_airflow_safety.py",
    "test_connect.py",
    "test_crash.py::test_sigkill_at_many_moments_recovers_exactly",  # ~156 s until its kills ran on the test's JVM
    "test_sql_subqueries.py",
    "test_sql_setops.py",
    "test_view_table.py",
    "test_sql_windows.py",
    "test_sources_dv.py",
    "test_jvmcache.py",
    "test_crawl_queue.py",
    "test_crash.py::test_sigkill_during_compaction_recovers_exactly",  # ~67 s until its 4 kills ran on the test's JVM
    "test_framing.py::test_framed_outputs_survive_crashes",
    "test_retention.py::test_kill_during_trimming_recovers_exactly",  # ~70 s, 6 of its 10 processes now in-process
    "test_rewind.py",
    "test_batch.py::test_batch_equals_per_key_with_framing_and_a_loopback_flow",
    "test_crash.py",
    "test_graphs.py::test_pagerank_matches_networkx",
    "test_graphs.py::test_pagerank_with_retractions",  # ~135 s until half its nodes became dead ends (2026-11-30)
    "test_durability.py",
    "test_docs.py",
    "test_graphs.py::test_pagerank_work_follows_the_change",
    "test_broadcast.py::test_broadcast_and_multicast_epochs_survive_crashes",
    "test_evolution_crash.py",
    "test_s3_home.py",
    "test_follow_airflow.py",
    "test_engine_memory.py",
)


def _keys(file: str, name: str) -> tuple[str, ...]:
    """The keys a test is known by: its file, its file with its name (parameters dropped), and, for a
    parametrized test, its file with its full name (one case: ``test_x.py::test_y[a-b]``)."""
    bare = name.split("[", 1)[0]
    return (file, f"{file}::{bare}") if bare == name else (file, f"{file}::{bare}", f"{file}::{name}")


def marks_of(file: str, name: str) -> set[str]:
    """The markers of the test ``name`` (as pytest names it, parameters included) in ``file``."""
    return {m for key in _keys(file, name) for m in MARKS.get(key, ())}


def group_of(file: str, name: str) -> str | None:
    """The xdist group of a test, or None (any worker)."""
    if file in GROUPS:
        return GROUPS[file]
    return file if file in WHOLE_FILES else None


def rank(file: str, name: str) -> int:
    """Where a test goes in the run: its place in :data:`FIRST`, else after all of them."""
    keys = _keys(file, name)
    places = [i for i, key in enumerate(FIRST) if key in keys]
    return min(places, default=len(FIRST))


def scope_of(nodeid: str) -> str:
    """The unit of work xdist hands to one worker (tests/conftest.py's scheduler): a group of
    :data:`GROUPS`, a test of a :data:`SPLIT` file, else a whole file.

    >>> scope_of("tests/test_cluster_faults.py::test_x"), scope_of("tests/test_crash.py::test_y[2]")
    ('group:cluster', 'tests/test_crash.py::test_y[2]')
    >>> scope_of("tests/test_cli.py::test_z")
    'tests/test_cli.py'
    """
    path = nodeid.split("::", 1)[0]
    file = path.rsplit("/", 1)[-1]
    if file in GROUPS:
        return f"group:{GROUPS[file]}"
    return nodeid if file in SPLIT and "::" in nodeid else path
