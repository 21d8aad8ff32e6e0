"""The web inspector's parts that are not the server's: its pages (``static/``, plain
HTML, CSS and JavaScript modules served as they are: no build step, nothing fetched from
the network) and its token (:mod:`memd.ui.token`), which ``memd serve`` and ``memd ui``
print and the daemon checks (:mod:`memd.server.inspector`)."""
