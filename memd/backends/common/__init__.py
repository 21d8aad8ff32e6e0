"""What the SQLite and PostgreSQL backends share: the SQL both dialects agree on, written
once with ``?`` marks and swapped to the driver's placeholder (:mod:`.dialect`), the
column lists (:mod:`.columns`), the row mappers (:mod:`.rows`), the migration runner's
bookkeeping (:mod:`.migrations`), driver-error translation (:mod:`.errors`) and the
Store methods whose SQL is portable (:mod:`.store`). A new column touches
:mod:`.columns` (and :mod:`.rows`) plus one migration per dialect."""
