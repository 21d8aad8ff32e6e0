-- Context virtualization: the identifiers a context object names most (paths, names,
-- error codes, ports), as a JSON list; its stub names them.
ALTER TABLE context_objects ADD COLUMN key_entities TEXT NOT NULL DEFAULT '[]';
