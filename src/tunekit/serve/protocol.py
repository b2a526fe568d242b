"""Request bodies of the OpenAI chat API (the fields tunekit honours; unknown fields are ignored, as OpenAI clients
send many).

Bounds: every integer has a range (``seed`` is a signed 64-bit integer, as OpenAI's), booleans are strict
(``"stream": "yes"`` is a 422, not true), ``stop`` holds at most 16 strings of at most 1,000 characters (they are
searched in the text after every token), and the JSON nesting depth and text validity are checked before this
schema runs (:data:`MAX_DEPTH`, :func:`tunekit.serve.request_checks.check_json`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

#: deepest JSON nesting accepted in a request body (a chat request needs about 8: tools' JSON schemas a few more)
MAX_DEPTH = 32
INT64 = 2**63
#: a stop string (searched in the decoded text after every token, so bounded)
StopText = Annotated[str, Field(max_length=1000)]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str
    arguments: str = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class MediaURL(_Lenient):
    """``image_url`` / ``video_url`` / ``audio_url``: a ``data:`` URL (base64) or a file under ``api_media_dir``."""

    url: str
    detail: str | None = None  # OpenAI's image detail; ignored (the resolution is the image_*_pixels options)


class InputAudio(_Lenient):
    """OpenAI's ``input_audio``: base64 audio bytes and their format (``wav``, ``mp3``, ...)."""

    data: str
    format: str | None = None


class ContentPart(_Lenient):
    type: str
    text: str | None = None
    image_url: MediaURL | str | None = None
    video_url: MediaURL | str | None = None
    audio_url: MediaURL | str | None = None
    input_audio: InputAudio | None = None


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Lenient):
    include_usage: StrictBool = False


class ChatCompletionRequest(_Lenient):
    model: str
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    max_tokens: int | None = Field(None, ge=1, lt=2**31)
    max_completion_tokens: int | None = Field(None, ge=1, lt=2**31)
    stop: StopText | Annotated[list[StopText], Field(max_length=16)] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(None, ge=-INT64, lt=INT64)
