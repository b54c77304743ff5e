"""Credentials in server URLs, masked wherever a URL or an error message is shown.

A server URL may carry a user name and password (``http://user:pass@host/v1``) or a key in its
query string (``?api_key=...``). :func:`scrub_url` drops the first and masks the second;
:func:`url_secrets` lists the secret parts so they can be masked in any free text, such as an
error message that quotes the URL.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit, urlunsplit

from hdeval.params.judge import SECRET_PARAM

MASK = "***"
# Shorter secrets are not masked in free text, where they would hide ordinary words.
_MIN_SECRET_LEN = 4


def _split(url: str) -> tuple[str, bool]:
    """``url`` with ``//`` put in front when it has no scheme, and whether that was done."""
    return (url, False) if "//" in url else ("//" + url, True)


def _is_secret_param(part: str) -> bool:
    name = unquote(part.partition("=")[0]).strip()
    return bool(SECRET_PARAM.search(name))


def _mask_params(query: str) -> str:
    """``a=1&api_key=xyz`` -> ``a=1&api_key=***``."""
    if not query:
        return query
    parts = query.split("&")
    return "&".join(
        f"{p.partition('=')[0]}={MASK}" if "=" in p and _is_secret_param(p) else p for p in parts
    )


def scrub_url(url: str) -> str:
    """``url`` without ``user:password@`` and with key- or token-like query values masked."""
    text, added = _split(url)
    try:
        parts = urlsplit(text)
    except ValueError:  # e.g. a malformed IPv6 host: fall back to a textual cut
        return re.sub(r"//[^/?#]*@", "//", url)
    scrubbed = urlunsplit(
        parts._replace(
            netloc=parts.netloc.rpartition("@")[2],
            query=_mask_params(parts.query),
            fragment=_mask_params(parts.fragment),
        )
    )
    return scrubbed.removeprefix("//") if added else scrubbed


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url`` (user info, password, key-like query values), raw and
    percent-decoded, and the user info as HTTP Basic credentials; longest first, for masking in
    free text."""
    text, _ = _split(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        match = re.search(r"//([^/?#]*)@", url)
        return [match.group(1)] if match else []
    found: set[str] = set()
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        password = userinfo.partition(":")[2]
        basic = base64.b64encode(unquote(userinfo).encode()).decode()  # as an HTTP Basic header
        found.update({userinfo, password, unquote(password), basic})
    for part in (parts.query + "&" + parts.fragment).split("&"):
        if "=" in part and _is_secret_param(part):
            value = part.partition("=")[2]
            found.update({value, unquote(value)})
    return sorted((s for s in found if len(s) >= _MIN_SECRET_LEN), key=len, reverse=True)


def mask_secrets(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text
