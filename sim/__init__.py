"""prunesim: cycle-level simulation of CNN training with pruned or approximated gradients.

Data flows one way: traces -> methods -> engines -> system timeline -> results -> analysis.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Callable, Iterable

__version__ = "0.1.0"

# Subpackages whose Numba kernels are compiled with cache=True: Numba caches next to the source,
# in <package>/__pycache__.
_NUMBA_PACKAGES = ("methods", "engines")


def _writable(d: str) -> bool:
    pyc = os.path.join(d, "__pycache__")
    return os.access(pyc if os.path.isdir(pyc) else d, os.W_OK)


def numba_cache_dir(pkg_dirs: Iterable[str], env: dict, writable: Callable[[str], bool] = _writable,
                    home: str | None = None) -> str | None:
    """Where Numba should cache, when its default (the package's __pycache__) is not writable: a
    user cache directory, else a per-user temporary one. None: leave Numba's default (the package
    is writable, or the user chose NUMBA_CACHE_DIR). Without this, a read-only install (a system
    site-packages, a container layer) fails at import with 'cannot cache function ... no locator
    available'."""
    if env.get("NUMBA_CACHE_DIR") or all(writable(d) for d in pkg_dirs):
        return None
    base = env.get("XDG_CACHE_HOME") or os.path.join(home or os.path.expanduser("~"), ".cache")
    for cand in (os.path.join(base, "prunesim", "numba"),
                 os.path.join(tempfile.gettempdir(), f"prunesim-numba-{os.getuid()}")):
        try:
            os.makedirs(cand, exist_ok=True)
        except OSError:
            continue
        if writable(cand):
            return cand
    return None


def _configure_numba_cache() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    d = numba_cache_dir([os.path.join(here, p) for p in _NUMBA_PACKAGES], os.environ)
    if d is None:
        return
    os.environ["NUMBA_CACHE_DIR"] = d  # read by Numba when it is imported
    if "numba" in sys.modules:  # imported before prunesim: set its live config too
        try:
            sys.modules["numba"].core.config.CACHE_DIR = d
        except AttributeError:
            pass


_configure_numba_cache()
