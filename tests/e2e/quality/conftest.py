"""The quality tests' generated bench (tests/quality/conftest.py), for the end-to-end ones."""

from tests.quality.conftest import bench_dir

__all__ = ["bench_dir"]
