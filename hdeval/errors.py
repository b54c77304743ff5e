"""Exceptions that carry a message a user can act on."""


class HDEvalError(Exception):
    """Base class of every error hdeval raises on purpose."""


class DataValidationError(HDEvalError):
    """A label file has a bad row or field; the message names the file, row and field."""


class ModelIntegrityError(HDEvalError):
    """Model weights are missing, incomplete, or fail their checksum."""


class ConfigError(HDEvalError):
    """A configuration value is invalid or names something that does not exist."""


class UnsupportedError(HDEvalError):
    """The chosen backend cannot do what was asked."""


class JudgeUnavailableError(HDEvalError):
    """The LLM judge's server cannot be reached or keeps failing; the run stops.

    The message names the server (without credentials), the last error and how many items
    succeeded before it; results returned before the error are valid and kept by their caller.
    """


class AcceptanceError(HDEvalError):
    """A trained evaluator failed an acceptance gate (DHP or the same-judge baselines)."""
