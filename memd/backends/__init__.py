"""Storage backends behind the Store protocol (base.py)."""
