"""``POST /v1/audio/transcriptions``: OpenAI's speech-to-text request on our speech recognition pipeline.

>>> srt([{"text": " Hello.", "timestamp": (0.0, 1.5)}])
'1\\n00:00:00,000 --> 00:00:01,500\\nHello.\\n'

Fields (multipart, as OpenAI's): ``file`` (wav, flac, ogg, mp3; others through ffmpeg), ``model``,
``language``, ``response_format`` (``json``, ``text``, ``verbose_json``, ``srt``, ``vtt``),
``timestamp_granularities[]`` (``segment``, ``word``: verbose_json's ``segments`` and ``words``), and
``temperature`` (0: the pipeline's beam search; above 0: sampling at that temperature). ``prompt`` is
refused (Whisper prompts are not served yet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response

from ..audio_input import load_audio
from .errors import BadRequest
from .fields import Body

__all__ = ["srt", "transcription_response", "vtt"]

FORMATS = ("json", "text", "verbose_json", "srt", "vtt")


def _clock(seconds: float, separator: str) -> str:
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def _cues(chunks: Sequence[Mapping[str, Any]], separator: str) -> list[tuple[str, str]]:
    cues = []
    for c in chunks:
        start, end = c["timestamp"]
        end = start if end is None else end
        cues.append((f"{_clock(start, separator)} --> {_clock(end, separator)}", c["text"].strip()))
    return cues


def srt(chunks: Sequence[Mapping[str, Any]]) -> str:
    """SubRip subtitles of segment chunks."""
    return "\n".join(f"{i}\n{span}\n{text}\n" for i, (span, text) in enumerate(_cues(chunks, ","), 1))


def vtt(chunks: Sequence[Mapping[str, Any]]) -> str:
    """WebVTT subtitles of segment chunks."""
    return "WEBVTT\n\n" + "\n".join(f"{span}\n{text}\n" for span, text in _cues(chunks, "."))


async def transcription_response(server: Any, served: Any, audio: bytes, fields: Mapping[str, str],
                                 granularities: Sequence[Any]) -> Response:
    """The answer to one transcription request (``server``: the app's ``_Server``, for its time limit)."""
    body = Body(dict(fields))
    body.refuse("prompt", why="Whisper prompts (prompt_ids) are not served yet")
    response_format = body.string("response_format", "json", choices=FORMATS)
    language = body.string("language")
    try:
        temperature = float(fields.get("temperature", "0") or 0)
    except ValueError:
        raise BadRequest("temperature must be a number", param="temperature") from None
    kinds = [str(g) for g in granularities]
    unknown = [k for k in kinds if k not in ("segment", "word")]
    if unknown:
        raise BadRequest(f"timestamp_granularities[] are 'segment' and 'word', not {unknown}",
                         param="timestamp_granularities[]")
    if kinds and response_format != "verbose_json":
        raise BadRequest("timestamp_granularities[] need response_format=verbose_json",
                         param="timestamp_granularities[]")
    rate = await served.sampling_rate()
    wave = load_audio(audio, rate, served.task, 0)  # a named error for an empty, corrupt or unknown file
    options: dict[str, Any] = {}
    if language:
        options["language"] = language
    if temperature > 0:
        options.update(do_sample=True, temperature=temperature, num_beams=1)
    segments_wanted = response_format in ("srt", "vtt") or (response_format == "verbose_json"
                                                            and (not kinds or "segment" in kinds))
    result = await server.run(served, wave, **options, **({"return_timestamps": True} if segments_wanted else {}))
    text = result["text"]
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "json":
        return JSONResponse({"text": text})
    if response_format in ("srt", "vtt"):
        subtitles = (srt if response_format == "srt" else vtt)(result["chunks"])
        return PlainTextResponse(subtitles, media_type="text/vtt" if response_format == "vtt" else "text/plain")
    answer: dict[str, Any] = {"task": "transcribe", "language": language or "", "duration": len(wave) / rate,
                              "text": text}
    if segments_wanted:
        answer["segments"] = [{"id": i, "start": c["timestamp"][0], "end": c["timestamp"][1], "text": c["text"]}
                              for i, c in enumerate(result["chunks"])]
    if "word" in kinds:
        words = await server.run(served, wave, **options, return_timestamps="word")
        answer["words"] = [{"word": c["text"].strip(), "start": c["timestamp"][0], "end": c["timestamp"][1]}
                           for c in words["chunks"]]
    return JSONResponse(answer)
