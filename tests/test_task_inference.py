"""``tm.pipeline(model=...)`` without a task: the task read from the repository (pipelines/task_inference.py).

Fixture folders (cached builds) are the repositories of the tasks they serve in the other tests (and in
test_doctests.py's ``REPOS``); small folders of a config.json and empty files check each rule alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import transmuter_mlx as tm
from tests.fixtures import audio_models, generation_models, gliner_models, text_models, vision_models
from transmuter_mlx import zoo
from transmuter_mlx.pipelines import ALIASES, TASKS, TaskInferenceError, infer_task
from transmuter_mlx.pipelines.task_inference import ARCHITECTURES
from transmuter_mlx.zoo import TYPE_TASKS as MODEL_TYPES

BUILDERS = {"text": text_models, "generation": generation_models, "vision": vision_models,
            "audio": audio_models, "gliner": gliner_models}

#: (fixture module, fixture, the task it serves in the other tests)
FIXTURES = [
    ("text", "bert-embed-mean", "text-embedding"),
    ("text", "minilm", "text-embedding"),
    ("text", "distilbert-sst2", "text-classification"),
    ("text", "bert-nli", "zero-shot-classification"),
    ("text", "bert-rerank", "text-ranking"),
    ("text", "bert-ner", "token-classification"),
    ("text", "bert-qa", "question-answering"),
    ("text", "bert-mlm", "fill-mask"),
    ("generation", "gpt2", "text-generation"),
    ("generation", "qwen3", "text-generation"),
    ("generation", "t5", "text2text-generation"),
    ("generation", "marian", "translation"),
    ("vision", "vit", "image-classification"),
    ("vision", "detr", "object-detection"),
    ("vision", "clip", "zero-shot-image-classification"),
    ("vision", "segformer", "image-segmentation"),
    ("vision", "owlvit", "zero-shot-object-detection"),
    ("audio", "whisper", "automatic-speech-recognition"),
    ("audio", "wav2vec2-ctc", "automatic-speech-recognition"),
    ("audio", "wav2vec2-cls", "audio-classification"),
    ("gliner", "gliner-span", "zero-shot-entity-recognition"),
]


def folder(kind: str, name: str) -> Path:
    return BUILDERS[kind].build(name)


@pytest.mark.parametrize("kind,name,task", FIXTURES, ids=[f[1] for f in FIXTURES])
def test_pipeline_without_a_task_builds_the_fixtures_task(kind, name, task):
    path = folder(kind, name)
    pipe = tm.pipeline(model=str(path))
    assert pipe.task == task and type(pipe) is TASKS[task].cls
    assert infer_task(path) == task


def test_the_positional_and_keyword_forms_agree():
    path = folder("text", "distilbert-sst2")
    by_keyword, by_position = tm.pipeline(model=str(path)), tm.pipeline(None, path)
    assert by_keyword.task == by_position.task == "text-classification"
    labels = set(by_keyword.config["id2label"].values())
    for pipe in (by_keyword, by_position):  # a working pipeline on the repository given
        assert {p["label"] for p in pipe("I love this", top_k=None)["predictions"]} == labels
        assert pipe.repo.name == f"folder '{path}'"


def test_a_task_given_is_used_as_before():
    path = folder("text", "bert-nli")
    assert tm.pipeline("text-classification", str(path)).task == "text-classification"
    assert tm.pipeline("text-classification", model=str(path)).task == "text-classification"


def test_neither_task_nor_model():
    with pytest.raises(ValueError, match="needs a task or a model repository"):
        tm.pipeline()
    with pytest.raises(ValueError, match="needs a task or a model repository"):
        tm.pipeline(model=object())  # a model loaded by hand names no repository to read


def write(root: Path, config: dict | None, *files: str, readme: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")
    if readme is not None:
        (root / "README.md").write_text(f"---\nlibrary_name: transformers.js\npipeline_tag: {readme}\n---\n")
    return root


def test_an_unknown_architecture_lists_the_candidates(tmp_path):
    repo = write(tmp_path / "fancy", {"model_type": "bert", "architectures": ["BertForFancyThing"]})
    with pytest.raises(TaskInferenceError) as caught:
        infer_task(repo)
    message = str(caught.value)
    served = tuple(t for t in TASKS if t in zoo.family("bert").TASKS)
    assert isinstance(caught.value, ValueError) and caught.value.candidates == served
    assert f"folder '{repo}'" in message and "['BertForFancyThing']" in message and "'bert'" in message
    assert message.endswith("one of the candidate tasks: " + ", ".join(served))
    with pytest.raises(TaskInferenceError, match="BertForFancyThing"):
        tm.pipeline(model=str(repo))


def test_no_architectures_nor_telling_files(tmp_path):
    repo = write(tmp_path / "bare", {"model_type": "vit"})
    with pytest.raises(TaskInferenceError, match=r"no architectures, model_type 'vit'.*"
                                                 r"candidate tasks: image-classification, image-embedding$"):
        infer_task(repo)


def test_a_model_type_no_family_serves(tmp_path):
    repo = write(tmp_path / "foo", {"model_type": "foo", "architectures": ["FooForMaskedLM"]})
    with pytest.raises(zoo.UnknownFamilyError, match="model_type 'foo' is not supported"):
        infer_task(repo)


@pytest.mark.parametrize("config,name,task", [
    ({"id2label": {"0": "NEG", "1": "POS"}}, "sst2", "text-classification"),
    ({"label2id": {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}}, "mnli", "zero-shot-classification"),
    ({"id2label": {"0": "LABEL_0"}}, "score", "text-classification"),  # a score or a regression
    ({"id2label": {"0": "LABEL_0"}, "problem_type": "regression"}, "stsb", "text-classification"),
    ({"id2label": {"0": "LABEL_0"}, "sentence_transformers": {"activation_fn": "Sigmoid"}}, "ce", "text-ranking"),
    ({"id2label": {"0": "LABEL_0"}}, "ms-marco-MiniLM-L-6-v2", "text-ranking"),
    ({"id2label": {"0": "LABEL_0"}}, "bge-reranker-base", "text-ranking"),
    ({"id2label": {"0": "LABEL_0"}, "_name_or_path": "cross-encoder/stsb"}, "local", "text-ranking"),
    ({"id2label": {"0": "A", "1": "B"}}, "ms-marco-two-labels", "text-classification"),
])
def test_sequence_classifiers(tmp_path, config, name, task):
    repo = write(tmp_path / name, {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
                                   **config})
    assert infer_task(repo) == task


@pytest.mark.parametrize("config,files,task", [
    ({"model_type": "wav2vec2", "architectures": ["Wav2Vec2ForSequenceClassification"]}, (),
     "audio-classification"),
    ({"model_type": "wav2vec2", "architectures": ["Wav2Vec2ForCTC"]}, (), "automatic-speech-recognition"),
    ({"model_type": "dinov2", "architectures": ["Dinov2Model"]}, (), "image-embedding"),
    ({"model_type": "vit", "architectures": ["ViTForImageClassification"]}, (), "image-classification"),
    ({"model_type": "clip", "architectures": ["CLIPVisionModelWithProjection"]}, (), "image-embedding"),
    ({"model_type": "siglip", "architectures": ["SiglipModel"]}, (), "zero-shot-image-classification"),
    ({"model_type": "detr", "architectures": ["DetrForSegmentation"]}, (), "image-segmentation"),
    ({"model_type": "dpt", "architectures": ["DPTForDepthEstimation"]}, (), "depth-estimation"),
    ({"model_type": "dpt", "architectures": ["DPTForSemanticSegmentation"]}, (), "image-segmentation"),
    ({"model_type": "bart", "architectures": ["BartForConditionalGeneration"]}, (), "text2text-generation"),
    ({"model_type": "m2m_100", "architectures": ["M2M100ForConditionalGeneration"]}, (), "text2text-generation"),
    ({"model_type": "marian", "architectures": ["MarianMTModel"]}, (), "translation"),
    ({"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"]}, (), "text-embedding"),
    # no architectures: the model_type, then the files
    ({"model_type": "gliner"}, (), "zero-shot-entity-recognition"),
    (None, ("gliner_config.json",), "zero-shot-entity-recognition"),  # config.json as the gliner package saves
    ({"model_type": "depth_anything"}, (), "depth-estimation"),
    ({"model_type": "marian"}, (), "translation"),
    ({"model_type": "bert"}, ("modules.json", "1_Pooling/config.json"), "text-embedding"),
    ({"model_type": "t5"}, ("onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"), "text2text-generation"),
    ({"model_type": "isnet"}, (), "background-removal"),
])
def test_rules(tmp_path, config, files, task):
    assert infer_task(write(tmp_path / "repo", config, *files)) == task


def test_the_model_card_comes_first(tmp_path):
    nli = {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
           "id2label": {"0": "contradiction", "1": "neutral", "2": "entailment"}}
    assert infer_task(write(tmp_path / "plain", nli)) == "zero-shot-classification"
    assert infer_task(write(tmp_path / "card", nli, readme="text-classification")) == "text-classification"
    t5 = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}
    assert infer_task(write(tmp_path / "t5", t5, readme="translation")) == "translation"
    embed = {"model_type": "bert", "architectures": ["BertForMaskedLM"]}
    assert infer_task(write(tmp_path / "st", embed, readme="sentence-similarity")) == "text-embedding"  # an alias
    # a tag the family does not serve (or no task at all) is passed over
    assert infer_task(write(tmp_path / "seg", embed, readme="image-segmentation")) == "fill-mask"
    assert infer_task(write(tmp_path / "odd", embed, readme="mask-generation")) == "fill-mask"


def test_the_tables_name_tasks_of_the_task_table():
    named = {t for _, tasks in ARCHITECTURES for t in tasks} | set(MODEL_TYPES.values())
    assert named <= set(TASKS), named - set(TASKS)
    suffixes = [s for s, _ in ARCHITECTURES]
    for i, suffix in enumerate(suffixes):  # no suffix is hidden behind a shorter one it ends with
        assert not any(suffix.endswith(earlier) for earlier in suffixes[:i]), suffix
    assert ALIASES["feature-extraction"] == "text-embedding"
