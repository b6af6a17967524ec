"""Files of any size, kept by reference: content-addressed by SHA-256 in a directory or an S3 bucket.

Beside them, the record of which tenant uploaded which file (``uploads``).

The rest of longhaul imports this package's names from here, never from its modules. The names
load on first use, as every store face's do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.files.object_files import FileNotStoredError as FileNotStoredError
    from store.files.object_files import FileStore as FileStore
    from store.files.object_files import StoredFile as StoredFile
    from store.files.object_files import address as address
    from store.files.uploads import Upload as Upload
    from store.files.uploads import Uploads as Uploads
    from store.files.uploads import open_uploads as open_uploads

_HOMES = {
    "FileNotStoredError": "store.files.object_files",
    "FileStore": "store.files.object_files",
    "StoredFile": "store.files.object_files",
    "Upload": "store.files.uploads",
    "Uploads": "store.files.uploads",
    "address": "store.files.object_files",
    "open_uploads": "store.files.uploads",
}
"""Each public name, and the module that defines it."""

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(_HOMES[name]), name)
