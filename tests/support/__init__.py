"""Helpers that more than one test module uses (builders and Hypothesis strategies)."""
