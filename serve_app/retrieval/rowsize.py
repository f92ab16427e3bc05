"""How many bytes a cached row really holds: content, tags, metadata and the rest.

The hot cache's budget must count what a row costs in memory, not its content's
length: a 1-character memory may carry 16 KB of metadata. Python object sizes
(``sys.getsizeof``) summed over the row's values, recursively through lists and
dicts; the column names are shared by all rows and not counted.
"""

from __future__ import annotations

import sys
from typing import Any

_ATOMS = (str, bytes, int, float, bool, type(None))
# The id -> row entry of the owner's mapping (hash table slot, amortised growth).
ROW_SLOT_BYTES = 64


def value_nbytes(value: Any) -> int:
    """Bytes held by ``value`` and everything it contains."""
    size = sys.getsizeof(value)
    if isinstance(value, _ATOMS):
        return size
    if isinstance(value, dict):
        return size + sum(value_nbytes(k) + value_nbytes(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(value_nbytes(v) for v in value)
    return size


def row_nbytes(row: dict[str, Any]) -> int:
    """Bytes held by one cached ``memory_items`` row (its dict, values and slot)."""
    return sys.getsizeof(row) + ROW_SLOT_BYTES + sum(value_nbytes(v) for v in row.values())
