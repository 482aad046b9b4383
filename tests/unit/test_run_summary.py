"""The run summary in words (stage facts -> lines), and the follower's lines: exact strings,
because these are what a person reads to learn why a run scored what it scored."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from swerl.agent.trajectory import ExitReason, Trajectory, Turn
from swerl.orchestration.follow import RunView, culprit, failure_lines, reason, shown_change, stage_after, state_line, tail
from swerl.orchestration.summary import (Behaviour, behaviour_of, behaviour_words, duration, eval_facts, images_facts,
                                         pass_table, plural, sampler_words, stage_line, summary_lines, summary_markdown, train_facts,
                                         validation_facts, verdict, where_to_look)

# the embedded default's story: a random tiny model that never writes a command, RFT on
# scripted demonstrations, DAPO with nothing to learn from
SILENT = Behaviour(trajectories=18, resolved=0, exits={"format_errors": 18}, replies=72, no_command=72)
DEMOS = Behaviour(trajectories=9, resolved=9, exits={"submitted": 9}, replies=45)
DAPO_REASON = ("nothing to train on among 36 trajectories: 36 have zero advantage (every group's rewards are equal), "
               "0 are masked or dropped by the limit/error policies")


def _eval(name: str, policy: str, pass_at_1: float = 0.0, promoted: bool | None = True, behaviour=SILENT):
    metrics = {"eval/pass_at_1": pass_at_1, "eval/pass_at_1_sem": 0.0, "eval/runs": 2.0, "eval/tasks": 9.0}
    return eval_facts(name, {"metrics": metrics, "policy": {"policy_version": policy}, "promoted": promoted}, behaviour)


def demo_stages():
    return [
        images_facts("images", {"train": {"manifest": "m.json", "ready": 9, "cached": 0, "cache_hit": True}}),
        validation_facts("validate", {"train": {"valid": 9, "total": 9, "invalid": [], "report": "v.json", "cached": 9}}),
        _eval("eval-start", "0"),
        train_facts("rft", {"trained": True, "reason": None, "policy": {"policy_version": "rft"},
                            "metrics": {"train/steps": 2.0, "rft/kept": 9.0}}, sampler_words("scripted", "0"), DEMOS),
        _eval("eval-rft", "rft", promoted=False),
        train_facts("iter-1", {"trained": False, "reason": DAPO_REASON, "policy": {"policy_version": "rft"}, "metrics": {}},
                    sampler_words("hf", "rft"), Behaviour(36, 0, {"format_errors": 36}, 144, 144)),
        _eval("eval-iter-1", "rft", promoted=False),
    ]


def test_behaviour_counts_replies_without_a_command_and_exit_reasons():
    def traj(i: int, exit_reason: str, commands: list[str | None], resolved: bool = False) -> Trajectory:
        turns = [Turn(index=n, reply="...", command=c) for n, c in enumerate(commands)]
        return Trajectory(instance_id="t", sample_index=i, trajectory_id=f"t/{i}", policy_version="0",
                          exit_reason=ExitReason(exit_reason), turns=turns, resolved=resolved)

    b = behaviour_of([traj(0, "format_errors", [None, None, None]), traj(1, "submitted", ["ls", None, "submit"], True)])
    assert b == Behaviour(trajectories=2, resolved=1, exits={"format_errors": 1, "submitted": 1}, replies=6, no_command=4,
                          graded=2)
    assert behaviour_words(b) == "1/2 resolved; exits: 1 format_errors, 1 submitted; 4/6 replies had no command"
    assert behaviour_words(DEMOS) == "9/9 resolved; exits: 9 submitted"
    assert behaviour_words(behaviour_of([])) == "no trajectory"


def test_behaviour_of_ungraded_demonstrations_says_so_instead_of_zero_resolved():
    turns = [Turn(index=0, reply="x", command="open a.py"), Turn(index=1, reply="x", command="submit")]
    b = behaviour_of([Trajectory(instance_id="t", sample_index=i, trajectory_id=f"t/{i}", policy_version="scripted",
                                 exit_reason=ExitReason.submitted, turns=turns) for i in range(3)])
    assert (b.resolved, b.graded) == (0, 0)
    assert behaviour_words(b) == "not graded; exits: 3 submitted"


def test_behaviour_counts_replies_cut_at_their_command():
    turns = [Turn(index=0, reply="```\nls\n```", command="ls", dropped_tokens=7), Turn(index=1, reply="x", command="submit")]
    b = behaviour_of([Trajectory(instance_id="t", sample_index=0, trajectory_id="t/0", policy_version="0",
                                 exit_reason=ExitReason.submitted, turns=turns, resolved=True)])
    assert b.cut == 1 and b.graded == 1
    assert behaviour_words(b) == "1/1 resolved; exits: 1 submitted; 1/2 replies ran on past their command and were cut there"


def test_each_stage_says_what_it_did():
    lines = [stage_line(s, 75.2) for s in demo_stages()]
    assert lines == [
        "images (1m 15s): 9 images ready for the training tasks (0 built, 9 reused)",
        "validate (1m 15s): 9/9 training tasks valid (valid: the gold patch passes the tests, the unpatched repository "
        "fails them)",
        "eval-start (1m 15s): policy 0: Pass@1 0.0% ± 0.0% (2 runs of 9 tasks); 0/18 resolved; exits: 18 format_errors; "
        "72/72 replies had no command; champion is this policy",
        "rft (1m 15s): the scripted policy (gold-patch replays) ran 9 trajectories (9/9 resolved; exits: 9 submitted); "
        "trained 2 steps on 9 trajectories -> policy rft",
        "eval-rft (1m 15s): policy rft: Pass@1 0.0% ± 0.0% (2 runs of 9 tasks); 0/18 resolved; exits: 18 format_errors; "
        "72/72 replies had no command; champion stays (this policy is no better)",
        f"iter-1 (1m 15s): policy rft ran 36 trajectories (0/36 resolved; exits: 36 format_errors; 144/144 replies had no "
        f"command); trained nothing, policy rft carries forward: {DAPO_REASON}",
        "eval-iter-1 (1m 15s): policy rft: Pass@1 0.0% ± 0.0% (2 runs of 9 tasks); 0/18 resolved; exits: 18 format_errors; "
        "72/72 replies had no command; champion stays (this policy is no better)",
    ]
    assert stage_line(demo_stages()[0], skipped=True) == ("images (finished in an earlier run): 9 images ready for the "
                                                          "training tasks (0 built, 9 reused)")


def test_images_count_builds_and_validation_names_dropped_tasks():
    # without a Prefect cache hit, `cached` images were found, the rest built
    built = images_facts("images", {"train": {"ready": 9, "cached": 6}, "eval": {"ready": 3, "cached": 3, "cache_hit": False}})
    assert built.words() == ("9 images ready for the training tasks (3 built, 6 reused); "
                             "3 images ready for the evaluation tasks (0 built, 3 reused)")
    dropped = validation_facts("validate", {"train": {"valid": 7, "total": 9, "invalid": ["a-1", "b-2"], "report": "v.json"}})
    assert dropped.words() == ("7/9 training tasks valid, 2 dropped: a-1, b-2 (reasons in v.json) (valid: the gold patch "
                               "passes the tests, the unpatched repository fails them)")


def test_the_verdict_explains_a_run_that_scores_zero_everywhere():
    assert verdict(demo_stages()) == [
        "Pass@1 per stage: start 0.0% -> rft 0.0% -> iter-1 0.0%.",
        "The plumbing works: 9 images ready; 9/9 tasks valid (gold patches pass in sandboxes); the scripted policy "
        "resolved 9/9 trajectories in rft.",
        "Why every evaluation scored 0%: the evaluated policies never wrote a command (216/216 replies had no fenced "
        "command block), so no task could be fixed (exits: 54 format_errors). A reply must end with one fenced command: "
        "start from a model that does (`model`), or warm-start the tiny one on demonstrations (`warm_start`, as "
        "deployments/learning.yaml does).",
        f"iter-1 trained nothing (1 of 2 training stages), so the policy carried forward: {DAPO_REASON}.",
    ]


def test_a_run_that_solves_tasks_gets_no_zero_explanation():
    solving = Behaviour(trajectories=18, resolved=6, exits={"submitted": 12, "max_turns": 6}, replies=90, no_command=3)
    stages = [_eval("eval-start", "0", 0.0), _eval("eval-rft", "rft", 1 / 3, behaviour=solving)]
    assert verdict(stages) == ["Pass@1 per stage: start 0.0% -> rft 33.3%."]
    ran = Behaviour(trajectories=18, resolved=0, exits={"max_turns": 18}, replies=72, no_command=2)
    assert verdict([_eval("eval-start", "0", behaviour=ran)])[1] == ("Why every evaluation scored 0%: the policies ran "
                                                                     "commands but fixed no task (exits: 18 max_turns).")


def test_the_summary_as_console_lines_and_markdown():
    where = where_to_look(Path("runs/pipelines/demo"), "abc123", "Demo")
    assert where == [
        "trajectories (every reply, command and observation; Parquet): runs/pipelines/demo/eval/<stage>/trajectories, "
        "runs/pipelines/demo/rft/rollout/trajectories, runs/pipelines/demo/iter-<k>/rollout/trajectories",
        "stage ledger runs/pipelines/demo/ledger.json; validation reports runs/pipelines/demo/validation*.json",
        "MLflow: parent run abc123 and a child run per stage",
        "Prefect: this flow run's artifacts summary-demo and metrics-demo, and a subflow run per stage (eval-start, rft, "
        "iter-1, ...)",
    ]
    stages = demo_stages()[:3]
    lines = summary_lines("demo", stages, ["here"])
    assert lines == ["summary of pipeline demo:", "  Pass@1 per stage: start 0.0%.",
                     "  The plumbing works: 9 images ready; 9/9 tasks valid (gold patches pass in sandboxes).",
                     lines[3], "where to look:", "  here"]
    assert lines[3].startswith("  Why every evaluation scored 0%: the evaluated policies never wrote a command (72/72")
    md = summary_markdown("demo", [_eval("eval-start", "0", promoted=None, behaviour=Behaviour(1, 0, {"a|b": 1}, 1))], ["x"])
    assert md == ("# Pipeline demo\n\n| stage | what happened |\n|---|---|\n"
                  "| eval-start | policy 0: Pass@1 0.0% ± 0.0% (2 runs of 9 tasks); 0/1 resolved; exits: 1 a\\|b |\n\n"
                  "## Verdict\n\n- Pass@1 per stage: start 0.0%.\n"
                  "- Why every evaluation scored 0%: the policies ran commands but fixed no task (exits: 1 a|b).\n\n"
                  "## Where to look\n\n- x\n")


def test_the_pass_at_1_table_for_the_console():
    rows = [{"stage": "start", "policy": "0", "pass_at_1": 0.0, "pass_at_1_sem": 0.0},
            {"stage": "rft", "policy": "rft", "pass_at_1": 0.125, "pass_at_1_sem": 0.0208, "trained": 1.0},
            {"stage": "iter-1", "policy": "rft", "trained": 0.0}]
    assert pass_table(rows) == ["   start  policy 0        Pass@1 0.0% ± 0.0%",
                                "     rft  policy rft      Pass@1 12.5% ± 2.1%  trained yes",
                                "  iter-1  policy rft      Pass@1 -  trained no"]


def test_counts_read_like_english():
    assert [plural(1, "run"), plural(2, "run"), plural(0, "task"), plural(1, "trajectory"), plural(3, "trajectory"),
            plural(2, "day")] == ["1 run", "2 runs", "0 tasks", "1 trajectory", "3 trajectories", "2 days"]


def test_durations_read_like_a_clock():
    assert [duration(s) for s in (0.4, 7, 75.2, 3599, 3600, 7322)] == ["0s", "7s", "1m 15s", "59m 59s", "1h 00m", "2h 02m"]


# --- the follower ----------------------------------------------------------------------------------

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def run(name: str, state: str, start_s: float | None = 0, end_s: float | None = None, message: str | None = None) -> RunView:
    return RunView(id=name, name=name, state_type=state.upper(), state_name=state, message=message,
                   start=None if start_s is None else T0 + timedelta(seconds=start_s),
                   end=None if end_s is None else T0 + timedelta(seconds=end_s))


def test_state_lines_give_the_time_a_run_took_once_it_ended():
    assert state_line(run("pipeline-demo", "Running")) == "pipeline-demo: Running"
    assert state_line(run("eval-rft", "Failed", 10, 196)) == "eval-rft: Failed after 3m 06s"
    assert state_line(run("pipeline-demo", "Scheduled", None)) == "pipeline-demo: Scheduled"


def test_the_root_runs_changes_are_shown_and_a_subflows_only_when_it_ends_badly():
    root = "pipeline-demo"
    assert shown_change(run(root, "Running"), root)
    assert not shown_change(run("eval-rft", "Running"), root)
    assert not shown_change(run("eval-rft", "Completed", 0, 5), root)
    assert shown_change(run("eval-rft", "Failed", 0, 5), root)
    assert shown_change(run("eval-rft", "Crashed", 0, 5), root)


def test_the_culprit_is_the_first_subflow_that_failed_else_the_root():
    root = run("pipeline-demo", "Failed", 0, 100)
    first, later = run("eval-rft", "Failed", 0, 40), run("iter-1", "Crashed", 0, 60)
    assert culprit(root, [root, later, first, run("eval-start", "Completed", 0, 20)]) == first
    assert culprit(root, [root, run("eval-start", "Completed", 0, 20)]) == root


def test_the_stage_under_way_follows_the_pipelines_lines():
    assert stage_after("eval-rft: started", None) == "eval-rft"
    assert stage_after("eval-rft (2m 29s): policy rft: Pass@1 0.0%", "eval-rft") is None
    assert stage_after("iter-1 (finished in an earlier run): ...", "iter-1") is None
    assert stage_after("some other line: with a colon", "iter-1") == "iter-1"


def test_a_failure_ends_with_the_error_logs_tail_and_then_the_reason():
    traceback = "Encountered exception during execution: ValueError('x')\nTraceback (most recent call last):\n" \
                "  File \"flows/pipeline.py\", line 9, in keep_valid_tasks\n    raise ValueError(...)\n" \
                "ValueError: every task in t.jsonl failed validation; see the validation report v.json"
    root = run("pipeline-demo", "Failed", 0, 130,
               message="Flow run encountered an exception: ValueError: every task in t.jsonl failed validation; see the "
                       "validation report v.json")
    lines = failure_lines(root, root, ["Task run failed", traceback], "validate", lines=3, ui_url="http://127.0.0.1:4200")
    assert lines == [
        "--- the end of pipeline-demo's error log ---",
        "    File \"flows/pipeline.py\", line 9, in keep_valid_tasks",
        "      raise ValueError(...)",
        "  ValueError: every task in t.jsonl failed validation; see the validation report v.json",
        "more: prefect flow-run logs pipeline-demo; http://127.0.0.1:4200/runs/flow-run/pipeline-demo",
        "pipeline-demo failed in stage validate: ValueError: every task in t.jsonl failed validation; see the validation "
        "report v.json",
    ]
    child = run("eval-rft", "Failed", 0, 40, message="Flow run encountered an exception: EngineError: model path 'x' does "
                                                     "not exist")
    assert failure_lines(root, child, [], None) == ["more: prefect flow-run logs eval-rft",
                                                    "pipeline-demo failed in eval-rft: EngineError: model path 'x' does not exist"]


def test_reason_and_tail_strip_what_a_person_does_not_need():
    assert reason("Flow run encountered an exception: KeyError: 'a'") == "KeyError: 'a'"
    assert reason(None) == "no message"
    assert tail(["a\nb", "c\nd\ne\n"], 2) == ["d", "e"]
    assert tail([], 3) == []


def test_the_error_tail_drops_prefects_engine_frames():
    traceback = """Encountered exception during execution: ValueError('x')
Traceback (most recent call last):
  File "/v/lib/python3.11/site-packages/prefect/flow_engine.py", line 1, in run_context
    yield self
  File "/repo/flows/pipeline.py", line 9, in keep_valid_tasks
    raise ValueError("x")
  File "/v/lib/python3.11/site-packages/prefect/task_engine.py", line 2, in call
    result = call_with_parameters(self.task.fn, parameters)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: x"""
    assert tail([traceback], 4) == ["Traceback (most recent call last):", '  File "/repo/flows/pipeline.py", line 9, in '
                                    'keep_valid_tasks', '    raise ValueError("x")', "ValueError: x"]


def test_the_rises_are_start_to_rft_and_rft_to_the_last_iteration_in_points_and_paired_standard_errors():
    from swerl.orchestration.summary import rise_lines

    start = {"a": [False, False], "b": [False, True], "c": [False, False], "d": [True, True]}
    rft = {"a": [True, True], "b": [True, True], "c": [False, False], "d": [True, True]}
    last = {"a": [True, True], "b": [True, True], "c": [True, False], "d": [True, True]}
    # per-task changes 1, 0.5, 0, 0: mean 0.375, sample SD 0.4787, SE 0.2394; then 0, 0, 0.5, 0: 0.125, SE 0.125
    assert rise_lines({"start": start, "rft": rft, "iter-1": rft, "iter-2": last}) == [
        "held-out Pass@1 start -> rft: +37.5 points, +1.6 SE paired over 4 tasks (SE 23.9 points)",
        "held-out Pass@1 rft -> iter-2: +12.5 points, +1.0 SE paired over 4 tasks (SE 12.5 points)"]
    assert rise_lines({"start": start, "rft": start}) == ["held-out Pass@1 start -> rft: +0.0 points, no spread paired over 4 tasks (SE 0.0 points)"]
    assert rise_lines({"rft": rft, "iter-1": {"z": [True]}}) == []  # other tasks: nothing paired to say


def test_per_task_outcomes_reads_each_evaluated_stage_in_order_and_leaves_out_stages_never_evaluated(tmp_path):
    import json

    from swerl.orchestration.summary import per_task_outcomes

    for stage, outcomes in (("start", {"a": [False, None]}), ("iter-2", {"a": [True, True]})):
        (tmp_path / "eval" / f"eval-{stage}").mkdir(parents=True)
        (tmp_path / "eval" / f"eval-{stage}" / "eval.json").write_text(json.dumps({"per_task": outcomes, "runs": 2}))
    found = per_task_outcomes(tmp_path, ["start", "rft", "iter-2"])
    assert list(found.items()) == [("start", {"a": [False, None]}), ("iter-2", {"a": [True, True]})]


def test_the_summary_artifact_renders_as_written():
    # Prefect's UI renders it as Markdown: `eval/<stage>/trajectories` must not lose `<stage>` as an HTML tag
    from tests.support.markdown_render import rendered

    where = where_to_look(Path("runs/pipelines/demo"), "abc123", "Demo")
    text, foreign = rendered(summary_markdown("demo", demo_stages(), where))
    assert foreign == []
    assert "runs/pipelines/demo/eval/<stage>/trajectories" in text and "runs/pipelines/demo/iter-<k>/rollout" in text


def test_what_an_evaluation_did_to_the_champion_and_why():
    from swerl.orchestration.summary import promotion_words

    assert promotion_words(False, "3", 0.5, (None, None), None) == "champion not considered (promote is off)"
    assert promotion_words(True, None, 0.5, (None, None), None) == (
        "champion not considered (the evaluated model is no registered version)")
    assert promotion_words(True, "1", 0.25, (None, None), True) == (
        "champion moved: none -> version 1 (Pass@1 25.0%, there was none)")
    assert promotion_words(True, "2", 0.3, ("1", 0.25), True) == (
        "champion moved: version 1 (Pass@1 25.0%) -> version 2 (Pass@1 30.0%, strictly better)")
    assert promotion_words(True, "2", 0.25, ("1", 0.25), False) == (
        "champion stays version 1 (Pass@1 25.0%): version 2 scored 25.0%, not strictly better")
    assert promotion_words(True, "2", 0.1, ("1", 0.25), True, force=True) == (
        "champion moved: version 1 (Pass@1 25.0%) -> version 2 (Pass@1 10.0%, forced)")
    assert promotion_words(True, "1", 0.3, ("1", 0.25), True) == "champion is this version (Pass@1 now 30.0%)"


def test_an_asynchronous_iteration_names_each_policy_that_began_its_trajectories():
    assert sampler_words("hf", "dapo-1", {"rft": 312, "dapo-1": 88}) == "policies rft (312) and dapo-1 (88)"
    assert sampler_words("hf", "dapo-1", {"dapo-1": 400}) == sampler_words("hf", "dapo-1") == "policy dapo-1"
    assert sampler_words("scripted", "0", {"0": 4}) == "the scripted policy (gold-patch replays)"
