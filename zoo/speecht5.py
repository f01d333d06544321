"""SpeechT5 text-to-speech: an encoder, a decoder run step by step on mel frames, a postnet and vocoder.

>>> from transmuter_mlx.zoo import speecht5
>>> args = speecht5.ModelArgs.from_dict({"model_type": "speecht5", "num_mel_bins": 80, "reduction_factor": 2})
>>> args.speaker_embedding_dim, args.length_limits(10)
(512, (0, 100))

optimum's text-to-audio export: ``encoder_model`` (``input_ids`` -> ``encoder_outputs``,
``encoder_attention_mask``), the decoder as ``decoder_model_merged`` or ``decoder_model`` +
``decoder_with_past_model`` (``output_sequence``, the mel frames so far, and ``speaker_embeddings`` in;
``output_sequence_out``, ``spectrum`` (``reduction_factor`` frames) and ``prob`` (their stop probabilities,
after the sigmoid) out, with the cache), and ``decoder_postnet_and_vocoder`` (the frames -> ``waveform``).
The decoder's prenet holds SpeechT5's dropout, on at inference (random operators): the pipeline seeds it per
input, or keeps every value (``noise=False``). The stop rule is transformers' ``_generate_speech`` (see
:class:`ModelArgs`). Text is tokenized with the repository's tokenizer.json (a character SentencePiece model
with ``</s>`` at the end).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import BaseArgs

__all__ = ["DEFAULT_VARIANT", "FILES", "SPEECH_SYNTHESIZER", "TASKS", "ModelArgs"]

FILES = {
    "encoder": ("encoder_model",),
    "decoder": ("decoder_model_merged", "decoder_model"),
    "decoder_with_past": ("decoder_with_past_model",),
    "vocoder": ("decoder_postnet_and_vocoder",),
}
TASKS = frozenset({"text-to-speech"})
DEFAULT_VARIANT = None
SPEECH_SYNTHESIZER = "speecht5"  # the key of pipelines.audio_tts.SYNTHESIZERS

# transformers' generate_speech defaults: stop once the stop probabilities of a step sum to THRESHOLD, after
# MIN_LEN_RATIO and before MAX_LEN_RATIO steps per input token (divided by the reduction factor)
THRESHOLD = 0.5
MIN_LEN_RATIO = 0.0
MAX_LEN_RATIO = 20.0


@dataclass
class ModelArgs(BaseArgs):
    """SpeechT5's config.json: the mel frames (``num_mel_bins``, ``reduction_factor`` per step) and the size of
    a speaker embedding (an x-vector: 512)."""

    num_mel_bins: int = 80
    reduction_factor: int = 2
    speaker_embedding_dim: int = 512
    max_text_positions: int = 450
    hidden_size: int = 768
    decoder_attention_heads: int = 12
    # the vocoder's rate: not in SpeechT5's config.json; 16 kHz as SpeechT5HifiGan's default
    sampling_rate: int = 16000

    def length_limits(self, encoder_length: int) -> tuple[int, int]:
        """(minlen, maxlen): the least and the most decoder steps for an encoder output of that length."""
        return (int(encoder_length * MIN_LEN_RATIO / self.reduction_factor),
                int(encoder_length * MAX_LEN_RATIO / self.reduction_factor))
