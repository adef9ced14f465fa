"""Errors a user can act on. Each carries a one-line message and an exit code."""

from __future__ import annotations


class SpecliError(Exception):
    """Base error: `message` names the problem, `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(SpecliError):
    exit_code = 2


class TemplateError(UsageError):
    """The model's chat template refused the messages (its own raise_exception)."""


class ModelError(SpecliError):
    """Missing, corrupt or unloadable model file."""

    exit_code = 3


class RegistryError(SpecliError):
    """Unknown model name, failed or corrupt download."""

    exit_code = 4


class PairError(SpecliError):
    """Draft and target cannot be paired."""

    exit_code = 5


class ProfileError(SpecliError):
    """Invalid profile YAML or settings."""

    exit_code = 6


class ContextError(SpecliError):
    """Prompt or history does not fit the context window."""

    exit_code = 7


class BackendError(SpecliError):
    """llama.cpp refused an operation (decode, rollback)."""

    exit_code = 8


EXIT_RPC = 10


class RpcError(SpecliError):
    """An RPC server cannot be reached, speaks another protocol version, or was lost."""

    exit_code = EXIT_RPC


EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (stop, keep what was produced) but never resumed."""
