"""The CLI is built from the config models: every field of a component is an option with the field's
description as help, and a value out of its bounds is refused naming the field, before any work."""

from __future__ import annotations

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

import swerl.cli.rollout as cli_rollout
from swerl.cli import app
from swerl.cli.options import OptionGroup, config_options, validated
from swerl.rl.rewards import RewardConfig

# fields one flag cannot carry, or that another option sets (why: swerl/cli/rollout.py)
NOT_OPTIONS = {
    "sampler": {"engine", "agent", "sampling", "sandbox", "serve", "grading"},  # their own groups; serve is the pipeline's (a stage takes --base-url)
    "engine": {"api_key", "engine_args"},  # a secret ($OPENAI_API_KEY, never a flag); a dict (YAML only)
    "grading": {"grading_logs", "run_tests_without_patch", "sandbox", "protected"},  # the stage's --log-dir; validation's; nested
    "agent": set(),
    "sampling": set(),
    "sandbox": {"kind", "run_id"},
}


SAMPLER = cli_rollout.SAMPLER


def _options(command: str) -> dict[str, typer.core.TyperOption]:
    params = typer.main.get_command(app).commands[command].params
    return {opt: p for p in params for opt in p.opts}


def _out_of_bounds(info) -> list[tuple[str, object]]:
    """One value just past each bound of a field: (bound, value)."""
    bad = []
    for meta in info.metadata:
        for key, step in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
            bound = getattr(meta, key, None)
            if bound is not None:
                bad.append((key, bound + step))
    return bad


@pytest.mark.parametrize("command", ["rollout", "eval"])
@pytest.mark.parametrize("group", cli_rollout.COMPONENTS, ids=lambda g: g.name)
def test_every_component_field_is_an_option_with_the_fields_description_as_help(command, group):
    options = _options(command)
    assert set(group.infos()) - set(group.fields()) == NOT_OPTIONS[group.name]
    for name in group.fields():
        option = options[group.flag(name)]
        assert option.help.startswith(group.infos()[name].description), name
        assert option.rich_help_panel == group.panel


def test_the_components_flags_are_the_field_names():
    engine = cli_rollout.ENGINE
    assert [engine.flag(n) for n in ("kind", "base_url", "served_model", "torch_threads", "demo", "give_up", "seed")] == [
        "--engine", "--base-url", "--served-model", "--torch-threads", "--demo", "--demo-give-up", "--engine-seed"]
    assert SAMPLER.flag("concurrency") == "--concurrency"
    assert [cli_rollout.AGENT.flag(n) for n in ("max_turns", "command_timeout_s", "deadline_s")] == [
        "--max-turns", "--command-timeout-s", "--deadline-s"]
    assert cli_rollout.SANDBOX.flag("memory") == "--sandbox-memory"
    options = _options("rollout")
    assert options["-j"] is options["--concurrency"]


@pytest.mark.parametrize("group", cli_rollout.COMPONENTS, ids=lambda g: g.name)
def test_a_value_out_of_bounds_is_refused_naming_the_field_before_docker(group, tmp_path, monkeypatch):
    monkeypatch.setattr(cli_rollout, "docker_ready", lambda: pytest.fail("Docker was asked before the settings were checked"))
    where = {"sampler": "", "engine": "engine.", "agent": "agent.", "sampling": "sampling.", "sandbox": "sandbox.docker.",
             "grading": "grading."}[group.name]
    checked = 0
    for name in group.fields():
        # an engine's field is tried with an engine that has it; the error names that engine
        kind = (group.takers(name) or ["hf"])[0] if group is cli_rollout.ENGINE else None
        engine = ["--engine", kind] if kind else []
        for bound, value in _out_of_bounds(group.infos()[name]):
            result = CliRunner().invoke(app, ["rollout", "--tasks", str(tmp_path / "t.jsonl"), "--model", "m", "--out",
                                              str(tmp_path / "out"), *engine, group.flag(name), str(value)])
            assert result.exit_code == 2, (name, value, result.output)
            said = " ".join(result.output.split())
            assert said.startswith(f"error: invalid rollout settings: {where}{f'{kind}.' if kind else ''}{name}: Input "
                                   "should be "), said
            checked += 1
    # every bounded field was tried
    assert checked >= {"sampler": 3, "engine": 30, "agent": 7, "sampling": 5, "sandbox": 3, "grading": 5}[group.name]
    assert not (tmp_path / "out").exists()


def _stage_seen(monkeypatch) -> dict:
    """The rollout command's stage, caught before it runs (no Docker, no model)."""
    seen = {}

    def run(stage, evaluate):
        seen["stage"] = stage
        raise typer.Exit(0)

    monkeypatch.setattr(cli_rollout, "docker_ready", lambda: None)
    monkeypatch.setattr(cli_rollout, "_run", run)
    return seen


def test_a_value_left_out_keeps_the_models_default_and_stays_unset(tmp_path, monkeypatch):
    seen = _stage_seen(monkeypatch)
    result = CliRunner().invoke(app, ["rollout", "--tasks", "t.jsonl", "--model", "m", "--out", "o", "--max-turns", "7",
                                      "--no-collect-patch-on-exit", "--sandbox-network", "--stop-token-ids", "3",
                                      "--stop-token-ids", "4", "-j", "2"])
    assert result.exit_code == 0, result.output
    sampler = seen["stage"].sampler
    assert sampler.agent.model_fields_set == {"max_turns", "collect_patch_on_exit"}
    assert (sampler.agent.max_turns, sampler.agent.deadline_s, sampler.concurrency) == (7, 1800.0, 2)
    assert (sampler.sandbox.network, sampler.sandbox.exec_channel) == (True, True)  # the agent's preset: the exec channel
    assert sampler.sampling.stop_token_ids == (3, 4)


def test_the_engine_options_fill_the_settings_of_the_engine_named_and_another_engines_are_refused(tmp_path, monkeypatch):
    seen = _stage_seen(monkeypatch)
    base = ["rollout", "--tasks", "t.jsonl", "--model", "m", "--out", "o"]
    result = CliRunner().invoke(app, [*base, "--engine", "scripted", "--demo", "replace", "--demo-give-up", "0.5"])
    assert result.exit_code == 0, result.output
    engine = seen["stage"].sampler.engine
    assert (engine.kind, engine.demo, engine.give_up) == ("scripted", "replace", 0.5)
    assert CliRunner().invoke(app, [*base, "--torch-threads", "1"]).exit_code == 0  # no --engine: hf
    assert seen["stage"].sampler.engine.torch_threads == 1
    result = CliRunner().invoke(app, [*base, "--engine", "vllm", "--torch-threads", "1"])
    assert result.exit_code == 2
    assert " ".join(result.output.split()).startswith("error: invalid rollout settings: engine.vllm.torch_threads: Extra "
                                                      "inputs are not permitted")


# --- any model: a new field is an option at once -------------------------------------------------------


class Knobs(BaseModel):
    """A component as a new one would be written."""

    turns: int = Field(4, ge=1, le=9, description="Turns.")
    share: float = Field(0.5, gt=0, lt=1, description="A share.")
    mode: str = Field("a", description="Mode.")
    on: bool = Field(True, description="A switch.")


@pytest.mark.parametrize("model", [Knobs, RewardConfig], ids=lambda m: m.__name__)
def test_any_models_fields_become_options_and_its_bounds_are_refused_by_name(model):
    group = OptionGroup("knobs", model, panel="Knobs")
    small = typer.Typer()

    @small.command()
    @config_options(group)
    def run(knobs: dict = {}) -> None:  # noqa: B006
        print(validated(model, "knob", **knobs).model_dump_json())

    @small.command()
    def other() -> None:
        pass

    options = {opt: p for p in typer.main.get_command(small).commands["run"].params for opt in p.opts}
    for name, info in model.model_fields.items():
        assert options[group.flag(name)].help.startswith(info.description), name
        for _, value in _out_of_bounds(info):
            result = CliRunner().invoke(small, ["run", group.flag(name), str(value)])
            assert result.exit_code == 2 and f"invalid knob settings: {name}: Input should be" in " ".join(result.output.split())


def test_two_components_with_one_flag_are_refused_when_the_command_is_declared():
    with pytest.raises(ValueError, match="--turns would set both Knobs.turns and Knobs.turns"):
        config_options(OptionGroup("a", Knobs, panel="A"), OptionGroup("b", Knobs, panel="B"))(lambda a={}, b={}: None)  # noqa: B006


def test_a_component_field_named_like_one_of_the_commands_own_flags_is_refused():
    def run(turns: int = typer.Option(1, "--turns"), knobs: dict = {}) -> None:  # noqa: B006
        pass

    with pytest.raises(ValueError, match="--turns would set both the command's turns and Knobs.turns"):
        config_options(OptionGroup("knobs", Knobs, panel="Knobs"))(run)
