"""References of the audio tasks, and the normal form in which their results are compared.

>>> transcript_items({"text": " Hi.", "chunks": [{"text": " Hi.", "timestamp": (0.0, 0.5)}]})
[((' Hi.',), 0.0), ((' Hi.',), (0.0, 0.5))]
>>> transcript_items({"text": "A", "chunks": [{"text": "A", "timestamp": (0.0, 0.5)}], "timestamp_tolerance": 1e-6})[1]
(('A',), (0.0, 0.5), 1e-06)

fp32: transformers 4.57.6 pipelines on the fixture's PyTorch weights (``model.safetensors`` beside the
ONNX files), on the same samples: both sides read the clip's WAV file with soundfile (transformers'
pipeline reads a path only through ffmpeg) and the reference gets ``{"raw", "sampling_rate"}``. Text to
speech has no pipeline option for deterministic noise: its reference is the PyTorch model called as
the ``text-to-audio`` pipeline calls it, with VITS's noise scales at 0 (``noise=False``). A reference is
computed once per task, fixture, inputs and options (both backends compare with it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .text_reference import Items
from .vision_reference import once

__all__ = ["audio_classification", "classification_items", "read_clip", "speech", "speech_items",
           "speech_recognition", "transcript_items", "zero_shot_audio_classification"]

#: our speech-recognition options that transformers takes in ``generate_kwargs``
GENERATE_OPTIONS = ("language", "task", "max_new_tokens", "num_beams")


def read_clip(path: str) -> dict:
    """A clip's samples as transformers' pipeline takes them (the file read with soundfile, float32)."""
    import soundfile

    samples, rate = soundfile.read(path, dtype="float32", always_2d=False)
    return {"raw": samples, "sampling_rate": rate}


def transcript_items(result: dict) -> Items:
    """The text (a key: it must be identical), then each chunk's text (key) and its (start, end) in seconds,
    with the reference's tolerance of its timestamps (``timestamp_tolerance``) where it gives one."""
    items: Items = [((result["text"],), 0.0)]
    own = (result["timestamp_tolerance"],) if "timestamp_tolerance" in result else ()
    for chunk in result.get("chunks", []):
        start, end = chunk["timestamp"]
        items.append(((chunk["text"],), (_seconds(start), _seconds(end)), *own))
    return items


def _seconds(value: Any) -> float:
    return float("nan") if value is None else float(value)


def classification_items(result: dict) -> Items:
    return [((p["label"],), p["score"]) for p in result["predictions"]]


def speech_items(result: dict) -> Items:
    """The sampling rate and length (keys), then the samples."""
    audio = np.asarray(result["audio"], np.float64)
    return [((int(result["sampling_rate"]), audio.size), audio)]


def _model(folder: Path, task: str) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.pipeline(task, model=str(folder), device="cpu")


@once
def speech_recognition(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' automatic-speech-recognition pipeline, our options as its arguments. Timestamps other
    than Whisper's segments (words, CTC characters) are sums of the same time steps on both sides: they
    must be equal (1e-6 s); segment times may be one step (0.02 s) apart, as the spec allows."""
    pipe = _model(folder, "automatic-speech-recognition")
    generate = {k: options[k] for k in GENERATE_OPTIONS if k in options}
    extra = {k: options[k] for k in ("return_timestamps", "chunk_length_s", "stride_length_s") if k in options}
    if "batch_size" in options:
        extra["batch_size"] = options["batch_size"]
    results = []
    for x in inputs:
        out = pipe(read_clip(x), **extra, **({"generate_kwargs": generate} if generate else {}))
        result = {"text": out["text"]}
        if "chunks" in out:
            result["chunks"] = [{"text": c["text"], "timestamp": tuple(c["timestamp"])} for c in out["chunks"]]
            if options.get("return_timestamps") is not True:
                result["timestamp_tolerance"] = 1e-6
        results.append(result)
    return results


@once
def audio_classification(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    pipe = _model(folder, "audio-classification")
    top_k = options.get("top_k", 5)
    top_k = pipe.model.config.num_labels if top_k is None else top_k
    return [{"predictions": [{"label": p["label"], "score": float(p["score"])}
                             for p in pipe(read_clip(x), top_k=top_k)]} for x in inputs]


@once
def zero_shot_audio_classification(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    pipe = _model(folder, "zero-shot-audio-classification")
    extra = {k: options[k] for k in ("hypothesis_template",) if k in options}
    return [{"predictions": [{"label": p["label"], "score": float(p["score"])}
                             for p in pipe(read_clip(x)["raw"], candidate_labels=options["labels"], **extra)]}
            for x in inputs]


@once
def speech(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """The PyTorch model as the text-to-audio pipeline runs it, deterministic (``noise=False``): VITS with
    both noise scales at 0; SpeechT5's ``generate_speech`` with its vocoder, its prenet dropout keeping every
    value (scaled by 1 / (1 - p), as dropout does), and the speaker embedding of the options."""
    import torch
    import transformers

    config = json.loads((folder / "config.json").read_text())
    if config["model_type"] == "vits":
        model = transformers.VitsModel.from_pretrained(folder).eval()
        model.noise_scale = model.noise_scale_duration = 0.0  # copied from config.json when built
        tokenizer = transformers.VitsTokenizer.from_pretrained(folder)
        rate = model.config.sampling_rate
        with torch.no_grad():
            waves = [model(**tokenizer(t, return_tensors="pt")).waveform[0].numpy() for t in inputs]
    else:
        model = transformers.SpeechT5ForTextToSpeech.from_pretrained(folder).eval()
        vocoder = transformers.SpeechT5HifiGan.from_pretrained(folder / "vocoder").eval()
        model.speecht5.decoder.prenet._consistent_dropout = lambda x, p: x * (1 / (1 - p))
        stop = folder / "stop.json"  # a fixture whose stop head was changed in its ONNX files (tts_models)
        if stop.is_file():
            with torch.no_grad():
                model.speech_decoder_postnet.prob_out.weight.neg_()
                model.speech_decoder_postnet.prob_out.bias.fill_(json.loads(stop.read_text())["bias"])
        tokenizer = transformers.SpeechT5Tokenizer.from_pretrained(folder)
        speaker = torch.tensor(np.asarray(options["speaker_embedding"], np.float32))[None]
        rate = vocoder.config.sampling_rate
        with torch.no_grad():
            waves = [model.generate_speech(tokenizer(t, return_tensors="pt").input_ids, speaker,
                                           vocoder=vocoder).numpy() for t in inputs]
    return [{"audio": w, "sampling_rate": rate} for w in waves]
