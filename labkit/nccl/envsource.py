"""An env block from a file, refused at once when it is not one (a FIFO, a device, a huge or
binary file, text that is not UTF-8), then read by :func:`labkit.nccl.paste.parse_env`."""

from __future__ import annotations

import os
import stat

from labkit.errors import ParameterError
from labkit.nccl.paste import ParsedEnv, parse_env

__all__ = ["MAX_ENV_BYTES", "MAX_ENV_LINES", "decode_env_bytes", "read_env_source"]

MAX_ENV_BYTES = 1 << 20  # an env block is a few KiB; a bigger file is not one
MAX_ENV_LINES = 50_000  # a rendered Helm chart of 1 MiB has about 35,000


def read_env_source(path: str | os.PathLike[str], label: str = "env file") -> ParsedEnv:
    """Parse the env block in ``path``, refusing at once, in one line, what is not one: a FIFO,
    socket, device or directory (never opened, so nothing blocks), a file over 1 MiB or 50,000
    lines, binary data, and text that is not UTF-8 (UTF-16 with a BOM, as PowerShell writes, is
    read)."""
    name = os.fspath(path)
    prefix = f"cannot read {label} {name}"
    try:
        info = os.stat(name)
    except OSError as exc:
        raise ParameterError(f"{prefix}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ParameterError(f"{prefix}: it is a directory; pass the env file in it")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else "a socket" \
            if stat.S_ISSOCK(info.st_mode) else "a device or other special file"
        raise ParameterError(f"{prefix}: it is {kind}, not a regular file; save the env block "
                             "to a file and pass that")
    if info.st_size > MAX_ENV_BYTES:
        raise ParameterError(_too_big(prefix, f"{info.st_size / (1 << 20):.1f} MiB"))
    try:  # O_NONBLOCK: should the file have become a FIFO meanwhile, open does not wait
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ParameterError(f"{prefix}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ParameterError(f"{prefix}: it changed into a special file while being opened")
        chunks, size = [], 0
        while size <= MAX_ENV_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ParameterError(f"{prefix}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > MAX_ENV_BYTES:
        raise ParameterError(_too_big(prefix, "over 1 MiB"))
    text = decode_env_bytes(b"".join(chunks), prefix, name)
    lines = text.count("\n") + (not text.endswith("\n"))
    if lines > MAX_ENV_LINES:  # a megabyte of one-character lines would take seconds to read
        raise ParameterError(f"{prefix}: it has {lines:,} lines, and labkit reads at most "
                             f"{MAX_ENV_LINES:,}: an env block is a few dozen")
    return parse_env(text)


def _too_big(prefix: str, size: str) -> str:
    return (f"{prefix}: it is {size}, and labkit reads at most {MAX_ENV_BYTES >> 20} MiB: an env "
            "block is a few KiB, so this is not one (pass the block, not a log or an archive)")


def decode_env_bytes(data: bytes, prefix: str, name: str) -> str:
    """The text of an env file: UTF-8 (BOM stripped), or UTF-16 with its BOM; binary data and
    other encodings are refused with where the first bad byte is. Latin-1 is not guessed: it
    decodes anything, so a wrong guess would hand the checker silently altered values."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    if b"\0" in data:
        offset = data.index(b"\0")
        raise ParameterError(f"{prefix}: it is binary (a NUL byte at offset {offset}), not a "
                             "text env block")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ParameterError(
            f"{prefix}: it is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}, line {line}); convert it first, e.g. iconv -f LATIN1 -t UTF-8 "
            f"{name} > env.utf8.sh") from None
