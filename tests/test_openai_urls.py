"""Credentials in server URLs: scrubbed from URLs, masked in free text, shown nowhere."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess

import pytest

from hdeval.errors import JudgeUnavailableError
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.server.urls import mask_secrets, scrub_url, url_secrets
from tests.servers import free_port
from tests.test_bad_inputs import HDEVAL, make_bundle, refused, texts
from tests.test_openai_faults import KEY_ENV, SECRET, FaultServer


@pytest.mark.parametrize(
    ("url", "scrubbed"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://user:secret@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://only-user@host/v1", "https://host/v1"),
        ("https://u:p%40ss@word@host:9/v1", "https://host:9/v1"),  # '@' inside the password
        ("user:secret@host:8000/v1", "host:8000/v1"),  # no scheme
        (
            "https://h/v1?api_key=k3y-value&model=m&Access_Token=t0ken#sig=abcd",
            "https://h/v1?api_key=***&model=m&Access_Token=***#sig=***",
        ),
        ("https://h/v1?x-api-key=abc&keep=1&flag", "https://h/v1?x-api-key=***&keep=1&flag"),
        ("http://[::1/v1", "http://[::1/v1"),  # malformed: returned without user info
        ("https://h/v1/sk-proj-Ab12Cd34/x", "https://h/v1/***/x"),  # a key as a path segment
        ("https://h/v1;token=abcd/x?m=1;api_key=k3y", "https://h/v1;token=***/x?m=1;api_key=***"),
        ("https://h/v1#sk-ant-abcd", "https://h/v1#***"),
        (
            "h/v1/models/0123456789abcdef0123456789abcdef",
            "h/v1/models/0123456789abcdef0123456789abcdef",
        ),
    ],
)
def test_scrub_url(url: str, scrubbed: str) -> None:
    assert scrub_url(url) == scrubbed


def test_url_secrets_cover_every_form_of_the_credentials() -> None:
    url = "http://user:s%23cret-pw@host/v1?token=abcdef&x=1"
    secrets = url_secrets(url)
    basic = base64.b64encode(b"user:s#cret-pw").decode()
    assert set(secrets) == {"user:s%23cret-pw", "s%23cret-pw", "s#cret-pw", basic, "abcdef"}
    assert secrets == sorted(secrets, key=len, reverse=True)
    text = f"GET {url} failed; header Authorization: Basic {basic}; echo s#cret-pw"
    masked = mask_secrets(text, secrets)
    for secret in secrets:
        assert secret not in masked
    assert masked.startswith("GET http://***@host/v1?token=***&x=1 failed")


def test_keys_anywhere_in_the_url_are_secrets() -> None:
    url = "https://h/v1/sk-proj-Ab12Cd34;key=pa%2Fth?m=1;token=t0ken#hf_abcdef"
    assert set(url_secrets(url)) == {"sk-proj-Ab12Cd34", "pa%2Fth", "pa/th", "t0ken", "hf_abcdef"}
    masked = mask_secrets(f"GET {url} failed", url_secrets(url))
    assert masked == "GET https://h/v1/***;key=***?m=1;token=***#*** failed"


def test_short_values_are_not_masked_in_free_text() -> None:
    assert url_secrets("http://u:ab@host/v1?key=x") == ["dTphYg==", "u:ab"]
    assert mask_secrets("a b", []) == "a b"


def test_closed_port_with_credentials_in_the_url(caplog: pytest.LogCaptureFixture) -> None:
    """The unreachable server is named in the error, without its password."""
    caplog.set_level(logging.DEBUG)
    port = free_port()
    judge = OpenAICompatibleBackend(
        f"http://user:secret@127.0.0.1:{port}/v1?api_key=k3y-secret", model="m", max_retries=2
    )
    with pytest.raises(JudgeUnavailableError) as caught:
        judge.digit_scores(["a\n"], ["b"])
    message = str(caught.value)
    assert f"the judge at http://127.0.0.1:{port}/v1?api_key=*** is unavailable" in message
    assert "ConnectError" in message
    with pytest.raises(JudgeUnavailableError) as unnamed:  # its weights cannot be asked
        judge.identity  # noqa: B018
    shown = [message, caplog.text, repr(judge), str(unnamed.value)]
    for text in shown:
        assert "secret" not in text


def test_credentials_in_the_url_stay_out_of_logs_and_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At DEBUG the HTTP client would log every request's URL, password included, and a careless
    server echoes the Authorization header (the user info as HTTP Basic credentials)."""
    caplog.set_level(logging.DEBUG)
    with FaultServer() as server:
        url = server.base_url.replace("http://", "http://user:secret@")
        judge = OpenAICompatibleBackend(url, model="fault", max_retries=0)
        good, bad = judge.digit_scores(["a\n"], ["[[ok-3]]", "[[always-500]]"])
        judge.close()
    basic = base64.b64encode(b"user:secret").decode()
    assert good.ok and not bad.ok and "internal error for" in bad.failure
    assert any(basic in h for h in server.auth_headers)  # the credentials were sent
    for text in (caplog.text, bad.failure, repr(judge), judge.identity):
        assert "secret" not in text and basic not in text


def test_a_params_file_found_in_the_working_directory_sends_no_key_where_not_chosen(tmp_path):
    """A params.yaml picked up from the working directory (someone else's, maybe) that would
    send the API key to its server is refused before any request; named with --params, or its
    server listed in HDEVAL_TRUSTED_URLS, the key is sent. Without a key nothing is refused."""
    with FaultServer() as server:
        make_bundle(tmp_path / "bundle", f"openai-compatible:{server.base_url}:fault")
        texts(tmp_path / "in.jsonl", 1)
        llm = {"backend": "openai", "base_url": server.base_url, "model": "fault",
               "api_key_env": KEY_ENV}  # fmt: skip
        (tmp_path / "params.yaml").write_text(json.dumps({"llm": llm}))
        env = {**os.environ, KEY_ENV: SECRET, "HDEVAL_CACHE": str(tmp_path / "cache.sqlite")}

        def score(*extra: str, **more: str) -> subprocess.CompletedProcess:
            args = [HDEVAL, "score", "in.jsonl", "--model", "bundle", *extra]
            return subprocess.run(
                args, cwd=tmp_path, env={**env, **more}, capture_output=True, text=True
            )

        message = refused(score(), "params.yaml was found in the working directory",
                          f"${KEY_ENV} to {server.base_url}", "--params params.yaml",
                          f"HDEVAL_TRUSTED_URLS={server.base_url}")  # fmt: skip
        assert SECRET not in message and sum(server.hits.values()) == 0  # nothing was sent
        for done in (
            score("--params", "params.yaml"),
            score(HDEVAL_TRUSTED_URLS=f"http://elsewhere/v1,{server.base_url}/"),
        ):
            assert done.returncode == 0, done.stderr[-2000:]
        assert set(server.auth_headers) == {f"Bearer {SECRET}"}
        del env[KEY_ENV]  # no key to send: nothing to refuse
        assert score().returncode == 0
