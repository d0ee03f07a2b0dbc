"""pagoda-broken-import: a plugin whose module fails to import."""
