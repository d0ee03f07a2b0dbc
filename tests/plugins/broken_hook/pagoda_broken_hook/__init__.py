"""pagoda-broken-hook: a plugin whose hook registers a name and then raises."""
