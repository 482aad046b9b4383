"""The rollout store: one atomic Parquet part per trajectory, resumable, exact round trip."""

import pyarrow.parquet as pq

from swerl.agent.trajectory import ExitReason, Trajectory, Turn
from swerl.rollout.store import SCHEMA, TrajectoryStore


def traj(iid="t-1", k=0, reason=ExitReason.submitted, **kw):
    return Trajectory(
        instance_id=iid, sample_index=k, trajectory_id=f"{iid}/{k}", policy_version="3", engine="hf", seed=7,
        prompt_ids=[1, 2, 3], response_ids=[4, 5, 6, 7], action_mask=[1, 1, 0, 1], logprobs=[-0.5, -1.25, 0.0, -2.0],
        messages=[{"role": "user", "content": "hi"}], turns=[Turn(index=0, reply="r", command="ls", n_action_tokens=2)],
        exit_reason=reason, patch="diff --git a/x b/x\n", num_turns=1, resolved=True, **kw,
    )


def test_round_trip_is_exact(tmp_path):
    store = TrajectoryStore(tmp_path)
    original = traj()
    part = store.append(original)
    assert pq.read_schema(part).equals(SCHEMA)
    assert store.trajectories() == [original]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left behind


def test_done_pairs_exclude_infrastructure_errors_so_reruns_retry_them(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.append(traj("a", 0))
    store.append(traj("a", 1, ExitReason.error, error="docker died"))
    store.append(traj("b", 0, ExitReason.max_turns))
    assert store.done() == {("a", 0), ("b", 0)}


def test_the_latest_row_of_a_pair_wins_and_compact_keeps_only_it(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.append(traj("a", 1, ExitReason.error, error="docker died"))
    store.append(traj("a", 1, ExitReason.submitted))
    assert [t.exit_reason for t in store.trajectories()] == [ExitReason.submitted]
    merged = store.compact()
    assert store.parts() == [merged]
    assert pq.read_table(merged).num_rows == 1
    assert store.trajectories()[0].exit_reason is ExitReason.submitted


def test_an_empty_store_reads_as_empty(tmp_path):
    store = TrajectoryStore(tmp_path / "new")
    assert store.trajectories() == [] and store.done() == set()


def _sampled(iid: str, *versions: str, staleness: int | None) -> Trajectory:
    """A trajectory whose turns were sampled by ``versions`` in order, stamped ``staleness``."""
    turns = [Turn(index=i, reply="r", command="ls", n_action_tokens=1, policy_version=v) for i, v in enumerate(versions)]
    return traj(iid).model_copy(update={"policy_version": versions[0], "turns": turns, "staleness": staleness})


def test_restamping_counts_staleness_again_from_where_the_update_really_starts_and_keeps_the_rest(tmp_path):
    # sampled beside iteration 2's update, stamped against dapo-2; iteration 2 trained nothing, so the update
    # that trains on them starts from dapo-1
    store = TrajectoryStore(tmp_path)
    store.append(_sampled("a", "dapo-1", staleness=1))
    store.append(_sampled("b", "dapo-1", "dapo-1", staleness=1))
    store.append(_sampled("c", "rft", "dapo-1", staleness=2))
    store.append(_sampled("d", "dapo-1", staleness=None))  # a rollout that named no update is left as it is
    assert store.restamp_staleness("dapo-1") == 3
    assert [(t.trajectory_id, t.staleness) for t in store.trajectories()] == [("a/0", 0), ("b/0", 0), ("c/0", 1), ("d/0", None)]
    assert len(store.parts()) == 1
    before = store.parts()
    assert store.restamp_staleness("dapo-1") == 0 and store.parts() == before  # again: nothing to change, nothing written


def test_restamping_leaves_versions_out_of_the_pipelines_order_for_the_update_to_refuse(tmp_path):
    store = TrajectoryStore(tmp_path)
    store.append(_sampled("a", "best", staleness=0))
    assert store.restamp_staleness("dapo-1") == 0 and store.trajectories()[0].staleness == 0
