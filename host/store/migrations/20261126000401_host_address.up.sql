-- The address each host advertises (serve --advertise-addr), renewed with
-- its lease: another host forwards there the requests for a session this
-- host runs.
ALTER TABLE hosts ADD COLUMN address TEXT NOT NULL DEFAULT '';
