"""GenerationConfig: defaults, update, and the config.json fallback of transformers."""

from __future__ import annotations

import json

import pytest

from transmuter_mlx.generation.config import GenerationConfig

transformers = pytest.importorskip("transformers")


def test_defaults_are_transformers_defaults():
    theirs = transformers.GenerationConfig()
    ours = GenerationConfig()
    for name in GenerationConfig.fields():
        if name != "seed":
            assert getattr(ours, name) == getattr(theirs, name), name


def test_update_overrides_and_rejects_unknown():
    config = GenerationConfig(num_beams=4, eos_token_id=2).update(num_beams=1, do_sample=True)
    assert (config.num_beams, config.do_sample, config.eos_ids) == (1, True, [2])
    with pytest.raises(TypeError, match="num_beam"):
        config.update(num_beam=3)
    with pytest.raises(ValueError, match="early_stopping"):
        config.update(early_stopping="sometimes")


def _repo(tmp_path, config: dict, generation: dict | None):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


@pytest.mark.parametrize("generation", [
    None,
    {"num_beams": 2, "max_length": 64, "eos_token_id": [5, 6]},
    {"_from_model_config": True, "num_beams": 4, "bos_token_id": 0, "eos_token_id": 0},
])
def test_from_repo_matches_from_pretrained(tmp_path, generation):
    config = {"model_type": "marian", "is_encoder_decoder": True, "vocab_size": 100, "num_beams": 4, "max_length": 512, "bad_words_ids": [[99]],
              "decoder_start_token_id": 99, "pad_token_id": 99, "eos_token_id": 0, "forced_eos_token_id": 0,
              "length_penalty": None}
    folder = _repo(tmp_path, config, generation)
    model_config = transformers.AutoConfig.from_pretrained(folder)
    if generation is None:
        theirs = transformers.GenerationConfig.from_model_config(model_config)
    else:
        theirs = transformers.GenerationConfig.from_pretrained(folder)
        if theirs._from_model_config and model_config._get_non_default_generation_parameters():
            theirs = transformers.GenerationConfig.from_model_config(model_config)
    ours = GenerationConfig.from_repo(folder)
    for name in GenerationConfig.fields():
        if name != "seed":
            assert getattr(ours, name) == getattr(theirs, name), name


@pytest.mark.parametrize("options,prompt", [
    ({"max_new_tokens": 8}, 5), ({}, 5), ({"max_length": 12}, 5), ({"min_new_tokens": 3, "min_length": 30}, 4),
])
def test_lengths(options, prompt):
    config = GenerationConfig(**options)
    max_length, min_length = config.lengths(prompt, max_position_embeddings=22)
    expected_max = {"max_new_tokens": 8 + prompt, "max_length": 12}.get(next(iter(options), ""), min(20 + prompt, 22))
    assert max_length == expected_max
    assert min_length == (3 + prompt if "min_new_tokens" in options else 0)


@pytest.mark.parametrize("options,message", [
    ({"top_p": 1.5}, r"top_p must be in \[0, 1\], got 1.5"),
    ({"top_p": float("nan")}, r"top_p must be in \[0, 1\], got nan"),
    ({"min_p": -0.5}, r"min_p must be in \[0, 1\]"),
    ({"repetition_penalty": 0}, r"repetition_penalty must be a finite number greater than 0, got 0.0"),
    ({"repetition_penalty": -1.0}, r"repetition_penalty must be a finite number greater than 0"),
    ({"num_return_sequences": 0, "do_sample": True}, r"num_return_sequences must be greater than 0, got 0"),
    ({"max_new_tokens": 0}, r"max_new_tokens must be greater than 0, got 0"),
    ({"max_new_tokens": 2.5}, r"max_new_tokens must be an int >= 1 or None, got 2.5 \(float\)"),
    ({"max_new_tokens": 16.0}, r"max_new_tokens must be an int"),
    ({"top_k": 1.5}, r"top_k must be an int >= 0 or None, got 1.5"),
    ({"top_k": -1}, r"top_k must be at least 0, got -1"),
    ({"num_beams": True}, r"num_beams must be an int >= 1, got True \(bool\)"),
    ({"no_repeat_ngram_size": "2"}, r"no_repeat_ngram_size must be an int >= 0, got '2'"),
    ({"min_new_tokens": -1}, r"min_new_tokens must be at least 0, got -1"),
    ({"do_sample": "yes"}, r"do_sample must be True or False, got 'yes'"),
    ({"temperature": "hot"}, r"temperature must be a number, got 'hot'"),
    ({"temperature": 0.0, "do_sample": True}, r"temperature must be > 0 with do_sample=True"),
    ({"length_penalty": float("inf")}, r"length_penalty must be a finite number, got inf"),
    ({"eos_token_id": -1}, r"eos_token_id must be at least 0, got -1"),
    ({"eos_token_id": [2, "x"]}, r"eos_token_id must be a token id \(an int\) or a list of them"),
    ({"bos_token_id": 1.0}, r"bos_token_id must be an int >= 0 or None, got 1.0"),
    ({"seed": -1}, r"seed must be at least 0, got -1"),
    ({"seed": 2**64}, r"seed must be less than 2\*\*64"),
    ({"bad_words_ids": []}, r"bad_words_ids must be a non-empty list of non-empty lists of token ids"),
    ({"bad_words_ids": [[1], [-2]]}, r"bad_words_ids must be a non-empty list"),
    ({"stop_strings": [""]}, r"stop_strings must be a non-empty str or a list of them, got \[''\]"),
    ({"stop_strings": 5}, r"stop_strings must be a non-empty str or a list of them, got 5"),
])
def test_bad_values_are_value_errors_naming_the_option(options, message):
    """transformers' checks (GenerationConfig.validate, the logits processors), at construction and update."""
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**options)
    with pytest.raises(ValueError, match=message):
        GenerationConfig().update(**options)


def test_values_are_normalized():
    import numpy as np

    config = GenerationConfig(max_new_tokens=np.int64(8), temperature=1, do_sample=np.bool_(True), top_k=None,
                              stop_strings="\n\n", eos_token_id=(2, np.int32(7)), seed=np.uint64(3))
    assert (config.max_new_tokens, config.temperature, config.do_sample, config.seed) == (8, 1.0, True, 3)
    assert type(config.max_new_tokens) is int and type(config.temperature) is float and config.do_sample is True
    assert config.stop_strings == ["\n\n"] and config.eos_token_id == [2, 7] and config.top_k is None
    assert GenerationConfig(stop_strings=[]).stop_strings is None
    assert GenerationConfig(length_penalty=None, repetition_penalty=None).length_penalty is None  # a null in a file


def test_a_bad_value_in_generation_config_json_names_the_file(tmp_path):
    folder = _repo(tmp_path, {"model_type": "gpt2"}, {"top_p": 2})
    with pytest.raises(ValueError, match=r"generation_config.json of folder '.*': top_p must be in \[0, 1\], got 2"):
        GenerationConfig.from_repo(folder)


@pytest.mark.parametrize("config,kind,positions", [
    ({"model_type": "gpt2", "n_positions": 1024}, "absolute", 1024),
    ({"model_type": "marian", "max_position_embeddings": 512, "is_encoder_decoder": True}, "absolute", 512),
    ({"model_type": "llama", "max_position_embeddings": 4096, "rope_theta": 1e4}, "rotary", 4096),
    ({"model_type": "qwen3", "max_position_embeddings": 40960, "rope_scaling": None}, "rotary", 40960),
    ({"model_type": "t5", "n_positions": 512, "relative_attention_num_buckets": 32}, "relative", 512),
    ({"model_type": "t5", "relative_attention_num_buckets": 32}, "relative", 300),  # the tokenizer's
    ({"model_type": "gpt2"}, "unknown", 300),  # no positions in the config: the tokenizer's
])
def test_context_limit_of_a_config(config, kind, positions):
    from transmuter_mlx import zoo
    from transmuter_mlx.generation.context import ContextLimit

    limit = ContextLimit.of(zoo.family(config).ModelArgs.from_dict(config), declared=300)
    assert (limit.kind, limit.positions, limit.hard) == (kind, positions, kind == "absolute")


def test_context_limit_lengths():
    from transmuter_mlx.generation.context import DEFAULT_POSITIONS, ContextLimit

    absolute = ContextLimit(256, "absolute", "n_positions of config.json")
    assert absolute.max_length(GenerationConfig(max_new_tokens=246), 10) == 256
    with pytest.raises(ValueError, match=r"max_new_tokens=247 after a prompt of 10 tokens needs 257 positions, "
                                         r"more than the 256 absolute positions .* pass max_new_tokens=246 or less"):
        absolute.max_length(GenerationConfig(max_new_tokens=247), 10)
    assert absolute.max_length(GenerationConfig(), 250, max_position_embeddings=256) == 256  # the default 20: capped
    with pytest.raises(ValueError, match="no room for a new token"):
        absolute.max_length(GenerationConfig(max_length=8), 10)
    rotary = ContextLimit(256, "rotary", "max_position_embeddings of config.json")
    assert rotary.max_length(GenerationConfig(max_new_tokens=10**9), 10) == 256
    with pytest.raises(ValueError, match="the prompt has 256 tokens, which leaves no room for a new token"):
        rotary.max_length(GenerationConfig(max_new_tokens=1), 256)
    from transmuter_mlx import zoo

    assert ContextLimit.of(zoo.family("llama").ModelArgs()).positions == DEFAULT_POSITIONS
