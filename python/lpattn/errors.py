"""Exceptions: every failed lpattn call raises LpattnError with its status and
lpattn_last_error()'s detail (which argument, what was expected, what was
given)."""
from . import _lib


class LpattnError(RuntimeError):
    """A C call failed. `status` is the lpattn_status number, `status_name` its
    name (e.g. "BAD_SHAPE"), `detail` the library's explanation."""

    def __init__(self, func, status, detail):
        self.func, self.status, self.detail = func, status, detail
        names = _lib.STATUS_NAMES
        self.status_name = names[status] if 0 <= status < len(names) else str(status)
        text = _lib.lib.lpattn_status_string(status).decode()
        super().__init__(f"{func}: LPATTN_ERR_{self.status_name} ({text})"
                         + (f": {detail}" if detail else ""))


class UnsupportedError(LpattnError, NotImplementedError):
    """UNSUPPORTED / UNSUPPORTED_HARDWARE: valid, but not on this backend or machine."""


def check(func, status):
    """Raise for a non-zero status of `lpattn_<func>`, with its detail."""
    if status == 0:
        return
    detail = (_lib.lib.lpattn_last_error() or b"").decode(errors="replace")
    cls = UnsupportedError if status in (9, 10) else LpattnError
    raise cls("lpattn_" + func, status, detail)


def call(func, *args):
    check(func, getattr(_lib.lib, "lpattn_" + func)(*args))
