"""SQLite stores.

sqlite-utils imports pandas and numpy when it loads, only to map their types to columns, which
Atlas never stores; with markitdown's extras installed that costs ~1.2 s on every command. They
are hidden while sqlite-utils loads (an import of a module set to None raises ImportError, which
sqlite-utils handles), then made importable again for markitdown.
"""

import sys

_HIDDEN = [name for name in ("pandas", "numpy") if name not in sys.modules]
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]
try:
    import sqlite_utils  # noqa: F401
finally:
    for _name in _HIDDEN:
        if sys.modules.get(_name) is None:
            del sys.modules[_name]
