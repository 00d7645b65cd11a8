"""Experiments that reproduce or test the papers' claims (each returns JSON-able results)."""
