"""`serve --voices DIR`: a folder of named voices, uploaded once the server is ready.

Each audio file `NAME.wav` (or .flac, .ogg, .mp3) in the folder is a voice named NAME;
`NAME.txt` beside it, if any, is what it says (the reference text a Base model clones
best with). Each is sent through the server's own `POST /v1/audio/voices`, so it passes
the same checks as a client's upload, and vLLM-Omni keeps it in the same folder
(SPEAKER_SAMPLES_DIR): it encodes the reference once, then a request names it as
`voice`. A voice the server already holds (restored from the folder) is not sent again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

AUDIO_TYPES = {
    ".wav": "audio/wav",
    ".flac": "audio/flac",
    ".ogg": "audio/ogg",
    ".mp3": "audio/mpeg",
}
CONSENT = "omni-cpu-serve-voices"  # vLLM-Omni asks each upload for a consent id


@dataclass(frozen=True)
class VoiceFile:
    name: str
    audio: Path
    ref_text: str


def voice_files(folder: Path) -> list[VoiceFile]:
    """The voices a folder holds: its audio files, each with its .txt if there is one."""
    found = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.suffix.lower() in AUDIO_TYPES and path.is_file():
            words = path.with_suffix(".txt")
            text = words.read_text().strip() if words.is_file() else ""
            found.append(VoiceFile(path.stem, path, text))
    return found


def _multipart(fields: dict[str, str], file_field: str, path: Path) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'
        parts.append(f"{head}{value}\r\n".encode())
    kind = AUDIO_TYPES[path.suffix.lower()]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
        f'filename="{path.name}"\r\nContent-Type: {kind}\r\n\r\n'.encode()
        + path.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def held_voices(base_url: str) -> set[str]:
    """Names (lower case) of the voices the server has uploaded; empty when it does not say."""
    try:
        with urllib.request.urlopen(f"{base_url}/v1/audio/voices", timeout=10) as reply:
            data = json.loads(reply.read())
    except (OSError, ValueError):
        return set()
    uploaded = data.get("uploaded_voices", []) if isinstance(data, dict) else []
    return {str(entry.get("name", "")).lower() for entry in uploaded if isinstance(entry, dict)}


def upload(base_url: str, voice: VoiceFile, timeout_s: float = 60.0) -> str | None:
    """Upload one voice; None when the server took it, else its one-line reason."""
    fields = {"name": voice.name, "consent": CONSENT}
    if voice.ref_text:
        fields["ref_text"] = voice.ref_text
    body, content_type = _multipart(fields, "audio_sample", voice.audio)
    request = urllib.request.Request(
        f"{base_url}/v1/audio/voices", body, {"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as error:
        try:
            return str(json.loads(error.read())["error"]["message"])
        except (ValueError, KeyError, TypeError):
            return f"HTTP {error.code}"
    except OSError as error:
        return str(error)


def preload(base_url: str, folder: Path) -> list[tuple[str, str | None]]:
    """Upload the folder's voices the server does not hold yet: (name, refusal or None)."""
    held = held_voices(base_url)
    return [
        (voice.name, upload(base_url, voice))
        for voice in voice_files(folder)
        if voice.name.lower() not in held
    ]
