"""Token-exact multi-turn chat: ids are appended turn by turn, the history is never re-rendered.

Re-rendering a conversation and re-tokenizing it does not give back the ids the sampler
produced (peer systems lost separators this way and stopped converging). So the
trajectory is built from three kinds of pieces:

* the prompt: the chat template's rendering of system + first user message, with the
  generation prompt, tokenized once;
* the policy's sampled ids, kept verbatim;
* after each reply, the "turn suffix": whatever the template puts between the end of the
  assistant's content and the start of the next assistant content (end-of-turn marker,
  the user turn holding the observation, the next generation prompt), tokenized alone.

The template's delimiters are learned once by rendering probe messages, so any ChatML-
like template works, and a template that rewrites history (e.g. one that strips earlier
reasoning) is refused up front instead of silently breaking the prefix invariant.
"""

from __future__ import annotations

from dataclasses import dataclass

from swerl.agent.actions import holds_command

PROBE_SYSTEM = "SWERL-PROBE-SYSTEM"
PROBE_USER = "SWERL-PROBE-USER"
PROBE_REPLY = "SWERL-PROBE-REPLY"
PROBE_OBS = "SWERL-PROBE-OBSERVATION"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be extended turn by turn."""


@dataclass(frozen=True)
class TurnSuffix:
    """Ids to append after a reply: ``ids`` (never trained on) and the text they encode."""

    ids: list[int]
    text: str


class ChatFormat:
    """A tokenizer plus what its chat template puts between turns."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template; give the model folder a chat_template.jinja")
        render = self.render
        first = [{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}]
        with_reply = first + [{"role": "assistant", "content": PROBE_REPLY}]
        with_obs = with_reply + [{"role": "user", "content": PROBE_OBS}]
        prompt = render(first, add_generation_prompt=True)
        full = render(with_reply)
        nxt = render(with_obs, add_generation_prompt=True)
        if not full.startswith(prompt + PROBE_REPLY):
            raise ChatTemplateError("the chat template does not render an assistant reply right after the generation prompt")
        second = render(with_obs + [{"role": "assistant", "content": PROBE_REPLY + "-2"}])
        if not nxt.startswith(full) or not second.startswith(nxt + PROBE_REPLY + "-2"):
            raise ChatTemplateError(
                "the chat template re-renders earlier turns when a turn is added, so ids cannot be appended turn by turn"
            )
        # text after the assistant's content up to where the next content starts
        self.assistant_end = full[len(prompt) + len(PROBE_REPLY):]
        tail = nxt[len(full):]
        self.user_prefix, _, self.user_suffix = tail.partition(PROBE_OBS)
        if not _:
            raise ChatTemplateError("the chat template drops the user's message")
        self.stop_token_ids = self._stop_ids()
        self.special_strings = sorted(
            {t for t in getattr(tokenizer, "all_special_tokens", [])} | {str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if getattr(t, "special", False)},
            key=len,
            reverse=True,
        )

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _stop_ids(self) -> tuple[int, ...]:
        """The token that ends an assistant turn: the first token of ``assistant_end``."""
        ids = self.encode(self.assistant_end)
        if not ids:
            raise ChatTemplateError("the chat template puts nothing after an assistant reply, so a reply cannot end")
        # only the template's own end-of-turn token: a reply ended by any other eos would
        # not render back to the same text, which breaks the prefix invariant
        return (ids[0],)

    def sanitize(self, text: str) -> str:
        """Break special-token strings in environment text so output cannot forge a turn boundary."""
        for s in self.special_strings:
            if s in text:
                text = text.replace(s, s[0] + "\u200b" + s[1:])
        return text

    def prompt_ids(self, system: str, user: str) -> list[int]:
        messages = [{"role": "system", "content": self.sanitize(system)}, {"role": "user", "content": self.sanitize(user)}]
        return self.encode(self.render(messages, add_generation_prompt=True))

    def turn_suffix(self, reply_ids: list[int], observation: str) -> TurnSuffix:
        """Ids closing the reply (if the sampler did not) and carrying ``observation`` as the next user turn."""
        end = self.assistant_end
        if reply_ids and reply_ids[-1] in self.stop_token_ids:
            stop_text = self.tokenizer.decode([reply_ids[-1]], skip_special_tokens=False)
            end = end[len(stop_text):] if end.startswith(stop_text) else end
        text = end + self.user_prefix + self.sanitize(observation) + self.user_suffix
        return TurnSuffix(ids=self.encode(text), text=text)

    def command_end(self, reply_ids: list[int]) -> int:
        """How many of ``reply_ids`` make the reply up to the end of its first fenced block: the ids
        through the one that closes it, plus an end-of-turn id sampled right after. All of them when
        no block closes.

        Only ids whose text holds a backtick can close a block, so the prefix is decoded (the
        tokenizer may merge bytes across ids) at those alone.
        """
        decode = self.tokenizer.decode
        for k, token in enumerate(reply_ids, 1):
            if "`" in decode([token], skip_special_tokens=False) and holds_command(decode(reply_ids[:k], skip_special_tokens=False)):
                return k + 1 if k < len(reply_ids) and reply_ids[k] in self.stop_token_ids else k
        return len(reply_ids)

    def reply_text(self, reply_ids: list[int]) -> str:
        """The assistant content: the reply without its end-of-turn token."""
        if reply_ids and reply_ids[-1] in self.stop_token_ids:
            reply_ids = reply_ids[:-1]
        return self.tokenizer.decode(reply_ids, skip_special_tokens=False)
