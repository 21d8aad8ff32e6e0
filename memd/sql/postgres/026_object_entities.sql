-- Context virtualization: the identifiers a context object names most (paths, names,
-- error codes, ports), as JSON text; its stub names them.
ALTER TABLE context_objects ADD COLUMN key_entities text NOT NULL DEFAULT '[]';
