"""Reading the text files commands are given (a prompt, a predicted output, code around a
cursor): UTF-8, or a usage error naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

from specli.errors import UsageError


def read_text_file(path: Path, option: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as e:
        raise UsageError(f"{option} {path}: {e.strerror or e}", "give a readable file") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{option} {path} is not valid UTF-8 (byte {e.start})", "convert it to UTF-8") from None
