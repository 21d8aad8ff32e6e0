"""The HTTP daemon (FastAPI): ``app.create_app`` builds it, ``memd serve`` runs it."""
