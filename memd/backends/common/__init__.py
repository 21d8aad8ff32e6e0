"""What the SQLite and PostgreSQL backends share: the SQL both dialects agree on, written
once with ``?`` marks and swapped to the driver's placeholder (:mod:`.dialect`), the
column lists (:mod:`.columns`), the row mappers (:mod:`.rows`), the migration runner's
bookkeeping (:mod:`.migrations`), driver-error translation (:mod:`.errors`), the
connection base and the base of a store's parts (:mod:`.connection`), the parts whose
SQL is portable (one module per role: :mod:`.sessions`, :mod:`.facts`, :mod:`.calls`,
:mod:`.jobs`...) and the store they compose (:mod:`.composed`). A new column touches
:mod:`.columns` (and :mod:`.rows`) plus one migration per dialect."""
