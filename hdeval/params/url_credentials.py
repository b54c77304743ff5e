"""Credentials anywhere in a server URL: user info, a key-like path segment, a key- or
token-named parameter (after ``?``, ``&``, ``;`` or ``#``), a key-like value.

Params validation refuses a URL holding any (:func:`credential_parts`); the server backend
masks the same parts wherever a URL is shown (:mod:`hdeval.llm.server.urls`).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, unquote, urlsplit

#: Names of URL parameters whose values are credentials: api_key, key, token, sig...
SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session", re.I)
#: How API keys begin (OpenAI, Anthropic, Stripe-like ``sk-``/``pk_``, GitHub, GitLab, Hugging
#: Face, Slack, AWS, Google).
_KEY_PREFIX = re.compile(
    r"^(?:(?:sk|pk|rk)[-_]|(?:ghp|gho|ghs|ghu|github_pat|glpat|hf|xox[abprs])[-_]"
    r"|AKIA[0-9A-Z]{12}|AIza[0-9A-Za-z_-]{20})"
)
#: A random token's length: a piece this long mixing upper case, lower case and digits.
_TOKEN_CHARS = 32
#: What separates a URL's parameters, and a path segment's own (``/v1;key=...``).
_PARAM_SEPARATOR = re.compile("[&;]")


def key_like(text: str) -> bool:
    """Whether ``text`` looks like an API key or a random token (hex ids and UUIDs do not:
    they have no upper case)."""
    text = unquote(text).strip()
    if _KEY_PREFIX.match(text):
        return True
    mixed = all(re.search(c, text) for c in ("[a-z]", "[A-Z]", "[0-9]"))
    return len(text) >= _TOKEN_CHARS and mixed and not re.search(r"\s", text)


def split_url(url: str) -> SplitResult | None:
    """``url``'s parts (``//`` put in front where it has no scheme), None if malformed."""
    try:
        return urlsplit(url if "//" in url else "//" + url)
    except ValueError:
        return None


def param_credentials(mark: str, text: str) -> list[tuple[str, str]]:
    """(kind, secret) of each credential among the parameters ``text`` (``a=1&key=x;t=y``)."""
    found = []
    for item in filter(None, _PARAM_SEPARATOR.split(text)):
        name, equals, value = item.partition("=")
        shown = unquote(name).strip()
        if equals and SECRET_PARAM.search(shown):
            found.append((f"{mark}{shown}=", value))
        elif key_like(value if equals else item):
            found.append((f"a key-like value after {mark!r}", value if equals else item))
    return found


def credential_parts(url: str) -> list[tuple[str, str]]:
    """(kind, secret text as written) of every credential in ``url``; the kind names where it
    is (``user:password@``, ``?api_key=``, ``a key-like path segment``), never the secret."""
    parts = split_url(url)
    if parts is None:
        match = re.search(r"//([^/?#]*)@", url)
        return [("user:password@", match.group(1))] if match else []
    found = []
    if "@" in parts.netloc:
        found.append(("user:password@", parts.netloc.rpartition("@")[0]))
    for segment in filter(None, parts.path.split("/")):
        base, _, params = segment.partition(";")
        if key_like(base):
            found.append(("a key-like path segment", base))
        found += param_credentials(";", params)
    found += param_credentials("?", parts.query) + param_credentials("#", parts.fragment)
    return found


def credentials_in(url: str) -> list[str]:
    """The kinds of credentials ``url`` holds, each once (their values are not named)."""
    return list(dict.fromkeys(kind for kind, _ in credential_parts(url)))
