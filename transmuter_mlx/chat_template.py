"""Chat templates rendered exactly as transformers' ``tokenizer.apply_chat_template(..., tokenize=False)``.

>>> template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
>>> render_chat(template, [{"role": "user", "content": "Hi"}], add_generation_prompt=True)
'<user>Hi<assistant>'

The jinja2 environment is the one of ``transformers.utils.chat_template_utils._compile_jinja_template``
(4.57): a sandbox with ``trim_blocks`` and ``lstrip_blocks``, the loop-controls extension, a
``{% generation %}`` block tag, ``raise_exception`` and ``strftime_now`` as globals, and a ``tojson``
filter that keeps non-ASCII text and takes ``indent``, ``separators`` and ``sort_keys``. The
variables are those of ``apply_chat_template``: ``messages``, ``tools``, ``documents``,
``add_generation_prompt``, the tokenizer's special tokens (``bos_token``, ``eos_token``, ...) and any
extra template options (``enable_thinking=False``), which override the special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from copy import deepcopy
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .hub import load_json

__all__ = ["ChatTemplate", "ChatTemplateError", "ChatTemplateNotFoundError", "render_chat"]

# the files that can hold a template, in the order transformers' loaders give them precedence
TEMPLATE_FILES = (
    "chat_template.jinja",
    "additional_chat_templates/",
    "tokenizer_config.json",
    "chat_template.json",
)
# PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES: what ``special_tokens_map`` passes to the template
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


class ChatTemplateError(ValueError):
    """A chat template that cannot be found, compiled or rendered.

    >>> try:
    ...     render_chat("{{ raise_exception('bad role') }}", [])
    ... except ChatTemplateError as error:
    ...     print(error)
    chat template 'default' raised an error: bad role
    """


class ChatTemplateNotFoundError(ChatTemplateError, FileNotFoundError):
    """A repository folder without any chat template.

    >>> issubclass(ChatTemplateNotFoundError, FileNotFoundError)
    True
    """


class _TemplateRaised(jinja2.exceptions.TemplateError):
    """What the ``raise_exception`` global raises, told apart from jinja's own errors."""


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body (transformers' AssistantTracker tag)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@lru_cache(maxsize=64)
def _compile(source: str, name: str) -> jinja2.Template:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    try:
        return environment.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(f"chat template {name!r} line {error.lineno}: {error.message}") from error


def _token_text(value: Any) -> Any:
    """A special token as ``special_tokens_map`` gives it: AddedToken dicts become their content."""
    if isinstance(value, Mapping):
        return value.get("content")
    if isinstance(value, list):
        return [_token_text(item) for item in value]
    return value


def special_tokens_of(tokenizer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The template variables ``tokenizer.special_tokens_map`` gives for a tokenizer_config.json.

    >>> special_tokens_of({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "unk_token": None})
    {'bos_token': '<s>', 'eos_token': '</s>'}
    """
    extra = tokenizer_config.get("extra_special_tokens")
    tokens = {key: _token_text(tokenizer_config.get(key)) for key in SPECIAL_TOKEN_KEYS}
    if isinstance(extra, Mapping):
        tokens.update({key: _token_text(value) for key, value in extra.items()})
    return {key: value for key, value in tokens.items() if value}


def _templates_of(value: Any) -> dict[str, str]:
    """A ``chat_template`` value (a string, or a list of ``{"name", "template"}``) as name -> source."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, Mapping):
        return dict(value)
    return {entry["name"]: entry["template"] for entry in value}


class ChatTemplate:
    """The chat template(s) of a repository with its special tokens, ready to render messages.

    >>> chat = ChatTemplate({"default": "{{ bos_token }}{{ messages[0].content }}"}, {"bos_token": "<s>"})
    >>> chat.render([{"role": "user", "content": "Hi"}])
    '<s>Hi'

    ``templates`` maps names to jinja sources; a single template is named ``default``.
    ``special_tokens`` become template variables, as ``special_tokens_map`` in transformers.
    """

    def __init__(
        self,
        templates: Mapping[str, str],
        special_tokens: Mapping[str, Any] | None = None,
        source: str = "template",
    ) -> None:
        self.templates = dict(templates)
        self.special_tokens = dict(special_tokens or {})
        self.source = source

    @classmethod
    def from_config(
        cls, tokenizer_config: Mapping[str, Any], source: str = "tokenizer_config.json"
    ) -> ChatTemplate:
        """The template and special tokens of a parsed tokenizer_config.json.

        >>> ChatTemplate.from_config({"chat_template": "{{ eos_token }}", "eos_token": "</s>"}).render([])
        '</s>'
        """
        if not tokenizer_config.get("chat_template"):
            raise ChatTemplateError(f"{source} has no 'chat_template'")
        return cls(
            _templates_of(tokenizer_config["chat_template"]), special_tokens_of(tokenizer_config), source
        )

    @classmethod
    def from_folder(cls, path: str | Path) -> ChatTemplate:
        """The chat template of a repository folder, found as transformers' tokenizer finds it.

        >>> from huggingface_hub import snapshot_download
        >>> chat = ChatTemplate.from_folder(snapshot_download("onnx-community/Qwen3-0.6B-ONNX",
        ...                                                   allow_patterns=["*.json", "*.jinja"]))
        >>> print(chat.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True), end="")
        <|im_start|>user
        Hi<|im_end|>
        <|im_start|>assistant

        Precedence: chat_template.jinja (plus named templates in additional_chat_templates/*.jinja),
        then ``chat_template`` of tokenizer_config.json, then the processor's chat_template.json.
        Special tokens come from tokenizer_config.json, with special_tokens_map.json filling gaps.
        """
        folder = Path(path)
        config = _read_json(folder / "tokenizer_config.json")
        tokens = {
            **special_tokens_of(_read_json(folder / "special_tokens_map.json")),
            **special_tokens_of(config),
        }
        templates: dict[str, str] = {}
        if (folder / "chat_template.jinja").is_file():
            templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        for extra in sorted((folder / "additional_chat_templates").glob("*.jinja")):
            templates[extra.name.removesuffix(".jinja")] = extra.read_text(encoding="utf-8")
        if templates:
            return cls(templates, tokens, str(folder / "chat_template.jinja"))
        for name in ("tokenizer_config.json", "chat_template.json"):
            value = _read_json(folder / name).get("chat_template")
            if value:
                return cls(_templates_of(value), tokens, str(folder / name))
        raise ChatTemplateNotFoundError(
            f"no chat template in {folder}: looked at {', '.join(TEMPLATE_FILES)} "
            f"({'a folder' if folder.is_dir() else 'not a folder'})"
        )

    def select(self, name: str | None = None, *, tools: Sequence[Any] | None = None) -> tuple[str, str]:
        """``(name, source)`` of the template to use, chosen as ``tokenizer.get_chat_template``.

        >>> ChatTemplate({"default": "a", "tool_use": "b"}).select(tools=[{}])
        ('tool_use', 'b')
        """
        if name is None:
            if len(self.templates) == 1 and "default" in self.templates:
                name = "default"
            elif tools is not None and "tool_use" in self.templates:
                name = "tool_use"
            elif "default" in self.templates:
                name = "default"
            else:
                raise ChatTemplateError(
                    f"{self.source} has several chat templates and none is 'default': pass one of "
                    f"{sorted(self.templates)} as template="
                )
        if name not in self.templates:
            raise ChatTemplateError(
                f"{self.source} has no chat template {name!r}: it has {sorted(self.templates)}"
            )
        return name, self.templates[name]

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        continue_final_message: bool = False,
        template: str | None = None,
        **template_options: Any,
    ) -> str:
        """The prompt text of ``messages``; ``template`` names one of several templates.

        >>> ChatTemplate({"default": "{{ messages | length }}"}).render([{"role": "user", "content": "a"}])
        '1'
        """
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError("continue_final_message and add_generation_prompt are not compatible")
        name, source = self.select(template, tools=tools)
        label = name if self.source == "template" else f"{self.source}:{name}"
        compiled = _compile(source, label)
        if tools is not None and not all(isinstance(tool, Mapping) for tool in tools):
            raise TypeError("tools must be JSON-schema dicts (callables are not converted)")
        if documents is not None and not all(isinstance(document, Mapping) for document in documents):
            raise TypeError("documents must be a list of dicts with 'title' and 'text' keys")
        messages = list(messages)
        if continue_final_message:
            messages, final_text = _tag_final_message(messages)
        variables = {**self.special_tokens, **template_options}
        try:
            text = compiled.render(
                messages=messages,
                tools=None if tools is None else list(tools),
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except _TemplateRaised as error:
            raise ChatTemplateError(f"chat template {label!r} raised an error: {error.message}") from error
        except jinja2.exceptions.TemplateError as error:
            raise ChatTemplateError(
                f"chat template {label!r} failed: {type(error).__name__}: {error}"
            ) from error
        return _cut_at_tag(text, final_text) if continue_final_message else text


def render_chat(
    template_or_tokenizer_config: str | Mapping[str, Any] | ChatTemplate | Path,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    continue_final_message: bool = False,
    special_tokens: Mapping[str, Any] | None = None,
    **template_options: Any,
) -> str:
    """Renders ``messages`` with a template source, a parsed tokenizer_config.json, a folder or a ChatTemplate.

    >>> config = {"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", "bos_token": "<s>"}
    >>> render_chat(config, [{"role": "user", "content": "Hi"}])
    '<s>Hi'

    ``special_tokens`` override those of the config; ``template_options`` (``enable_thinking``,
    ``template=`` to pick a named template) go to the template as variables.
    """
    chat = template_or_tokenizer_config
    if isinstance(chat, str):
        chat = ChatTemplate({"default": chat})
    elif isinstance(chat, Mapping):
        chat = ChatTemplate.from_config(chat)
    elif isinstance(chat, Path):
        chat = ChatTemplate.from_folder(chat)
    if special_tokens:
        chat = ChatTemplate(chat.templates, {**chat.special_tokens, **special_tokens}, chat.source)
    return chat.render(
        messages,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        documents=documents,
        continue_final_message=continue_final_message,
        **template_options,
    )


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON file of the folder ({} when absent); a MalformedFileError naming it when it does not parse."""
    return load_json(path) if path.is_file() else {}


def _tag_final_message(messages: list[Any]) -> tuple[list[Any], str]:
    """Appends transformers' continue tag to the last text of the final message."""
    messages = deepcopy(messages)
    content = messages[-1]["content"]
    if not isinstance(content, (list, tuple)):
        messages[-1]["content"] = content + _CONTINUE_TAG
        return messages, content
    for part in reversed(content):
        if "text" in part:
            final_text = part["text"]
            part["text"] = final_text + _CONTINUE_TAG
            return messages, final_text
    raise ChatTemplateError("continue_final_message is set but the final message has no text to continue")


def _cut_at_tag(text: str, final_text: str) -> str:
    """The rendered text up to the end of the final message, as ``render_jinja_template`` cuts it."""
    if final_text.strip() not in text or _CONTINUE_TAG.strip() not in text:
        raise ChatTemplateError(
            "continue_final_message is set but the final message does not appear in the rendered chat: "
            "the template changes or drops part of it"
        )
    at = text.rindex(_CONTINUE_TAG.strip())
    if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
