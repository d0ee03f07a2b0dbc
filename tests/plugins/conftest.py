"""tests/plugins/ holds pip-installable fake plugin projects, not tests: collect nothing here."""

collect_ignore_glob = ["*"]
