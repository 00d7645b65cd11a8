"""Verb modules of the `tying` command line (see `tying.cli`)."""
