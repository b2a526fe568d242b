"""What the API checks before a request reaches the schema: OpenAI-shaped errors, the JSON body, the bearer key."""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

from .protocol import MAX_DEPTH


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self, headers: dict | None = None):
        from fastapi.responses import JSONResponse

        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=headers)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str):
    raise APIError(400, f"The body is not valid JSON: {name} is not a JSON number.")


def parse_json(body: bytes) -> Any:
    """``json.loads`` with every failure a 400 (syntax, bad UTF-8, NaN/Infinity, huge integers, deep nesting)."""
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise APIError(
            400, f"The body is nested too deeply (more than {MAX_DEPTH} levels of arrays/objects)."
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, int digits limit
        raise APIError(400, f"The body is not valid JSON: {exc}.") from None
    check_json(data)
    return data


def check_json(data: Any) -> None:
    """400 for nesting deeper than :data:`MAX_DEPTH` and for strings with lone UTF-16 surrogates (no valid text)."""
    stack = [(data, 1, "")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise APIError(
                    400,
                    f"The body is nested too deeply: more than {MAX_DEPTH} levels of arrays/objects "
                    f"(at {where or 'the top'}).",
                    param=where or None,
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise APIError(
                        400, f"A key at {where or 'the top'} holds a lone UTF-16 surrogate: send valid Unicode."
                    )
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                raise APIError(
                    400,
                    f"{where or 'The body'} holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x} at "
                    f"character {found.start()}), which is not valid Unicode text.",
                    param=where or None,
                )


def authorized(header: str, api_key: str) -> bool:
    """``Authorization: Bearer KEY`` (scheme in any case), compared in constant time."""
    scheme, _, token = header.strip().partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    return hmac.compare_digest(token.strip().encode("utf-8", "surrogatepass"), api_key.encode("utf-8")) and ok_scheme
