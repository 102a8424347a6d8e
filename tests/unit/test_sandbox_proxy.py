"""The egress proxy's HTTP side: host spelling, the allow-list, and reading one request head."""

from __future__ import annotations

import asyncio

import pytest

from atlas.sandbox.proxy import DEFAULT_ALLOWED_DOMAINS, EgressProxy
from atlas.sandbox.proxy_protocol import (
    MAX_HEAD_BYTES,
    ProxyRefusal,
    answer,
    normalise_host,
    normalise_pattern,
    on_allow_list,
    read_request,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("PyPI.org.", "pypi.org"),
        ("127。0。0。1", "127.0.0.1"),  # ideographic full stops
        ("１２７.０.０.１", "127.0.0.1"),  # full-width digits
        ("127%E3%80%820%E3%80%820%E3%80%821", "127.0.0.1"),  # percent-encoded full stops
        ("2130706433", "127.0.0.1"),  # the resolver reads these old spellings as addresses
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[0:0:0:0:0:ffff:7f00:1]", "::ffff:7f00:1"),
        ("ｅｘａｍｐｌｅ.com", "example.com"),  # full-width letters
        ("bücher.example", "xn--bcher-kva.example"),
        ("a_b.example.com", "a_b.example.com"),
    ],
)
def test_hosts_have_one_spelling(raw: str, expected: str) -> None:
    assert normalise_host(raw) == expected


@pytest.mark.parametrize("raw", ["a b.com", "evil.com/x", "a..b", "x:y", "fe80::1%eth0", ""])
def test_malformed_hosts_are_refused(raw: str) -> None:
    with pytest.raises(ProxyRefusal) as refusal:
        normalise_host(raw)
    assert refusal.value.status == 400


def test_allow_list_matches_exact_names_and_listed_subdomains() -> None:
    patterns = [normalise_pattern(p) for p in ("pypi.org", "*.githubusercontent.com", ".Crates.IO")]
    assert patterns == ["pypi.org", ".githubusercontent.com", ".crates.io"]
    assert on_allow_list("pypi.org", patterns)
    assert on_allow_list("raw.githubusercontent.com", patterns)
    assert on_allow_list("static.crates.io", patterns)
    assert not on_allow_list("githubusercontent.com", patterns)  # *.x means subdomains only
    assert not on_allow_list("evilpypi.org", patterns)
    assert not on_allow_list("pypi.org.evil.com", patterns)
    assert not on_allow_list("files.pypi.org", patterns)


def test_ip_addresses_match_only_when_listed_themselves() -> None:
    patterns = [normalise_pattern("pypi.org"), normalise_pattern("127.0.0.1")]
    assert on_allow_list("127.0.0.1", patterns)
    assert not on_allow_list("10.0.0.1", patterns)
    with pytest.raises(ValueError, match="cannot have subdomains"):
        normalise_pattern("*.0.0.1")
    with pytest.raises(ValueError, match="is not a domain"):
        normalise_pattern("http://pypi.org/")


def test_default_allow_list_is_valid_and_has_the_registries() -> None:
    patterns = [normalise_pattern(p) for p in DEFAULT_ALLOWED_DOMAINS]
    for host in ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "github.com"):
        assert on_allow_list(host, patterns)
    assert on_allow_list("raw.githubusercontent.com", patterns)
    assert not on_allow_list("example.com", patterns)


def test_a_bad_allow_list_entry_is_refused_when_the_proxy_is_made(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from atlas.config import WebSettings

    with pytest.raises(ValueError, match="not a domain"):
        EgressProxy(["pypi.org", "not a domain"], WebSettings(), tmp_path)


async def read(data: bytes):  # type: ignore[no-untyped-def]
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await read_request(reader)


async def test_connect_names_host_port_and_keeps_what_follows() -> None:
    request = await read(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n\x16\x03\x01")
    assert request is not None
    assert (request.host, request.port, request.tunnel) == ("pypi.org", 443, True)
    assert request.leftover == b"\x16\x03\x01"  # the start of TLS, sent at once by some clients
    ipv6 = await read(b"CONNECT [::1]:8080 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert ipv6 is not None and (ipv6.host, ipv6.port) == ("::1", 8080)


@pytest.mark.parametrize("target", [b"pypi.org", b"pypi.org:0", b"pypi.org:99999", b":443"])
async def test_connect_needs_a_host_and_a_port(target: bytes) -> None:
    with pytest.raises(ProxyRefusal) as refusal:
        await read(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert refusal.value.status == 400


async def test_absolute_form_is_rewritten_for_the_origin() -> None:
    request = await read(
        b"POST http://user:pw@Example.COM:8080/a/b?q=1#frag HTTP/1.1\r\n"
        b"Host: wrong.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
        b"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Private\r\n"
        b"X-Private: 1\r\nContent-Length: 4\r\nAccept: */*\r\n\r\nbody"
    )
    assert request is not None
    assert (request.host, request.port, request.tunnel) == ("example.com", 8080, False)
    lines = request.head.split(b"\r\n")
    assert lines[0] == b"POST /a/b?q=1 HTTP/1.1"
    assert b"Host: Example.COM:8080" in lines
    assert b"Content-Length: 4" in lines and b"Accept: */*" in lines
    assert b"Connection: close" in lines
    lowered = request.head.lower()
    for gone in (
        b"proxy-authorization",
        b"proxy-connection",
        b"keep-alive",
        b"x-private",
        b"wrong",
    ):
        assert gone not in lowered
    assert request.head.endswith(b"\r\n\r\n")
    assert request.leftover == b"body"


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /just/a/path HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # origin-form: not a proxy request
        (b"GET https://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", 400),
        (b"GET ftp://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", 400),
        ("GET http://127。0.0.1/ HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 400),  # raw UTF-8
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (
            b"GET http://a.com/ HTTP/1.1\r\nHost: a\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n",
            431,
        ),
    ],
)
async def test_unusable_requests_get_a_clear_status(head: bytes, status: int) -> None:
    with pytest.raises(ProxyRefusal) as refusal:
        await read(head)
    assert refusal.value.status == status
    assert refusal.value.reason


async def test_a_client_that_closes_at_once_sends_no_request() -> None:
    assert await read(b"") is None


def test_refusals_are_complete_responses_with_a_reason() -> None:
    raw = answer(403, "blocked by Atlas: evil.com is not allowed")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert body == b"blocked by Atlas: evil.com is not allowed\n"
