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
