"""A conversation as memd follows it: which session a call continues, what is new in it,
what a client resends, side requests, titles."""
