"""SQL schema and migrations, one folder per dialect (``sqlite/``, ``postgres/``)."""
