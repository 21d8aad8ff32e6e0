"""The memory block: the token-budgeted context compiled for a call and added to the history
the client owns."""
