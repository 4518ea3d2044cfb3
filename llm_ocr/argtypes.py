"""Value types of command-line flags (argparse ``type=`` callables) shared by every command line.

The CLI's commands and the shipped engines' own command lines both use them, so they live here,
below both, instead of one reaching into the other.
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def positive(text: str) -> float:
    """An argparse type: a number greater than 0."""
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def non_negative(text: str) -> float:
    """An argparse type: a number of at least 0."""
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value
