"""Test doubles of external services, backed by real local sandboxes."""
