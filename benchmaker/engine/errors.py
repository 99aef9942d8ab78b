"""Errors raised by the engine.

    BenchmakerError
    ├── ConfigError          bad config / rate spec / CLI value; names file, line, field
    │   └── RateSpecError    a rate-spec string that does not parse
    ├── TransportError       the request could not be sent or its body not read
    │   └── ConnectTimeout   the connect deadline fired
    ├── RunInvalid           the run finished but could not measure what it claims
    └── RunFailed            the run stopped before its end; what it wrote is kept (exit 1)

Measurement failures of single requests never raise out of the runner: they become a
Sample with an outcome.
"""

from __future__ import annotations


class BenchmakerError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(BenchmakerError, ValueError):
    """A configuration value is wrong. The message names where: `path:line: field: problem`."""


class RateSpecError(ConfigError):
    """A rate-spec string (e.g. `poisson:50`) does not parse; the message lists the forms."""


class TransportError(BenchmakerError):
    """The transport failed to send the request or read its response."""


class ConnectTimeout(TransportError):
    """The connect deadline fired before a connection was made."""


class RunFailed(BenchmakerError):
    """A run that could not go on (a full disk); the message says what was kept and
    where. The CLI exits 1 with it (a failed run, not bad input)."""


class RunInvalid(BenchmakerError):
    """A finished run that failed its self-checks; `reasons` lists why."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons
