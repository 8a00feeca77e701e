"""Checks of the planned objects against the rules of the APIs that will receive them."""
