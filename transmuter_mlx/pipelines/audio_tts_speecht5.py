"""SpeechT5's synthesizer: the encoder once, the decoder step by step on mel frames, then the vocoder.

>>> from tests.fixtures.tts_models import build
>>> from transmuter_mlx.pipelines.audio_tts import TextToSpeech
>>> speak = TextToSpeech(build("speecht5"), speaker_embedding=[0.1] * 8)   # the fixture's embeddings: 8 values
>>> speak("hello world", noise=False)["audio"].ndim
1

The loop is transformers' ``_generate_speech``: the frames start with one frame of zeros; each step runs the
decoder on all frames so far (its prenet reads them all; the cache holds the layers' past) and gives
``reduction_factor`` new frames (``spectrum``) and their stop probabilities (``prob``); the last new frame
joins the frames. It stops after step ``minlen`` once the probabilities of a step sum to 0.5, or at step
``maxlen`` (``ModelArgs.length_limits``: 0 and 20 steps per input token, over the reduction factor). The
spectra of all steps, in order, go through ``decoder_postnet_and_vocoder`` into the waveform.

A repository without ``decoder_postnet_and_vocoder.onnx`` (transformers.js exports keep the vocoder apart)
takes the ``onnx/model.onnx`` of the ``vocoder`` option, by default :data:`DEFAULT_VOCODER`.

The decoder's dropout is random: each step draws from a seed taken from the input's seed, so that one seed
gives one audio; ``noise=False`` keeps every value.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..converters.model import load
from ..hub import open_repo
from ..tokenizer import Tokenizer
from ..zoo.speecht5 import THRESHOLD
from .audio_tts import SpeechInput, declared, to_numpy

__all__ = ["SpeechT5Synthesizer"]

PAST, PRESENT = "past_key_values.", "present."
#: the postnet and vocoder of a repository without them (transformers.js's SpeechT5 exports)
DEFAULT_VOCODER = "Xenova/speecht5_hifigan"


class SpeechT5Synthesizer:
    """SpeechT5 (see the module docstring); its ONNX files are the family's ``FILES``."""

    def __init__(self, pipe: Any) -> None:
        self.task, self.args, name = pipe.task, pipe.args, pipe.repo.name
        missing = [role for role in ("encoder", "decoder") if not pipe.has_file(role)]
        if missing:
            stems = [pipe.family.FILES[r][0] for r in missing]
            raise ValueError(f"{self.task}: {name} has no {', '.join(s + '.onnx' for s in stems)}: SpeechT5 takes "
                             "optimum's text-to-audio export (encoder, decoder, decoder_postnet_and_vocoder)")
        self.encoder = pipe.load_file("encoder")
        self.decoder = pipe.load_file("decoder")
        inputs = {i.name for i in self.decoder.inputs}
        self.merged = "use_cache_branch" in inputs
        self.with_past = None
        if not self.merged:
            if not pipe.has_file("decoder_with_past"):
                raise ValueError(f"{self.task}: {name} has decoder_model.onnx but no decoder_with_past_model.onnx")
            self.with_past = pipe.load_file("decoder_with_past")
        self.vocoder = self._vocoder(pipe)
        self.tokenizer: Tokenizer = pipe.options.tokenizer or Tokenizer.from_repo(pipe.repo)
        features = pipe.repo.read_json("preprocessor_config.json") or {}
        self.sampling_rate = int(features.get("sampling_rate") or self.args.sampling_rate)

    def _vocoder(self, pipe: Any) -> Any:
        """The repository's decoder_postnet_and_vocoder.onnx; else the ``vocoder`` option (a Model, or the
        ``onnx/model.onnx`` of a repository or folder), by default DEFAULT_VOCODER."""
        source = pipe.vocoder_source
        if source is None and pipe.has_file("vocoder"):
            return pipe.load_file("vocoder")
        if source is not None and not isinstance(source, str | os.PathLike | tuple):
            return source  # a Model (or Model-like) of its own
        o = pipe.options
        repo = open_repo(source or DEFAULT_VOCODER, revision=o.revision, cache_dir=o.cache_dir, offline=o.offline)
        if not repo.onnx_variants("model"):
            raise ValueError(f"{self.task}: the vocoder {repo.name} has no onnx/model.onnx")
        return load(repo.onnx_path("model", variant=o.variant), backend=o.backend, dtype=o.dtype, device=o.device)

    # ------------------------------------------------------------------ inputs
    def ids(self, index: int, text: str) -> np.ndarray:
        ids = self.tokenizer.encode_rows([text], truncation=False)[0].input_ids
        if len(ids) > self.args.max_text_positions:
            raise ValueError(f"{self.task}: input {index}: the text is {len(ids)} tokens long; the model reads at "
                             f"most {self.args.max_text_positions} (max_text_positions)")
        return ids.astype(np.int64)

    def speaker_embedding(self, value: Any, where: str) -> np.ndarray:
        size = self.args.speaker_embedding_dim
        try:
            array = np.asarray(value, np.float32)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.task}: {where} is not an array of numbers ({e})") from None
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]  # transformers' (1, dim)
        if array.shape != (size,):
            raise ValueError(f"{self.task}: {where} has shape {list(np.shape(value))}; the model takes "
                             f"{size} values (speaker_embedding_dim)")
        if not np.isfinite(array).all():
            raise ValueError(f"{self.task}: {where} holds NaN or infinite values")
        return array

    # ------------------------------------------------------------------ the loop
    def synthesize(self, item: SpeechInput, noise: bool) -> np.ndarray:
        if item.speaker_embedding is None:
            raise ValueError(f"{self.task}: input {item.index}: SpeechT5 needs a speaker embedding of "
                             f"{self.args.speaker_embedding_dim} values: the speaker_embedding option, or the "
                             "input's speaker_embedding")
        encoded = self.encoder({"input_ids": item.ids[None]})
        hidden = encoded["encoder_outputs"]
        mask = encoded.get("encoder_attention_mask")
        if mask is None:
            mask = np.ones(item.ids[None].shape, np.int64)
        minlen, maxlen = self.args.length_limits(int(hidden.shape[1]))
        frames = np.zeros((1, 1, self.args.num_mel_bins), np.float32)
        speaker = item.speaker_embedding[None]
        draws = np.random.default_rng(item.seed) if noise else None
        past: dict[str, Any] = {}
        spectra = []
        step = 0
        while True:
            step += 1
            model = self.decoder if step == 1 or self.merged else self.with_past
            feeds = {"output_sequence": frames, "speaker_embeddings": speaker, "encoder_hidden_states": hidden,
                     "encoder_attention_mask": mask, **(past if step > 1 else self._empty_past(model))}
            if self.merged:
                feeds["use_cache_branch"] = np.array([step > 1])
            seed = int(draws.integers(0, 2**63)) if draws is not None else None
            # every step is one new shape (the frames and the cache grow): a trace would rarely pay for itself
            out = model(declared(model, feeds), seed=seed, noise=noise, compile=False)
            spectra.append(to_numpy(model, out["spectrum"]).reshape(-1, self.args.num_mel_bins))
            prob = to_numpy(model, out["prob"])
            frames = to_numpy(model, out["output_sequence_out"]).astype(np.float32)
            # the cross-attention cache is the first step's: a merged decoder's cached branch gives placeholders
            past.update({PAST + n[len(PRESENT):]: v for n, v in out.items()
                         if n.startswith(PRESENT) and (step == 1 or ".encoder." not in n)})
            if step >= minlen and (step >= maxlen or float(prob.sum()) >= THRESHOLD):
                break
        spectrogram = np.concatenate(spectra).astype(np.float32)
        waveform = self.vocoder(declared(self.vocoder, {"spectrogram": spectrogram}))["waveform"]
        return to_numpy(self.vocoder, waveform).reshape(-1).astype(np.float32)

    def _empty_past(self, model: Any) -> dict[str, np.ndarray]:
        """The cache inputs of a first step of the merged decoder: empty (its first branch reads none)."""
        feeds = {}
        for info in model.inputs:
            if not info.name.startswith(PAST):
                continue
            shape = info.shape or (1, self.args.decoder_attention_heads, 0, 1)
            heads = shape[1] if isinstance(shape[1], int) else self.args.decoder_attention_heads
            size = shape[3] if isinstance(shape[3], int) else self.args.hidden_size // self.args.decoder_attention_heads
            feeds[info.name] = np.zeros((1, heads, 0, size), np.float32)
        return feeds
