"""fragprobe: find out why CUDA ran out of memory while nvidia-smi says gigabytes are free.

This package carries the native ``fragprobe`` command (installed on ``PATH`` beside
``python``) and ``libfragprobe.so``, the probe preloaded into the program under study.
Use the command; from Python, this module only says where the files are::

    >>> import fragprobe
    >>> fragprobe.binary()        # the fragprobe executable
    >>> fragprobe.probe_path()    # libfragprobe.so, for LD_PRELOAD

``python -m fragprobe ARGS`` is the same as ``fragprobe ARGS``.
"""

import os
import shutil

__version__ = "0.0.0"  # the wheel builder writes the workspace's version here

__all__ = ["binary", "probe_path", "__version__"]


def _installed(suffix):
    """The installed file of this distribution whose path ends with ``suffix``."""
    try:
        from importlib import metadata

        files = metadata.files("fragprobe") or []
    except Exception:  # not installed from the wheel (a source checkout on sys.path)
        files = []
    for f in files:
        # RECORD paths are relative to site-packages (`../../fragprobe/libfragprobe.so`):
        # resolve them before matching
        path = os.path.realpath(str(f.locate()))
        if path.replace(os.sep, "/").endswith("/" + suffix) and os.path.isfile(path):
            return path
    return None


def binary():
    """Absolute path of the ``fragprobe`` executable this package installed."""
    path = _installed("bin/fragprobe") or shutil.which("fragprobe")
    if path is None:
        raise FileNotFoundError(
            "the fragprobe executable is not installed with this package; "
            "reinstall it with `pip install --force-reinstall fragprobe`"
        )
    return path


def probe_path():
    """Absolute path of ``libfragprobe.so``: ``LD_PRELOAD=<it> python train.py``."""
    path = _installed("lib/fragprobe/libfragprobe.so")
    if path is None:
        raise FileNotFoundError(
            "libfragprobe.so is not installed with this package; "
            "reinstall it with `pip install --force-reinstall fragprobe`"
        )
    return path
