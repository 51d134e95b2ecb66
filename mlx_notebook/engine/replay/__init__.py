"""Replaying results: finished generations stored under what determined them."""
