"""Credentials in server URLs, masked wherever a URL or an error message is shown.

A server URL may carry a user name and password (``http://user:pass@host/v1``), a key in a path
segment (``/v1/sk-proj-.../``) or in a parameter (``?api_key=...``, ``;token=...``,
``#sig=...``): :func:`~hdeval.params.url_credentials.credential_parts` finds them all.
:func:`scrub_url` drops the user info and masks the rest; :func:`url_secrets` lists the secret
parts so they can be masked in any free text, such as an error message that quotes the URL.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlunsplit

from hdeval.params.url_credentials import credential_parts, key_like, param_credentials, split_url

MASK = "***"
# Shorter secrets are not masked in free text, where they would hide ordinary words.
_MIN_SECRET_LEN = 4


def _mask_params(text: str) -> str:
    """``a=1&api_key=xyz;t=sk-1`` -> ``a=1&api_key=***;t=***``."""
    pieces = re.split("([&;])", text)
    return "".join(
        piece if piece in ("&", ";") or not param_credentials("", piece)
        else (f"{piece.partition('=')[0]}={MASK}" if "=" in piece else MASK)
        for piece in pieces
    )  # fmt: skip


def _mask_path(path: str) -> str:
    """``/v1/sk-proj-abc;key=x/`` -> ``/v1/***;key=***/``."""
    segments = []
    for segment in path.split("/"):
        base, semicolon, params = segment.partition(";")
        segments.append((MASK if key_like(base) else base) + semicolon + _mask_params(params))
    return "/".join(segments)


def scrub_url(url: str) -> str:
    """``url`` without ``user:password@`` and with every other credential masked."""
    parts = split_url(url)
    if parts is None:  # e.g. a malformed IPv6 host: fall back to a textual cut
        return re.sub(r"//[^/?#]*@", "//", url)
    scrubbed = urlunsplit(
        parts._replace(
            netloc=parts.netloc.rpartition("@")[2],
            path=_mask_path(parts.path),
            query=_mask_params(parts.query),
            fragment=_mask_params(parts.fragment),
        )
    )
    return scrubbed if "//" in url else scrubbed.removeprefix("//")


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url`` (user info, password, keys in its path or parameters), raw
    and percent-decoded, and the user info as HTTP Basic credentials; longest first, for masking
    in free text."""
    found: set[str] = set()
    for kind, secret in credential_parts(url):
        if kind == "user:password@":
            password = secret.partition(":")[2]
            basic = base64.b64encode(unquote(secret).encode()).decode()  # an HTTP Basic header
            found.update({secret, password, unquote(password), basic})
        else:
            found.update({secret, unquote(secret)})
    return sorted((s for s in found if len(s) >= _MIN_SECRET_LEN), key=len, reverse=True)


def mask_secrets(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
