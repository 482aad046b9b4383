"""Trajectories -> TrainBatch rows: ids, masks, old log-probs and advantages, exactly."""

import math

import pytest
import torch

from test_rft import traj as rft_traj  # tests/unit is on sys.path (pytest's prepend import mode)

from swerl.agent.trajectory import ExitReason
from swerl.rl.rewards import RewardConfig
from swerl.rl.rft import RFTConfig, select_rft
from swerl.rollout.store import TrajectoryStore
from swerl.train import data

IDS = [1, 2, 10, 11, 20, 12, 13, 14, 21, 22, 15]
MASK = [0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1]
LOGPROBS = [0.0, 0.0, -0.1, -0.2, 0.0, -0.3, -0.4, -0.5, 0.0, 0.0, -0.6]


def traj(iid="a", k=0, resolved=True, reason=ExitReason.submitted, format_error_turn=None, exact=True, version="v1"):
    """test_rft's trajectory (prompt [1, 2], three turns: IDS, MASK, LOGPROBS), sampled by ``version``."""
    t = rft_traj(iid, k, resolved, reason, format_error_turn, exact)
    t.policy_version = version
    return t


def rows_of(batch):
    return ([t.tolist() for t in batch.input_ids], [t.int().tolist() for t in batch.action_mask],
            [[round(x, 6) for x in t.tolist()] for t in batch.old_logprobs], batch.advantages.tolist())


def test_rft_rows_are_the_stored_ids_aligned_over_the_full_sequence():
    examples, why = select_rft([traj("a", 0), traj("a", 1, resolved=False)])
    assert why == {"unresolved": 1}
    batch = data.to_batch(data.rft_rows(examples))
    ids, mask, lps, adv = rows_of(batch)
    assert ids == [IDS] and mask == [MASK] and lps == [LOGPROBS] and adv == [1.0]
    assert batch.meta["trajectory_ids"] == ["a/0"]
    assert batch.input_ids[0].dtype == torch.long and batch.action_mask[0].dtype == torch.bool


def test_rft_masks_format_error_replies_unless_asked_not_to():
    examples, _ = select_rft([traj(format_error_turn=1)])
    _, mask, lps, _ = rows_of(data.to_batch(data.rft_rows(examples)))
    assert mask == [[0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1]]
    assert lps[0][5:8] == [0.0, 0.0, 0.0]
    examples, _ = select_rft([traj(format_error_turn=1)], RFTConfig(mask_format_errors=False))
    assert rows_of(data.to_batch(data.rft_rows(examples)))[1] == [MASK]


def test_dapo_rows_carry_group_advantages_and_drop_zero_advantage_groups():
    runs = [traj("a", 0), traj("a", 1, resolved=False, format_error_turn=1), traj("b", 0), traj("b", 1)]
    d = data.dapo_data(runs, RewardConfig())
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # rewards (1, 0): mean 0.5, sample std sqrt(0.5)
    assert [r.example.trajectory_id for r in d.rows] == ["a/0", "a/1"]
    assert [r.advantage for r in d.rows] == pytest.approx([a, -a], abs=1e-12)
    assert d.kept_fraction == 0.5 and d.reward_mean == 0.75 and d.resolved_rate == 0.75
    assert d.advantages.n_zero_advantage == 2
    ids, mask, lps, adv = rows_of(data.to_batch(d.rows))
    assert ids == [IDS, IDS] and lps == [LOGPROBS, LOGPROBS]
    assert mask == [MASK, MASK]  # DAPO keeps format-error replies in the loss: a negative advantage teaches
    assert adv == pytest.approx([a, -a], rel=1e-6)


def test_plain_grpo_keeps_zero_advantage_samples_in_the_batch():
    runs = [traj("a", 0), traj("a", 1, resolved=False, format_error_turn=1), traj("b", 0), traj("b", 1)]
    d = data.dapo_data(runs, RewardConfig(), drop_zero_advantage=False)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [r.example.trajectory_id for r in d.rows] == ["a/0", "a/1", "b/0", "b/1"]
    assert [r.advantage for r in d.rows] == pytest.approx([a, -a, 0.0, 0.0], abs=1e-12)
    assert d.kept_fraction == 1.0 and d.advantages.n_zero_advantage == 0


def test_dapo_length_penalty_and_limit_policy_reach_the_rows():
    long = traj("a", 1, reason=ExitReason.max_turns)
    long.num_turns = 25  # R = 1 + (10 - 25) / 30 = 0.5
    d = data.dapo_data([traj("a", 0), long], RewardConfig())
    assert [s.reward for s in d.scored] == [1.0, 0.5]
    a = 0.25 / (math.sqrt(0.125) + 1e-6)  # mean 0.75, sample std sqrt(0.125)
    assert [r.advantage for r in d.rows] == pytest.approx([a, -a], abs=1e-12)
    d = data.dapo_data([traj("a", 0), long], RewardConfig(limit_policy="drop"))
    assert d.rows == [] and d.advantages.n_excluded == 1


def test_reward_overrides_replace_r_and_make_ungraded_runs_usable(tmp_path):
    path = tmp_path / "rewards.jsonl"
    path.write_text('{"trajectory_id": "a/0", "reward": 0.25}\n\n{"trajectory_id": "a/1", "reward": 2}\n'
                    '{"trajectory_id": "zz/9", "reward": -1}\n')
    overrides = data.read_reward_overrides(path)
    assert overrides == {"a/0": 0.25, "a/1": 2.0, "zz/9": -1.0}
    runs = [traj("a", 0, resolved=False), traj("a", 1, resolved=None), traj("a", 2, resolved=False)]
    d = data.dapo_data(runs, RewardConfig(), overrides=overrides)
    assert [s.reward for s in d.scored] == [0.25, 2.0, 0.0]
    assert [s.use for s in d.scored] == ["keep", "keep", "keep"]
    assert d.unmatched_overrides == ["zz/9"]
    mean, std = 0.75, math.sqrt(((0.25 - 0.75) ** 2 + 1.25 ** 2 + 0.75 ** 2) / 2)
    assert [r.advantage for r in d.rows] == pytest.approx([(x - mean) / (std + 1e-6) for x in (0.25, 2.0, 0.0)], abs=1e-12)
    # without the file the ungraded run is dropped (error_policy): the two others both score 0
    assert data.dapo_data(runs, RewardConfig()).rows == []
    with pytest.raises(data.DataError, match="none of the 1 reward overrides"):
        data.dapo_data(runs, RewardConfig(), overrides={"x/0": 1.0})


@pytest.mark.parametrize("line, match", [('{"trajectory_id": "a/0"}', "expected"), ("not json", "not JSON"),
                                         ('{"trajectory_id": "a/0", "reward": true}', "expected"),
                                         ('{"trajectory_id": "a/0", "reward": NaN}', "expected")])
def test_bad_reward_lines_name_the_line(tmp_path, line, match):
    path = tmp_path / "r.jsonl"
    path.write_text('{"trajectory_id": "a/1", "reward": 1}\n' + line + "\n")
    with pytest.raises(data.DataError, match=f"r.jsonl:2: {match}"):
        data.read_reward_overrides(path)


def test_duplicate_override_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"trajectory_id": "a/1", "reward": 1}\n{"trajectory_id": "a/1", "reward": 0}\n')
    with pytest.raises(data.DataError, match="appears twice"):
        data.read_reward_overrides(path)


def test_stale_and_retokenized_trajectories_are_refused():
    runs = [traj("a", 0), traj("a", 1, version="v0"), traj("b", 0, exact=False)]
    with pytest.raises(data.DataError, match=r"1 of 3 trajectories were sampled by policy version\(s\) \['v0'\], not 'v1' \(stale data\): a/1"):
        data.check_trajectories(runs, "v1")
    with pytest.raises(data.DataError, match="1 of 3 trajectories have ids re-tokenized.*b/0"):
        data.check_trajectories(runs, require_exact_ids=True)
    data.check_trajectories(runs)  # neither asked
    bad = traj()
    bad.logprobs = bad.logprobs[:-1]
    with pytest.raises(data.DataError, match="different lengths: a/0"):
        data.check_trajectories([bad])


def test_epochs_are_shuffled_deterministically_and_cut_into_steps():
    rows = data.rft_rows(select_rft([traj(chr(97 + i)) for i in range(7)])[0])
    first = data.epoch_batches(rows, 3, seed=5, epoch=0)
    assert [len(b) for b in first] == [3, 3, 1]
    order = [tid for b in first for tid in b.meta["trajectory_ids"]]
    assert sorted(order) == [f"{chr(97 + i)}/0" for i in range(7)]
    assert order == [tid for b in data.epoch_batches(rows, 3, seed=5, epoch=0) for tid in b.meta["trajectory_ids"]]
    assert order != [tid for b in data.epoch_batches(rows, 3, seed=5, epoch=1) for tid in b.meta["trajectory_ids"]]
    assert data.steps_per_epoch(7, 3) == 3 and data.steps_per_epoch(6, 3) == 2


def test_fingerprint_follows_the_data_and_settings():
    rows = data.rft_rows(select_rft([traj("a"), traj("b")])[0])
    base = data.fingerprint(rows, batch_size=2, seed=0)
    assert base == data.fingerprint(list(rows), batch_size=2, seed=0)
    assert base != data.fingerprint(rows, batch_size=1, seed=0)
    assert base != data.fingerprint([data.Row(rows[0].example, -1.0), rows[1]], batch_size=2, seed=0)


def test_sequences_longer_than_a_microbatch_are_refused():
    rows = data.rft_rows(select_rft([traj()])[0])
    data.check_lengths(rows, 11)
    with pytest.raises(data.DataError, match="longest 11 tokens: a/0.*at least 11"):
        data.check_lengths(rows, 10)


def test_a_rollout_run_folder_or_its_store_reads_the_same(tmp_path):
    store = TrajectoryStore(tmp_path / "run" / "trajectories")
    store.append(traj("a", 0))
    store.append(traj("a", 1, resolved=False))
    a = data.read_trajectories([tmp_path / "run"])
    b = data.read_trajectories([tmp_path / "run" / "trajectories"])
    assert [t.trajectory_id for t in a] == [t.trajectory_id for t in b] == ["a/0", "a/1"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(data.DataError, match="no trajectories in"):
        data.read_trajectories([tmp_path / "empty"])
    with pytest.raises(data.DataError, match="is not a folder"):
        data.read_trajectories([tmp_path / "missing"])
