"""A small number (0-255) per code address, one byte each in 4 KiB pages.

A module's instructions number hundreds of thousands: a byte per address of
the pages that hold code costs far less than a Python int in a set or a dict
entry per instruction. 0 means absent.
"""
from __future__ import annotations

from typing import Dict

PAGE_BITS = 12


class ByteMap:
    def __init__(self):
        self._pages: Dict[int, bytearray] = {}

    def get(self, address: int) -> int:
        page = self._pages.get(address >> PAGE_BITS)
        return 0 if page is None else page[address & ((1 << PAGE_BITS) - 1)]

    def _page(self, number: int) -> bytearray:
        """Page `number`, made (all absent) if it is not there yet."""
        page = self._pages.get(number)
        if page is None:
            page = self._pages[number] = bytearray(1 << PAGE_BITS)
        return page

    def set(self, address: int, value: int) -> None:
        self._page(address >> PAGE_BITS)[address & ((1 << PAGE_BITS) - 1)] = value

    def set_all(self, addresses, value: int) -> None:
        """set(address, value) for each of addresses (in any order; a page looked up once per run in it)."""
        mask = (1 << PAGE_BITS) - 1
        number, page = None, None
        for address in addresses:
            if address >> PAGE_BITS != number:
                number = address >> PAGE_BITS
                page = self._page(number)
            page[address & mask] = value

    def set_run(self, address: int, sizes: bytes) -> None:
        """set(a, size) for each instruction of a linear sweep from address: their sizes in order."""
        mask = (1 << PAGE_BITS) - 1
        number, page = None, None
        for size in sizes:
            if address >> PAGE_BITS != number:
                number = address >> PAGE_BITS
                page = self._page(number)
            page[address & mask] = size
            address += size

    def __contains__(self, address: int) -> bool:
        return self.get(address) != 0
