"""Errors a user can cause. The CLI prints them as one line (no traceback) and exits 2."""


class BenchError(Exception):
    """Base class for every error caused by user input or the user's environment."""


class ConfigError(BenchError):
    """A config value is unknown, of the wrong type or out of range."""


class DataError(BenchError):
    """Dataset files are missing, unreadable or corrupt."""
