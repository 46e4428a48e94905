"""Named, seeded random streams: every consumer of randomness gets its own stream derived from the
run seed and a stable name, so adding a consumer never changes the draws of another."""
from __future__ import annotations

import zlib
from typing import Callable

import numpy as np


def stream(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


class DrawBuffer:
    """Hands out draws one at a time from numpy blocks (fast in a Python loop, still seeded), or
    block by block to compiled code (`rest`, then `block`): the same stream either way."""

    def __init__(self, draw: Callable[[int], np.ndarray], block: int = 8192) -> None:
        self._draw = draw  # callable(size) -> ndarray
        self._block = block
        self._values: list[float] = []
        self._pos = 0

    def next(self) -> float:
        if self._pos >= len(self._values):
            self._values = self._draw(self._block).tolist()
            self._pos = 0
        v = self._values[self._pos]
        self._pos += 1
        return v

    def rest(self) -> np.ndarray:
        """The draws of the current block not handed out yet, handed out now as an array."""
        rest = np.array(self._values[self._pos:])
        self._values, self._pos = [], 0
        return rest

    def block(self) -> np.ndarray:
        """The next block of draws."""
        return self._draw(self._block)
