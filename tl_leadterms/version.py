"""The installed version of tl_leadterms."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tl_leadterms")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0"
