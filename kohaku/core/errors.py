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
