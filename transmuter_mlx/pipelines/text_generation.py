"""generation: a decoder-only model (GPT-2, Llama, Qwen, ...) continuing a text or a chat.

>>> import transmuter_mlx as tm
>>> chat = tm.text.generation("onnx-community/Qwen3-0.6B-ONNX", max_new_tokens=64,
...                           template_options={"enable_thinking": False})
>>> chat({"messages": [{"role": "user", "content": "Write a haiku about MLX."}]})
{'results': [{'text': '...', 'token_summary': {'input': ..., 'output': ..., 'padding': 0}}]}
>>> streamed = "".join(chat("Once upon a time", stream=True, seed=7))      # text chunks as they come
>>> streamed == chat("Once upon a time", seed=7)["results"][0]["text"]
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..chat_template import ChatTemplate, ChatTemplateError
from ..generation.config import GenerationConfig
from ..generation.context import ContextLimit
from ..generation.loop import Generated, generate
from ..generation.sessions import open_session
from ..generation.slots import open_slots
from ..tokenizer import Tokenizer
from .generating import GENERATION_OPTIONS, STREAM_OPTIONS, GeneratingPipeline, RowInput

__all__ = ["TextGeneration"]

TASK_OPTIONS = MappingProxyType({"template_options": None, "return_full_text": False, **STREAM_OPTIONS})


@dataclass
class Prompt:
    """One input, ready to generate: its token ids, its seed and the text they came from."""

    ids: list[int]
    seed: int | None
    text: str


class TextGeneration(GeneratingPipeline):
    """Text or ``{"messages": [...]}`` in, ``{"results": [{"text", "token_summary"}, ...]}`` out.

    >>> import transmuter_mlx as tm
    >>> gen = tm.text.generation("Xenova/gpt2", max_new_tokens=8)
    >>> results = gen(["Hello, my name is", {"text": "The sky", "seed": 3}], do_sample=True)
    >>> [r["results"][0]["token_summary"]["output"] <= 8 for r in results]   # a list in, a list out
    [True, True]

    A str goes to the tokenizer with its special tokens (as transformers' pipeline); messages go
    through the repository's chat template with ``add_generation_prompt`` (unless the last message
    is the assistant's: it is continued) and ``template_options``, and are tokenized without special
    tokens. ``text`` is the new text only (``return_full_text=True`` puts the prompt in front). The
    settings of generation_config.json apply and every :class:`GenerationConfig` field overrides them.
    ``stream=True`` (one input) returns an iterator of text chunks; ``stream_done=True`` ends it with
    ``("done", {"token_summary": ...})``. ``compile={"batch_size": n}`` decodes up to n inputs in one loop.
    """

    task = "text-generation"
    defaults = MappingProxyType({**{n: None for n in GENERATION_OPTIONS}, **TASK_OPTIONS})
    single_types = (str, dict)
    decode_cleans_spaces = True  # decode() cleans up tokenization spaces, as transformers' pipeline

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        o = self.options
        self.tokenizer: Tokenizer = o.tokenizer or Tokenizer.from_repo(self.repo)
        self.generation = GenerationConfig.from_repo(self.repo)
        self.model = o.model if o.model is not None else self.load_file("model")
        self.max_positions = self.args.positions  # the cap of the default 20 new tokens, as transformers
        self.context = self.tokenizer.model_max_length
        self.context_limit = ContextLimit.of(self.args, self.context)
        self._chat: ChatTemplate | None = None
        self.generation_for(dict(o.extra))  # options given at build time fail here, not at the first call

    # ------------------------------------------------------------------ inputs
    def preprocess(self, index: int, item: Any, options: Mapping[str, Any], config: GenerationConfig) -> Prompt:
        """The token ids of one input (no truncation: a prompt longer than the context is an error)."""
        seed, chat = None, None
        if isinstance(item, Mapping):
            unknown = set(item) - {"text", "messages", "seed"}
            if unknown or ("text" in item) == ("messages" in item):
                raise TypeError(f"{self.task}: input {index}: a dict input has 'text' or 'messages' (and "
                                f"optionally 'seed'), got keys {sorted(item)}")
            seed, chat, item = item.get("seed"), item.get("messages"), item.get("text")
        if chat is not None:
            text = self.render_chat(index, chat, options.get("template_options") or {})
        elif isinstance(item, str):
            text = item
        else:
            raise TypeError(f"{self.task}: input {index}: expected a str, {{'text': ...}} or "
                            f"{{'messages': [...]}}, got {type(item).__name__}")
        encoded = self.tokenizer.encode([text], truncation=False, add_special_tokens=chat is None)
        ids = [int(t) for t in encoded.input_ids[0][encoded.attention_mask[0] == 1]]
        if not ids:  # transformers generates from bos_token_id when the prompt is empty
            if config.bos_token_id is None:
                raise ValueError(f"{self.task}: input {index} is empty and {self.repo.name} has no bos_token_id "
                                 "to start from")
            ids = [config.bos_token_id]
        if self.context and len(ids) > self.context:
            raise ValueError(f"{self.task}: input {index} has {len(ids)} tokens, more than the {self.context} "
                             f"tokens of the model's context; shorten the prompt (it is not truncated)")
        self.row_length(config, len(ids), f"input {index}: ")  # past absolute positions: an error, before decoding
        return Prompt(ids, seed, text)

    def render_chat(self, index: int, messages: Sequence[Mapping[str, Any]], template_options: Mapping) -> str:
        """The prompt text of a chat, rendered by the repository's chat template."""
        if self._chat is None:
            files = [n for n in ("chat_template.jinja", "tokenizer_config.json", "chat_template.json",
                                 "special_tokens_map.json") if self.repo.exists(n)]
            try:
                if not files:
                    raise ChatTemplateError("no tokenizer_config.json, chat_template.jinja or chat_template.json")
                self._chat = ChatTemplate.from_folder(self.repo.path(files[0]).parent)
            except ChatTemplateError as error:
                raise ChatTemplateError(f"{self.task}: {self.repo.name} has no chat template, so it takes text, "
                                 f"not messages ({error})") from error
        if not isinstance(messages, Sequence) or not messages:
            raise TypeError(f"{self.task}: input {index}: messages must be a non-empty list of dicts")
        last = messages[-1].get("role") if isinstance(messages[-1], Mapping) else None
        try:
            return self._chat.render(messages, add_generation_prompt=last != "assistant",
                                     continue_final_message=last == "assistant", **template_options)
        except ChatTemplateError as error:
            raise ChatTemplateError(f"{self.task}: input {index}: {error}") from error

    # ------------------------------------------------------------------ hooks of GeneratingPipeline
    def normalize_input(self, inputs: Any) -> Any:
        """transformers' spelling: a list of messages is one chat."""
        return {"messages": inputs} if _is_chat(inputs) else inputs

    def generate_batch(self, batch: list[Prompt], config: GenerationConfig, options: Mapping[str, Any],
                       on_step: Callable[[list[list[int]]], None] | None) -> Generated:
        """One decoding loop over the prompts, each row with its own positions and KV cache padding."""
        session = open_session(self.model, config.pad_id if config.pad_id is not None else 0,
                               heads=self.args.num_key_value_heads, head_dim=self.args.head_dim)
        out = generate(session, [p.ids for p in batch], config, decode=self.decode,
                       max_position_embeddings=self.max_positions, on_step=on_step,
                       max_length_cap=self.context_limit.positions)
        self.warn_context_end(out, [len(p.ids) for p in batch], config)
        return out

    def open_slots(self, slots: int) -> Any:
        """The decoder's slot cache, in the KV-cache mode of its graph."""
        pad = self.generation.pad_id if self.generation.pad_id is not None else 0
        return open_slots(self.model, pad, slots, heads=self.args.num_key_value_heads, head_dim=self.args.head_dim)

    def row_input(self, prepared: Prompt, config: GenerationConfig, options: Mapping[str, Any]) -> RowInput:
        return RowInput(list(prepared.ids), input_tokens=len(prepared.ids))

    def text_prefix(self, prepared: Prompt, options: Mapping[str, Any]) -> str:
        """The prompt text under ``return_full_text=True``."""
        return prepared.text if options.get("return_full_text") else ""

    def decode(self, ids: Sequence[int]) -> str:
        """New tokens to text, as transformers' pipeline decodes (special tokens skipped, spaces cleaned)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)


def _is_chat(inputs: Any) -> bool:
    return (isinstance(inputs, list) and bool(inputs)
            and all(isinstance(m, Mapping) and "role" in m for m in inputs))
