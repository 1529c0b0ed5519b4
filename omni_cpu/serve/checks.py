"""What admission judges in a speech request's fields, whichever door it came by.

The plain speech request, each item of a batch (with the batch's shared fields),
each WebSocket session's config and the text of each utterance, and an uploaded
voice all pass the same checks: the URL policy, the reference audio in every field
omni_cpu.serve.references names (the same rules as `run --ref-audio`: an audio MIME
type, decoded within bounds), input length.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from omni_cpu.errors import InputError
from omni_cpu.profile.sampling import RULES, SEED_RULE
from omni_cpu.serve.asgi import BadBody
from omni_cpu.serve.fetch import UrlPolicy, as_data_url, fetch, split_url
from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.references import audio_values, set_value

URL_REFUSED = (
    "this server does not fetch ref_audio URLs; send the audio as base64 "
    "(data:audio/wav;base64,...) or a file:// path under its --ref-audio-dir, "
    "or start omni-cpu serve with --allow-ref-audio-urls"
)


def input_length(fields: dict[str, Any]) -> int | None:
    """Characters in the request's `input`, or None when the body is not what we can judge."""
    text = fields.get("input")
    return len(text) if isinstance(text, str) else None


def _scheme(item: str) -> str:
    """The URL's scheme, lower-cased ("" for none); read by hand, as a malformed URL has one."""
    head, colon, _ = item.strip().partition(":")
    return head.lower() if colon and head.isascii() and head.isalpha() else ""


def ref_audio_is_url(fields: dict[str, Any]) -> str | None:
    """The first reference audio field that asks the server to fetch over http(s), or None."""
    for name, item in audio_values(fields):
        if _scheme(item) in ("http", "https"):
            return name
    return None


def audio_bytes_problem(source: str, data: bytes) -> str | None:
    """Why these audio file bytes cannot be cloned from (run's rules), or None."""
    from omni_cpu.speech.ref_audio import decode_reference_audio

    try:
        decode_reference_audio(source, data)
    except InputError as error:
        return error.one_line()
    return None


def _data_url_problem(field: str, item: str) -> str | None:
    header, comma, payload = item.strip().partition(",")
    if not comma or not header.lower().endswith(";base64"):
        return f"{field} data: URLs must be base64 (send data:audio/wav;base64,<the file's bytes>)"
    mime = header[len("data:") :].lower().partition(";")[0].strip()
    if not mime.startswith("audio/"):
        return (
            f"{field} is a data: URL of {mime or 'no type'}, not audio "
            "(send data:audio/wav;base64,<the file's bytes>)"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return f"{field} is not valid base64 (send data:audio/wav;base64,<the file's bytes>)"
    return audio_bytes_problem(f"in {field}", data)


def _file_url_problem(field: str, item: str, ref_audio_dir: str) -> str | None:
    from omni_cpu.speech.ref_audio import read_reference_audio

    if not ref_audio_dir:
        return (
            f"this server reads no file:// {field}; send the audio as base64 "
            "(data:audio/wav;base64,...), or start omni-cpu serve with --ref-audio-dir"
        )
    try:
        parts = urlsplit(item.strip())
    except ValueError:
        return f"{field} is not a file:// URL this server can read"
    if parts.netloc not in ("", "localhost"):
        return f"{field} {item!r} names another host; file:// paths are read on this server"
    base = os.path.realpath(ref_audio_dir)
    path = os.path.realpath(unquote(parts.path))
    if os.path.commonpath([base, path]) != base:
        return f"{field} {item!r} is outside this server's --ref-audio-dir"
    if not os.path.isfile(path):
        return f"{field} {item!r} does not exist under this server's --ref-audio-dir"
    try:
        read_reference_audio(Path(path), source=item)
    except InputError as error:
        return error.one_line()
    return None


def ref_audio_problem(fields: dict[str, Any], ref_audio_dir: str = "") -> tuple[str, str] | None:
    """(field, why) for the first `data:` or `file:` reference audio that cannot be cloned from.

    Every field of omni_cpu.serve.references is judged. URLs (http/https) are judged by
    `judge_fields`; anything else is vLLM-Omni's to refuse.
    """
    for field, item in audio_values(fields):
        scheme = _scheme(item)
        if scheme == "data":
            problem = _data_url_problem(field, item)
        elif scheme == "file":
            problem = _file_url_problem(field, item, ref_audio_dir)
        else:
            continue
        if problem is not None:
            return field, problem
    return None


# OpenAI's formats that vLLM-Omni 0.30.0 does not encode, and why (its encoder is
# libsndfile's, which has no AAC).
UNENCODED_FORMATS = {
    "aac": "AAC is not among the formats this server encodes (libsndfile has no AAC encoder)",
}
ENCODED_FORMATS = "wav, pcm, flac, mp3, opus"


def judge_format(fields: dict[str, Any], where: str = "") -> None:
    """Refuse (BadBody) a response_format OpenAI knows but this server cannot encode."""
    asked = fields.get("response_format")
    why = UNENCODED_FORMATS.get(asked) if isinstance(asked, str) else None
    if why is not None:
        raise BadBody(
            400,
            f"response_format {asked}: {why}; ask for one of {ENCODED_FORMATS} (mp3 or opus "
            "for a compressed stream)",
            f"{where}response_format",
            "unsupported_format",
        )


def judge_fields(fields: dict[str, Any], limits: AdmissionLimits, where: str = "") -> None:
    """Refuse (BadBody) what needs no audio decoding to judge: the URL policy, input length.

    `where` names the part of a larger request ("items[3].") in messages and `param`.
    """
    url_field = ref_audio_is_url(fields)
    if url_field is not None and not limits.allow_ref_audio_urls:
        raise BadBody(400, URL_REFUSED, f"{where}{url_field}", "ref_audio_url")
    for field, item in audio_values(fields):
        if _scheme(item) in ("http", "https"):
            split_url(f"{where}{field}", item)  # BadBody (400) when malformed
    judge_voice_names(fields, where)
    judge_sampling(fields, where)
    judge_engine_sampling(fields, where)
    judge_format(fields, where)
    judge_speed(fields, where)
    judge_budget(fields, limits, where)
    length = input_length(fields) if limits.max_input_chars else None
    if length is not None and length > limits.max_input_chars:
        raise BadBody(
            400,
            f"{where}input is {length} characters; this server accepts at most "
            f"{limits.max_input_chars} (split the text into several requests)",
            f"{where}input",
            "input_too_long",
        )


SPEEDS = (0.25, 4.0)  # vLLM-Omni's bounds on `speed`


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def judge_speed(fields: dict[str, Any], where: str = "") -> None:
    """Refuse (BadBody) a `speed` that is not a finite number (vLLM-Omni calls NaN "> 4")."""
    speed = fields.get("speed")
    if _number(speed) and not math.isfinite(speed):
        low, high = SPEEDS
        raise BadBody(
            400,
            f"{where}speed is {speed}; give a number from {low:g} to {high:g}",
            f"{where}speed",
            "invalid",
        )


def judge_budget(fields: dict[str, Any], limits: AdmissionLimits, where: str = "") -> None:
    """Refuse (BadBody) a `max_new_tokens` no request can reach: past the talker's context,
    where the engine would stop it early without a word."""
    asked = fields.get("max_new_tokens")
    whole = _number(asked) and math.isfinite(asked) and asked == int(asked) and asked >= 1
    if asked is not None and not whole:
        # vLLM-Omni's model reads `true` as 1 frame, which speaks nothing.
        raise BadBody(
            400,
            f"{where}max_new_tokens is {json.dumps(asked)[:40]}; give a whole number of frames, "
            "1 or more (a frame is 80 ms of audio)",
            f"{where}max_new_tokens",
            "invalid",
        )
    context = limits.talker_max_model_len
    if context and _number(asked) and asked > context:
        raise BadBody(
            400,
            f"{where}max_new_tokens is {asked}; this model's talker holds {context} positions "
            "(prompt and frames together), so ask for fewer frames",
            f"{where}max_new_tokens",
            "invalid",
        )


# A voice is a file NAME.<ext> in vLLM-Omni's voices folder: a name past what a file name can
# hold came back as the OS's own error. Names this long are no one's voice.
MAX_VOICE_NAME_CHARS = 128


def judge_voice_names(fields: dict[str, Any], where: str = "") -> None:
    """Refuse (BadBody) a `voice` or `speaker` name longer than any voice's."""
    for name in ("voice", "speaker"):
        value = fields.get(name)
        if isinstance(value, str) and len(value) > MAX_VOICE_NAME_CHARS:
            raise BadBody(
                400,
                f"{where}{name} is {len(value)} characters; a voice's name has at most "
                f"{MAX_VOICE_NAME_CHARS} (GET /v1/audio/voices lists this server's)",
                f"{where}{name}",
                "invalid",
            )


def judge_engine_sampling(fields: dict[str, Any], where: str = "") -> None:
    """Refuse (BadBody, naming the field) what the talker's engine core would refuse, built
    and checked by vLLM's own codec and validators (omni_cpu.platform.request_check).

    After `judge_sampling`, whose rules are omni-cpu's own (the code predictor takes the same
    values); this one is vLLM's, whatever they are in the installed release. It imports vLLM:
    the API server's process has it loaded.
    """
    if fields.get("extra_params") is None and fields.get("seed") is None:
        return
    from omni_cpu.platform.request_check import talker_sampling_problem

    found = talker_sampling_problem(fields)
    if found is not None:
        field, why = found
        raise BadBody(400, f"{where}{why}", f"{where}{field}", "invalid")


def judge_sampling(fields: dict[str, Any], where: str = "") -> None:
    """Refuse (BadBody, naming the field) sampling values the engine would fail on.

    A request samples as `omni-cpu run`'s options do, by the same rules
    (omni_cpu.profile.sampling): `seed`, and `extra_params` temperature, top_k, top_p and
    repetition_penalty (vLLM-Omni 0.30.0 copies the first three onto the talker, where a bad
    one is a 500 and a traceback; omni_cpu.platform.request_sampling takes them on to the
    code predictor, with the repetition penalty).
    """
    seed = fields.get("seed")
    takes_seed, want_seed = SEED_RULE
    if seed is not None and not takes_seed(seed):
        raise BadBody(400, f"{where}seed is {seed!r}; give {want_seed}", f"{where}seed", "invalid")
    extra = fields.get("extra_params")
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise BadBody(
            400, f"{where}extra_params must be a JSON object", f"{where}extra_params", "invalid"
        )
    for name, (takes, what) in RULES.items():
        if name in extra and extra[name] is not None and not takes(extra[name]):
            field = f"{where}extra_params.{name}"
            raise BadBody(400, f"{field} is {extra[name]!r}; give {what}", field, "invalid")


def judge_ref_audio(fields: dict[str, Any], limits: AdmissionLimits, where: str = "") -> None:
    """Refuse (BadBody) reference audio run would refuse; decodes it (call off the loop)."""
    found = ref_audio_problem(fields, limits.ref_audio_dir)
    if found is not None:
        field, problem = found
        raise BadBody(
            400, f"{where}{problem}" if where else problem, f"{where}{field}", "ref_audio"
        )


# A batch's own fields that are defaults for each item (vLLM-Omni's BatchSpeechRequest).
BATCH_SHARED = (
    "voice",
    "speaker",
    "instructions",
    "task_type",
    "language",
    "ref_audio",
    "ref_text",
)


def batch_items(fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Each item of a batch request as the speech request it becomes (shared fields filled)."""
    items = fields.get("items")
    if not isinstance(items, list):
        return []
    shared = {key: fields[key] for key in BATCH_SHARED if fields.get(key) is not None}
    return [{**shared, **item} if isinstance(item, dict) else {} for item in items]


def url_policy(limits: AdmissionLimits) -> UrlPolicy:
    """The fetching policy `limits` carry."""
    return UrlPolicy(
        limits.allow_ref_audio_urls,
        limits.ref_audio_fetch_s,
        limits.ref_audio_fetch_s,
        limits.max_body_bytes,
    )


def fetch_references(data: dict[str, Any], limits: AdmissionLimits) -> bool:
    """Fetch each http(s) reference `data` names (a batch: its items' too) within the URL
    policy, and put the audio in its place as a `data:` URL; whether any was fetched.

    Raises BadBody (400/504 naming the host) when a fetch is refused or fails. Call off the
    event loop: it connects and reads.
    """
    found = list(audio_values(data))
    items = data.get("items")
    if isinstance(items, list):
        for index, item in enumerate(items):
            if isinstance(item, dict):
                found += [(f"items[{index}].{name}", value) for name, value in audio_values(item)]
    fetched: dict[str, str] = {}
    for field, item in found:
        if _scheme(item) not in ("http", "https"):
            continue
        if item not in fetched:  # a shared reference is fetched once
            audio, mime = fetch(field, item, url_policy(limits))
            fetched[item] = as_data_url(audio, mime)
        set_value(data, field, fetched[item])
    return bool(fetched)
