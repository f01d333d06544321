"""Speech recognition with Moonshine: the encoder on raw audio, then the decoder generates the text.

>>> from tests.fixtures.audio_models import build
>>> from tests.fixtures.speech import speech
>>> from transmuter_mlx.pipelines.audio_speech import SpeechToText
>>> asr = SpeechToText(build("moonshine"))                 # a tiny random Moonshine
>>> wave, rate = speech("beckett")
>>> isinstance(asr(wave[:rate], num_beams=1)["text"], str)
True

:class:`MoonshineRecognizer` decodes as transformers' ``automatic-speech-recognition`` pipeline calls
``generate``: the pipeline's defaults (``max_new_tokens=256``, ``num_beams=5``) under the values of the
repository's generation_config.json that differ from transformers' global defaults (so Moonshine's
``max_length`` wins over the 256 new tokens), then the call's generation options. One waveform per
call of the encoder: its group norm sees the whole input, so padding would change the result.
``chunk_length_s`` cuts long audio into windows as the pipeline does for a seq2seq model, and joins the
tokens of the windows (the pipeline keeps no strides for seq2seq models: the overlaps are decoded twice).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..generation.config import GenerationConfig
from ..generation.loop import generate
from ..generation.seq2seq import EncoderDecoderSession
from ..processors.audio import AudioProcessor
from ..tokenizer import Tokenizer
from .audio_ctc import Window, check_wave, stream_windows, window_sizes, windows

__all__ = ["AudioEncoderDecoderSession", "MoonshineRecognizer", "pipeline_generation_config"]

#: the generation defaults of transformers' AutomaticSpeechRecognitionPipeline (``_default_generation_config``)
ASR_GENERATION_DEFAULTS: Mapping[str, Any] = {"max_new_tokens": 256, "num_beams": 5}


def pipeline_generation_config(repo: Any, defaults: Mapping[str, Any] = ASR_GENERATION_DEFAULTS,
                               pad_token_id: int | None = None) -> GenerationConfig:
    """The GenerationConfig a transformers pipeline builds: ``defaults`` (the pipeline's), each field the
    model's generation config sets to other than the global default taking the model's value; then, when
    ``max_new_tokens`` is still the pipeline's and the model sets a ``max_length``, that ``max_length``.
    The model's generation config is generation_config.json as ``from_pretrained`` loads it (whatever
    its ``_from_model_config``), else the generation keys of config.json; a missing pad token is
    ``pad_token_id`` (the tokenizer's)."""
    values = repo.read_json("generation_config.json")
    try:
        model = GenerationConfig.from_dict(values) if values is not None else GenerationConfig.from_model_config(
            repo.config)
    except ValueError as error:
        raise ValueError(f"generation_config.json of {repo.name}: {error}") from error
    base, chosen = GenerationConfig(), GenerationConfig(**defaults)
    changed = {f.name: getattr(model, f.name) for f in dataclasses.fields(GenerationConfig)
               if getattr(chosen, f.name) == getattr(base, f.name) and getattr(model, f.name) != getattr(base, f.name)}
    config = chosen.update(**changed)
    if (defaults.get("max_new_tokens") is not None and config.max_new_tokens == defaults["max_new_tokens"]
            and config.max_length != base.max_length):
        config = config.update(max_new_tokens=None)
    if config.pad_token_id is None and pad_token_id is not None:
        config = config.update(pad_token_id=pad_token_id)
    return config


class AudioEncoderDecoderSession(EncoderDecoderSession):
    """An :class:`EncoderDecoderSession` whose encoder reads samples. The samples' ``attention_mask`` (all
    ones when the feature extractor gives none: one unpadded clip per call) goes to the encoder and, as
    ``encoder_attention_mask``, to the decoder: Moonshine's decoder takes the mask of the samples and
    downsamples it to the encoder's frames itself (every 384th sample), as transformers'
    ``MoonshineDecoder`` does."""

    def encode(self, feeds: Mapping[str, Any]) -> None:
        declared = {i.name: i.dtype for i in self.encoder.inputs}
        feeds = dict(feeds)
        if "attention_mask" not in feeds:
            feeds["attention_mask"] = np.ones(np.shape(feeds["input_values"]), np.int64)
        # each feed as the graph declares it (the extractor's int32 mask, an fp16 file's samples)
        super().encode({n: np.asarray(v).astype(declared[n], copy=False) if declared.get(n) is not None else v
                        for n, v in feeds.items()})
        self.input_padding = [0] * len(self.input_padding)  # the frames of an unpadded clip are all its own


class MoonshineRecognizer:
    """The ``automatic-speech-recognition`` recognizer of Moonshine (``SPEECH_RECOGNIZER = "moonshine"``).

    Built from a ``SpeechToText`` pipe: its ``encoder_model`` and ``decoder_model_merged`` (or the split
    decoders; or an :class:`EncoderDecoderSession` given as ``model=``), the feature extractor of
    ``preprocessor_config.json`` (or ``featurizer=``) and ``tokenizer.json`` (or ``tokenizer=``).
    ``recognize(waves, options)`` gives ``{"text"}`` per waveform; the options are the generation
    options of transformers (``max_new_tokens``, ``num_beams``, ...) and ``chunk_length_s``/
    ``stride_length_s``; timestamps are not served, as in transformers. ``stream(audio, options)`` gives
    the text in pieces as windows are decoded.
    """

    def __init__(self, pipe: Any) -> None:
        o = pipe.options
        self.task: str = pipe.task
        self.name: str = pipe.repo.name
        self.session = o.model if isinstance(o.model, EncoderDecoderSession) else self._load_session(pipe)
        self.processor = o.featurizer if o.featurizer is not None else AudioProcessor.from_repo(pipe.repo, self.task)
        self.tokenizer: Tokenizer = o.tokenizer if o.tokenizer is not None else Tokenizer.from_repo(pipe.repo)
        self.generation = pipeline_generation_config(pipe.repo, pad_token_id=self.tokenizer.pad_token_id)
        self.sampling_rate: int = int(self.processor.sampling_rate)
        self.max_positions: int | None = pipe.args.positions
        self.min_samples: int = int(pipe.args.min_samples)

    @staticmethod
    def _load_session(pipe: Any) -> AudioEncoderDecoderSession:
        decoders = [pipe.load_file("decoder")]
        if "use_cache_branch" not in {i.name for i in decoders[0].inputs}:
            decoders.append(pipe.load_file("decoder_with_past"))
        return AudioEncoderDecoderSession(pipe.load_file("encoder"), *decoders, heads=pipe.args.num_key_value_heads,
                                          head_dim=pipe.args.head_dim)

    def config_for(self, options: Mapping[str, Any]) -> GenerationConfig:
        """The call's GenerationConfig (the pipeline's, then the options given); unserved options are errors."""
        stamps = options.get("return_timestamps")
        if stamps is not None and stamps is not False:
            raise ValueError(f"{self.task}: {self.name} (Moonshine) gives no timestamps, as in transformers; "
                             f"return_timestamps must be None or False, got {stamps!r}")
        for name in ("language", "task", "return_language"):
            if options.get(name) is not None and options.get(name) is not False:
                raise ValueError(f"{self.task}: {self.name} (Moonshine) has no {name!r} option (it is Whisper's)")
        given = {k: v for k, v in options.items() if k in GenerationConfig.fields() and v is not None}
        try:
            config = self.generation.update(**given)
        except ValueError as error:
            raise ValueError(f"{self.task}: {error}") from error
        if config.num_return_sequences != 1:
            raise ValueError(f"{self.task}: one text per input: num_return_sequences must be 1, got "
                             f"{config.num_return_sequences}")
        if config.start_id is None:
            raise ValueError(f"{self.task}: {self.name} has no decoder_start_token_id (nor bos_token_id) in "
                             "generation_config.json or config.json")
        return config

    def recognize(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One ``{"text"}`` per waveform (float32 mono at ``sampling_rate``); see the class docstring."""
        config = self.config_for(options)
        sizes = None
        if options.get("chunk_length_s"):  # no inputs_to_logits_ratio: the pipeline aligns windows to 1 sample
            sizes = window_sizes(options["chunk_length_s"], options.get("stride_length_s"), self.sampling_rate, 1,
                                 self.task)
        waves = [check_wave(w, i, self.task, self.min_samples, self.sampling_rate) for i, w in enumerate(waves)]
        return [self.transcribe(w, i, config, sizes) for i, w in enumerate(waves)]

    def transcribe(self, wave: np.ndarray, index: int, config: GenerationConfig,
                   sizes: tuple[int, int, int] | None) -> dict[str, Any]:
        """One waveform: the tokens of each window (decoder start token included, as ``generate`` returns
        them) joined, then decoded without special tokens, as the pipeline decodes them."""
        tokens: list[int] = []
        for piece in [Window(wave)] if sizes is None else windows(wave, *sizes):
            tokens += self.window_ids(self.checked(piece, index), config)
        return {"text": self.tokenizer.decode(tokens, skip_special_tokens=True)}

    def checked(self, piece: Window, index: int) -> np.ndarray:
        """A window's samples, or a ValueError when they are fewer than the encoder's convolutions take."""
        if piece.samples.shape[0] < self.min_samples:
            raise ValueError(f"{self.task}: input {index}: a window of {piece.samples.shape[0]} samples is "
                             f"shorter than the model's {self.min_samples}: choose a longer chunk_length_s")
        return piece.samples

    def stream(self, audio: np.ndarray | Iterable[np.ndarray], options: Mapping[str, Any]) -> Iterator[str]:
        """The text of one input in pieces as its ``chunk_length_s`` windows are decoded (without windows: the
        whole text once the audio has ended); the pieces join to the text of a plain call. ``audio`` is a
        waveform or a stream's checked blocks (windows are cut as the blocks arrive). A piece never ends in
        the middle of a character (bytes of a token still to come); with ``clean_up_tokenization_spaces`` the
        text comes at the end."""
        config = self.config_for(options)
        sizes = None
        if options.get("chunk_length_s"):
            sizes = window_sizes(options["chunk_length_s"], options.get("stride_length_s"), self.sampling_rate, 1,
                                 self.task)
        return self._stream(audio, config, sizes)

    def _stream(self, audio: np.ndarray | Iterable[np.ndarray], config: GenerationConfig,
                sizes: tuple[int, int, int] | None) -> Iterator[str]:
        tokens: list[int] = []
        emitted = ""
        for piece in stream_windows(audio, sizes, self.task, self.sampling_rate, self.min_samples):
            tokens += self.window_ids(self.checked(piece, 0), config)
            if sizes is None or self.tokenizer.clean_up_tokenization_spaces:
                continue
            text = self.tokenizer.decode(tokens, skip_special_tokens=True).rstrip("\ufffd")
            if len(text) > len(emitted) and text.startswith(emitted):
                yield text[len(emitted):]
                emitted = text
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.startswith(emitted):  # later windows only add tokens: the texts so far are prefixes
            raise RuntimeError(f"{self.task}: streamed text {emitted!r} is not the start of the text {text!r}")
        if len(text) > len(emitted):
            yield text[len(emitted):]

    def window_ids(self, samples: np.ndarray, config: GenerationConfig) -> list[int]:
        """The tokens ``generate`` gives for one window: the decoder start token, then the new tokens."""
        self.session.encode({k: v[None] for k, v in self.processor.features(samples).items()})
        out = generate(self.session, [[config.start_id]], config, decode=self.tokenizer.decode,
                       max_position_embeddings=self.max_positions)
        return [config.start_id, *out.sequences[0]]
