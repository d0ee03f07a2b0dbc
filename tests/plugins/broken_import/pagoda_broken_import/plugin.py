"""A plugin module that cannot be imported: Pagoda must report it, not crash."""

raise ImportError("pagoda_broken_import needs the library 'libfake', which is not installed")
