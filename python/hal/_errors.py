"""hal's exceptions: hal.Error and a subclass per hal::StatusCode, raised by the extension with hal's message."""

from __future__ import annotations

import builtins

from . import _hal


class Error(Exception):
    """Every failing hal call raises a subclass of hal.Error.

    Attributes: ``code`` (hal.StatusCode), ``message`` (hal's message: what
    went wrong and what to do next; also ``str(error)``) and ``native_code``
    (the vendor's error code, or 0).
    """

    code: _hal.StatusCode
    message: str
    native_code: int

    def __init__(self, message: str = "", code: "_hal.StatusCode | None" = None, native_code: int = 0):
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else _CODES.get(type(self), _hal.StatusCode.internal)
        self.native_code = native_code


class InvalidArgumentError(Error, ValueError):
    """The caller passed a bad value (invalid_argument)."""


class UnsupportedError(Error, NotImplementedError):
    """A valid request this backend or device cannot do (unsupported)."""


class NotPresentError(Error):
    """A vendor library or device is missing (not_present)."""


class OutOfMemoryError(Error, MemoryError):
    """The device ran out of memory (out_of_memory)."""


class TimeoutError(Error, builtins.TimeoutError):
    """An operation timed out (timeout)."""


class DeviceLostError(Error):
    """The device was lost (device_lost); recreate the Runtime."""


class AbortedError(Error):
    """The operation was aborted (aborted), e.g. on an aborted communicator."""


class InternalError(Error):
    """A bug in hal or a backend (internal); please report it."""


_CODES = {
    InvalidArgumentError: _hal.StatusCode.invalid_argument,
    UnsupportedError: _hal.StatusCode.unsupported,
    NotPresentError: _hal.StatusCode.not_present,
    OutOfMemoryError: _hal.StatusCode.out_of_memory,
    TimeoutError: _hal.StatusCode.timeout,
    DeviceLostError: _hal.StatusCode.device_lost,
    AbortedError: _hal.StatusCode.aborted,
    InternalError: _hal.StatusCode.internal,
}

for _cls in (Error, *_CODES):
    _cls.__module__ = "hal"

_hal._register_errors(Error, {code: cls for cls, code in _CODES.items()})
