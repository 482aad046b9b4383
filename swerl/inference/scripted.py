"""A scripted policy: a real InferenceEngine that replays given replies instead of sampling.

It drives the whole path (engine -> agent -> tools -> sandbox -> submit -> grading) with
known-good behaviour, e.g. a gold patch applied hunk by hunk through the `edit` tool. Its
replies are tokenized canonically, so its trajectories are the prefix-invariant's
reference case. A deterministic policy gives each reply probability 1: log-prob 0, at any
temperature or top-p, and the same reply whatever the seed.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.grading.diffs import split_diff
from swerl.inference.base import EngineError, Generation, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.config import SCRIPTED_MAX_CONTEXT, ScriptedEngineConfig

if TYPE_CHECKING:
    from swerl.data.task import Task

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

Script = Sequence[str]
Scripts = Mapping[str, Script] | Callable[[GenerationRequest], str]


class ScriptedEngine:
    """Answers turn ``k`` of trajectory ``<instance_id>/<sample>`` with ``scripts[instance_id][k]``.

    A key may also be a full trajectory id, which wins over the instance id. Past the end
    of its script a trajectory gets ``config.after_script``. A reply is its text's tokens and
    then the end-of-turn token (``stop_token_ids[0]``; default ``<|im_end|>``), cut as every
    engine cuts it (``request_limits``): after its first stop token (the request's, the
    sampling config's, or that end-of-turn token; finish reason ``stop``), at most
    ``max_tokens`` long (``length``).
    """

    name = "scripted"

    def __init__(
        self,
        tokenizer,
        scripts: Scripts,
        config: ScriptedEngineConfig | None = None,
        *,
        sampling: SamplingConfig | None = None,
        stop_token_ids: Sequence[int] | None = None,
        policy_version: str = "scripted",
    ) -> None:
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.config = config or ScriptedEngineConfig()
        self.sampling = sampling or SamplingConfig()
        self.max_context = self.config.max_context or SCRIPTED_MAX_CONTEXT
        self.policy_version = policy_version
        self._stop = list(stop_token_ids) if stop_token_ids is not None else [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self._closed = False

    def reply_for(self, request: GenerationRequest) -> str:
        if callable(self.scripts):
            return self.scripts(request)
        script = self.scripts.get(request.trajectory_id)
        if script is None:
            script = self.scripts.get(request.trajectory_id.rsplit("/", 1)[0])
        if script is None:
            raise EngineError(f"no script for trajectory {request.trajectory_id!r}")
        return script[request.turn] if request.turn < len(script) else self.config.after_script

    async def generate(self, request: GenerationRequest) -> Generation:
        if self._closed:
            raise EngineError("the scripted engine is closed")
        limits = request_limits(request, self.sampling, self.max_context)
        ids = list(self.tokenizer.encode(self.reply_for(request), add_special_tokens=False)) + self._stop[:1]
        stops = {*limits.stop_token_ids, *self._stop[:1]}
        end = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))
        reason = "stop"
        if end > limits.max_tokens:
            end, reason = limits.max_tokens, "length"
        return Generation(request.request_id, ids[:end], [0.0] * end, reason, policy_version=self.policy_version)

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        raise EngineError("a scripted policy has no weights to load")

    def close(self) -> None:
        self._closed = True


def demonstrations(config: ScriptedEngineConfig, tokenizer, tasks: Sequence[Task]) -> Scripts:
    """The replies ``config.demo`` gives on ``tasks``: their gold patches, applied with ``edit`` or ``replace``."""
    if config.demo == "replace":
        return ReplaceDemonstrator(tokenizer, {t.instance_id: t.patch for t in tasks}, give_up=config.give_up)
    return {t.instance_id: script_from_patch(t.patch) for t in tasks}


def script_from_patch(patch: str, *, explore: bool = True, minimal: bool = True) -> list[str]:
    """Replies that apply ``patch`` through the agent's tools (open / edit / create), then submit.

    Hunks are applied bottom-up within each file, so earlier line numbers stay valid. With
    ``minimal`` an edit covers only the changed lines (the diff's context lines are left
    alone), the smallest demonstration of the fix.
    """
    replies = ["Let me look at the repository first.\n```\nls\n```"] if explore else []
    for section in split_diff(patch):
        if section.new_path is None:
            replies.append(f"This file must go.\n```\nrm {section.old_path}\n```")
            continue
        hunks = _hunks(section.text)
        if section.old_path is None:
            replies.append(f"I need a new file.\n```\ncreate {section.new_path}\n```")
        else:
            replies.append(f"Let me open the file to fix.\n```\nopen {section.new_path}\n```")
        for old_start, old_len, lines in sorted(hunks, key=lambda h: -h[0]):
            lead = trail = 0
            if minimal and section.old_path is not None:
                while lead < len(lines) and lines[lead][0] == " ":
                    lead += 1
                while trail < len(lines) - lead and lines[len(lines) - 1 - trail][0] == " ":
                    trail += 1
            if lead or trail:
                start, old_len = old_start + lead, old_len - lead - trail
            else:
                start = old_start if old_len else old_start + 1  # an insertion-only hunk anchors *after* old_start
            end = start + old_len - 1  # END = START-1 inserts before START
            body = "".join(text for kind, text in lines[lead:len(lines) - trail] if kind in " +")
            replies.append(f"Applying the change at line {start}.\n```\nedit {start}:{end} <<'SWERL_EOF'\n{body}SWERL_EOF\n```")
    replies.append("The fix is in place.\n```\nsubmit\n```")
    return replies


def _hunks(section: str) -> list[tuple[int, int, list[tuple[str, str]]]]:
    """(old_start, old_len, [(kind, text with newline)]) for each hunk of one file's diff;
    kind is ' ' (context), '-' (removed) or '+' (added)."""
    hunks: list[tuple[int, int, list[tuple[str, str]]]] = []
    current: list[tuple[str, str]] | None = None
    for line in section.splitlines(keepends=True):
        m = _HUNK.match(line)
        if m:
            current = []
            hunks.append((int(m.group(1)), int(m.group(2) or 1), current))
        elif current is not None and line[:1] in (" ", "+", "-"):
            current.append((line[0], line[1:] if line.endswith("\n") else line[1:] + "\n"))
    return hunks


_FILE_VIEW = re.compile(r"^\[File: (?P<path>\S+) \((?P<n>\d+) lines total\)\]$")
_VIEW_LINE = re.compile(r"^(\d+):(.*)$")
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]+")


def one_line_change(patch: str) -> tuple[str, str, str] | None:
    """(path, old line, new line) when ``patch`` changes exactly one line of one existing file."""
    sections = split_diff(patch)
    if len(sections) != 1 or sections[0].old_path is None or sections[0].new_path is None:
        return None
    hunks = _hunks(sections[0].text)
    if len(hunks) != 1:
        return None
    removed = [text for kind, text in hunks[0][2] if kind == "-"]
    added = [text for kind, text in hunks[0][2] if kind == "+"]
    if len(removed) != 1 or len(added) != 1:
        return None
    return sections[0].new_path, removed[0].rstrip("\n"), added[0].rstrip("\n")


def minimal_replace(text: str, old: str, new: str) -> tuple[str, str] | None:
    """The shortest (SEARCH, REPLACE) of whole tokens around where ``old`` and ``new`` differ
    such that SEARCH occurs exactly once in ``text`` (the file holding ``old``)."""
    if old not in text:
        return None
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    spans = [(m.start(), m.end()) for m in _TOKEN.finditer(old)]
    if not spans:
        return None
    start, end = prefix, len(old) - suffix
    if start >= end:  # a pure insertion: anchor on the last character of code before it
        k = max(0, prefix - 1)
        while k > 0 and old[k].isspace():
            k -= 1
        start, end = k, k + 1
    first = next(i for i, (a, b) in enumerate(spans) if b > start)
    last = max(i for i, (a, b) in enumerate(spans) if a < end)
    first, last = min(first, last), max(first, last)
    while True:
        a, b = spans[first][0], spans[last][1]
        search = old[a:b]
        if search.strip() and search == search.strip() and text.count(search) == 1:
            return search, new[a:len(new) - (len(old) - b)]
        if first == 0 and last == len(spans) - 1:
            return (search, new[a:len(new) - (len(old) - b)]) if text.count(search) == 1 else None
        # Grow to the right first (the rest of the expression), then left; bare space never ends a span.
        if last < len(spans) - 1:
            last += 1
            if not old[spans[last][0]:spans[last][1]].strip() and last < len(spans) - 1:
                last += 1
        else:
            first -= 1
            if not old[spans[first][0]:spans[first][1]].strip() and first > 0:
                first -= 1


def file_view(prompt_text: str) -> tuple[str, str] | None:
    """(path, text) of the last whole-file view the `open` tool printed in ``prompt_text``."""
    lines = prompt_text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        m = _FILE_VIEW.match(lines[i])
        if not m:
            continue
        body = []
        for line in lines[i + 1:]:
            v = _VIEW_LINE.match(line)
            if not v:
                break
            body.append(v.group(2))
        if len(body) != int(m.group("n")):
            return None  # a window of a longer file: uniqueness cannot be checked from it
        return m.group("path"), "\n".join(body) + "\n"
    return None


class ReplaceDemonstrator:
    """A scripted policy that fixes a one-line bug the shortest way: ``open`` the file, ``replace``
    the smallest unique span it reads there (``edit`` by line number when the line has none), ``submit``.

    The span is chosen from the file as the `open` tool showed it (decoded from the prompt), the
    way an agent would, so the demonstration never relies on text it did not see. A patch that
    is not a one-line change is demonstrated with ``script_from_patch`` instead.

    With ``give_up`` > 0 it is a noisy demonstrator: that fraction of trajectories (chosen by a
    hash of the trajectory id, so reruns agree) submit right after ``open``, without a fix. A
    policy imitating it knows the fix but often does not make it, the way an instruct model
    often stops short; its Pass@k is well above its Pass@1, which is the room RL has to work in.
    """

    def __init__(self, tokenizer, patches: Mapping[str, str], *, give_up: float = 0.0) -> None:
        if not 0.0 <= give_up <= 1.0:
            raise ValueError(f"give_up is a probability, got {give_up}")
        self.tokenizer = tokenizer
        self.patches = dict(patches)
        self.give_up = give_up
        self.changes = {iid: one_line_change(patch) for iid, patch in self.patches.items()}  # parsed once, asked every turn

    def gives_up(self, trajectory_id: str) -> bool:
        """Whether this trajectory stops after ``open``: a uniform draw from its id's hash."""
        draw = int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") / 2**64
        return draw < self.give_up

    def __call__(self, request: GenerationRequest) -> str:
        instance_id = request.trajectory_id.rsplit("/", 1)[0]
        if instance_id not in self.patches:
            raise EngineError(f"no patch for trajectory {request.trajectory_id!r}")
        patch = self.patches[instance_id]
        change = self.changes[instance_id]
        if change is None:
            script = script_from_patch(patch, explore=False)
            return script[request.turn] if request.turn < len(script) else "```\nsubmit\n```"
        path, old, new = change
        if request.turn == 0:
            return f"```\nopen {path}\n```"
        if request.turn == 1 and self.gives_up(request.trajectory_id):
            return "```\nsubmit\n```"
        if request.turn == 1:
            view = file_view(self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False))
            pair = minimal_replace(view[1], old, new) if view is not None else None
            if pair is not None:
                return f"```\nreplace {shlex.quote(pair[0])} {shlex.quote(pair[1])}\n```"
            return script_from_patch(patch, explore=False)[1]  # no unique span on one line: edit it by number
        return "```\nsubmit\n```"
