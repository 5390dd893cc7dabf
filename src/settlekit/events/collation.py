"""`String.prototype.localeCompare` exactly as the reference runtime computes it.

settld orders some artifact lists with `a.localeCompare(b)`. In V8 that is an ICU collator for the default
locale (en-US, whose rules are CLDR root) at tertiary strength with normalization on, comparing the strings'
UTF-16 code units as they are (lone surrogates included). A table or the plain DUCET (pyuca) disagrees with it on
punctuation, symbols and recent characters, and so does an older ICU: only an ICU of the same generation
reproduces it. settlekit uses the ICU4C 78 libraries that the pinned `icu4py` wheel installs (a plain
`pip install`, no system package, no compiler), through ICU's stable C API (`ucol_*`).

Sort keys: `sort_key(a) < sort_key(b)` exactly when `a.localeCompare(b) < 0`, and equal keys mean the
comparison is 0 (JS's sort is stable, so are Python's: ties keep their input order).

The libraries are loaded on first use, not at import.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from functools import lru_cache
from typing import Any, Final

from settlekit.errors import SettlekitError

_LOCALE: Final = b"en_US"  # V8's default locale; its collation rules are CLDR root
_UCOL_NORMALIZATION_MODE: Final = 4
_UCOL_ON: Final = 17
_U_ZERO_ERROR: Final = 0


class CollationUnavailable(SettlekitError):
    """The ICU libraries of the `icu4py` package could not be loaded."""

    code = "COLLATION_UNAVAILABLE"
    status = 500


class _Collator:
    __slots__ = ("_coll", "_sort_key", "version")

    def __init__(self, libdir: str) -> None:
        lib: Any = None
        libi18n = ""
        # dependency order: data, common, then i18n (which holds the collator)
        for name in ("libicudata", "libicuuc", "libicui18n"):
            found = sorted(glob.glob(os.path.join(libdir, f"{name}-*.so.*")))
            if not found:
                raise CollationUnavailable(f"{name} not found in {libdir}", libdir=libdir)
            libi18n = found[-1]
            lib = ctypes.CDLL(libi18n, mode=ctypes.RTLD_GLOBAL)
        major = libi18n.rsplit(".so.", 1)[1].split(".")[0]
        self.version = libi18n.rsplit(".so.", 1)[1]

        def fn(name: str) -> Any:
            return getattr(lib, f"{name}_{major}")  # ICU4C exports versioned C symbols

        ucol_open = fn("ucol_open")
        ucol_open.restype = ctypes.c_void_p
        ucol_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        set_attribute = fn("ucol_setAttribute")
        set_attribute.restype = None
        set_attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self._sort_key = fn("ucol_getSortKey")
        self._sort_key.restype = ctypes.c_int32
        self._sort_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32]

        status = ctypes.c_int(_U_ZERO_ERROR)
        coll = ucol_open(_LOCALE, ctypes.byref(status))
        if not coll or status.value > _U_ZERO_ERROR:
            raise CollationUnavailable(f"ucol_open failed with ICU status {status.value}")
        # ECMA-402: canonically equivalent strings compare equal (V8 turns normalization on)
        set_attribute(coll, _UCOL_NORMALIZATION_MODE, _UCOL_ON, ctypes.byref(status))
        if status.value > _U_ZERO_ERROR:
            raise CollationUnavailable(f"ucol_setAttribute failed with ICU status {status.value}")
        self._coll = coll  # never closed: one collator for the process

    def sort_key(self, s: str) -> bytes:
        units = s.encode("utf-16-le", "surrogatepass")  # JS strings are UTF-16, lone surrogates included
        n = len(units) // 2
        size = 4 * n + 32
        while True:
            buf = ctypes.create_string_buffer(size)
            need = self._sort_key(self._coll, units, n, buf, size)
            if need <= 0:
                raise CollationUnavailable("ucol_getSortKey failed")
            if need <= size:
                return buf.raw[:need]
            size = need


_lock = threading.Lock()
_collator: _Collator | None = None


def _icu4py_libdir() -> str:
    spec = importlib.util.find_spec("icu4py")
    if spec is None or not spec.submodule_search_locations:
        raise CollationUnavailable("the icu4py package is not installed (it provides the ICU libraries)")
    pkg_dir = list(spec.submodule_search_locations)[0]
    return os.path.join(os.path.dirname(pkg_dir), "icu4py.libs")


def collator() -> _Collator:
    """The process-wide collator, loaded on first use."""
    global _collator
    if _collator is None:
        with _lock:
            if _collator is None:
                _collator = _Collator(_icu4py_libdir())
    return _collator


@lru_cache(maxsize=65536)
def sort_key(s: str) -> bytes:
    """Binary sort key of `s` under JS `localeCompare` (compare keys with `<`, `==`)."""
    return collator().sort_key(s)


def locale_compare(a: str, b: str) -> int:
    """`Math.sign(a.localeCompare(b))`."""
    ka, kb = sort_key(a), sort_key(b)
    return (ka > kb) - (ka < kb)


def icu_version() -> str:
    """Version of the ICU libraries in use (e.g. "78.3")."""
    return collator().version
