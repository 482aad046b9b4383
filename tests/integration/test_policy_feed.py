"""A rollout follows the trainer: the policies an asynchronous pipeline announces are loaded into the sampling
engine as they land, newest first in the pipeline's order, each once; a reload that fails is counted and leaves the
engine on its old weights. Real transformers engine, tiny policy."""

from __future__ import annotations

import asyncio
import json
import time
import pytest

from swerl.inference.base import GenerationRequest
from swerl.inference.hf_engine import HFEngine, HFEngineConfig
from swerl.rl.staleness import StalenessError
from swerl.rollout.policy_feed import FeedEntry, FeedFollower, announce, newest, starting_policy


def test_the_newest_policy_is_the_latest_in_the_pipeline_s_order_not_the_last_line(tmp_path):
    feed = tmp_path / "policies.jsonl"
    assert newest(feed) is None
    announce(feed, "dapo-2", tmp_path / "iter-2")
    announce(feed, "dapo-1", tmp_path / "iter-1")  # a resumed run may announce an older one again
    with feed.open("a") as f:
        f.write('{"version": "dapo-3", "checkpo')  # a line cut short by a crash
    assert newest(feed) == FeedEntry("dapo-2", tmp_path / "iter-2")
    assert [json.loads(line)["version"] for line in feed.read_text().splitlines()[:2]] == ["dapo-2", "dapo-1"]


def test_a_version_outside_the_pipeline_s_order_is_refused_when_announced(tmp_path):
    with pytest.raises(StalenessError, match="'best'"):
        announce(tmp_path / "policies.jsonl", "best", tmp_path)
    assert not (tmp_path / "policies.jsonl").exists()


def test_a_following_rollout_starts_from_the_feeds_newest_policy_when_it_is_newer_than_its_own(tmp_path):
    feed = tmp_path / "policies.jsonl"
    assert starting_policy(None, "rft-folder", "rft") == starting_policy(feed, "rft-folder", "rft") == ("rft-folder", "rft")
    announce(feed, "dapo-1", tmp_path / "iter-1")
    assert starting_policy(feed, "rft-folder", "rft") == (str(tmp_path / "iter-1"), "dapo-1")
    assert starting_policy(feed, "iter-2", "dapo-2") == ("iter-2", "dapo-2")  # never back to an older one
    assert starting_policy(feed, "best", "best") == ("best", "best")  # outside the order: as given, not followed


@pytest.fixture
def engine(tiny_model_dir):
    engine = HFEngine(HFEngineConfig(model=str(tiny_model_dir), dtype="float32"), policy_version="rft")
    yield engine
    engine.close()


def _sampled_by(engine) -> str:
    return asyncio.run(engine.generate(GenerationRequest("r", prompt_ids=[1, 2, 3], max_new_tokens=2, seed=0))).policy_version


def test_a_newer_policy_is_loaded_once_and_an_older_one_never(engine, trained_checkpoint, tiny_model_dir, tmp_path):
    feed = tmp_path / "policies.jsonl"
    follower = FeedFollower(feed, engine)
    follower.poll()
    assert (engine.policy_version, follower.record.loaded) == ("rft", [])
    announce(feed, "dapo-1", trained_checkpoint)
    follower.poll()
    follower.poll()
    assert [v for v, _ in follower.record.loaded] == ["dapo-1"] and _sampled_by(engine) == "dapo-1"
    assert engine.model_path == str(trained_checkpoint)
    announce(feed, "rft", tiny_model_dir)  # older than what it serves: never loaded
    follower.poll()
    assert (engine.policy_version, len(follower.record.loaded)) == ("dapo-1", 1)


def test_a_reload_that_fails_is_counted_once_and_sampling_goes_on_with_the_old_weights(engine, tmp_path):
    feed = tmp_path / "policies.jsonl"
    announce(feed, "dapo-1", tmp_path / "no-such-checkpoint")
    follower = FeedFollower(feed, engine)
    follower.poll()
    follower.poll()  # not tried again
    assert [v for v, _ in follower.record.failed] == ["dapo-1"] and follower.record.loaded == []
    assert _sampled_by(engine) == "rft"


def test_while_the_block_runs_a_policy_announced_mid_rollout_is_picked_up(engine, trained_checkpoint, tmp_path):
    feed = tmp_path / "policies.jsonl"
    with FeedFollower(feed, engine, poll_s=0.05) as follower:
        before = _sampled_by(engine)
        announce(feed, "dapo-1", trained_checkpoint)
        deadline = time.monotonic() + 60
        while not follower.record.loaded and time.monotonic() < deadline:
            time.sleep(0.05)
        after = _sampled_by(engine)
    assert (before, after, [v for v, _ in follower.record.loaded]) == ("rft", "dapo-1", ["dapo-1"])
    assert not follower._thread.is_alive()


def test_a_policy_announced_before_the_rollout_starts_serves_its_first_request(engine, trained_checkpoint, tmp_path):
    feed = tmp_path / "policies.jsonl"
    announce(feed, "dapo-1", trained_checkpoint)
    with FeedFollower(feed, engine, poll_s=3600):
        assert _sampled_by(engine) == "dapo-1"
