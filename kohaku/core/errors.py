"""The one base class of errors meant for the user.

Every error whose message names the file, row or config key at fault and says what to do
derives from :class:`KohakuError` (config keys, corpus files, submissions, model backends,
documents). The runner turns any of them raised inside a stage into the one-line
``StageError``; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class KohakuError(Exception):
    """An error caused by input or settings; its message is written for the user."""


class CorpusError(KohakuError, ValueError):
    """A corpus file is missing, unreadable or malformed; the message names file and row."""


class CorpusFileNotFound(CorpusError, FileNotFoundError):
    """A corpus file (metadata, questions, solutions) does not exist."""


class SubmissionError(KohakuError, ValueError):
    """A submission or solutions file is malformed; the message names the file, row and column."""


class MetricError(SubmissionError):
    """Malformed solutions or submission; the message names the file, row and column."""


def one_line(exc: BaseException, name: str | None = None) -> str:
    """What a command prints for ``exc`` (its row of a batch's table, its last line on stderr):
    a KohakuError's (or a missing file's) own message, prefixed with ``name`` (the file) where it
    does not name it; any other exception is a bug in kohaku, not in the input, and says so with
    how to get its traceback (``--debug`` or ``KOHAKU_DEBUG=1``). Always one line."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, (KohakuError, FileNotFoundError)):
        text = (f"unexpected {type(exc).__name__} ({text[:300]}): a bug in kohaku, not in the input; "
                "rerun with --debug (or KOHAKU_DEBUG=1) for the traceback and report it")
    if name and str(name) not in text:
        text = f"{name}: {text}"
    return " ".join(text.split())
